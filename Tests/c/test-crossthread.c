/*
 * test-crossthread.c -- the cross-thread matrix, test-reentry.c's other
 * dimension: thread A dispatches and parks inside one kind of user code (a
 * row); meanwhile thread B calls one public function (a column) on the same
 * dispatcher, store or group, and gets the status flux.h documents for a
 * call from "another thread". Then A is let go, both finish, and the cell
 * checks A's outcome, that the dispatcher is idle and usable, and (under
 * ASan, make check-address) that nothing leaked.
 *
 * Whether B's call returned before A was let go is part of the cell: only
 * flux_dispatch() waits for another thread's dispatch ("Threading"); every
 * other call must return while A is still parked.
 */
/* This test's own fields of the world (world.h has the rest). */
#define WORLD_FIELDS \
    atomic_int fired;        /* the row's site was entered (parks once) */ \
    flag parked, gate, b_returned; \
    pthread_t a_thread, a_self;   /* a_self: set by A itself, for A's user code */ \
    _Atomic pid_t b_tid; \
    long got;                /* B's result */ \
    flux_status a_status;    /* A's dispatch (or enqueue) */ \
    flux_token waiter_token; \
    atomic_int probe_done_runs; \
    flux_status probe_done_status; \
    bool probe_done_on_a; \
    atomic_int callback_destroys; \
    bool callback_destroy_on_a; \
    /* The world's listener, group and observer contexts: destroys, and \
     * whether on A. */ \
    atomic_int listener_destroys, group_destroys, observer_destroys; \
    bool listener_destroy_on_a, group_destroy_on_a, observer_destroy_on_a; \
    atomic_int acted;        /* the row's act was done (once) */
#define WORLD_OWN "the"
#include "world.h"

/* What A's dispatch does first, so that a destroy runs in or after it. */
enum act { ACT_NONE, ACT_UNREGISTER_SELF, ACT_REMOVE_LISTENER_SELF, ACT_RELEASE_GROUP_SELF,
           ACT_REPLACE_OBSERVER };

/*
 * Expectations, one per column (spaces ignored), same letters as
 * test-reentry.c. From another thread while d dispatches:
 *   D 0: waits for A's dispatch, then runs it (the only waiting column);
 *   T 3: "also when another thread is dispatching d"; E 0: queued, its done
 *   runs on A; R, O, o, C, A, r, G, g 0: "any thread ... never waits";
 *   U 0 for a callback's token, 1 for a store's (refused whatever the
 *   thread); W 4: "one running on another thread"; I 1: "on any thread";
 *   X and S 3: "or on another thread"; M, H, F 4: only on the dispatching
 *   thread; e 1 only while A is inside the store's listener; K (close) 3:
 *   "when a dispatch is running ... on another thread", and 1 once A's
 *   dispatch is over but its call is not: the world's store keeps d open.
 */
#define XT(U, e) "0 3 0 0 " U " 4 1 3 0 0 0 3 0 0 4 4 4 0 0 " e " 1 0 0 1 3"

struct row {
    const char *name;
    enum site site;
    bool via_wait_for;   /* the callback runs inside another one's flux_wait_for() */
    bool enqueue;        /* A idle-enqueues rather than dispatches */
    const char *expect;
    enum act act;
    bool idle;           /* parked after the dispatch ended, in flux_dispatch() still */
};

static const struct row rows[] = {
    {"callback", SITE_CALLBACK, false, false, XT("0", "0"), ACT_NONE, false},
    {"callback run by flux_wait_for", SITE_CALLBACK, true, false, XT("0", "0"), ACT_NONE, false},
    {"closure handler registered as a callback", SITE_CLOSURE, false, false, XT("0", "0"), ACT_NONE, false},
    {"reduce", SITE_REDUCE, false, false, XT("1", "0"), ACT_NONE, false},
    {"equal", SITE_EQUAL, false, false, XT("1", "0"), ACT_NONE, false},
    {"release_state in a dispatch", SITE_RELEASE, false, false, XT("1", "0"), ACT_NONE, false},
    {"listener", SITE_LISTENER, false, false, XT("1", "1"), ACT_NONE, false},
    {"group function", SITE_GROUP, false, false, XT("1", "0"), ACT_NONE, false},
    {"observer dispatch_begin", SITE_DISPATCH_BEGIN, false, false, XT("0", "0"), ACT_NONE, false},
    {"observer callback_begin", SITE_CALLBACK_BEGIN, false, false, XT("0", "0"), ACT_NONE, false},
    {"observer callback_end", SITE_CALLBACK_END, false, false, XT("0", "0"), ACT_NONE, false},
    {"observer wait_for", SITE_WAIT_FOR, false, false, XT("0", "0"), ACT_NONE, false},
    {"observer dispatch_end", SITE_DISPATCH_END, false, false, XT("0", "0"), ACT_NONE, false},
    {"enqueue's done", SITE_DONE, false, true, XT("0", "0"), ACT_NONE, false},
    /* Run right after the listener returns, inside the emit (flux.h,
     * flux_store_remove_listener()): still A's dispatch. */
    {"listener destroy of a listener removing itself", SITE_LISTENER_DESTROY, false, false,
     "0 3 0 0 0 4 1 3 0 0 0 3 0 2 4 4 4 0 0 1 1 0 0 1 3", ACT_REMOVE_LISTENER_SELF, false},
    /* Destroys deferred to the dispatch's end run "outside the dispatch"
     * ("Ownership", set_observer): the dispatcher is idle, so B's calls act
     * as on an idle dispatcher -- flux_dispatch() does not wait. B's
     * flux_dispatcher_destroy() is not run: A's flux_dispatch() is still in
     * flight ("no other call on d may be in flight"). */
    {"registration destroy deferred to the dispatch's end", SITE_REG_DESTROY, false, false,
     "0 0 0 0 2 4 0 - 0 0 0 1 0 0 4 4 4 0 0 0 1 0 0 1 1", ACT_UNREGISTER_SELF, true},
    {"group destroy deferred to the dispatch's end", SITE_GROUP_DESTROY, false, false,
     "0 0 0 0 0 4 0 - 0 0 0 0 0 0 4 4 4 0 - 0 1 0 0 1 1", ACT_RELEASE_GROUP_SELF, true},
    {"observer destroy deferred to the dispatch's end", SITE_OBSERVER_DESTROY, false, false,
     "0 0 0 0 0 4 0 - 0 0 0 1 0 0 4 4 4 0 0 0 1 0 0 1 1", ACT_REPLACE_OBSERVER, true},
};

enum { ROWS = sizeof rows / sizeof rows[0] };

/* ---- the world -------------------------------------------------------- */

static void probe_done(void *context, void *p, flux_status status)
{
    (void)context; (void)p;
    W.probe_done_status = status;
    W.probe_done_on_a = pthread_equal(pthread_self(), W.a_self);
    atomic_fetch_add(&W.probe_done_runs, 1);
}

static flux_token own_token(enum site site)
{
    switch (site) {
    case SITE_CLOSURE: return W.closure_token;
    case SITE_REDUCE: case SITE_EQUAL: case SITE_RELEASE: case SITE_LISTENER:
    case SITE_GROUP:
        return W.store_token;
    default: return W.callback_token;
    }
}

/* The row's user code, entered for the first time: tells the main thread,
 * then stays until the gate opens (bounded, so a bug cannot hang A). */
static void probe(enum site site)
{
    if (W.row == NULL || W.row->site != site || atomic_exchange(&W.fired, 1))
        return;
    flag_set(&W.parked);
    (void)flag_wait(&W.gate, 30.0);
}

/* ---- the user code ------------------------------------------------------ */

static int world_waiter(void *context, const void *p)
{
    (void)context; (void)p;
    if (W.row != NULL && W.row->via_wait_for)
        (void)flux_wait_for(W.d, &W.callback_token, 1);
    return 0;
}

static int world_callback(void *context, const void *p)
{
    (void)context; (void)p;
    probe(SITE_CALLBACK);
    if (W.row != NULL && W.row->act == ACT_UNREGISTER_SELF && !atomic_exchange(&W.acted, 1))
        REQUIRE(flux_unregister(W.d, W.callback_token) == FLUX_OK);
    if (W.row != NULL && W.row->act == ACT_REPLACE_OBSERVER && !atomic_exchange(&W.acted, 1))
        REQUIRE(flux_dispatcher_set_observer(W.d, &quiet_hooks, block(), free_context) == FLUX_OK);
    return 0;
}

static void world_callback_destroy(void *context)
{
    W.callback_destroy_on_a = pthread_equal(pthread_self(), W.a_self);
    atomic_fetch_add(&W.callback_destroys, 1);
    probe(SITE_REG_DESTROY);
    free(context);
}

static void world_listener_destroy(void *context)
{
    W.listener_destroy_on_a = pthread_equal(pthread_self(), W.a_self);
    atomic_fetch_add(&W.listener_destroys, 1);
    probe(SITE_LISTENER_DESTROY);
    free(context);
}

static void world_group_destroy(void *context)
{
    W.group_destroy_on_a = pthread_equal(pthread_self(), W.a_self);
    atomic_fetch_add(&W.group_destroys, 1);
    probe(SITE_GROUP_DESTROY);
    free(context);
}

static void world_observer_destroy(void *context)
{
    W.observer_destroy_on_a = pthread_equal(pthread_self(), W.a_self);
    atomic_fetch_add(&W.observer_destroys, 1);
    probe(SITE_OBSERVER_DESTROY);
    free(context);
}

static void world_listener(void *context)
{
    (void)context;
    probe(SITE_LISTENER);
    if (W.row != NULL && W.row->act == ACT_REMOVE_LISTENER_SELF && !atomic_exchange(&W.acted, 1))
        REQUIRE(flux_store_remove_listener(W.s, W.listener) == FLUX_OK);
}

static void world_group(void *context)
{
    (void)context;
    probe(SITE_GROUP);
    if (W.row != NULL && W.row->act == ACT_RELEASE_GROUP_SELF && !atomic_exchange(&W.acted, 1)) {
        REQUIRE(flux_store_group_release(W.g) == FLUX_OK);
        W.g = NULL;
    }
}

static void trigger_done(void *context, void *p, flux_status status)
{
    (void)context; (void)p; (void)status;
    probe(SITE_DONE);
}

/* The waiter, registered first, waits for the callback in the via_wait_for
 * row; the group's wait for the store feeds the observer's wait_for hook. */
static void world_setup(const struct row *row, enum fn fn)
{
    memset(&W, 0, sizeof W);
    W.fn = fn;
    flag_init(&W.parked);
    flag_init(&W.gate);
    flag_init(&W.b_returned);
    world_create(world_waiter, &W.waiter_token, free_context);
    W.row = row;
}

static void *thread_a(void *arg)
{
    (void)arg;
    W.a_self = pthread_self();
    if (W.row->enqueue)
        W.a_status = flux_enqueue(W.d, (void *)payload, trigger_done, NULL);
    else
        W.a_status = flux_dispatch(W.d, payload);
    return NULL;
}

static void *thread_b(void *arg)
{
    (void)arg;
    atomic_store(&W.b_tid, thread_id());
    W.got = call_fn(W.row->site, false);   /* A may be replacing the state */
    flag_set(&W.b_returned);
    return NULL;
}

static bool join_within(pthread_t t, double seconds)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)seconds;
    return pthread_timedjoin_np(t, NULL, &deadline) == 0;
}

static void bail(const char *what)
{
    printf("Bail out! %s: %s, %s (deadlock)\n", what, W.row->name, fn_names[W.fn]);
    fflush(stdout);
    _exit(3);
}

static void world_teardown(void)
{
    world_release_stores();
    EXPECT_OK(flux_dispatcher_destroy(W.d));
    EXPECT_OK(flux_closure_destroy(W.closure));
    flag_fini(&W.parked);
    flag_fini(&W.gate);
    flag_fini(&W.b_returned);
}

static void run_cell(const struct row *row, enum fn fn, long want)
{
    const char *name = row->name, *fname = fn_names[fn];
    world_setup(row, fn);
    pthread_t b;
    REQUIRE(pthread_create(&W.a_thread, NULL, thread_a, NULL) == 0);
    if (!flag_wait(&W.parked, prompt_seconds()))
        bail("A never reached the row's user code");
    REQUIRE(pthread_create(&b, NULL, thread_b, NULL) == 0);
    bool returned_early, waits = fn == F_DISPATCH && !row->idle;
    if (waits) {
        /* Expected to wait: give it time to get there, then see it has not
         * returned. */
        (void)wait_until_blocked(&W.b_tid, prompt_seconds());
        returned_early = flag_is_set(&W.b_returned);
    } else {
        returned_early = flag_wait(&W.b_returned, prompt_seconds());
    }
    flag_set(&W.gate);
    if (!join_within(W.a_thread, 30))
        bail("A did not finish");
    if (!join_within(b, 30))
        bail("B did not finish");

    ok(returned_early == !waits, "%s: %s %s before A went on", name, fname,
       waits ? "waited" : "returned");
    if (W.got != want)
        diag("B's call returned %ld", W.got);
    is_int(W.got, want, "%s: %s from another thread -> %ld", name, fname, want);
    is_int(W.a_status, FLUX_OK, "%s: %s: A's dispatch succeeded", name, fname);
    if (fn == F_ENQUEUE)
        ok(atomic_load(&W.probe_done_runs) == 1 && W.probe_done_on_a == !row->idle
               && W.probe_done_status == FLUX_OK,
           "%s: the payload's done ran once, on %s, with FLUX_OK (%d runs, %s)", name,
           row->idle ? "B" : "A",
           atomic_load(&W.probe_done_runs), flux_status_name(W.probe_done_status));
    /* Idle rows: what B removes is destroyed at once, on B. */
    if (fn == F_UNREGISTER_OWN && W.got == FLUX_OK && own_token(row->site) == W.callback_token)
        ok(atomic_load(&W.callback_destroys) == 1 && W.callback_destroy_on_a == !row->idle,
           "%s: the unregistered callback's destroy ran once, on A at its dispatch's end", name);
    /* Removed during A's dispatch: destroyed once, on A, when it ended
     * ("Threading", flux_store_group_release(), set_observer). */
    /* A listener's destroy runs in the remove, unless that listener is
     * running: then right after it returns, on its thread. */
    if (fn == F_REMOVE_LISTENER && W.got == FLUX_OK)
        ok(atomic_load(&W.listener_destroys) == 1
               && W.listener_destroy_on_a == (row->site == SITE_LISTENER),
           "%s: the removed listener's destroy ran once, on %s", name,
           row->site == SITE_LISTENER ? "A" : "B");
    if (fn == F_GROUP_RELEASE && W.got == FLUX_OK)
        ok(atomic_load(&W.group_destroys) == 1 && W.group_destroy_on_a == !row->idle,
           "%s: the released group's destroy ran once, on %s", name, row->idle ? "B" : "A");
    if (fn == F_SET_OBSERVER || fn == F_CLEAR_OBSERVER) {
        bool on_a = !row->idle || row->act == ACT_REPLACE_OBSERVER;
        ok(atomic_load(&W.observer_destroys) == 1 && W.observer_destroy_on_a == on_a,
           "%s: the replaced observer's context was destroyed once, on %s", name, on_a ? "A" : "B");
        is_int(atomic_load(&W.dispatch_ends), 1, "%s: A's dispatch kept its observer to the end", name);
    }
    is_int(flux_is_dispatching(W.d), 0, "%s: %s: idle afterwards", name, fname);
    EXPECT_OK(flux_dispatch(W.d, payload));
    world_teardown();
}

static const struct row *current_row;

static void run_row(void)
{
    const struct row *row = current_row;
    int want[F_COUNT];
    parse_expect(row->expect, want);
    for (int fn = 0; fn < F_COUNT; fn++)
        if (want[fn] >= 0)
            run_cell(row, (enum fn)fn, want[fn]);
}

int main(void)
{
    tap_init();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t r = 0; r < ROWS; r++) {
        current_row = &rows[r];
        tap_run_case(rows[r].name, run_row);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    diag("%d kinds x %d functions from another thread, in %.1f s", (int)ROWS, (int)F_COUNT,
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return tap_done();
}
