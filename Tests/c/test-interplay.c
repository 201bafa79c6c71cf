/*
 * test-interplay.c -- queued dispatch, the observer and the depth check
 * together: enqueues from observer hooks, dones, store reduces, listeners,
 * group functions and destroys; dones that close, destroy, dispatch, set or
 * clear the observer; queues of dispatches each failing its own way
 * (callback failed, too deep, a circular wait ignored) on small thread
 * stacks; chains of waits through stores and groups that go too deep with an
 * observer installed. Every done runs exactly once with its documented
 * status and flux_last_error(), and the observer's events stay balanced:
 * each dispatch_begin has its dispatch_end, each callback_begin its
 * callback_end, nested, with wait_for only inside a callback's pair.
 */
#include "helpers.h"

#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

/* This program, which runs some scenarios again in a fresh process. */
static const char *self_path;

/* The thread stacks the depth scenarios run on. */
static const size_t small_stacks[] = {64 * 1024, 128 * 1024, 256 * 1024};

static int nop_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

/* ---- a balance-checking observer ----------------------------------------- */

enum { BAL_MAX = 64, BAL_STACK = 200000 };

typedef struct bal {
    flux_dispatcher *d;
    int in_dispatch;
    size_t top;                   /* callbacks begun and not ended */
    flux_token *stack;            /* cap tokens */
    size_t cap;
    long begins, ends, cbegins, cends, waits;
    long broken;                  /* events out of place */
    flux_status status[BAL_MAX];  /* dispatch_end's, in order */
    const void *payload[BAL_MAX]; /* dispatch_begin's, in order */
    int destroyed;
    /* What the hooks do: enqueue one payload from each kind of hook, while
     * its budget lasts. */
    int enqueue_from[5];          /* per hook: 0 begin, 1 end, 2 cb begin, 3 cb end, 4 wait */
    flux_status enqueue_status[5];
} bal;

static void bal_init_cap(bal *b, flux_dispatcher *d, size_t cap)
{
    memset(b, 0, sizeof *b);
    b->d = d;
    b->cap = cap;
    b->stack = calloc(cap, sizeof *b->stack);
    REQUIRE(b->stack != NULL);
    for (int i = 0; i < 5; i++)
        b->enqueue_status[i] = (flux_status)-1;
}

static void bal_init(bal *b, flux_dispatcher *d) { bal_init_cap(b, d, BAL_STACK); }

static void bal_fini(bal *b)
{
    free(b->stack);
    b->stack = NULL;
}

/* The payloads hooks and dones enqueue: ids, and a done that records. */
typedef struct job {
    int id;
    int kind;               /* what the callbacks do with it (see kinds) */
    int done_calls;
    flux_status done_status;
    flux_token done_token;
    char done_error[160];
    int order;              /* position among dones, from 1 */
    void (*then)(struct job *self); /* runs inside done, after recording */
    flux_dispatcher *d;
    flux_status from_done[8];
} job;

static int done_order;

static void job_done(void *context, void *payload, flux_status status)
{
    job *j = context;
    if (j != payload) {
        /* The context is the job itself: a mismatch is a misdirected done. */
        j->done_calls += 1000;
        return;
    }
    j->done_calls++;
    j->done_status = status;
    j->done_token = status ? flux_last_error_token() : 0;
    snprintf(j->done_error, sizeof j->done_error, "%s", status ? flux_last_error() : "");
    j->order = ++done_order;
    if (j->then)
        j->then(j);
}

enum { HOOK_JOBS = 16 };
static job hook_jobs[HOOK_JOBS];
static int hook_jobs_used;

static void hook_enqueue(bal *b, int which)
{
    if (b->enqueue_from[which] <= 0 || hook_jobs_used >= HOOK_JOBS)
        return;
    b->enqueue_from[which]--;
    job *j = &hook_jobs[hook_jobs_used++];
    j->id = 100 + which;
    b->enqueue_status[which] = flux_enqueue(b->d, j, job_done, j);
}

static void bal_dispatch_begin(void *c, const void *payload)
{
    bal *b = c;
    b->broken += b->in_dispatch != 0 || b->top != 0;
    b->in_dispatch = 1;
    if (b->begins < BAL_MAX)
        b->payload[b->begins] = payload;
    b->begins++;
    hook_enqueue(b, 0);
}

static void bal_dispatch_end(void *c, const void *payload, flux_status status)
{
    bal *b = c;
    (void)payload;
    b->broken += b->in_dispatch != 1 || b->top != 0;
    b->in_dispatch = 0;
    if (b->ends < BAL_MAX)
        b->status[b->ends] = status;
    b->ends++;
    hook_enqueue(b, 1);
}

static void bal_callback_begin(void *c, flux_token t)
{
    bal *b = c;
    b->broken += b->in_dispatch != 1 || b->top >= b->cap;
    if (b->top < b->cap)
        b->stack[b->top++] = t;
    b->cbegins++;
    hook_enqueue(b, 2);
}

static void bal_callback_end(void *c, flux_token t, int result)
{
    bal *b = c;
    (void)result;
    b->broken += b->in_dispatch != 1 || b->top == 0 || b->stack[b->top - 1] != t;
    if (b->top > 0)
        b->top--;
    b->cends++;
    hook_enqueue(b, 3);
}

static void bal_wait_for(void *c, flux_token waiter, const flux_token *tokens, size_t count)
{
    bal *b = c;
    (void)tokens;
    (void)count;
    b->broken += b->in_dispatch != 1 || b->top == 0 || b->stack[b->top - 1] != waiter;
    b->waits++;
    hook_enqueue(b, 4);
}

static void bal_destroy(void *c) { ((bal *)c)->destroyed++; }

static const flux_observer bal_hooks = {
    FLUX_OBSERVER_VERSION, bal_dispatch_begin, bal_dispatch_end, bal_callback_begin, bal_callback_end, bal_wait_for,
};

/* Balanced and at rest: every begin ended, nothing out of place. */
static void expect_balanced(const bal *b, const char *what)
{
    ok(b->broken == 0 && b->in_dispatch == 0 && b->top == 0 && b->begins == b->ends && b->cbegins == b->cends,
       "%s: the observer's events balance (broken %ld, dispatches %ld/%ld, callbacks %ld/%ld)", what, b->broken,
       b->begins, b->ends, b->cbegins, b->cends);
}

/* ---- enqueue from every hook --------------------------------------------- */

static void test_enqueue_from_every_hook(void)
{
    node n[3];
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    for (int i = 0; i < 3; i++) {
        node_init(&n[i], i + 1, d, NULL);
        REQUIRE(node_register(&n[i]) == FLUX_OK);
    }
    node_wait_on(&n[0], 1, &n[2].token);
    bal b;
    bal_init(&b, d);
    for (int i = 0; i < 5; i++)
        b.enqueue_from[i] = 1;
    memset(hook_jobs, 0, sizeof hook_jobs);
    hook_jobs_used = 0;
    done_order = 0;
    REQUIRE(flux_dispatcher_set_observer(d, &bal_hooks, &b, bal_destroy) == FLUX_OK);

    job outer = {.id = 1};
    EXPECT_OK(flux_enqueue(d, &outer, job_done, &outer));
    is_int(outer.done_calls, 1, "the outer payload's done ran once");
    is_int(hook_jobs_used, 5, "each kind of hook enqueued one payload");
    int bad = 0;
    for (int i = 0; i < hook_jobs_used; i++)
        bad += hook_jobs[i].done_calls != 1 || hook_jobs[i].done_status != FLUX_OK;
    is_int(bad, 0, "every payload a hook enqueued ran once and its done got FLUX_OK");
    for (int i = 0; i < 5; i++)
        is_int(b.enqueue_status[i], FLUX_OK, "flux_enqueue from hook %d queued", i);
    is_int(b.begins, 6, "six dispatches observed: the outer and the five queued");
    expect_balanced(&b, "enqueue from hooks");
    is_int(n[0].calls, 6, "each dispatch ran the callbacks");
    is_int(b.destroyed, 0, "the observer is still installed");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(b.destroyed, 1, "destroying the dispatcher destroyed the observer's context once");
    bal_fini(&b);
}

/* ---- dones that change the dispatcher ----------------------------------- */

static bal *done_second_observer;
static flux_dispatcher *other_d;
static bal *other_bal;

/* In the outer payload's done: everything a done may try on its own,
 * dispatching dispatcher, then on another one. */
static job queued_by_done;

static void hostile_done_actions(job *j)
{
    flux_dispatcher *d = j->d;
    j->from_done[0] = flux_dispatch(d, NULL);
    j->from_done[1] = flux_dispatcher_close(d);
    j->from_done[2] = flux_dispatcher_destroy(d);
    flux_token t = 1;
    j->from_done[3] = flux_wait_for(d, &t, 1);
    j->from_done[4] = flux_dispatcher_set_observer(d, &bal_hooks, done_second_observer, bal_destroy);
    queued_by_done.d = d;
    j->from_done[5] = flux_enqueue(d, &queued_by_done, job_done, &queued_by_done);
    j->from_done[6] = flux_dispatch(other_d, NULL);
    j->from_done[7] = (flux_status)flux_is_dispatching(d);
}

static void clear_observer_in_done(job *j)
{
    j->from_done[0] = flux_dispatcher_set_observer(j->d, NULL, NULL, NULL);
    /* Destroyed when the outermost call returns, not now. */
    j->from_done[1] = (flux_status)done_second_observer->destroyed;
}

static void test_dones_that_change_the_dispatcher(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    other_d = flux_dispatcher_create();
    REQUIRE(d && other_d);
    node n, o;
    node_init(&n, 1, d, NULL);
    node_init(&o, 2, other_d, NULL);
    REQUIRE(node_register(&n) == FLUX_OK && node_register(&o) == FLUX_OK);
    bal first, second, third;
    bal_init(&first, d);
    bal_init(&second, d);
    bal_init(&third, other_d);
    done_second_observer = &second;
    other_bal = &third;
    REQUIRE(flux_dispatcher_set_observer(d, &bal_hooks, &first, bal_destroy) == FLUX_OK);
    REQUIRE(flux_dispatcher_set_observer(other_d, &bal_hooks, &third, bal_destroy) == FLUX_OK);
    memset(&queued_by_done, 0, sizeof queued_by_done);
    queued_by_done.then = clear_observer_in_done;
    done_order = 0;

    job outer = {.id = 1, .d = d, .then = hostile_done_actions};
    EXPECT_OK(flux_enqueue(d, &outer, job_done, &outer));
    is_int(outer.done_calls, 1, "the outer done ran once");
    is_int(outer.from_done[0], FLUX_ERR_ALREADY_DISPATCHING, "flux_dispatch from a done is refused");
    is_int(outer.from_done[1], FLUX_ERR_ALREADY_DISPATCHING, "flux_dispatcher_close from a done is refused");
    is_int(outer.from_done[2], FLUX_ERR_ALREADY_DISPATCHING, "flux_dispatcher_destroy from a done is refused");
    is_int(outer.from_done[3], FLUX_ERR_NOT_DISPATCHING, "flux_wait_for from a done is refused");
    is_int(outer.from_done[4], FLUX_OK, "setting the observer from a done is accepted");
    is_int(outer.from_done[5], FLUX_OK, "an enqueue from the done is queued");
    is_int(outer.from_done[6], FLUX_OK, "dispatching another dispatcher from a done works");
    is_int(outer.from_done[7], 1, "the dispatcher is dispatching in the done");
    is_int(queued_by_done.done_calls, 1, "the payload the done queued ran, its done once");
    is_int(queued_by_done.from_done[0], FLUX_OK, "clearing the observer from a queued done is accepted");
    is_int(queued_by_done.from_done[1], 0, "the cleared context is not destroyed inside the dispatch");
    is_int(first.begins, 1, "the first observer saw the outer dispatch only");
    is_int(second.begins, 1, "the observer set in the done saw the queued dispatch, from its beginning");
    is_int(first.destroyed, 1, "the replaced observer was destroyed once, when the call returned");
    is_int(second.destroyed, 1, "the cleared observer was destroyed once, when the call returned");
    is_int(third.begins, 1, "the other dispatcher's observer saw its dispatch");
    expect_balanced(&first, "first");
    expect_balanced(&second, "second");
    expect_balanced(&third, "other");
    EXPECT_OK(flux_dispatch(d, NULL));
    is_int(first.begins + second.begins, 2, "after the clear, dispatches are unobserved");
    EXPECT_OK(flux_dispatcher_destroy(d));
    EXPECT_OK(flux_dispatcher_destroy(other_d));
    is_int(third.destroyed, 1, "the other observer destroyed once");
    bal_fini(&first);
    bal_fini(&second);
    bal_fini(&third);
}

/* An observer's context, replaced during a dispatch, whose destroy ends the
 * dispatcher: it runs when the outermost call returns, outside the
 * dispatch, so the destroy is allowed -- and nothing may use d after. */
static void destroy_the_dispatcher(void *c)
{
    bal *b = c;
    b->destroyed++;
    flux_status *s = (flux_status *)b->stack;
    s[0] = flux_dispatcher_destroy(b->d);
}

static void replace_observer_done(job *j)
{
    j->from_done[0] = flux_dispatcher_set_observer(j->d, NULL, NULL, NULL);
}

static void test_a_retired_observer_may_destroy_the_dispatcher(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node n;
    node_init(&n, 1, d, NULL);
    REQUIRE(node_register(&n) == FLUX_OK);
    n.destroy_log = NULL;
    bal b;
    bal_init(&b, d);
    REQUIRE(flux_dispatcher_set_observer(d, &bal_hooks, &b, destroy_the_dispatcher) == FLUX_OK);
    job outer = {.id = 1, .d = d, .then = replace_observer_done};
    /* The done clears the observer; as the call ends, the old observer's
     * destroy frees d. */
    EXPECT_OK(flux_enqueue(d, &outer, job_done, &outer));
    is_int(b.destroyed, 1, "the retired observer's destroy ran once, after the call");
    is_int(((flux_status *)b.stack)[0], FLUX_OK, "and could destroy the dispatcher");
    is_int(n.destroyed, 1, "which destroyed the registration");
    bal_fini(&b);
}

/* ---- destroys that enqueue ------------------------------------------------ */

typedef struct enqueuer {
    flux_dispatcher *d;
    job j;
    flux_status status;
    int calls;
} enqueuer;

static void enqueue_on_destroy(void *c)
{
    enqueuer *e = c;
    e->calls++;
    e->j.d = e->d;
    e->status = flux_enqueue(e->d, &e->j, job_done, &e->j);
}

/* A store's release_state whose state is an enqueuer: enqueues as it goes. */
static void enqueue_on_release(void *context, void *state)
{
    (void)context;
    if (state)
        enqueue_on_destroy(state);
}

static int store_keep_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)payload;
    *next = state;
    return 0;
}

typedef struct unreg {
    flux_dispatcher *d;
    flux_token t;
} unreg;

/* Unregisters u->t once, during the dispatch. */
static int unregister_other_cb(void *c, const void *payload)
{
    (void)payload;
    unreg *u = c;
    if (u->t) {
        REQUIRE(flux_unregister(u->d, u->t) == FLUX_OK);
        u->t = 0;
    }
    return 0;
}

static void test_destroys_that_enqueue(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    bal b;
    bal_init(&b, d);
    REQUIRE(flux_dispatcher_set_observer(d, &bal_hooks, &b, bal_destroy) == FLUX_OK);

    /* A registration unregistered during a dispatch: its destroy runs as
     * the call ends, outside the dispatch, so its enqueue dispatches. */
    enqueuer e = {.d = d};
    unreg target = {d, 0};
    REQUIRE(flux_register(d, nop_cb, &e, enqueue_on_destroy, &target.t) == FLUX_OK);
    flux_token killer;
    REQUIRE(flux_register(d, unregister_other_cb, &target, NULL, &killer) == FLUX_OK);
    done_order = 0;
    EXPECT_OK(flux_dispatch(d, NULL));
    is_int(e.calls, 1, "the destroy ran once");
    is_int(e.status, FLUX_OK, "its enqueue found the dispatcher idle and dispatched");
    is_int(e.j.done_calls, 1, "that payload's done ran once");
    is_int(e.j.done_status, FLUX_OK, "with FLUX_OK");
    is_int(flux_is_dispatching(d), 0, "the dispatcher is idle again");
    expect_balanced(&b, "destroy that enqueues");
    is_int(b.begins, 2, "two dispatches observed");

    /* A store's release_state and destroy, run by flux_store_destroy() on
     * an idle dispatcher: their enqueues dispatch at once, without the
     * store. */
    enqueuer from_release = {.d = d}, from_store_destroy = {.d = d};
    flux_store *store;
    REQUIRE(flux_store_create(d, &from_release, store_keep_reduce, NULL, enqueue_on_release, &from_store_destroy,
                              enqueue_on_destroy, &store) == FLUX_OK);
    EXPECT_OK(flux_dispatch(d, NULL));
    long begins = b.begins;
    EXPECT_OK(flux_store_destroy(store));
    is_int(from_release.calls + from_store_destroy.calls, 2, "release_state and destroy each ran once");
    ok(from_release.status == FLUX_OK && from_store_destroy.status == FLUX_OK,
       "their enqueues found the dispatcher idle and dispatched");
    ok(from_release.j.done_calls == 1 && from_store_destroy.j.done_calls == 1 &&
           from_release.j.done_status == FLUX_OK && from_store_destroy.j.done_status == FLUX_OK,
       "each done ran once with FLUX_OK");
    is_int(b.begins - begins, 2, "two more dispatches observed");
    expect_balanced(&b, "store destroy that enqueues");

    /* A destroy that flux_dispatcher_close() runs: refused, done at once. */
    enqueuer closing = {.d = d};
    flux_token t2;
    REQUIRE(flux_register(d, nop_cb, &closing, enqueue_on_destroy, &t2) == FLUX_OK);
    EXPECT_OK(flux_dispatcher_close(d));
    is_int(closing.status, FLUX_ERR_INVALID_ARGUMENT, "an enqueue from a destroy the close runs is refused");
    is_int(closing.j.done_calls, 1, "its done ran once, at once");
    is_int(closing.j.done_status, FLUX_ERR_INVALID_ARGUMENT, "with FLUX_ERR_INVALID_ARGUMENT");
    has_substr(closing.j.done_error, "flux_enqueue", "and flux_last_error() names flux_enqueue in it");
    is_int(b.destroyed, 1, "close destroyed the observer's context once");
    EXPECT_OK(flux_dispatcher_destroy(d));
    bal_fini(&b);
}

/* ---- queues of dispatches failing their own ways, on small stacks -------- */

/* What a payload asks the callbacks to do. */
enum { KIND_OK, KIND_FAIL, KIND_DEEP, KIND_CIRC, KIND_START };

enum { LINKS = 20000 };
static flux_dispatcher *qd;
static flux_token link_tokens[LINKS];
static flux_token fail_token, circ_a, circ_b;
static flux_status circ_status[2];
static job q_jobs[5];

static int kind_of(const void *payload) { return payload ? ((const job *)payload)->kind : KIND_OK; }

static int starter_cb(void *c, const void *payload)
{
    (void)c;
    if (kind_of(payload) != KIND_START)
        return 0;
    /* The deep one first: in a fresh process the first error the library
     * reports is then the one made at the bottom of the stack. */
    static const int kinds[] = {KIND_DEEP, KIND_FAIL, KIND_CIRC, KIND_OK};
    for (int i = 0; i < 4; i++) {
        q_jobs[i + 1].id = i + 2;
        q_jobs[i + 1].kind = kinds[i];
        if (flux_enqueue(qd, &q_jobs[i + 1], job_done, &q_jobs[i + 1]) != FLUX_OK)
            return 99;
    }
    return 0;
}

static int fail_cb(void *c, const void *payload)
{
    (void)c;
    return kind_of(payload) == KIND_FAIL ? 7 : 0;
}

static int circ_cb(void *c, const void *payload)
{
    size_t which = (size_t)(uintptr_t)c;
    if (kind_of(payload) != KIND_CIRC)
        return 0;
    flux_token other = which ? circ_a : circ_b;
    circ_status[which] = flux_wait_for(qd, &other, 1);
    return 0; /* the circular wait is ignored */
}

static int qlink_cb(void *c, const void *payload)
{
    size_t i = (size_t)(uintptr_t)c;
    if (kind_of(payload) != KIND_DEEP || i + 1 >= LINKS)
        return 0;
    return (int)flux_wait_for(qd, &link_tokens[i + 1], 1);
}

static bal q_bal;

static void *run_queue_thread(void *arg)
{
    flux_status *out = arg;
    q_jobs[0].id = 1;
    q_jobs[0].kind = KIND_START;
    *out = flux_enqueue(qd, &q_jobs[0], job_done, &q_jobs[0]);
    return NULL;
}

/* Runs the queue on a thread with a `size`-byte stack; returns a bit set of
 * what went wrong (0: all as documented). */
static int queue_of_failures(size_t size)
{
    qd = flux_dispatcher_create();
    if (!qd)
        return 1 << 30;
    flux_token t;
    if (flux_register(qd, starter_cb, NULL, NULL, &t) || flux_register(qd, fail_cb, NULL, NULL, &fail_token)
        || flux_register(qd, circ_cb, (void *)0, NULL, &circ_a) || flux_register(qd, circ_cb, (void *)1, NULL, &circ_b))
        return 1 << 30;
    for (size_t i = 0; i < LINKS; i++)
        if (flux_register(qd, qlink_cb, (void *)(uintptr_t)i, NULL, &link_tokens[i]))
            return 1 << 30;
    bal_init(&q_bal, qd);
    if (flux_dispatcher_set_observer(qd, &bal_hooks, &q_bal, bal_destroy))
        return 1 << 30;
    memset(q_jobs, 0, sizeof q_jobs);
    done_order = 0;
    flux_status status = (flux_status)-1;
    if (!run_on_stack(size, run_queue_thread, &status))
        return 1 << 30;
    int bad = 0;
    const flux_status want[5] = {FLUX_OK, FLUX_ERR_TOO_DEEP, FLUX_ERR_CALLBACK_FAILED, FLUX_OK, FLUX_OK};
    bad |= (status != FLUX_OK) << 0;
    for (int i = 0; i < 5; i++) {
        bad |= (q_jobs[i].done_calls != 1 || q_jobs[i].done_status != want[i] || q_jobs[i].order != i + 1) << (1 + i);
        if (q_jobs[i].done_calls != 1 || q_jobs[i].done_status != want[i])
            fprintf(stderr, "# job %d: %d done(s), status %d, want %d: %s\n", i, q_jobs[i].done_calls,
                    q_jobs[i].done_status, want[i], q_jobs[i].done_error);
    }
    bad |= (q_jobs[1].done_token == 0 || strstr(q_jobs[1].done_error, "too deep") == NULL) << 6;
    bad |= (q_jobs[2].done_token != fail_token || strstr(q_jobs[2].done_error, "returned 7") == NULL) << 7;
    bad |= (circ_status[0] != FLUX_ERR_CIRCULAR && circ_status[1] != FLUX_ERR_CIRCULAR) << 8;
    bad |= (q_bal.broken || q_bal.begins != 5 || q_bal.ends != 5 || q_bal.cbegins != q_bal.cends) << 9;
    for (int i = 0; i < 5; i++)
        bad |= (q_bal.status[i] != want[i] || q_bal.payload[i] != &q_jobs[i]) << (10 + i);
    bad |= (flux_is_dispatching(qd) != 0) << 15;
    bad |= (flux_dispatcher_destroy(qd) != FLUX_OK || q_bal.destroyed != 1) << 16;
    if (bad)
        fprintf(stderr, "# broken %ld, begins %ld ends %ld, cb %ld/%ld\n", q_bal.broken, q_bal.begins, q_bal.ends,
                q_bal.cbegins, q_bal.cends);
    bal_fini(&q_bal);
    return bad;
}

/* ---- chains of waits through stores and groups, too deep ----------------- */

enum { PAIRS = 6000 };
static flux_dispatcher *sd;
static flux_store *stores[PAIRS + 1];
static flux_store_group *groups[PAIRS];
static int listener_calls, group_calls, releases;
static long store_waits_failed;
static job s_jobs[4];
static int listener_enqueued, group_enqueued;

/* Store i's reduce: for a deep payload, waits for group i (over store i+1),
 * which waits for store i+1, whose reduce waits for group i+1 ... */
static int chain_reduce(void *c, void *state, const void *payload, void **next)
{
    size_t i = (size_t)(uintptr_t)c;
    int kind = kind_of(payload);
    if (kind == KIND_DEEP && i < PAIRS) {
        flux_token t = flux_store_group_token(groups[i]);
        flux_status s = flux_wait_for(sd, &t, 1);
        if (s != FLUX_OK) {
            store_waits_failed++;
            return (int)s;
        }
    }
    if (kind == KIND_OK)
        *next = (void *)((uintptr_t)state + 1);
    return 0;
}

static void chain_release(void *c, void *state)
{
    (void)c;
    (void)state;
    releases++;
}

static void chain_listener(void *c)
{
    (void)c;
    listener_calls++;
    if (!listener_enqueued++) {
        s_jobs[2].id = 3;
        s_jobs[2].kind = KIND_OK;
        flux_enqueue(sd, &s_jobs[2], job_done, &s_jobs[2]);
    }
}

static void chain_group_fn(void *c)
{
    (void)c;
    group_calls++;
    if (!group_enqueued++) {
        s_jobs[3].id = 4;
        s_jobs[3].kind = KIND_OK;
        flux_enqueue(sd, &s_jobs[3], job_done, &s_jobs[3]);
    }
}

/* The deep payload's done queues an ordinary one. */
static void after_deep(job *j)
{
    (void)j;
    s_jobs[1].id = 2;
    s_jobs[1].kind = KIND_OK;
    j->from_done[0] = flux_enqueue(sd, &s_jobs[1], job_done, &s_jobs[1]);
}

static bal s_bal;

static void *run_store_thread(void *arg)
{
    flux_status *out = arg;
    s_jobs[0].id = 1;
    s_jobs[0].kind = KIND_DEEP;
    s_jobs[0].then = after_deep;
    *out = flux_enqueue(sd, &s_jobs[0], job_done, &s_jobs[0]);
    return NULL;
}

static int store_chain(size_t size)
{
    sd = flux_dispatcher_create();
    if (!sd)
        return 1 << 30;
    for (size_t i = 0; i <= PAIRS; i++) {
        if (flux_store_create(sd, NULL, chain_reduce, NULL, chain_release, (void *)(uintptr_t)i, NULL, &stores[i]))
            return 1 << 30;
        flux_listener_id l;
        if (flux_store_add_listener(stores[i], chain_listener, NULL, NULL, &l))
            return 1 << 30;
    }
    for (size_t i = 0; i < PAIRS; i++)
        if (flux_store_group_create(&stores[i + 1], 1, chain_group_fn, NULL, NULL, &groups[i]))
            return 1 << 30;
    bal_init(&s_bal, sd);
    if (flux_dispatcher_set_observer(sd, &bal_hooks, &s_bal, bal_destroy))
        return 1 << 30;
    flux_status status = (flux_status)-1;
    if (!run_on_stack(size, run_store_thread, &status))
        return 1 << 30;
    int bad = 0;
    bad |= (status != FLUX_ERR_TOO_DEEP) << 0;
    bad |= (s_jobs[0].done_calls != 1 || s_jobs[0].done_status != FLUX_ERR_TOO_DEEP || s_jobs[0].done_token == 0) << 1;
    bad |= (s_jobs[0].from_done[0] != FLUX_OK || s_jobs[1].done_calls != 1 || s_jobs[1].done_status != FLUX_OK) << 2;
    bad |= (s_jobs[2].done_calls != 1 || s_jobs[2].done_status != FLUX_OK) << 3;
    bad |= (s_jobs[3].done_calls != 1 || s_jobs[3].done_status != FLUX_OK) << 4;
    bad |= (listener_calls != 3 * (PAIRS + 1)) << 5; /* the three ordinary payloads */
    bad |= (group_calls != 3 * PAIRS) << 6;
    bad |= (store_waits_failed == 0) << 7;
    bad |= (s_bal.broken || s_bal.begins != 4 || s_bal.ends != 4 || s_bal.cbegins != s_bal.cends) << 8;
    bad |= (s_bal.status[0] != FLUX_ERR_TOO_DEEP) << 9;
    /* The deep dispatch changed no store; the three others each did. */
    bad |= ((uintptr_t)flux_store_state(stores[0]) != 3 || (uintptr_t)flux_store_state(stores[PAIRS]) != 3) << 10;
    for (size_t i = 0; i < PAIRS; i++)
        bad |= (flux_store_group_release(groups[i]) != FLUX_OK) << 11;
    for (size_t i = 0; i <= PAIRS; i++)
        bad |= (flux_store_destroy(stores[i]) != FLUX_OK) << 12;
    /* Three replaced states and the last one, per store. */
    bad |= (releases != 4 * (PAIRS + 1)) << 13;
    bad |= (flux_dispatcher_destroy(sd) != FLUX_OK || s_bal.destroyed != 1) << 14;
    if (bad)
        fprintf(stderr, "# status %d, done %d/%d token %llu (%s); listeners %d, groups %d; broken %ld %ld/%ld %ld/%ld\n",
                status, s_jobs[0].done_calls, s_jobs[0].done_status, (unsigned long long)s_jobs[0].done_token,
                s_jobs[0].done_error, listener_calls, group_calls, s_bal.broken, s_bal.begins, s_bal.ends,
                s_bal.cbegins, s_bal.cends);
    bal_fini(&s_bal);
    return bad;
}

/* ---- threads: enqueues racing observer changes ------------------------- */

enum { RACE_JOBS = 3000, RACE_OBSERVERS = 40 };
static flux_dispatcher *rd;
static job race_jobs[2][RACE_JOBS];
static bal race_bals[RACE_OBSERVERS];
static _Atomic int race_progress; /* enqueues made by both threads */
static _Atomic int race_set;      /* observer changes made */

static void *race_enqueuer(void *arg)
{
    job *jobs = arg;
    for (int i = 0; i < RACE_JOBS; i++) {
        /* In step with the observer changes (which wait for these). */
        while (atomic_load(&race_set) < i / (RACE_JOBS / RACE_OBSERVERS))
            sched_yield();
        jobs[i].id = i;
        flux_status s = flux_enqueue(rd, &jobs[i], job_done, &jobs[i]);
        if (s != FLUX_OK)
            jobs[i].done_calls += 10000; /* nothing here fails */
        atomic_fetch_add(&race_progress, 1);
    }
    return NULL;
}

static void *race_observer_setter(void *arg)
{
    (void)arg;
    for (int k = 0; k < RACE_OBSERVERS; k++) {
        /* Spread over the enqueues: the changes land while they run. */
        while (atomic_load(&race_progress) < k * (2 * RACE_JOBS / RACE_OBSERVERS))
            sched_yield();
        REQUIRE(flux_dispatcher_set_observer(rd, &bal_hooks, &race_bals[k], bal_destroy) == FLUX_OK);
        if (k % 3 == 2)
            REQUIRE(flux_dispatcher_set_observer(rd, NULL, NULL, NULL) == FLUX_OK);
        atomic_fetch_add(&race_set, 1);
    }
    return NULL;
}

static void test_enqueues_racing_observer_changes(void)
{
    rd = flux_dispatcher_create();
    REQUIRE(rd != NULL);
    node n[2];
    for (int i = 0; i < 2; i++) {
        node_init(&n[i], i + 1, rd, NULL);
        REQUIRE(node_register(&n[i]) == FLUX_OK);
    }
    node_wait_on(&n[0], 1, &n[1].token);
    for (int k = 0; k < RACE_OBSERVERS; k++)
        bal_init_cap(&race_bals[k], rd, 8);
    memset(race_jobs, 0, sizeof race_jobs);
    atomic_store(&race_progress, 0);
    atomic_store(&race_set, 0);
    pthread_t t[3];
    REQUIRE(pthread_create(&t[0], NULL, race_enqueuer, race_jobs[0]) == 0);
    REQUIRE(pthread_create(&t[1], NULL, race_enqueuer, race_jobs[1]) == 0);
    REQUIRE(pthread_create(&t[2], NULL, race_observer_setter, NULL) == 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    int bad = 0;
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < RACE_JOBS; i++)
            bad += race_jobs[w][i].done_calls != 1 || race_jobs[w][i].done_status != FLUX_OK;
    is_int(bad, 0, "every payload enqueued from two threads was dispatched once, its done once with FLUX_OK");
    is_int(n[0].calls, 2 * RACE_JOBS, "the callbacks ran once per payload");
    EXPECT_OK(flux_dispatcher_destroy(rd));
    long broken = 0, destroyed = 0, observed = 0;
    for (int k = 0; k < RACE_OBSERVERS; k++) {
        broken += race_bals[k].broken || race_bals[k].in_dispatch || race_bals[k].begins != race_bals[k].ends ||
                  race_bals[k].cbegins != race_bals[k].cends;
        destroyed += race_bals[k].destroyed != 1;
        observed += race_bals[k].begins;
        bal_fini(&race_bals[k]);
    }
    is_int(broken, 0, "each observer's events balanced");
    is_int(destroyed, 0, "each observer's context was destroyed exactly once");
    diag("%ld dispatches observed", observed);
}

/* ---- errors reported at the bottom of the stack -------------------------- */

/* A chain as deep as the depth check lets it go, whose last link then makes
 * a call that fails in another way: the margin the check keeps is also for
 * reporting errors (flux.h, "Depth"), so each must come back as a status,
 * not overflow the stack -- in a fresh process, where the first error of a
 * kind takes its deepest path. The depth is measured first in another
 * process (the same program, stack and chain): a chain run there ends with
 * FLUX_ERR_TOO_DEEP, itself an error of the kind, which would warm the path
 * up here. */
enum { BOTTOM_LINKS = 20000 };
static flux_dispatcher *bd;
static flux_token bottom_tokens[BOTTOM_LINKS];
static size_t bottom_stop = BOTTOM_LINKS, bottom_deepest;
static const char *bottom_action = "none";
static flux_status bottom_status = (flux_status)-1;
static int bottom_done_calls;
static flux_status bottom_done_status;

static void bottom_done(void *context, void *payload, flux_status status)
{
    (void)context;
    (void)payload;
    bottom_done_calls++;
    bottom_done_status = status;
    /* Reading the message is part of reporting it. */
    if (strlen(flux_last_error()) == 0)
        bottom_done_calls += 100;
}

static void bottom_act(void)
{
    if (strcmp(bottom_action, "circular") == 0) {
        bottom_status = flux_wait_for(bd, &bottom_tokens[0], 1);
    } else if (strcmp(bottom_action, "circular2") == 0) {
        flux_token two[2] = {bottom_tokens[bottom_stop / 2], bottom_tokens[0]};
        bottom_status = flux_wait_for(bd, two, 2);
    } else if (strcmp(bottom_action, "unknown") == 0) {
        flux_token bogus = 987654321;
        bottom_status = flux_wait_for(bd, &bogus, 1);
    } else if (strcmp(bottom_action, "enqueue-null") == 0) {
        bottom_status = flux_enqueue(NULL, NULL, bottom_done, NULL);
    } else if (strcmp(bottom_action, "observer-version") == 0) {
        flux_observer wrong = bal_hooks;
        wrong.version = 77;
        bottom_status = flux_dispatcher_set_observer(bd, &wrong, NULL, NULL);
    } else if (strcmp(bottom_action, "dispatch") == 0) {
        bottom_status = flux_dispatch(bd, NULL);
    } else if (strcmp(bottom_action, "fail") == 0) {
        bottom_status = FLUX_ERR_CALLBACK_FAILED;
    }
}

static int bottom_cb(void *c, const void *payload)
{
    (void)payload;
    size_t i = (size_t)(uintptr_t)c;
    if (i > bottom_deepest)
        bottom_deepest = i;
    if (i == bottom_stop) {
        bottom_act();
        return strcmp(bottom_action, "fail") == 0 ? 5 : 0;
    }
    /* Past the chain (the outer loop goes on with them): no wait. */
    if (i > bottom_stop || i + 1 >= BOTTOM_LINKS)
        return 0;
    return (int)flux_wait_for(bd, &bottom_tokens[i + 1], 1);
}

static bal bottom_bal;
static flux_status bottom_dispatch_status = (flux_status)-1;

static void *bottom_thread(void *arg)
{
    (void)arg;
    bottom_dispatch_status = flux_dispatch(bd, NULL);
    return NULL;
}

/* Builds the chain with the observer, runs it on a `size`-byte stack. */
static int bottom_run(size_t size)
{
    bd = flux_dispatcher_create();
    if (!bd)
        return 2;
    for (size_t i = 0; i < BOTTOM_LINKS; i++)
        if (flux_register(bd, bottom_cb, (void *)(uintptr_t)i, NULL, &bottom_tokens[i]))
            return 2;
    bal_init(&bottom_bal, bd);
    if (flux_dispatcher_set_observer(bd, &bal_hooks, &bottom_bal, bal_destroy))
        return 2;
    if (!run_on_stack(size, bottom_thread, NULL))
        return 2;
    return 0;
}

/* "--measure SIZE": prints the index of the deepest link that ran. */
static int bottom_measure(size_t size)
{
    if (bottom_run(size))
        return 2;
    printf("%zu\n", bottom_deepest);
    return bottom_dispatch_status == FLUX_ERR_TOO_DEEP ? 0 : 1;
}

/* "--bottom SIZE STOP ACTION": exits 0 when the action's call returned its
 * status and the dispatch ended as it should. */
static int bottom_check(size_t size, size_t stop, const char *action)
{
    bottom_stop = stop;
    bottom_action = action;
    if (bottom_run(size))
        return 2;
    flux_status want_call = strcmp(action, "circular") == 0 || strcmp(action, "circular2") == 0 ? FLUX_ERR_CIRCULAR
                            : strcmp(action, "unknown") == 0                                    ? FLUX_ERR_UNKNOWN_TOKEN
                            : strcmp(action, "dispatch") == 0 ? FLUX_ERR_ALREADY_DISPATCHING
                            : strcmp(action, "fail") == 0     ? FLUX_ERR_CALLBACK_FAILED
                                                              : FLUX_ERR_INVALID_ARGUMENT;
    flux_status want_dispatch = strcmp(action, "fail") == 0 ? FLUX_ERR_CALLBACK_FAILED : FLUX_OK;
    int bad = 0;
    bad |= (bottom_deepest != (strcmp(action, "fail") == 0 ? stop : BOTTOM_LINKS - 1)) << 0;
    bad |= (bottom_status != want_call) << 1;
    bad |= (bottom_dispatch_status != want_dispatch) << 2;
    bad |= (strcmp(action, "enqueue-null") == 0 && (bottom_done_calls != 1 || bottom_done_status != want_call)) << 3;
    bad |= (bottom_bal.broken || bottom_bal.begins != 1 || bottom_bal.ends != 1) << 4;
    if (bad)
        fprintf(stderr, "# bottom %s: 0x%x (deepest %zu of %zu, call %d, dispatch %d)\n", action, bad, bottom_deepest,
                stop, bottom_status, bottom_dispatch_status);
    return bad ? 1 : 0;
}

/* The child "--measure SIZE" prints the depth; 0 when it could not. */
static size_t measure_depth(size_t size)
{
    char arg[32];
    snprintf(arg, sizeof arg, "%zu", size);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    char *args[] = {(char *)self_path, "--measure", arg, NULL};
    pid_t child;
    REQUIRE(posix_spawn(&child, self_path, &actions, NULL, args, environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    char text[64] = "";
    ssize_t got = read(fds[0], text, sizeof text - 1);
    close(fds[0]);
    int status = -1;
    REQUIRE(waitpid(child, &status, 0) == child);
    if (got <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 0;
    return (size_t)strtoul(text, NULL, 10);
}

static void test_errors_reported_at_the_bottom_of_small_stacks(void)
{
    static const char *actions[] = {"circular", "circular2", "unknown", "enqueue-null", "observer-version",
                                    "dispatch", "fail"};
    for (size_t s = 0; s < sizeof small_stacks / sizeof small_stacks[0]; s++) {
        size_t size = small_stacks[s];
        size_t deepest = measure_depth(size);
        if (!ok(deepest > 2, "a chain on a %zu KiB stack went %zu links deep, then stopped", size / 1024, deepest))
            continue;
        for (size_t a = 0; a < sizeof actions / sizeof actions[0]; a++) {
            char arg[32], stop[32];
            snprintf(arg, sizeof arg, "%zu", size);
            snprintf(stop, sizeof stop, "%zu", deepest);
            char *args[] = {(char *)self_path, "--bottom", arg, stop, (char *)actions[a], NULL};
            pid_t child;
            int status = -1;
            REQUIRE(posix_spawn(&child, self_path, NULL, NULL, args, environ) == 0);
            REQUIRE(waitpid(child, &status, 0) == child);
            ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "%s at the deepest link a %zu KiB stack allows, in a fresh process: its status, no overflow (%s %d)",
               actions[a], size / 1024, WIFSIGNALED(status) ? "signal" : "exit",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        }
    }
}

/* ---- the children: each scenario in a fresh process ---------------------- */

static void run_child(const char *scenario, size_t size, const char *what)
{
    char arg[32];
    snprintf(arg, sizeof arg, "%zu", size);
    char *args[] = {(char *)self_path, (char *)scenario, arg, NULL};
    pid_t child;
    int status = -1;
    REQUIRE(posix_spawn(&child, self_path, NULL, NULL, args, environ) == 0);
    REQUIRE(waitpid(child, &status, 0) == child);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s, on a %zu KiB thread stack, in a fresh process (%s %d)", what,
       size / 1024, WIFSIGNALED(status) ? "signal" : "exit",
       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static void test_a_queue_of_failures_on_small_stacks(void)
{
    for (size_t i = 0; i < sizeof small_stacks / sizeof small_stacks[0]; i++)
        run_child("--queue", small_stacks[i],
                  "queued dispatches going too deep, failing and waiting in a circle: each done and dispatch_end "
                  "gets its own status");
}

static void test_store_and_group_chains_too_deep_on_small_stacks(void)
{
    for (size_t i = 0; i < sizeof small_stacks / sizeof small_stacks[0]; i++)
        run_child("--stores", small_stacks[i],
                  "a chain of waits through stores and groups stops with FLUX_ERR_TOO_DEEP, observed, and the "
                  "queue goes on");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--queue") == 0) {
        int bad = queue_of_failures((size_t)strtoul(argv[2], NULL, 10));
        if (bad)
            fprintf(stderr, "# queue: failures 0x%x\n", bad);
        return bad ? 1 : 0;
    }
    if (argc == 3 && strcmp(argv[1], "--stores") == 0) {
        int bad = store_chain((size_t)strtoul(argv[2], NULL, 10));
        if (bad)
            fprintf(stderr, "# stores: failures 0x%x\n", bad);
        return bad ? 1 : 0;
    }
    if (argc == 3 && strcmp(argv[1], "--measure") == 0)
        return bottom_measure((size_t)strtoul(argv[2], NULL, 10));
    if (argc == 5 && strcmp(argv[1], "--bottom") == 0)
        return bottom_check((size_t)strtoul(argv[2], NULL, 10), (size_t)strtoul(argv[3], NULL, 10), argv[4]);
    self_path = argv[0];
    tap_init();
    RUN(test_enqueue_from_every_hook);
    RUN(test_dones_that_change_the_dispatcher);
    RUN(test_a_retired_observer_may_destroy_the_dispatcher);
    RUN(test_destroys_that_enqueue);
    RUN(test_enqueues_racing_observer_changes);
    RUN(test_a_queue_of_failures_on_small_stacks);
    RUN(test_store_and_group_chains_too_deep_on_small_stacks);
    RUN(test_errors_reported_at_the_bottom_of_small_stacks);
    return tap_done();
}
