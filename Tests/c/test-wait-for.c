/*
 * test-wait-for.c -- flux_wait_for(): Facebook's Dispatcher-test.js translated
 * to C, then ordering, chains, cycles, token checks, failures while waiting.
 */
#include "helpers.h"

static const char payload[] = "payload";

/* Registers `count` do-nothing callbacks so later tokens are multi-digit and
 * easy to find in a message. */
static int noop_cb(void *context, const void *p)
{
    (void)context;
    (void)p;
    return 0;
}

static void pad_tokens(flux_dispatcher *d, int count)
{
    for (int i = 0; i < count; i++) {
        flux_token t;
        REQUIRE(flux_register(d, noop_cb, NULL, NULL, &t) == FLUX_OK);
    }
}

/* ---- Dispatcher-test.js --------------------------------------------------- */

static void test_fb_executes_all_callbacks(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.calls, 1, "should execute all subscriber callbacks: A once");
    is_int(b.calls, 1, "should execute all subscriber callbacks: B once");
    is_ptr(a.payload, payload, "A got the payload");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.calls, 2, "A once per dispatch");
    is_int(b.calls, 2, "B once per dispatch");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* Records, at the moment of the wait, how often `other` had been called. */
static int count_after_wait(node *self, const void *p)
{
    (void)p;
    node *other = self->user;
    trace_push(self->log, 100 + other->calls);
    return 0;
}

static void test_fb_waits_for_earlier(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b;
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    node_wait_on(&b, 1, &a.token);
    b.hook = count_after_wait;
    b.user = &a;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(b.wait_status, FLUX_OK, "should wait for callbacks registered earlier: wait_for OK");
    is_trace(&log, INTS(1, 2, 101), "A ran before B, once, and was not run again by the wait");
    is_int(a.calls, 1, "A called exactly once");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.calls, 2, "the next dispatch calls A once again");
    is_int(b.wait_status, FLUX_OK, "and the wait works again");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_waits_for_later(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b;
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    node_wait_on(&a, 1, &b.token);
    a.hook = count_after_wait;
    a.user = &b;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.wait_status, FLUX_OK, "should wait for callbacks registered later: wait_for OK");
    is_trace(&log, INTS(1, 2, 101), "B ran inside A's wait_for, before it returned");
    is_int(b.calls, 1, "B was not called again by the dispatch loop");
    is_ptr(b.payload, payload, "B got the payload");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static int dispatch_again(node *self, const void *p)
{
    flux_status s = flux_dispatch(self->d, p);
    trace_push(self->log, 300 + (int)s);
    return 0;
}

static void test_fb_throws_dispatch_while_dispatching(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b;
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    a.hook = dispatch_again;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(1, 300 + FLUX_ERR_ALREADY_DISPATCHING, 2),
             "should throw if dispatch() while dispatching; the outer dispatch goes on");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_throws_wait_for_not_dispatching(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a;
    node_init(&a, 1, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_STATUS(flux_wait_for(d, &a.token, 1), FLUX_ERR_NOT_DISPATCHING);
    has_prefix(flux_last_error(), "flux_wait_for", "the message names flux_wait_for");
    EXPECT_STATUS(flux_wait_for(d, NULL, 0), FLUX_ERR_NOT_DISPATCHING);
    EXPECT_OK(flux_dispatch(d, payload));
    EXPECT_STATUS(flux_wait_for(d, &a.token, 1), FLUX_ERR_NOT_DISPATCHING);
    is_int(a.calls, 1, "a failed wait_for outside a dispatch calls nothing");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_throws_wait_for_invalid_token(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    pad_tokens(d, 10);
    node a;
    node_init(&a, 1, d, NULL);
    EXPECT_OK(node_register(&a));
    flux_token bogus = 4321;
    node_wait_on(&a, 1, &bogus);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.wait_status, FLUX_ERR_UNKNOWN_TOKEN, "should throw on waitFor() with an invalid token");
    has_prefix(a.wait_error, "flux_wait_for", "the message names flux_wait_for");
    has_number(a.wait_error, 4321, "the message names the token");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_self_circular(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    pad_tokens(d, 11);
    trace log = {0};
    node a;
    node_init(&a, 1, d, &log);
    a.trace_exit = true;
    EXPECT_OK(node_register(&a));
    node_wait_on(&a, 1, &a.token);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.wait_status, FLUX_ERR_CIRCULAR, "should throw on self-circular dependencies");
    has_prefix(a.wait_error, "flux_wait_for", "the message starts with flux_wait_for");
    has_number(a.wait_error, a.token, "the message names the token (%llu)",
               (unsigned long long)a.token);
    is_trace(&log, INTS(1, -1), "the callback ran once and was not re-entered");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_multi_circular(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    pad_tokens(d, 20);
    trace log = {0};
    node a, b, c;
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    node_init(&c, 3, d, &log);
    a.trace_exit = b.trace_exit = c.trace_exit = true;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&c));
    /* a -> b -> c -> a */
    node_wait_on(&a, 1, &b.token);
    node_wait_on(&b, 1, &c.token);
    node_wait_on(&c, 1, &a.token);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(c.wait_status, FLUX_ERR_CIRCULAR, "should throw on multi-circular dependencies");
    has_prefix(c.wait_error, "flux_wait_for", "the message starts with flux_wait_for");
    has_number(c.wait_error, a.token, "the message names the pending token (%llu)",
               (unsigned long long)a.token);
    is_int(b.wait_status, FLUX_OK, "the wait above it returns OK (its callback finished)");
    is_int(a.wait_status, FLUX_OK, "and so does the outermost wait");
    is_trace(&log, INTS(1, 2, 3, -3, -2, -1), "each ran once, nested, none re-entered");

    /* Two-node cycle where the callback at the bottom propagates the error. */
    a.wait = false;
    node_wait_on(&b, 1, &c.token);
    node_wait_on(&c, 1, &b.token);
    c.fail_times = 1;
    log.n = 0;
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(c.wait_status, FLUX_ERR_CIRCULAR, "b <-> c: c's wait is CIRCULAR");
    has_number(c.wait_error, b.token, "naming b's token");
    is_int(b.wait_status, FLUX_ERR_CALLBACK_FAILED,
           "c failed, so b's wait_for reports CALLBACK_FAILED");
    is_trace(&log, INTS(1, -1, 2, 3, -3, -2), "nothing ran after the failure");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_consistent_after_failed_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    a.fail_times = 1;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(b.calls, 0, "B not called after A failed");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.calls, 2, "should remain in a consistent state after a failed dispatch: A");
    is_int(b.calls, 1, "should remain in a consistent state after a failed dispatch: B");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_fb_unregisters_properly(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(flux_dispatch(d, payload));
    EXPECT_OK(flux_unregister(d, b.token));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.calls, 2, "should properly unregister callbacks: A still called");
    is_int(b.calls, 1, "should properly unregister callbacks: B no longer called");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- more wait_for -------------------------------------------------------- */

static void test_chain_reverse_registration(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node c, b, a;   /* registered c, b, a; c waits b, b waits a */
    node_init(&c, 3, d, &log);
    node_init(&b, 2, d, &log);
    node_init(&a, 1, d, &log);
    a.trace_exit = b.trace_exit = c.trace_exit = true;
    EXPECT_OK(node_register(&c));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&a));
    node_wait_on(&c, 1, &b.token);
    node_wait_on(&b, 1, &a.token);
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(3, 2, 1, -1, -2, -3), "chained waits: a finishes first, then b, then c");
    is_int(a.calls + b.calls + c.calls, 3, "each called once; the loop skips the handled ones");
    is_int(b.wait_status, FLUX_OK, "b's wait OK");
    is_int(c.wait_status, FLUX_OK, "c's wait OK");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_order_given_and_skip_handled(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, w, c, e;   /* w waits [e, a, c, e, c]: a handled, e then c run, dups skipped */
    node_init(&a, 1, d, &log);
    node_init(&w, 2, d, &log);
    node_init(&c, 3, d, &log);
    node_init(&e, 4, d, &log);
    w.trace_exit = true;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&w));
    EXPECT_OK(node_register(&c));
    EXPECT_OK(node_register(&e));
    flux_token list[] = {e.token, a.token, c.token, e.token, c.token};
    node_wait_on(&w, 5, list);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(w.wait_status, FLUX_OK, "wait_for with an already-handled token and duplicates: OK");
    is_trace(&log, INTS(1, 2, 4, 3, -2), "waited-for callbacks ran in the order given, each once");
    is_int(a.calls + c.calls + e.calls, 3, "no callback ran twice");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* Waits on the same token twice in one callback, in two calls. */
static int wait_again(node *self, const void *p)
{
    (void)p;
    node *other = self->user;
    flux_status s = flux_wait_for(self->d, &other->token, 1);
    trace_push(self->log, s == FLUX_OK ? 200 : 300 + (int)s);
    return 0;
}

static void test_wait_twice_on_same_token(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node w, x;
    node_init(&w, 1, d, &log);
    node_init(&x, 2, d, &log);
    EXPECT_OK(node_register(&w));
    EXPECT_OK(node_register(&x));
    node_wait_on(&w, 1, &x.token);
    w.hook = wait_again;
    w.user = &x;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(w.wait_status, FLUX_OK, "first wait runs the later callback");
    is_trace(&log, INTS(1, 2, 200), "a second wait_for on it is OK and runs nothing");
    is_int(x.calls, 1, "called once in all");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_empty_wait_list(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    a.wait = true;
    a.wait_null = true;
    a.nwait = 0;
    b.wait = true;
    b.nwait = 0;     /* non-NULL array, count 0 */
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.wait_status, FLUX_OK, "flux_wait_for(d, NULL, 0) inside a dispatch is OK");
    is_int(b.wait_status, FLUX_OK, "flux_wait_for(d, tokens, 0) inside a dispatch is OK");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_null_tokens_with_count(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    a.wait = true;
    a.wait_null = true;
    a.nwait = 1;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.wait_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_wait_for(d, NULL, 1) inside a dispatch -> INVALID_ARGUMENT");
    has_prefix(a.wait_error, "flux_wait_for", "the message names flux_wait_for");
    is_int(b.calls, 1, "nothing was run early; B ran once from the loop");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_all_tokens_checked_first(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node w, x, gone;
    node_init(&w, 1, d, &log);
    node_init(&x, 2, d, &log);
    node_init(&gone, 3, d, &log);
    EXPECT_OK(node_register(&w));
    EXPECT_OK(node_register(&x));
    EXPECT_OK(node_register(&gone));
    EXPECT_OK(flux_unregister(d, gone.token));

    const flux_token bad[] = {999, 0, gone.token};
    const char *what[] = {"never issued (999)", "0", "unregistered"};
    for (int i = 0; i < 3; i++) {
        flux_token list[] = {x.token, bad[i]};
        node_wait_on(&w, 2, list);
        log.n = 0;
        x.calls = 0;
        EXPECT_OK(flux_dispatch(d, payload));
        is_int(w.wait_status, FLUX_ERR_UNKNOWN_TOKEN, "wait_for [valid, %s] -> UNKNOWN_TOKEN", what[i]);
        has_number(w.wait_error, bad[i], "the message names token %llu", (unsigned long long)bad[i]);
        is_trace(&log, INTS(1, 2), "[valid, %s]: the valid callback had not run before the error; "
                 "it ran later from the loop", what[i]);
        is_int(x.calls, 1, "and only once");
    }
    EXPECT_OK(flux_dispatcher_destroy(d));
}

struct remover {
    flux_dispatcher *d;
    flux_token target;
    flux_status status;
};

static int remove_target(void *context, const void *p)
{
    struct remover *r = context;
    (void)p;
    r->status = flux_unregister(r->d, r->target);
    return 0;
}

static void test_wait_for_token_unregistered_during_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node w, target;
    node_init(&w, 2, d, &log);
    node_init(&target, 3, d, &log);
    struct remover r = {d, 0, (flux_status)-1};
    flux_token tr;
    EXPECT_OK(flux_register(d, remove_target, &r, NULL, &tr));
    EXPECT_OK(node_register(&w));
    EXPECT_OK(node_register(&target));
    r.target = target.token;
    node_wait_on(&w, 1, &target.token);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(r.status, FLUX_OK, "an earlier callback unregistered the target");
    is_int(w.wait_status, FLUX_ERR_UNKNOWN_TOKEN,
           "waiting on a token unregistered earlier in this dispatch -> UNKNOWN_TOKEN");
    is_int(target.calls, 0, "the unregistered callback never ran");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_circular_checked_first(void)
{
    /* [not yet run, itself]: the cycle is found before the first one runs. */
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node w, x;
    node_init(&w, 1, d, &log);
    node_init(&x, 2, d, &log);
    w.trace_exit = true;
    EXPECT_OK(node_register(&w));
    EXPECT_OK(node_register(&x));
    flux_token list[] = {x.token, w.token};
    node_wait_on(&w, 2, list);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(w.wait_status, FLUX_ERR_CIRCULAR, "wait_for [not yet run, self] -> CIRCULAR");
    has_number(w.wait_error, w.token, "naming the waiter's own token");
    is_trace(&log, INTS(1, -1, 2), "the other callback had not run before the error");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_wait_for_handled_then_unregistered(void)
{
    /* a runs; b unregisters a and then waits on it: a is no longer registered. */
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a;
    node_init(&a, 1, d, NULL);
    EXPECT_OK(node_register(&a));
    struct remover r = {d, a.token, (flux_status)-1};
    flux_token tr;
    EXPECT_OK(flux_register(d, remove_target, &r, NULL, &tr));
    node w;
    node_init(&w, 3, d, NULL);
    EXPECT_OK(node_register(&w));
    node_wait_on(&w, 1, &a.token);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(r.status, FLUX_OK, "a callback that already ran was unregistered");
    is_int(w.wait_status, FLUX_ERR_UNKNOWN_TOKEN,
           "waiting on it afterwards in the same dispatch -> UNKNOWN_TOKEN (it is unregistered)");
    is_int(a.calls, 1, "it ran once");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* wait_for [remover, target]: every token is checked before any callback
 * runs, so the remover runs and the target, which it unregisters, is then
 * skipped -- the call cannot report UNKNOWN_TOKEN once a callback ran. */
static void test_wait_for_several_skips_a_token_one_of_them_unregisters(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node w, target;
    node_init(&w, 1, d, &log);
    node_init(&target, 3, d, &log);
    EXPECT_OK(node_register(&w));
    struct remover r = {d, 0, (flux_status)-1};
    flux_token tr;
    EXPECT_OK(flux_register(d, remove_target, &r, NULL, &tr));
    EXPECT_OK(node_register(&target));
    r.target = target.token;
    flux_token list[] = {tr, target.token};
    node_wait_on(&w, 2, list);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(r.status, FLUX_OK, "the first token's callback unregistered the second");
    is_int(w.wait_status, FLUX_OK, "the wait succeeded: the second token was skipped");
    is_int(target.calls, 0, "the unregistered callback never ran");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static flux_status self_unregister_status;
static int unregister_self_hook(node *self, const void *p)
{
    (void)p;
    self_unregister_status = flux_unregister(self->d, self->token);
    return 0;
}

/* a's wait runs b, which unregisters itself: its return must not mark it
 * handled, so a later wait finds it unregistered, as when the loop ran it. */
static void test_wait_for_run_by_a_wait_that_unregistered_itself(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b, c;
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    node_init(&c, 3, d, &log);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&c));
    node_wait_on(&a, 1, &b.token);
    node_wait_on(&c, 1, &b.token);
    b.hook = unregister_self_hook;
    self_unregister_status = (flux_status)-1;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(self_unregister_status, FLUX_OK, "b unregistered itself while a's wait ran it");
    is_int(a.wait_status, FLUX_OK, "a's wait ran b");
    is_int(c.wait_status, FLUX_ERR_UNKNOWN_TOKEN,
           "a later wait on b in the same dispatch -> UNKNOWN_TOKEN (it is unregistered)");
    is_trace(&log, INTS(1, 2, 3), "b ran once, from a's wait");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* Facebook's "Cannot dispatch in the middle of a dispatch": the refusal of a
 * dispatch from a callback of the same thread says so, rather than blaming
 * another thread or a deadlock. */
static char reentry_error[2][256];
static flux_status reentry_status[2];
static int dispatch_and_try_again(node *self, const void *p)
{
    reentry_status[0] = flux_dispatch(self->d, p);
    snprintf(reentry_error[0], sizeof reentry_error[0], "%s", flux_last_error());
    reentry_status[1] = flux_try_dispatch(self->d, p);
    snprintf(reentry_error[1], sizeof reentry_error[1], "%s", flux_last_error());
    return 0;
}

static void test_dispatch_from_a_callback_says_why(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node a;
    node_init(&a, 1, d, NULL);
    a.hook = dispatch_and_try_again;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(reentry_status[0], FLUX_ERR_ALREADY_DISPATCHING, "flux_dispatch from a callback");
    has_substr(reentry_error[0], "in the middle of a dispatch", "its message says why");
    is_int(reentry_status[1], FLUX_ERR_ALREADY_DISPATCHING, "flux_try_dispatch from a callback");
    has_substr(reentry_error[1], "in the middle of a dispatch", "its message says why");
    is_int(a.calls, 1, "the callback ran once");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* A callback of `inner` that waits on a token of the outer dispatcher, which
 * is dispatching further up the same thread. */
struct nested_wait {
    flux_dispatcher *outer, *inner;
    flux_token outer_token;
    flux_status wait, inner_dispatch;
};

static int nested_wait_inner(void *context, const void *p)
{
    struct nested_wait *n = context;
    (void)p;
    n->wait = flux_wait_for(n->outer, &n->outer_token, 1);
    return 0;
}

static int nested_wait_outer(void *context, const void *p)
{
    struct nested_wait *n = context;
    n->inner_dispatch = flux_dispatch(n->inner, p);
    return 0;
}

static void test_wait_for_outer_from_nested_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d != NULL && d2 != NULL);
    trace log = {0};
    struct nested_wait n = {d, d2, 0, (flux_status)-1, (flux_status)-1};
    node later;
    node_init(&later, 2, d, &log);
    flux_token t;
    EXPECT_OK(flux_register(d, nested_wait_outer, &n, NULL, &t));
    EXPECT_OK(node_register(&later));
    EXPECT_OK(flux_register(d2, nested_wait_inner, &n, NULL, &t));
    n.outer_token = later.token;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(n.inner_dispatch, FLUX_OK, "the nested dispatch of another dispatcher worked");
    is_int(n.wait, FLUX_OK,
           "wait_for on the outer dispatcher from a nested dispatcher's callback (same thread) is OK");
    is_int(later.calls, 1, "the waited-for callback ran once");
    EXPECT_OK(flux_dispatcher_destroy(d));
    EXPECT_OK(flux_dispatcher_destroy(d2));
}

struct join_then_wait {
    flux_dispatcher *d;
    node *joiner;
    flux_token valid;           /* a callback not yet run */
    flux_status reg, wait_joiner, wait_both;
    char message[256];
    int calls;
};

static int join_then_wait_cb(void *context, const void *p)
{
    struct join_then_wait *j = context;
    (void)p;
    if (j->calls++ > 0)
        return 0;
    j->reg = node_register(j->joiner);
    j->wait_joiner = flux_wait_for(j->d, &j->joiner->token, 1);
    snprintf(j->message, sizeof j->message, "%s", flux_last_error());
    flux_token list[] = {j->valid, j->joiner->token};
    j->wait_both = flux_wait_for(j->d, list, 2);
    return 0;
}

static void test_wait_for_token_registered_during_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    pad_tokens(d, 30);
    trace log = {0};
    node joiner, later;
    node_init(&joiner, 9, d, &log);
    node_init(&later, 2, d, &log);
    struct join_then_wait j = {d, &joiner, 0, (flux_status)-1, (flux_status)-1,
                               (flux_status)-1, "", 0};
    flux_token tj;
    EXPECT_OK(flux_register(d, join_then_wait_cb, &j, NULL, &tj));
    EXPECT_OK(node_register(&later));
    j.valid = later.token;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(j.reg, FLUX_OK, "registered a callback during the dispatch");
    is_int(j.wait_joiner, FLUX_ERR_UNKNOWN_TOKEN,
           "waiting on a token registered during this dispatch -> UNKNOWN_TOKEN");
    has_prefix(j.message, "flux_wait_for", "the message names flux_wait_for");
    has_number(j.message, joiner.token, "the message names the token");
    has_substr(j.message, "registered during", "the message says it was registered during this dispatch");
    is_int(j.wait_both, FLUX_ERR_UNKNOWN_TOKEN, "[valid, joined] -> UNKNOWN_TOKEN too");
    is_trace(&log, INTS(2), "the valid one was not run early; the joiner not at all");
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(2, 2, 9), "the joiner runs in the next dispatch");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_wait_for_other_dispatcher(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_dispatcher *idle = flux_dispatcher_create();
    REQUIRE(d != NULL && idle != NULL);
    node other, w;
    node_init(&other, 1, idle, NULL);
    EXPECT_OK(node_register(&other));
    node_init(&w, 2, idle, NULL);     /* waits on `idle`, but registered on d */
    REQUIRE(flux_register(d, node_cb, &w, NULL, &w.token) == FLUX_OK);
    node_wait_on(&w, 1, &other.token);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(w.wait_status, FLUX_ERR_NOT_DISPATCHING,
           "wait_for on an idle dispatcher from a callback of another -> NOT_DISPATCHING");
    is_int(other.calls, 0, "nothing of the idle dispatcher ran");
    EXPECT_OK(flux_dispatcher_destroy(d));
    EXPECT_OK(flux_dispatcher_destroy(idle));
}

/* ---- failures while waiting ----------------------------------------------- */

static int wait_on_c_after(node *self, const void *p)
{
    (void)p;
    node *c = self->user;
    flux_status s = flux_wait_for(self->d, &c->token, 1);
    trace_push(self->log, 300 + (int)s);
    return 0;
}

/* flux.h: once the dispatch is being aborted, FLUX_ERR_CALLBACK_FAILED comes
 * before any token error -- the callback learns the dispatch failed, not
 * that it asked for a bad token. */
static struct after_abort {
    flux_status unknown, zero, self, several, many_self;
    flux_token unknown_token, self_token;
} after_abort;

static int waits_bad_tokens_after_abort(node *self, const void *p)
{
    (void)p;
    flux_token unknown = 999, zero = 0, several[2] = {self->waits[0], 999};
    flux_token selves[2] = {self->token, self->token};
    after_abort.unknown = flux_wait_for(self->d, &unknown, 1);
    after_abort.unknown_token = flux_last_error_token();
    after_abort.zero = flux_wait_for(self->d, &zero, 1);
    after_abort.self = flux_wait_for(self->d, &self->token, 1);
    after_abort.self_token = flux_last_error_token();
    after_abort.several = flux_wait_for(self->d, several, 2);
    after_abort.many_self = flux_wait_for(self->d, selves, 2);
    return 0;
}

static void test_after_an_abort_the_failure_comes_before_token_errors(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    pad_tokens(d, 3);
    node a, b;
    node_init(&a, 1, d, NULL);
    node_init(&b, 2, d, NULL);
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    node_wait_on(&a, 1, &b.token);
    b.fail_times = 1;
    a.hook = waits_bad_tokens_after_abort;
    memset(&after_abort, 0, sizeof after_abort);
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(a.wait_status, FLUX_ERR_CALLBACK_FAILED, "the wait that ran the failing callback");
    is_int(after_abort.unknown, FLUX_ERR_CALLBACK_FAILED, "then an unknown token: the failure, not UNKNOWN_TOKEN");
    is_uint(after_abort.unknown_token, b.token, "naming the callback that failed");
    is_int(after_abort.zero, FLUX_ERR_CALLBACK_FAILED, "token 0: the failure");
    is_int(after_abort.self, FLUX_ERR_CALLBACK_FAILED, "the waiter itself: the failure, not CIRCULAR");
    is_uint(after_abort.self_token, b.token, "naming the callback that failed");
    is_int(after_abort.several, FLUX_ERR_CALLBACK_FAILED, "several tokens, one unknown: the failure");
    is_int(after_abort.many_self, FLUX_ERR_CALLBACK_FAILED, "several tokens, circular: the failure");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_failure_inside_waited_callback(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b, c;     /* a waits b; b fails; a ignores it and waits on c */
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    node_init(&c, 3, d, &log);
    a.trace_exit = true;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&c));
    node_wait_on(&a, 1, &b.token);
    b.fail_times = 1;
    b.fail_value = 5;
    a.hook = wait_on_c_after;
    a.user = &c;
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(a.wait_status, FLUX_ERR_CALLBACK_FAILED,
           "the waiter's wait_for reports the waited-for callback's failure");
    is_trace(&log, INTS(1, 2, 300 + FLUX_ERR_CALLBACK_FAILED, -1),
             "a later wait_for in the aborted dispatch fails too and runs nothing");
    is_int(c.calls, 0, "nothing else ran, although the waiter returned 0");
    is_int(flux_is_dispatching(d), 0, "the dispatcher is idle");

    a.wait = false;
    a.hook = NULL;
    log.n = 0;
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(1, -1, 2, 3), "the next dispatch calls everyone");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_failure_propagates_through_nested_waits(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    node a, b, c, e;     /* a waits b, b waits c, c fails; e is later */
    node_init(&a, 1, d, &log);
    node_init(&b, 2, d, &log);
    node_init(&c, 3, d, &log);
    node_init(&e, 4, d, &log);
    a.trace_exit = b.trace_exit = c.trace_exit = true;
    EXPECT_OK(node_register(&a));
    EXPECT_OK(node_register(&b));
    EXPECT_OK(node_register(&c));
    EXPECT_OK(node_register(&e));
    node_wait_on(&a, 1, &b.token);
    node_wait_on(&b, 1, &c.token);
    c.fail_times = 1;
    a.fail_times = 1;       /* a passes the failure on */
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(b.wait_status, FLUX_ERR_CALLBACK_FAILED, "b's wait_for reports c's failure");
    is_int(a.wait_status, FLUX_ERR_CALLBACK_FAILED, "a's wait_for, further up, too");
    is_trace(&log, INTS(1, 2, 3, -3, -2, -1), "the stack unwound; e never ran");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(a.wait_status, FLUX_OK, "next dispatch: waits work again");
    is_int(e.calls, 1, "and every callback runs");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- depth ---------------------------------------------------------------- */

static void test_chain_depth_1000(void)
{
    enum { N = 1000 };
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    static node n[N];
    static trace log;
    log.n = 0;
    for (int i = 0; i < N; i++) {
        node_init(&n[i], i + 1, d, &log);
        n[i].trace_exit = true;
        REQUIRE(node_register(&n[i]) == FLUX_OK);
    }
    for (int i = 0; i + 1 < N; i++)
        node_wait_on(&n[i], 1, &n[i + 1].token);
    EXPECT_OK(flux_dispatch(d, payload));
    /* Entries 1..N, then exits -N..-1. */
    int good = log.n == 2 * N;
    for (int i = 0; good && i < N; i++)
        good = log.ev[i] == i + 1 && log.ev[N + i] == -(N - i);
    ok(good, "a wait_for chain %d deep: entered in order, finished deepest first", N);
    int calls = 0, waits_ok = 0;
    for (int i = 0; i < N; i++) {
        calls += n[i].calls;
        waits_ok += i + 1 == N || n[i].wait_status == FLUX_OK;
    }
    is_int(calls, N, "each callback ran once");
    is_int(waits_ok, N, "every wait_for returned OK");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(n[0].calls + n[N - 1].calls, 4, "and again on the next dispatch");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

int main(void)
{
    tap_init();
    RUN(test_fb_executes_all_callbacks);
    RUN(test_fb_waits_for_earlier);
    RUN(test_fb_waits_for_later);
    RUN(test_fb_throws_dispatch_while_dispatching);
    RUN(test_fb_throws_wait_for_not_dispatching);
    RUN(test_fb_throws_wait_for_invalid_token);
    RUN(test_fb_self_circular);
    RUN(test_fb_multi_circular);
    RUN(test_fb_consistent_after_failed_dispatch);
    RUN(test_fb_unregisters_properly);
    RUN(test_chain_reverse_registration);
    RUN(test_order_given_and_skip_handled);
    RUN(test_wait_twice_on_same_token);
    RUN(test_empty_wait_list);
    RUN(test_null_tokens_with_count);
    RUN(test_all_tokens_checked_first);
    RUN(test_circular_checked_first);
    RUN(test_wait_for_token_unregistered_during_dispatch);
    RUN(test_wait_for_handled_then_unregistered);
    RUN(test_wait_for_several_skips_a_token_one_of_them_unregisters);
    RUN(test_wait_for_run_by_a_wait_that_unregistered_itself);
    RUN(test_dispatch_from_a_callback_says_why);
    RUN(test_wait_for_token_registered_during_dispatch);
    RUN(test_wait_for_other_dispatcher);
    RUN(test_wait_for_outer_from_nested_dispatch);
    RUN(test_failure_inside_waited_callback);
    RUN(test_after_an_abort_the_failure_comes_before_token_errors);
    RUN(test_failure_propagates_through_nested_waits);
    RUN(test_chain_depth_1000);
    return tap_done();
}
