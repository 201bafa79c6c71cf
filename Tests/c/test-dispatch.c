/*
 * test-dispatch.c -- flux_dispatch(): delivery, order, tokens, participants
 * fixed at the start of a dispatch, failing callbacks, nested dispatch,
 * flux_is_dispatching(), versions and status names (DESIGN.md 2 and 3).
 */
#include "helpers.h"

static const char payload_a[] = "payload a";
static const char payload_b[] = "payload b";

static void test_every_callback_gets_every_payload(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node n[3];
    for (int i = 0; i < 3; i++) {
        node_init(&n[i], i + 1, d, &log);
        EXPECT_OK(node_register(&n[i]));
    }

    EXPECT_OK(flux_dispatch(d, payload_a));
    for (int i = 0; i < 3; i++) {
        is_int(n[i].calls, 1, "callback %d called once by the first dispatch", i + 1);
        is_ptr(n[i].payload, payload_a, "callback %d got the payload pointer itself", i + 1);
    }
    is_trace(&log, INTS(1, 2, 3), "callbacks ran in registration order");

    EXPECT_OK(flux_dispatch(d, payload_b));
    for (int i = 0; i < 3; i++) {
        is_int(n[i].calls, 2, "callback %d called once more by the second dispatch", i + 1);
        is_ptr(n[i].payload, payload_b, "callback %d got the second payload", i + 1);
    }
    is_trace(&log, INTS(1, 2, 3, 1, 2, 3), "registration order again");

    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_dispatch_with_no_callbacks(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    ok(d != NULL, "flux_dispatcher_create() returns a dispatcher");
    is_int(flux_is_dispatching(d), 0, "a new dispatcher is not dispatching");
    EXPECT_OK(flux_dispatch(d, payload_a));
    EXPECT_OK(flux_dispatch(d, NULL));
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_many_callbacks_in_registration_order(void)
{
    enum { N = 500 };
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    static trace log;
    static node n[N];
    log.n = 0;
    int failures = 0;
    for (int i = 0; i < N; i++) {
        node_init(&n[i], i + 1, d, &log);
        failures += node_register(&n[i]) != FLUX_OK;
    }
    is_int(failures, 0, "%d registrations succeed", N);
    EXPECT_OK(flux_dispatch(d, payload_a));
    int in_order = log.n == N;
    for (int i = 0; in_order && i < N; i++)
        in_order = log.ev[i] == i + 1;
    ok(in_order, "%d callbacks called once each, in registration order", N);

    /* Remove every third one; the rest keep their order; new ones go last. */
    for (int i = 0; i < N; i += 3)
        failures += flux_unregister(d, n[i].token) != FLUX_OK;
    is_int(failures, 0, "unregistering every third callback succeeds");
    node extra;
    node_init(&extra, N + 1, d, &log);
    EXPECT_OK(node_register(&extra));
    log.n = 0;
    EXPECT_OK(flux_dispatch(d, payload_b));
    int want[N + 1];
    size_t nwant = 0;
    for (int i = 0; i < N; i++)
        if (i % 3 != 0)
            want[nwant++] = i + 1;
    want[nwant++] = N + 1;
    ok(log.n == nwant && memcmp(log.ev, want, nwant * sizeof(int)) == 0,
       "after removals the remaining callbacks keep their order, the new one runs last");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static int noop_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

static void test_tokens(void)
{
    enum { N = 100 };
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t[N];
    int failures = 0, zero = 0, increasing = 1;
    for (int i = 0; i < N; i++) {
        t[i] = 0;
        failures += flux_register(d, noop_cb, NULL, NULL, &t[i]) != FLUX_OK;
        zero += t[i] == 0;
        if (i > 0 && t[i] <= t[i - 1])
            increasing = 0;
    }
    is_int(failures, 0, "%d registrations succeed", N);
    is_uint(t[0], 1, "tokens count up from 1: the first token of a dispatcher is 1");
    is_int(zero, 0, "no token is 0");
    ok(increasing, "tokens strictly increase (so are unique)");

    /* Unregister them all (last first), register again: never reused. */
    for (int i = N - 1; i >= 0; i--)
        failures += flux_unregister(d, t[i]) != FLUX_OK;
    is_int(failures, 0, "unregistering all of them succeeds");
    flux_token again = 0;
    EXPECT_OK(flux_register(d, noop_cb, NULL, NULL, &again));
    ok(again > t[N - 1], "a token issued after unregistering is new (%llu > %llu)",
       (unsigned long long)again, (unsigned long long)t[N - 1]);
    EXPECT_STATUS(flux_unregister(d, t[N - 1]), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_OK(flux_unregister(d, again));

    /* Tokens are per dispatcher. */
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d2 != NULL);
    flux_token first = 0;
    EXPECT_OK(flux_register(d2, noop_cb, NULL, NULL, &first));
    is_uint(first, 1, "a second dispatcher's first token is 1 too");
    EXPECT_OK(flux_dispatcher_destroy(d2));
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_null_payload(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    a.payload = payload_a;
    b.payload = payload_a;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatch(d, NULL));
    is_int(a.calls, 1, "first callback called with a NULL payload");
    is_int(b.calls, 1, "second callback called with a NULL payload");
    is_ptr(a.payload, NULL, "first callback got NULL");
    is_ptr(b.payload, NULL, "second callback got NULL");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- is_dispatching ------------------------------------------------------ */

struct seen {
    flux_dispatcher *d, *other;
    int mine, other_seen, calls;
};

static int record_dispatching(void *context, const void *payload)
{
    struct seen *s = context;
    (void)payload;
    s->calls++;
    s->mine = flux_is_dispatching(s->d);
    s->other_seen = flux_is_dispatching(s->other);
    return 0;
}

static void test_is_dispatching(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_dispatcher *other = flux_dispatcher_create();
    REQUIRE(d != NULL && other != NULL);
    struct seen s = {d, other, -1, -1, 0};
    flux_token t;
    EXPECT_OK(flux_register(d, record_dispatching, &s, NULL, &t));
    is_int(flux_is_dispatching(d), 0, "not dispatching before the first dispatch");
    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(s.calls, 1, "callback ran");
    is_int(s.mine, 1, "flux_is_dispatching() is 1 inside a callback");
    is_int(s.other_seen, 0, "another, idle dispatcher is not dispatching meanwhile");
    is_int(flux_is_dispatching(d), 0, "flux_is_dispatching() is 0 after the dispatch");

    /* Also inside a failing callback, and after a failed dispatch. */
    node failing;
    node_init(&failing, 2, d, NULL);
    failing.fail_times = 1;
    EXPECT_OK(node_register(&failing));
    EXPECT_STATUS(flux_dispatch(d, payload_a), FLUX_ERR_CALLBACK_FAILED);
    is_int(failing.dispatching, 1, "flux_is_dispatching() is 1 inside a failing callback");
    is_int(flux_is_dispatching(d), 0, "flux_is_dispatching() is 0 after a failed dispatch");
    EXPECT_OK(flux_dispatcher_destroy(d));
    EXPECT_OK(flux_dispatcher_destroy(other));
}

/* ---- participants are fixed when a dispatch starts ----------------------- */

struct registrar {
    flux_dispatcher *d;
    node *joiner;          /* registered from inside the callback, once */
    flux_status status;
    int calls;
};

static int register_joiner(void *context, const void *payload)
{
    struct registrar *r = context;
    (void)payload;
    if (r->calls++ == 0)
        r->status = node_register(r->joiner);
    return 0;
}

static void test_register_during_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node before, joiner;
    node_init(&before, 1, d, &log);
    node_init(&joiner, 3, d, &log);
    struct registrar r = {d, &joiner, (flux_status)-1, 0};
    flux_token tr;
    EXPECT_OK(flux_register(d, register_joiner, &r, NULL, &tr));
    EXPECT_OK(node_register(&before));

    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(r.status, FLUX_OK, "flux_register() inside a callback succeeds");
    ok(joiner.token > before.token, "the new token is larger than the earlier ones");
    is_int(joiner.calls, 0, "a callback registered during a dispatch is not called by it");
    is_trace(&log, INTS(1), "only the original participants ran");

    EXPECT_OK(flux_dispatch(d, payload_b));
    is_int(joiner.calls, 1, "it is called by the next dispatch");
    is_ptr(joiner.payload, payload_b, "with the next dispatch's payload");
    is_trace(&log, INTS(1, 1, 3), "and runs after the earlier registrations");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

struct unregistrar {
    flux_dispatcher *d;
    flux_token target;
    flux_status status;
    int calls;
};

static int unregister_target_once(void *context, const void *payload)
{
    struct unregistrar *u = context;
    (void)payload;
    if (u->calls++ == 0)
        u->status = flux_unregister(u->d, u->target);
    return 0;
}

static void test_unregister_later_during_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node b, c;
    node_init(&b, 2, d, &log);
    node_init(&c, 3, d, &log);
    struct unregistrar u = {d, 0, (flux_status)-1, 0};
    flux_token tu;
    EXPECT_OK(flux_register(d, unregister_target_once, &u, NULL, &tu));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&c));
    u.target = c.token;

    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(u.status, FLUX_OK, "unregistering a later callback from inside a callback succeeds");
    is_int(c.calls, 0, "the unregistered later callback is not called by that dispatch");
    is_int(b.calls, 1, "the callback between them still runs");
    EXPECT_OK(flux_dispatch(d, payload_b));
    is_int(c.calls, 0, "nor by the next one");
    is_trace(&log, INTS(2, 2), "only the remaining callback ran, once per dispatch");
    EXPECT_STATUS(flux_unregister(d, c.token), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_unregister_earlier_during_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a;
    node_init(&a, 1, d, &log);
    EXPECT_OK(node_register(&a));
    struct unregistrar u = {d, a.token, (flux_status)-1, 0};
    flux_token tu;
    EXPECT_OK(flux_register(d, unregister_target_once, &u, NULL, &tu));

    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(u.status, FLUX_OK, "unregistering a callback that already ran in this dispatch succeeds");
    is_int(a.calls, 1, "it ran once in that dispatch");
    EXPECT_OK(flux_dispatch(d, payload_b));
    is_int(a.calls, 1, "and not in the next");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

struct self_remover {
    flux_dispatcher *d;
    flux_token token;
    flux_status first, second;
    int calls;
};

static int unregister_self(void *context, const void *payload)
{
    struct self_remover *s = context;
    (void)payload;
    s->calls++;
    s->first = flux_unregister(s->d, s->token);
    s->second = flux_unregister(s->d, s->token);
    return 0;
}

static void test_unregister_self(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node before, after;
    node_init(&before, 1, d, &log);
    node_init(&after, 3, d, &log);
    struct self_remover s = {d, 0, (flux_status)-1, (flux_status)-1, 0};
    EXPECT_OK(node_register(&before));
    EXPECT_OK(flux_register(d, unregister_self, &s, NULL, &s.token));
    EXPECT_OK(node_register(&after));

    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(s.calls, 1, "self-unregistering callback ran");
    is_int(s.first, FLUX_OK, "a callback may unregister itself");
    is_int(s.second, FLUX_ERR_UNKNOWN_TOKEN, "unregistering itself twice: the second is UNKNOWN_TOKEN");
    is_int(after.calls, 1, "the callbacks after it still run");
    EXPECT_OK(flux_dispatch(d, payload_b));
    is_int(s.calls, 1, "it is not called by the next dispatch");
    is_trace(&log, INTS(1, 3, 1, 3), "the others run in order both times");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- failing callbacks --------------------------------------------------- */

static void test_callback_failure(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    /* A few spare registrations so the failing token is not a small number. */
    flux_token spare[10];
    for (int i = 0; i < 10; i++)
        REQUIRE(flux_register(d, noop_cb, NULL, NULL, &spare[i]) == FLUX_OK);
    node a, b, c;
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    node_init(&c, 3, d, &log);
    b.fail_times = 1;
    b.fail_value = 42;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&c));

    EXPECT_STATUS(flux_dispatch(d, payload_a), FLUX_ERR_CALLBACK_FAILED);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", flux_last_error());
    is_trace(&log, INTS(1, 2), "callbacks after the failing one are not called");
    is_int(c.calls, 0, "the later callback did not run");
    is_int(flux_is_dispatching(d), 0, "the dispatcher is idle after the failure");
    has_prefix(msg, "flux_dispatch", "the message names flux_dispatch");
    has_number(msg, b.token, "the message names the failing token (%llu)",
               (unsigned long long)b.token);
    has_number(msg, 42, "the message names the value the callback returned (42)");

    EXPECT_OK(flux_dispatch(d, payload_b));
    is_trace(&log, INTS(1, 2, 1, 2, 3), "the next dispatch works and calls everyone");
    is_ptr(c.payload, payload_b, "with its own payload");

    /* Negative values fail too; a failing first callback stops everything. */
    a.fail_times = 1;
    a.fail_value = -1;
    log.n = 0;
    EXPECT_STATUS(flux_dispatch(d, payload_a), FLUX_ERR_CALLBACK_FAILED);
    is_trace(&log, INTS(1), "a callback returning -1 aborts the dispatch too");
    EXPECT_OK(flux_dispatch(d, payload_a));
    is_trace(&log, INTS(1, 1, 2, 3), "and the dispatcher recovers again");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_failure_with_joiner_registered(void)
{
    /* A callback registered during a failed dispatch joins the next one. */
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node joiner, failing;
    node_init(&joiner, 9, d, &log);
    node_init(&failing, 2, d, &log);
    failing.fail_times = 1;
    struct registrar r = {d, &joiner, (flux_status)-1, 0};
    flux_token tr;
    EXPECT_OK(flux_register(d, register_joiner, &r, NULL, &tr));
    EXPECT_OK(node_register(&failing));
    EXPECT_STATUS(flux_dispatch(d, payload_a), FLUX_ERR_CALLBACK_FAILED);
    is_int(r.status, FLUX_OK, "registered during the failing dispatch");
    EXPECT_OK(flux_dispatch(d, payload_b));
    is_trace(&log, INTS(2, 2, 9), "the joiner runs in the next dispatch, after the others");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- dispatch from inside a callback ------------------------------------- */

struct nested {
    flux_dispatcher *d;      /* dispatched from inside: the same one or another */
    const void *payload;
    flux_status status;
    char message[256];
    int dispatching_after;
    int calls;
};

static int dispatch_inside(void *context, const void *payload)
{
    struct nested *n = context;
    (void)payload;
    n->calls++;
    n->status = flux_dispatch(n->d, n->payload);
    snprintf(n->message, sizeof n->message, "%s", flux_last_error());
    n->dispatching_after = flux_is_dispatching(n->d);
    return 0;
}

static void test_dispatch_inside_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b;
    node_init(&a, 1, d, &log);
    node_init(&b, 3, d, &log);
    struct nested n = {d, payload_b, (flux_status)-1, "", -1, 0};
    flux_token tn;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(flux_register(d, dispatch_inside, &n, NULL, &tn));
    EXPECT_OK(node_register(&b));

    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(n.status, FLUX_ERR_ALREADY_DISPATCHING,
           "flux_dispatch() of the same dispatcher inside a callback -> ALREADY_DISPATCHING");
    has_prefix(n.message, "flux_dispatch", "its message names flux_dispatch");
    is_int(n.dispatching_after, 1, "the outer dispatch is still running afterwards");
    is_trace(&log, INTS(1, 3), "the outer dispatch went on: every callback once, nobody twice");
    is_ptr(b.payload, payload_a, "the later callback got the outer payload");
    is_int(flux_is_dispatching(d), 0, "idle afterwards");
    EXPECT_OK(flux_dispatch(d, payload_b));
    is_int(n.calls, 2, "the dispatcher works normally afterwards");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* flux_try_dispatch() with no other thread around: a dispatch like any other
 * -- refused inside a callback of its dispatcher, queued payloads drained,
 * a failure aborting it. */
enum trying_mode { TRY_INSIDE, ENQUEUE_INSIDE, FAIL };

struct trying {
    flux_dispatcher *d;
    enum trying_mode mode;
    flux_status inner;
    char message[128];
};

static int trying_cb(void *context, const void *payload)
{
    struct trying *t = context;
    switch (t->mode) {
    case TRY_INSIDE:
        t->inner = flux_try_dispatch(t->d, payload_b);
        snprintf(t->message, sizeof t->message, "%s", flux_last_error());
        return 0;
    case ENQUEUE_INSIDE:
        if (payload == payload_a)
            flux_enqueue(t->d, (void *)payload_b, NULL, NULL);
        return 0;
    case FAIL:
        return 7;
    }
    return 0;
}

static void test_try_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a;
    node_init(&a, 1, d, &log);
    struct trying t = {d, TRY_INSIDE, (flux_status)-1, ""};
    flux_token tt;
    EXPECT_OK(flux_register(d, trying_cb, &t, NULL, &tt));
    EXPECT_OK(node_register(&a));

    EXPECT_OK(flux_try_dispatch(d, payload_a));
    is_int(t.inner, FLUX_ERR_ALREADY_DISPATCHING, "inside a callback of its dispatcher -> ALREADY_DISPATCHING");
    has_prefix(t.message, "flux_try_dispatch:", "its message names flux_try_dispatch");
    is_trace(&log, INTS(1), "the outer dispatch went on, running each callback once");
    is_ptr(a.payload, payload_a, "with its payload");
    is_int(flux_is_dispatching(d), 0, "idle afterwards");

    log.n = 0;
    t.mode = ENQUEUE_INSIDE;
    EXPECT_OK(flux_try_dispatch(d, payload_a));
    is_trace(&log, INTS(1, 1), "the payload queued by a callback ran before the try returned");
    is_ptr(a.payload, payload_b, "the queued payload came last");

    t.mode = FAIL;
    EXPECT_STATUS(flux_try_dispatch(d, payload_a), FLUX_ERR_CALLBACK_FAILED);
    is_uint(flux_last_error_token(), tt, "a failing callback aborts it, naming its token");
    EXPECT_STATUS(flux_try_dispatch(NULL, payload_a), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_OK(flux_dispatcher_destroy(d));
}

struct cross {
    flux_dispatcher *outer, *inner;
    int outer_dispatching, inner_dispatching;
    flux_status back_status;      /* inner callback dispatching outer again */
    int calls;
};

static int inner_cb(void *context, const void *payload)
{
    struct cross *c = context;
    (void)payload;
    c->calls++;
    c->outer_dispatching = flux_is_dispatching(c->outer);
    c->inner_dispatching = flux_is_dispatching(c->inner);
    c->back_status = flux_dispatch(c->outer, payload);
    return 0;
}

static void test_dispatch_other_dispatcher_inside(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d != NULL && d2 != NULL);
    trace log = {0};
    node inner_node;
    node_init(&inner_node, 7, d2, &log);
    struct cross c = {d, d2, -1, -1, (flux_status)-1, 0};
    flux_token t;
    EXPECT_OK(node_register(&inner_node));
    EXPECT_OK(flux_register(d2, inner_cb, &c, NULL, &t));
    struct nested n = {d2, payload_b, (flux_status)-1, "", -1, 0};
    node after;
    node_init(&after, 3, d, &log);
    EXPECT_OK(flux_register(d, dispatch_inside, &n, NULL, &t));
    EXPECT_OK(node_register(&after));

    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(n.status, FLUX_OK, "dispatching a different dispatcher from inside a callback works");
    is_int(inner_node.calls, 1, "the other dispatcher's callback ran");
    is_ptr(inner_node.payload, payload_b, "with the inner payload");
    is_int(c.outer_dispatching, 1, "inside it, the outer dispatcher is dispatching");
    is_int(c.inner_dispatching, 1, "and so is the inner one");
    is_int(c.back_status, FLUX_ERR_ALREADY_DISPATCHING,
           "dispatching the outer dispatcher from the inner callback -> ALREADY_DISPATCHING");
    is_int(n.dispatching_after, 0, "the inner dispatcher is idle after its dispatch");
    is_trace(&log, INTS(7, 3), "then the outer dispatch goes on");
    EXPECT_OK(flux_dispatcher_destroy(d));
    EXPECT_OK(flux_dispatcher_destroy(d2));
}

/* ---- versions and status names ------------------------------------------- */

static void test_version(void)
{
    is_uint(flux_version(), FLUX_VERSION_NUMBER, "flux_version() == FLUX_VERSION_NUMBER");
    is_str(flux_version_string(), FLUX_VERSION_STRING,
           "flux_version_string() == FLUX_VERSION_STRING");
    is_uint(FLUX_VERSION_NUMBER,
            FLUX_VERSION_MAJOR * 10000 + FLUX_VERSION_MINOR * 100 + FLUX_VERSION_PATCH,
            "FLUX_VERSION_NUMBER is MAJOR*10000 + MINOR*100 + PATCH");
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", FLUX_VERSION_MAJOR, FLUX_VERSION_MINOR,
             FLUX_VERSION_PATCH);
    is_str(FLUX_VERSION_STRING, expected, "FLUX_VERSION_STRING is \"MAJOR.MINOR.PATCH\"");
    ok(FLUX_VERSION_CHECK(FLUX_VERSION_MAJOR, FLUX_VERSION_MINOR, FLUX_VERSION_PATCH),
       "FLUX_VERSION_CHECK(current) is true");
    ok(!FLUX_VERSION_CHECK(FLUX_VERSION_MAJOR + 1, 0, 0), "FLUX_VERSION_CHECK(next major) is false");
}

static void test_status_names(void)
{
    static const struct {
        flux_status status;
        const char *name;
    } names[] = {
        {FLUX_OK, "FLUX_OK"},
        {FLUX_ERR_INVALID_ARGUMENT, "FLUX_ERR_INVALID_ARGUMENT"},
        {FLUX_ERR_UNKNOWN_TOKEN, "FLUX_ERR_UNKNOWN_TOKEN"},
        {FLUX_ERR_ALREADY_DISPATCHING, "FLUX_ERR_ALREADY_DISPATCHING"},
        {FLUX_ERR_NOT_DISPATCHING, "FLUX_ERR_NOT_DISPATCHING"},
        {FLUX_ERR_CIRCULAR, "FLUX_ERR_CIRCULAR"},
        {FLUX_ERR_CALLBACK_FAILED, "FLUX_ERR_CALLBACK_FAILED"},
        {FLUX_ERR_NO_MEMORY, "FLUX_ERR_NO_MEMORY"},
        {FLUX_ERR_TOO_DEEP, "FLUX_ERR_TOO_DEEP"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        is_str(flux_status_name(names[i].status), names[i].name, "flux_status_name(%d) is %s",
               (int)names[i].status, names[i].name);
    is_int(FLUX_OK, 0, "FLUX_OK is 0");
    is_int(FLUX_ERR_NO_MEMORY, 7, "codes are fixed: FLUX_ERR_NO_MEMORY is 7");
    is_int(FLUX_ERR_TOO_DEEP, 8, "codes are fixed: FLUX_ERR_TOO_DEEP is 8");
    is_str(flux_status_name((flux_status)9), "FLUX_ERR_UNKNOWN", "flux_status_name(9)");
    is_str(flux_status_name((flux_status)1000), "FLUX_ERR_UNKNOWN", "flux_status_name(1000)");
    is_str(flux_status_name((flux_status)-1), "FLUX_ERR_UNKNOWN", "flux_status_name(-1)");
    ok(flux_status_name(FLUX_ERR_CIRCULAR) == flux_status_name(FLUX_ERR_CIRCULAR),
       "status names are static storage (same pointer every time)");
}

/* flux_dispatcher_close(): destroy's work but the freeing. */
static int close_done_calls;
static flux_status close_done_status;
static void close_done(void *context, void *payload, flux_status status)
{
    (void)context;
    (void)payload;
    close_done_calls++;
    close_done_status = status;
}

static int close_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)state;
    (void)payload;
    (void)next;
    return 0;
}

static void test_close_releases_everything_and_refuses_later_calls(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace released = {0};
    node a, b, late;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    node_init(&late, 3, d, NULL);
    a.destroy_log = b.destroy_log = late.destroy_log = &released;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatcher_close(d));
    is_trace(&released, INTS(1, 2), "every destroy ran once, in registration order");
    /* Every later call is refused, and changes nothing. */
    EXPECT_STATUS(flux_dispatch(d, payload_a), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "closed", "the message says the dispatcher is closed");
    EXPECT_STATUS(flux_try_dispatch(d, payload_a), FLUX_ERR_INVALID_ARGUMENT);
    is_int(a.calls + b.calls, 0, "no callback ran");
    EXPECT_STATUS(node_register(&late), FLUX_ERR_INVALID_ARGUMENT);
    is_int(late.destroyed, 1, "a refused registration's context is still destroyed once");
    is_uint(late.token, 0, "and gets no token");
    EXPECT_STATUS(flux_unregister(d, a.token), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_wait_for(d, &a.token, 1), FLUX_ERR_INVALID_ARGUMENT);
    close_done_calls = 0;
    EXPECT_STATUS(flux_enqueue(d, NULL, close_done, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_int(close_done_calls, 1, "a refused enqueue's done ran, as always");
    is_int(close_done_status, FLUX_ERR_INVALID_ARGUMENT, "with the refusal");
    EXPECT_STATUS(flux_dispatcher_set_observer(d, NULL, NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_store_listener_fail(d, 1), FLUX_ERR_INVALID_ARGUMENT);
    flux_store *s = (flux_store *)&s;
    EXPECT_STATUS(flux_store_create(d, NULL, close_reduce, NULL, NULL, NULL, NULL, &s), FLUX_ERR_INVALID_ARGUMENT);
    is_ptr(s, NULL, "no store is made");
    is_int(flux_is_dispatching(d), 0, "flux_is_dispatching() answers 0");
    EXPECT_OK(flux_dispatcher_close(d)); /* closed already */
    is_trace(&released, INTS(1, 2, 3), "nothing was destroyed again");
    EXPECT_OK(flux_dispatcher_destroy(d)); /* frees it; valgrind and ASan see the rest */
    is_trace(&released, INTS(1, 2, 3), "nor by the destroy that freed it");
    EXPECT_STATUS(flux_dispatcher_close(NULL), FLUX_ERR_INVALID_ARGUMENT);
}

static int close_from_inside(node *self, const void *p)
{
    (void)p;
    self->user = (void *)(intptr_t)flux_dispatcher_close(self->d);
    return 0;
}

static void test_close_refused_while_dispatching_or_with_stores(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    a.hook = close_from_inside;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int((int)(intptr_t)a.user, FLUX_ERR_ALREADY_DISPATCHING, "close from inside a callback is refused");
    is_int(b.calls, 1, "and the dispatch went on");
    is_int(a.destroyed + b.destroyed, 0, "nothing was released");
    a.hook = NULL;
    flux_store *s = NULL;
    EXPECT_OK(flux_store_create(d, NULL, close_reduce, NULL, NULL, NULL, NULL, &s));
    EXPECT_STATUS(flux_dispatcher_close(d), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "store", "the message says why");
    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(a.calls, 2, "the dispatcher still works");
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_close(d));
    is_int(a.destroyed + b.destroyed, 2, "then it closes");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* What a destroy function that flux_dispatcher_close() runs gets from d:
 * the dispatcher is closed already, so close answers FLUX_OK and the rest
 * FLUX_ERR_INVALID_ARGUMENT -- destroy too, which must not free d under the
 * close still running it (ASan and valgrind would see that close go on in
 * freed memory). */
static struct closing_probe {
    flux_dispatcher *d;
    int runs;
    flux_status close, destroy, dispatch, try_dispatch, enqueue, reg, unreg, observer;
    int is_dispatching, done_runs, reg_destroyed, observer_destroyed;
    flux_status done_status;
    flux_token reg_token;
} closing;

static void closing_done(void *context, void *payload, flux_status status)
{
    (void)context;
    (void)payload;
    closing.done_runs++;
    closing.done_status = status;
}

static void closing_count_reg(void *context) { (void)context; closing.reg_destroyed++; }
static void closing_count_observer(void *context) { (void)context; closing.observer_destroyed++; }

static void destroy_that_probes_the_closing_dispatcher(void *context)
{
    (void)context;
    flux_dispatcher *d = closing.d;
    static const flux_observer hooks = {FLUX_OBSERVER_VERSION, NULL, NULL, NULL, NULL, NULL};
    closing.runs++;
    closing.close = flux_dispatcher_close(d);
    closing.destroy = flux_dispatcher_destroy(d);
    closing.dispatch = flux_dispatch(d, payload_a);
    closing.try_dispatch = flux_try_dispatch(d, payload_a);
    closing.enqueue = flux_enqueue(d, NULL, closing_done, NULL);
    closing.reg_token = 55;
    closing.reg = flux_register(d, noop_cb, NULL, closing_count_reg, &closing.reg_token);
    closing.unreg = flux_unregister(d, 1);
    closing.observer = flux_dispatcher_set_observer(d, &hooks, NULL, closing_count_observer);
    closing.is_dispatching = flux_is_dispatching(d);
}

static void test_calls_from_a_destroy_that_close_runs(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    memset(&closing, 0, sizeof closing);
    closing.d = d;
    node a;
    node_init(&a, 1, d, NULL);
    EXPECT_OK(node_register(&a));
    flux_token probe;
    EXPECT_OK(flux_register(d, noop_cb, NULL, destroy_that_probes_the_closing_dispatcher, &probe));
    EXPECT_OK(flux_dispatcher_close(d));
    is_int(closing.runs, 1, "the probing destroy ran once");
    is_int(a.destroyed, 1, "the other registration was released once");
    EXPECT_OK(closing.close);
    is_int(closing.destroy, FLUX_ERR_INVALID_ARGUMENT, "flux_dispatcher_destroy: refused, d not freed under the close");
    is_int(closing.dispatch, FLUX_ERR_INVALID_ARGUMENT, "flux_dispatch: refused");
    is_int(closing.try_dispatch, FLUX_ERR_INVALID_ARGUMENT, "flux_try_dispatch: refused");
    is_int(closing.enqueue, FLUX_ERR_INVALID_ARGUMENT, "flux_enqueue: refused");
    is_int(closing.done_runs, 1, "its done ran once");
    is_int(closing.done_status, FLUX_ERR_INVALID_ARGUMENT, "with the refusal");
    is_int(closing.reg, FLUX_ERR_INVALID_ARGUMENT, "flux_register: refused");
    is_int(closing.reg_destroyed, 1, "its context destroyed at once");
    is_uint(closing.reg_token, 0, "and *out_token set to 0");
    is_int(closing.unreg, FLUX_ERR_INVALID_ARGUMENT, "flux_unregister: refused");
    is_int(closing.observer, FLUX_ERR_INVALID_ARGUMENT, "flux_dispatcher_set_observer: refused");
    is_int(closing.observer_destroyed, 1, "its context destroyed at once");
    is_int(closing.is_dispatching, 0, "flux_is_dispatching: 0");
    is_int(a.calls, 0, "no callback ran");
    EXPECT_OK(flux_dispatcher_destroy(d)); /* the close has returned: this one frees it */
    is_int(closing.runs + a.destroyed, 2, "nothing was destroyed again");
}

/* A done and an observer hook run while d is dispatching: close refuses
 * there as from a callback, and nothing is released. */
static flux_status close_from_done_status = (flux_status)-1, close_from_hook_status = (flux_status)-1;

static void done_that_closes(void *context, void *payload, flux_status status)
{
    (void)payload;
    (void)status;
    close_from_done_status = flux_dispatcher_close(context);
}

static void hook_that_closes(void *context, const void *payload, flux_status status)
{
    (void)payload;
    (void)status;
    close_from_hook_status = flux_dispatcher_close(context);
}

static void test_close_refused_from_a_done_and_a_hook(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a;
    node_init(&a, 1, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(flux_enqueue(d, (void *)payload_a, done_that_closes, d));
    is_int(close_from_done_status, FLUX_ERR_ALREADY_DISPATCHING, "close from a done is refused");
    flux_observer hooks = {FLUX_OBSERVER_VERSION, NULL, hook_that_closes, NULL, NULL, NULL};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, d, NULL));
    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(close_from_hook_status, FLUX_ERR_ALREADY_DISPATCHING, "close from dispatch_end is refused");
    is_int(a.destroyed, 0, "nothing was released");
    EXPECT_OK(flux_dispatch(d, payload_b));
    is_int(a.calls, 3, "the dispatcher still works");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(a.destroyed, 1, "and is destroyed as usual");
}

/* A destroy deferred to the end of a dispatch runs outside it, and may
 * call any function -- close the dispatcher too, while the flux_dispatch()
 * that ran it has not returned ("other calls on d may be in flight"). */
static flux_status deferred_close_status = (flux_status)-1;
static int deferred_close_runs;

static void destroy_that_closes(void *context)
{
    deferred_close_runs++;
    deferred_close_status = flux_dispatcher_close(((node *)context)->d);
}

static int unregister_self_hook(node *self, const void *p)
{
    (void)p;
    return flux_unregister(self->d, self->token) == FLUX_OK ? 0 : 1;
}

static void test_close_from_a_destroy_deferred_to_the_dispatch_end(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    a.hook = unregister_self_hook;
    EXPECT_OK(flux_register(d, node_cb, &a, destroy_that_closes, &a.token));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatch(d, payload_a));
    is_int(deferred_close_runs, 1, "the deferred destroy ran once");
    is_int(deferred_close_status, FLUX_OK, "and closed the dispatcher, the dispatch being over");
    is_int(b.calls, 1, "the dispatch ran whole");
    is_int(b.destroyed, 1, "the close released the other registration once");
    EXPECT_STATUS(flux_dispatch(d, payload_b), FLUX_ERR_INVALID_ARGUMENT);
    is_int(b.calls, 1, "later dispatches are refused");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(deferred_close_runs + b.destroyed, 2, "nothing was destroyed again");
}

/* A dispatch waiting for another thread's as close runs: it runs whole
 * before the close (which is refused meanwhile) or is refused -- never with
 * some callbacks released. Both orders happen; each round checks which. */
struct close_race {
    flux_dispatcher *d;
    node first, second;
    flag holding, release;
    flux_status waiter_status;
    int holder_calls;
    _Atomic pid_t waiter_tid;
};

static int close_race_hold(void *context, const void *p)
{
    struct close_race *r = context;
    if (p == payload_a) { /* the holder's own dispatch */
        r->holder_calls++;
        flag_set(&r->holding);
        flag_wait(&r->release, 10);
    }
    return 0;
}

static void *close_race_holder(void *arg)
{
    struct close_race *r = arg;
    flux_dispatch(r->d, payload_a);
    return NULL;
}

static void *close_race_waiter(void *arg)
{
    struct close_race *r = arg;
    r->waiter_tid = thread_id();
    r->waiter_status = flux_dispatch(r->d, &r->waiter_status);
    return NULL;
}

static void test_close_as_a_dispatch_waits_never_runs_part_of_it(void)
{
    int ran_whole = 0, refused = 0, partial = 0;
    for (int round = 0; round < 20; round++) {
        struct close_race r;
        memset(&r, 0, sizeof r);
        r.d = flux_dispatcher_create();
        REQUIRE(r.d != NULL);
        flag_init(&r.holding);
        flag_init(&r.release);
        flux_token t;
        REQUIRE(flux_register(r.d, close_race_hold, &r, NULL, &t) == FLUX_OK);
        node_init(&r.first, 1, r.d, NULL);
        node_init(&r.second, 2, r.d, NULL);
        REQUIRE(node_register(&r.first) == FLUX_OK && node_register(&r.second) == FLUX_OK);
        pthread_t holder, waiter;
        REQUIRE(pthread_create(&holder, NULL, close_race_holder, &r) == 0);
        REQUIRE(flag_wait(&r.holding, 10));
        REQUIRE(pthread_create(&waiter, NULL, close_race_waiter, &r) == 0);
        wait_until_blocked(&r.waiter_tid, 10);
        flag_set(&r.release);
        flux_status closed;
        while ((closed = flux_dispatcher_close(r.d)) == FLUX_ERR_ALREADY_DISPATCHING)
            sched_yield();
        pthread_join(holder, NULL);
        pthread_join(waiter, NULL);
        if (closed != FLUX_OK)
            partial++;
        else if (r.waiter_status == FLUX_OK && r.first.calls == 2 && r.second.calls == 2)
            ran_whole++;
        else if (r.waiter_status == FLUX_ERR_INVALID_ARGUMENT && r.first.calls == 1 && r.second.calls == 1)
            refused++;
        else
            partial++;
        REQUIRE(flux_dispatcher_destroy(r.d) == FLUX_OK);
        flag_fini(&r.holding);
        flag_fini(&r.release);
    }
    is_int(partial, 0, "the waiting dispatch ran whole (%d) or was refused (%d), never in part", ran_whole, refused);
}

/* A store created on another thread as close runs: counted before it
 * registers, it either keeps the close refused while it lives or finds the
 * dispatcher closed -- never released by the close under its creator (it
 * was: the count was read before the engine's lock, so a store registered
 * in between was freed by the close, and ASan saw its creator use it). */
struct store_race {
    flux_dispatcher *d;
    atomic_int made, refused_closed, bad;
};

static void *store_race_creator(void *arg)
{
    struct store_race *r = arg;
    static int initial = 7;
    /* Bounded, and a pause between stores: the close gets its windows. */
    for (int i = 0; i < 100; i++) {
        flux_store *s = NULL;
        flux_status st = flux_store_create(r->d, &initial, close_reduce, NULL, NULL, NULL, NULL, &s);
        if (st == FLUX_ERR_INVALID_ARGUMENT) {
            atomic_fetch_add(&r->refused_closed, 1);
            return NULL;
        }
        if (st != FLUX_OK) {
            atomic_fetch_add(&r->bad, 1);
            return NULL;
        }
        atomic_fetch_add(&r->made, 1);
        sched_yield();
        if (flux_store_state(s) != &initial || flux_store_destroy(s) != FLUX_OK)
            atomic_fetch_add(&r->bad, 1);
        usleep(20);
    }
    return NULL;
}

static void test_close_racing_a_store_creation_never_frees_it_under_its_creator(void)
{
    int bad = 0, rounds = (int)tap_scale(100), closed_first = 0;
    for (int round = 0; round < rounds; round++) {
        struct store_race r = {.d = flux_dispatcher_create()};
        REQUIRE(r.d != NULL);
        pthread_t creator;
        REQUIRE(pthread_create(&creator, NULL, store_race_creator, &r) == 0);
        for (int spin = 0; spin < round % 50; spin++)
            sched_yield();
        flux_status st;
        while ((st = flux_dispatcher_close(r.d)) == FLUX_ERR_INVALID_ARGUMENT)
            sched_yield(); /* a store is live: its creator destroys it */
        pthread_join(creator, NULL);
        closed_first += atomic_load(&r.made) == 0;
        bad += st != FLUX_OK || atomic_load(&r.bad) != 0 || atomic_load(&r.refused_closed) > 1;
        REQUIRE(flux_dispatcher_destroy(r.d) == FLUX_OK);
    }
    is_int(bad, 0, "every store made before the close lived until its creator destroyed it (%d of %d rounds "
                   "closed before any store)", closed_first, rounds);
}

int main(void)
{
    tap_init();
    RUN(test_every_callback_gets_every_payload);
    RUN(test_dispatch_with_no_callbacks);
    RUN(test_many_callbacks_in_registration_order);
    RUN(test_tokens);
    RUN(test_null_payload);
    RUN(test_is_dispatching);
    RUN(test_register_during_dispatch);
    RUN(test_unregister_later_during_dispatch);
    RUN(test_unregister_earlier_during_dispatch);
    RUN(test_unregister_self);
    RUN(test_callback_failure);
    RUN(test_failure_with_joiner_registered);
    RUN(test_dispatch_inside_dispatch);
    RUN(test_dispatch_other_dispatcher_inside);
    RUN(test_try_dispatch);
    RUN(test_close_releases_everything_and_refuses_later_calls);
    RUN(test_close_refused_while_dispatching_or_with_stores);
    RUN(test_calls_from_a_destroy_that_close_runs);
    RUN(test_close_refused_from_a_done_and_a_hook);
    RUN(test_close_from_a_destroy_deferred_to_the_dispatch_end);
    RUN(test_close_as_a_dispatch_waits_never_runs_part_of_it);
    RUN(test_close_racing_a_store_creation_never_frees_it_under_its_creator);
    RUN(test_version);
    RUN(test_status_names);
    return tap_done();
}
