/*
 * test-threads.c -- dispatches of one dispatcher are serialized across
 * threads; register, unregister and is_dispatching from other threads never
 * wait for a running dispatch; wait_for works only on the dispatching thread;
 * destroy of a registration removed during a dispatch runs on the dispatching
 * thread when that dispatch ends; destroying a dispatcher mid-dispatch fails.
 *
 * A callback "holds a dispatch open" by blocking on a flag; calls that must
 * return promptly run on a worker whose completion is awaited with a deadline,
 * so a call that waits for the dispatch fails its test instead of hanging
 * (and the per-case watchdog catches anything worse).
 */
#include <sched.h>
#include <signal.h>
#include <stdint.h>

#include "helpers.h"

static const int payload_ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};

/* A thread running one flux_dispatch(). */
typedef struct dispatch_job {
    flux_dispatcher *d;
    const void *payload;
    flux_status status;
    flag started, done;
    pthread_t thread;
    _Atomic pid_t tid; /* its thread_id(), for wait_until_blocked() */
} dispatch_job;

static void *dispatch_job_main(void *arg)
{
    dispatch_job *j = arg;
    atomic_store(&j->tid, thread_id());
    flag_set(&j->started);
    j->status = flux_dispatch(j->d, j->payload);
    flag_set(&j->done);
    return NULL;
}

static void dispatch_job_start(dispatch_job *j, flux_dispatcher *d, const void *payload)
{
    j->d = d;
    j->payload = payload;
    j->status = (flux_status)-1;
    flag_init(&j->started);
    flag_init(&j->done);
    atomic_store(&j->tid, 0);
    REQUIRE(pthread_create(&j->thread, NULL, dispatch_job_main, j) == 0);
}

static void dispatch_job_join(dispatch_job *j)
{
    pthread_join(j->thread, NULL);
    flag_fini(&j->started);
    flag_fini(&j->done);
}

/* A callback that blocks on its first call until released. */
typedef struct blocker {
    flag entered, release;
    atomic_int block;          /* block on the next call when set */
    atomic_int calls;
    atomic_int destroyed;
    atomic_int destroyed_after_release;  /* own destroy count when released */
    int fail_after_release;
    trace *log;
    int id;
    pthread_t destroy_thread;
} blocker;

static void blocker_init(blocker *b, int id, trace *log)
{
    memset(b, 0, sizeof *b);
    flag_init(&b->entered);
    flag_init(&b->release);
    atomic_store(&b->block, 1);
    atomic_store(&b->destroyed_after_release, -1);
    b->id = id;
    b->log = log;
}

static void blocker_fini(blocker *b)
{
    flag_fini(&b->entered);
    flag_fini(&b->release);
}

static int blocker_cb(void *context, const void *payload)
{
    blocker *b = context;
    atomic_fetch_add(&b->calls, 1);
    trace_push(b->log, b->id * 10 + (payload ? *(const int *)payload : 0));
    if (atomic_exchange(&b->block, 0)) {
        flag_set(&b->entered);
        flag_wait(&b->release, 3600.0);   /* the watchdog ends a stuck test */
        atomic_store(&b->destroyed_after_release, atomic_load(&b->destroyed));
        return b->fail_after_release;
    }
    return 0;
}

static void blocker_destroy(void *context)
{
    blocker *b = context;
    b->destroy_thread = pthread_self();
    atomic_fetch_add(&b->destroyed, 1);
}

/* A plain thread-aware context. */
typedef struct tctx {
    int id;
    atomic_int calls;
    atomic_int destroyed;
    pthread_t destroy_thread;
    trace *log;
    const atomic_int *watch;   /* recorded into watched when called */
    atomic_int watched;
} tctx;

static void tctx_init(tctx *t, int id, trace *log)
{
    memset(t, 0, sizeof *t);
    t->id = id;
    t->log = log;
    atomic_store(&t->watched, -1);
}

static int tctx_cb(void *context, const void *payload)
{
    tctx *t = context;
    atomic_fetch_add(&t->calls, 1);
    trace_push(t->log, t->id * 10 + (payload ? *(const int *)payload : 0));
    if (t->watch)
        atomic_store(&t->watched, atomic_load(t->watch));
    return 0;
}

static void tctx_destroy(void *context)
{
    tctx *t = context;
    t->destroy_thread = pthread_self();
    atomic_fetch_add(&t->destroyed, 1);
}

/* ---- 1. serialized dispatches, nothing lost ------------------------------- */

enum { NTHREADS = 4, NCB = 3 };

struct serial {
    flux_dispatcher *d;
    atomic_int inside, overlaps, order_errors, bad_status, bad_payload;
    long counts[NCB];          /* plain longs: the dispatcher serializes callbacks */
    long per_thread[NTHREADS];
    int last;                  /* id of the previous callback */
    long iters;
    pthread_barrier_t start;
};

struct serial_cb_ctx {
    struct serial *s;
    int id;
};

static int serial_cb(void *context, const void *payload)
{
    struct serial_cb_ctx *c = context;
    struct serial *s = c->s;
    if (atomic_fetch_add(&s->inside, 1) != 0)
        atomic_fetch_add(&s->overlaps, 1);
    int expected_prev = c->id == 0 ? NCB - 1 : c->id - 1;
    if (s->last != expected_prev)
        atomic_fetch_add(&s->order_errors, 1);
    s->last = c->id;
    s->counts[c->id]++;
    const int *tid = payload;
    if (tid == NULL || *tid < 0 || *tid >= NTHREADS)
        atomic_fetch_add(&s->bad_payload, 1);
    else if (c->id == 0)
        s->per_thread[*tid]++;
    for (volatile int spin = 0; spin < 50; spin++) {
    }
    atomic_fetch_sub(&s->inside, 1);
    return 0;
}

struct serial_thread {
    struct serial *s;
    int tid;
};

static void *serial_thread_main(void *arg)
{
    struct serial_thread *t = arg;
    pthread_barrier_wait(&t->s->start);
    for (long i = 0; i < t->s->iters; i++)
        if (flux_dispatch(t->s->d, &payload_ids[t->tid]) != FLUX_OK)
            atomic_fetch_add(&t->s->bad_status, 1);
    return NULL;
}

static void test_dispatches_serialized(void)
{
    static struct serial s;
    memset(&s, 0, sizeof s);
    s.d = flux_dispatcher_create();
    REQUIRE(s.d != NULL);
    s.last = NCB - 1;
    s.iters = tap_scale(20000);
    REQUIRE(pthread_barrier_init(&s.start, NULL, NTHREADS) == 0);
    struct serial_cb_ctx ctx[NCB];
    for (int i = 0; i < NCB; i++) {
        ctx[i] = (struct serial_cb_ctx){&s, i};
        flux_token t;
        EXPECT_OK(flux_register(s.d, serial_cb, &ctx[i], NULL, &t));
    }
    pthread_t th[NTHREADS];
    struct serial_thread args[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (struct serial_thread){&s, i};
        REQUIRE(pthread_create(&th[i], NULL, serial_thread_main, &args[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&s.start);

    is_int(atomic_load(&s.bad_status), 0, "%d threads x %ld dispatches all returned FLUX_OK",
           NTHREADS, s.iters);
    is_int(atomic_load(&s.overlaps), 0, "no two callbacks of the dispatcher ever overlapped");
    is_int(atomic_load(&s.order_errors), 0, "every dispatch ran its callbacks whole and in order");
    is_int(atomic_load(&s.bad_payload), 0, "every callback got its dispatch's payload");
    for (int i = 0; i < NCB; i++)
        is_int(s.counts[i], NTHREADS * s.iters, "callback %d called once per dispatch", i);
    long sum = 0;
    int each = 1;
    for (int i = 0; i < NTHREADS; i++) {
        sum += s.per_thread[i];
        each &= s.per_thread[i] == s.iters;
    }
    ok(each, "every thread's dispatches were all delivered (total %ld)", sum);
    is_int(flux_is_dispatching(s.d), 0, "idle at the end");
    EXPECT_OK(flux_dispatcher_destroy(s.d));
}

/* ---- 2. a second thread's dispatch waits for the first -------------------- */

static void test_second_dispatch_waits(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    blocker a;
    tctx b;
    blocker_init(&a, 1, &log);
    tctx_init(&b, 2, &log);
    flux_token t;
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &t));
    EXPECT_OK(flux_register(d, tctx_cb, &b, NULL, &t));

    dispatch_job j1, j2;
    dispatch_job_start(&j1, d, &payload_ids[1]);
    ok(flag_wait(&a.entered, prompt_seconds()), "first dispatch is inside its first callback");
    dispatch_job_start(&j2, d, &payload_ids[2]);
    ok(wait_until_blocked(&j2.tid, prompt_seconds()), "a second thread's flux_dispatch() blocks");
    ok(!flag_is_set(&j2.done), "a second thread's flux_dispatch() waits while the first runs");
    is_int(flux_is_dispatching(d), 1, "the dispatcher is dispatching meanwhile");
    flag_set(&a.release);
    dispatch_job_join(&j1);
    dispatch_job_join(&j2);
    is_int(j1.status, FLUX_OK, "the first dispatch returned OK");
    is_int(j2.status, FLUX_OK, "the second one then ran and returned OK (not ALREADY_DISPATCHING)");
    is_trace(&log, INTS(11, 21, 12, 22), "the second dispatch started after the first had finished");
    is_int(flux_is_dispatching(d), 0, "idle at the end");
    EXPECT_OK(flux_dispatcher_destroy(d));
    blocker_fini(&a);
}

/* flux_try_dispatch() never waits: while another thread dispatches, it fails
 * at once, having run nothing; once that dispatch is over it dispatches. */
static void test_try_dispatch_does_not_wait(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    blocker a;
    blocker_init(&a, 1, &log);
    flux_token t;
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &t));

    dispatch_job j;
    dispatch_job_start(&j, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    /* This thread is the one that lets the dispatch go on: were the call to
     * wait, the watchdog would end the test. */
    EXPECT_STATUS(flux_try_dispatch(d, &payload_ids[2]), FLUX_ERR_ALREADY_DISPATCHING);
    has_prefix(flux_last_error(), "flux_try_dispatch:", "its message names flux_try_dispatch");
    has_substr(flux_last_error(), "another thread is dispatching", "and says another thread is dispatching");
    ok(!flag_is_set(&j.done), "the other thread's dispatch is still running");
    flag_set(&a.release);
    dispatch_job_join(&j);
    is_int(j.status, FLUX_OK, "which then finished OK");
    EXPECT_OK(flux_try_dispatch(d, &payload_ids[2]));
    is_trace(&log, INTS(11, 12), "the refused try ran nothing; the later one ran the callback");
    EXPECT_OK(flux_dispatcher_destroy(d));
    blocker_fini(&a);
}

/* A thread cancelled (pthread_cancel, deferred) while its flux_dispatch()
 * waits for another thread's dispatch: the wait is no cancellation point, so
 * the cancel takes effect once the call has returned. It was one: the thread
 * unwound out of its wait holding the dispatcher's lock (pthread_cond_wait
 * takes it back first), still counted as a waiter, so the running dispatch
 * hung as it ended, and every later call on the dispatcher with it. */
typedef struct cancel_job {
    flux_dispatcher *d;
    flag ready, go, unwound;
    flux_status status;
} cancel_job;

static void cancel_job_unwound(void *arg) { flag_set(&((cancel_job *)arg)->unwound); }

static void *cancel_job_main(void *arg)
{
    cancel_job *c = arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_cleanup_push(cancel_job_unwound, c);
    flag_set(&c->ready);
    flag_wait(&c->go, 3600.0);
    /* Cancelled already: the first cancellation point it meets acts on it. */
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    c->status = flux_dispatch(c->d, &payload_ids[2]);
    pthread_testcancel();
    pthread_cleanup_pop(0);
    return NULL;
}

/* The same, but the dispatch the cancelled thread then runs calls a
 * callback that meets a cancellation point (usleep; printf or write would
 * do). flux.h promises the cancel acts once flux_dispatch() has returned:
 * it acted inside that callback instead, unwinding out of the engine with
 * the dispatcher still claimed by the dead thread, so every later dispatch
 * waited for good (here flux_try_dispatch reports it). */
static int cancel_point_cb(void *context, const void *payload)
{
    (void)context;
    if (payload == &payload_ids[2])
        usleep(1000); /* a cancellation point */
    return 0;
}

/* Both cases: the waiting thread, cancelled, goes on to run its dispatch
 * (whose callbacks meet a cancellation point when point_in_callback), and
 * acts on the cancel only once flux_dispatch() has returned. */
static void cancel_a_waiting_dispatch(int point_in_callback)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    blocker a;
    blocker_init(&a, 1, &log);
    flux_token t;
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &t));
    if (point_in_callback)
        EXPECT_OK(flux_register(d, cancel_point_cb, NULL, NULL, &t));
    dispatch_job j;
    dispatch_job_start(&j, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    cancel_job c = {.d = d, .status = (flux_status)-1};
    flag_init(&c.ready);
    flag_init(&c.go);
    flag_init(&c.unwound);
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, cancel_job_main, &c) == 0);
    REQUIRE(flag_wait(&c.ready, prompt_seconds()));
    REQUIRE(pthread_cancel(thread) == 0);
    flag_set(&c.go);
    /* Time for it to reach its wait (and, were that a cancellation point,
     * to unwind out of it). */
    ok(!flag_wait(&c.unwound, tap_under_valgrind() ? 1.0 : 0.3), "the waiting dispatch is not cancelled mid-wait");
    flag_set(&a.release);
    int ended = flag_wait(&j.done, prompt_seconds());
    ok(ended, "the running dispatch ends");
    if (!ended)
        return; /* it hangs for good: leave it to the watchdog */
    dispatch_job_join(&j);
    void *result = NULL;
    REQUIRE(pthread_join(thread, &result) == 0);
    ok(result == PTHREAD_CANCELED, "the thread was cancelled once its call returned");
    is_int(c.status, FLUX_OK, "its dispatch ran after the other one and returned FLUX_OK, not inside a callback");
    is_trace(&log, INTS(11, 12), "both dispatches ran, in turn");
    is_int(flux_try_dispatch(d, &payload_ids[3]), FLUX_OK, "the dispatcher is free again");
    is_int(flux_is_dispatching(d), 0, "and idle");
    if (flux_is_dispatching(d) == 0)
        EXPECT_OK(flux_dispatcher_destroy(d));
    flag_fini(&c.ready);
    flag_fini(&c.go);
    flag_fini(&c.unwound);
    blocker_fini(&a);
}

static void test_cancelled_waiting_dispatch(void)
{
    cancel_a_waiting_dispatch(0);
}

static void test_cancelled_waiting_dispatch_with_a_cancellation_point_in_a_callback(void)
{
    cancel_a_waiting_dispatch(1);
}

static void test_waiting_dispatch_runs_after_failed_one(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    blocker a;
    tctx b;
    blocker_init(&a, 1, &log);
    tctx_init(&b, 2, &log);
    a.fail_after_release = 9;
    flux_token t;
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &t));
    EXPECT_OK(flux_register(d, tctx_cb, &b, NULL, &t));
    dispatch_job j1, j2;
    dispatch_job_start(&j1, d, &payload_ids[1]);
    flag_wait(&a.entered, prompt_seconds());
    dispatch_job_start(&j2, d, &payload_ids[2]);
    ok(wait_until_blocked(&j2.tid, prompt_seconds()), "the second dispatch waits for the first");
    flag_set(&a.release);
    dispatch_job_join(&j1);
    dispatch_job_join(&j2);
    is_int(j1.status, FLUX_ERR_CALLBACK_FAILED, "the first dispatch failed");
    is_int(j2.status, FLUX_OK, "the dispatch waiting on another thread then ran normally");
    is_trace(&log, INTS(11, 12, 22), "the failed dispatch stopped; the next called everyone");
    EXPECT_OK(flux_dispatcher_destroy(d));
    blocker_fini(&a);
}

/* ---- signals (flux.h, "Signals") -------------------------------------------- */

static atomic_int signals_handled;

static void count_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&signals_handled, 1);
}

/* A handled signal -- its handler installed without SA_RESTART, so that a
 * system call it interrupts fails with EINTR -- does not end a dispatch's
 * wait for another thread's: the call goes on waiting, then dispatches. */
static void test_signals_do_not_end_a_waiting_dispatch(void)
{
    struct sigaction counting, old;
    memset(&counting, 0, sizeof counting);
    counting.sa_handler = count_signal;
    sigemptyset(&counting.sa_mask);
    REQUIRE(sigaction(SIGUSR1, &counting, &old) == 0);
    atomic_store(&signals_handled, 0);

    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    blocker a;
    tctx b;
    blocker_init(&a, 1, &log);
    tctx_init(&b, 2, &log);
    flux_token t;
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &t));
    EXPECT_OK(flux_register(d, tctx_cb, &b, NULL, &t));
    dispatch_job j1, j2;
    dispatch_job_start(&j1, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    dispatch_job_start(&j2, d, &payload_ids[2]);
    REQUIRE(wait_until_blocked(&j2.tid, prompt_seconds())); /* into its wait */
    for (int i = 0; i < 20; i++) {
        pthread_kill(j2.thread, SIGUSR1);
        sleep_ms(5);
    }
    ok(atomic_load(&signals_handled) > 0, "the waiting thread handled the signals");
    ok(!flag_is_set(&j2.done), "and its flux_dispatch() is still waiting");
    flag_set(&a.release);
    dispatch_job_join(&j1);
    dispatch_job_join(&j2);
    is_int(j2.status, FLUX_OK, "then it dispatched and returned FLUX_OK");
    is_trace(&log, INTS(11, 21, 12, 22), "after the other dispatch had finished");
    EXPECT_OK(flux_dispatcher_destroy(d));
    blocker_fini(&a);
    REQUIRE(sigaction(SIGUSR1, &old, NULL) == 0);
}

/* Every signal's disposition, and this thread's mask. */
typedef struct signal_state {
    struct sigaction actions[NSIG];
    sigset_t mask;
} signal_state;

static void signal_state_get(signal_state *st)
{
    memset(st, 0, sizeof *st);
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, NULL, &st->actions[sig]); /* fails (and stays zero) for unused numbers */
    pthread_sigmask(SIG_SETMASK, NULL, &st->mask);
}

/* How many signals' dispositions or mask bits differ. */
static int signal_state_changes(const signal_state *x, const signal_state *y)
{
    int changes = 0;
    for (int sig = 1; sig < NSIG; sig++) {
        changes += x->actions[sig].sa_handler != y->actions[sig].sa_handler;
        changes += x->actions[sig].sa_flags != y->actions[sig].sa_flags;
        changes += sigismember(&x->mask, sig) != sigismember(&y->mask, sig);
    }
    return changes;
}

static int signal_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)payload;
    *next = (void *)((intptr_t)state + 1);
    return 0;
}

static void signal_listener(void *context)
{
    ++*(int *)context;
}

static void signal_handler(void *userdata, void *ret, void **args)
{
    (void)userdata;
    (void)args;
    *(int32_t *)ret = 0;
}

static void signal_done(void *context, void *payload, flux_status status)
{
    (void)payload;
    *(flux_status *)context = status;
}

typedef struct signal_worker {
    flux_dispatcher *d;
    int changes;
} signal_worker;

static void *signal_worker_main(void *arg)
{
    signal_worker *w = arg;
    signal_state before, after;
    signal_state_get(&before);
    EXPECT_OK(flux_dispatch(w->d, &payload_ids[2]));
    signal_state_get(&after);
    w->changes = signal_state_changes(&before, &after);
    return NULL;
}

/* The library's whole surface, on two threads: no disposition and no mask
 * changes (a runtime linked into the library could install handlers). */
static void test_library_leaves_signals_alone(void)
{
    signal_state before, after;
    signal_state_get(&before);

    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_store *s = NULL;
    EXPECT_OK(flux_store_create(d, NULL, signal_reduce, NULL, NULL, NULL, NULL, &s));
    int heard = 0;
    flux_listener_id id;
    EXPECT_OK(flux_store_add_listener(s, signal_listener, &heard, NULL, &id));
    flux_closure *c = NULL;
    EXPECT_OK(flux_closure_create("i(pp)", signal_handler, NULL, NULL, &c));
    flux_token t;
    EXPECT_OK(flux_register(d, (flux_callback)flux_closure_code(c), NULL, NULL, &t));
    EXPECT_OK(flux_dispatch(d, &payload_ids[1]));
    flux_status done = (flux_status)-1;
    EXPECT_OK(flux_enqueue(d, (void *)&payload_ids[3], signal_done, &done));
    is_int(done, FLUX_OK, "an enqueued dispatch ran");
    signal_worker w = {.d = d, .changes = -1};
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, signal_worker_main, &w) == 0);
    REQUIRE(pthread_join(thread, NULL) == 0);
    is_int(heard, 3, "the store's listener heard three dispatches");
    EXPECT_STATUS(flux_wait_for(d, &t, 1), FLUX_ERR_NOT_DISPATCHING);
    EXPECT_OK(flux_unregister(d, t));
    EXPECT_OK(flux_closure_destroy(c));
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(d));

    signal_state_get(&after);
    is_int(signal_state_changes(&before, &after), 0, "no signal disposition, nor this thread's mask, changed");
    is_int(w.changes, 0, "nor the mask of another thread that dispatched");
}

/* ---- 3. other threads while a dispatch is held open ------------------------ */

struct ops {
    flux_dispatcher *d;
    blocker *a;
    tctx *c, *late;            /* late: registered from the other thread */
    flux_token ta, tb, tc, tlate;
    flag done;
};

/* Runs on a second thread while the dispatching thread is blocked in a. */
static void *ops_main(void *arg)
{
    struct ops *o = arg;
    flux_dispatcher *d = o->d;
    is_int(flux_is_dispatching(d), 1, "other thread: flux_is_dispatching() is 1 during the dispatch");

    EXPECT_OK(flux_register(d, tctx_cb, o->late, tctx_destroy, &o->tlate));
    ok(o->tlate > o->tc, "other thread: register during the dispatch got a new, larger token");

    EXPECT_OK(flux_unregister(d, o->tc));
    is_int(atomic_load(&o->c->destroyed), 0,
           "other thread: unregister of a later callback during the dispatch defers its destroy");
    EXPECT_OK(flux_unregister(d, o->ta));
    is_int(atomic_load(&o->a->destroyed), 0,
           "other thread: unregister of the running callback defers its destroy");
    EXPECT_STATUS(flux_unregister(d, o->ta), FLUX_ERR_UNKNOWN_TOKEN);

    EXPECT_STATUS(flux_wait_for(d, &o->tb, 1), FLUX_ERR_NOT_DISPATCHING);
    has_prefix(flux_last_error(), "flux_wait_for", "other thread: its message names flux_wait_for");
    EXPECT_STATUS(flux_wait_for(d, NULL, 0), FLUX_ERR_NOT_DISPATCHING);

    EXPECT_STATUS(flux_dispatcher_destroy(d), FLUX_ERR_ALREADY_DISPATCHING);
    has_prefix(flux_last_error(), "flux_dispatcher_destroy",
               "other thread: its message names flux_dispatcher_destroy");
    EXPECT_STATUS(flux_unregister(d, 9999), FLUX_ERR_UNKNOWN_TOKEN);
    is_int(flux_is_dispatching(d), 1, "other thread: the dispatch is still running");
    flag_set(&o->done);
    return NULL;
}

static void test_other_threads_during_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    blocker a;
    tctx b, c, late;
    blocker_init(&a, 1, &log);
    tctx_init(&b, 2, &log);
    tctx_init(&c, 3, &log);
    tctx_init(&late, 4, &log);
    b.watch = &c.destroyed;       /* b records c's destroy count when it runs */
    struct ops o;
    memset(&o, 0, sizeof o);
    o.d = d;
    o.a = &a;
    o.c = &c;
    o.late = &late;
    flag_init(&o.done);
    EXPECT_OK(flux_register(d, blocker_cb, &a, blocker_destroy, &o.ta));
    EXPECT_OK(flux_register(d, tctx_cb, &b, tctx_destroy, &o.tb));
    EXPECT_OK(flux_register(d, tctx_cb, &c, tctx_destroy, &o.tc));

    dispatch_job j;
    dispatch_job_start(&j, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    pthread_t worker;
    REQUIRE(pthread_create(&worker, NULL, ops_main, &o) == 0);
    ok(flag_wait(&o.done, prompt_seconds()),
       "register/unregister/is_dispatching/wait_for/destroy from another thread returned "
       "while the dispatch was held open");
    ok(!flag_is_set(&j.done), "the dispatch was held open all along");
    flag_set(&a.release);
    dispatch_job_join(&j);
    pthread_join(worker, NULL);
    flag_fini(&o.done);

    is_int(j.status, FLUX_OK, "the dispatch finished OK");
    is_int(atomic_load(&a.destroyed_after_release), 0,
           "the running callback's context was not destroyed under it");
    is_int(atomic_load(&a.destroyed), 1, "its destroy ran once, when the dispatch finished");
    ok(pthread_equal(a.destroy_thread, j.thread), "on the dispatching thread");
    is_int(atomic_load(&b.watched), 0, "the later callback's destroy had not run during the dispatch");
    is_int(atomic_load(&c.destroyed), 1, "it ran once when the dispatch finished");
    ok(pthread_equal(c.destroy_thread, j.thread), "on the dispatching thread");
    is_int(atomic_load(&b.calls), 1, "the callback in between ran");
    is_int(atomic_load(&late.calls), 0, "the callback registered meanwhile did not join the running dispatch");
    /* The unregistration returned before the held callback was released (the
     * flags order them), so the dispatching thread saw the stamp. */
    is_int(atomic_load(&c.calls), 0,
           "the later callback, unregistered from another thread before the dispatch reached it, "
           "was not called");
    int c_calls = atomic_load(&c.calls);
    is_int(flux_is_dispatching(d), 0, "idle afterwards");

    EXPECT_OK(flux_dispatch(d, &payload_ids[2]));
    is_int(atomic_load(&a.calls), 1, "the next dispatch skips the unregistered running callback");
    is_int(atomic_load(&c.calls), c_calls, "nor the unregistered later one");
    is_int(atomic_load(&b.calls), 2, "calls the remaining one");
    is_int(atomic_load(&late.calls), 1, "and the one registered from the other thread");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(atomic_load(&b.destroyed) + atomic_load(&late.destroyed), 2,
           "dispatcher destroy ran the remaining destroys");
    is_int(atomic_load(&a.destroyed) + atomic_load(&c.destroyed), 2, "and no other again");
    blocker_fini(&a);
}

/* wait_for, with a real token, from a thread that is not dispatching. */
struct wait_job {
    flux_dispatcher *d;
    flux_token token;
    flux_status status;
    flag done;
};

static void *wait_job_main(void *arg)
{
    struct wait_job *w = arg;
    w->status = flux_wait_for(w->d, &w->token, 1);
    flag_set(&w->done);
    return NULL;
}

static void test_wait_for_from_other_thread(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    blocker a;
    tctx b;
    blocker_init(&a, 1, NULL);
    tctx_init(&b, 2, NULL);
    flux_token ta;
    struct wait_job w;
    memset(&w, 0, sizeof w);
    w.d = d;
    w.status = (flux_status)-1;
    flag_init(&w.done);
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &ta));
    EXPECT_OK(flux_register(d, tctx_cb, &b, NULL, &w.token));
    dispatch_job j;
    dispatch_job_start(&j, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, wait_job_main, &w) == 0);
    ok(flag_wait(&w.done, prompt_seconds()), "wait_for from another thread returns at once");
    is_int(w.status, FLUX_ERR_NOT_DISPATCHING,
           "wait_for from a thread not running the dispatch -> NOT_DISPATCHING");
    is_int(atomic_load(&b.calls), 0, "it ran nothing");
    flag_set(&a.release);
    dispatch_job_join(&j);
    pthread_join(th, NULL);
    is_int(j.status, FLUX_OK, "the dispatch finished OK");
    is_int(atomic_load(&b.calls), 1, "the callback ran once, from the dispatch");
    flag_fini(&w.done);
    EXPECT_OK(flux_dispatcher_destroy(d));
    blocker_fini(&a);
}

/* ---- 4. dispatchers are independent ---------------------------------------- */

static void test_other_dispatcher_not_blocked(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d != NULL && d2 != NULL);
    blocker a;
    tctx x;
    blocker_init(&a, 1, NULL);
    tctx_init(&x, 2, NULL);
    flux_token t;
    EXPECT_OK(flux_register(d, blocker_cb, &a, NULL, &t));
    EXPECT_OK(flux_register(d2, tctx_cb, &x, NULL, &t));
    dispatch_job j1, j2;
    dispatch_job_start(&j1, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    dispatch_job_start(&j2, d2, &payload_ids[2]);
    ok(flag_wait(&j2.done, prompt_seconds()),
       "another dispatcher dispatches on another thread while the first is held open");
    is_int(j2.status, FLUX_OK, "and returns OK");
    is_int(atomic_load(&x.calls), 1, "its callback ran");
    flag_set(&a.release);
    dispatch_job_join(&j1);
    dispatch_job_join(&j2);
    is_int(j1.status, FLUX_OK, "the held dispatch finished OK");
    EXPECT_OK(flux_dispatcher_destroy(d));
    EXPECT_OK(flux_dispatcher_destroy(d2));
    blocker_fini(&a);
}

/* Two dispatchers whose callbacks dispatch each other, held by two threads:
 * each inner flux_dispatch() would wait for the other thread's dispatch for
 * good. flux.h: the one whose wait would close the cycle fails with
 * FLUX_ERR_ALREADY_DISPATCHING instead, and the other then goes on. */
typedef struct crossing {
    flux_dispatcher *other;
    flag entered;
    flag *other_entered;
    flux_status inner;
    char message[512];
} crossing;

static int crossing_cb(void *context, const void *p)
{
    crossing *c = context;
    if (p != &payload_ids[1])
        return 0; /* the other's inner dispatch */
    flag_set(&c->entered);
    if (!flag_wait(c->other_entered, prompt_seconds()))
        return 1;
    c->inner = flux_dispatch(c->other, &payload_ids[2]);
    snprintf(c->message, sizeof c->message, "%s", c->inner ? flux_last_error() : "");
    return 0;
}

static void test_dispatchers_dispatching_each_other_do_not_deadlock(void)
{
    flux_dispatcher *d1 = flux_dispatcher_create();
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d1 != NULL && d2 != NULL);
    crossing c1 = {.other = d2, .inner = (flux_status)-1}, c2 = {.other = d1, .inner = (flux_status)-1};
    flag_init(&c1.entered);
    flag_init(&c2.entered);
    c1.other_entered = &c2.entered;
    c2.other_entered = &c1.entered;
    flux_token t;
    EXPECT_OK(flux_register(d1, crossing_cb, &c1, NULL, &t));
    EXPECT_OK(flux_register(d2, crossing_cb, &c2, NULL, &t));
    dispatch_job j1, j2;
    dispatch_job_start(&j1, d1, &payload_ids[1]);
    dispatch_job_start(&j2, d2, &payload_ids[1]);
    int finished = flag_wait(&j1.done, prompt_seconds()) && flag_wait(&j2.done, prompt_seconds());
    ok(finished, "two threads dispatching each other's dispatchers from callbacks both finish");
    if (!finished)
        return; /* they wait for good: leave them to the watchdog */
    dispatch_job_join(&j1);
    dispatch_job_join(&j2);
    is_int(j1.status, FLUX_OK, "the first outer dispatch returns OK");
    is_int(j2.status, FLUX_OK, "the second outer dispatch returns OK");
    int refused = (c1.inner == FLUX_ERR_ALREADY_DISPATCHING) + (c2.inner == FLUX_ERR_ALREADY_DISPATCHING);
    int went_on = (c1.inner == FLUX_OK) + (c2.inner == FLUX_OK);
    ok(refused == 1 && went_on == 1, "one inner dispatch is refused, the other runs (%d, %d)", c1.inner, c2.inner);
    has_substr(c1.inner ? c1.message : c2.message, "deadlock", "the refusal says waiting would deadlock");
    EXPECT_OK(flux_dispatcher_destroy(d1));
    EXPECT_OK(flux_dispatcher_destroy(d2));
    flag_fini(&c1.entered);
    flag_fini(&c2.entered);
}

/* ---- 5. register/unregister churn while dispatching ------------------------ */

enum { CHURN_THREADS = 3, CHURN_BATCH = 8 };

struct churn {
    flux_dispatcher *d;
    atomic_int stop;
    atomic_long calls, destroyed, dispatches;
    atomic_int bad_use, double_destroy, bad_status, bad_reg, bad_unreg;
    long iters;
    flux_token *tokens;        /* CHURN_THREADS * iters * CHURN_BATCH */
};

typedef struct churn_ctx {
    atomic_int alive;
    struct churn *c;
} churn_ctx;

static int churn_cb(void *context, const void *p)
{
    churn_ctx *x = context;
    (void)p;
    if (!atomic_load(&x->alive))
        atomic_fetch_add(&x->c->bad_use, 1);
    atomic_fetch_add(&x->c->calls, 1);
    return 0;
}

static void churn_destroy(void *context)
{
    churn_ctx *x = context;
    struct churn *c = x->c;
    if (!atomic_exchange(&x->alive, 0))
        atomic_fetch_add(&c->double_destroy, 1);
    atomic_fetch_add(&c->destroyed, 1);
    free(x);
}

static void *churn_dispatcher_main(void *arg)
{
    struct churn *c = arg;
    while (!atomic_load(&c->stop)) {
        if (flux_dispatch(c->d, NULL) != FLUX_OK)
            atomic_fetch_add(&c->bad_status, 1);
        atomic_fetch_add(&c->dispatches, 1);
    }
    return NULL;
}

struct churn_thread {
    struct churn *c;
    int index;
};

static void *churn_thread_main(void *arg)
{
    struct churn_thread *t = arg;
    struct churn *c = t->c;
    flux_token *mine = c->tokens + (size_t)t->index * (size_t)c->iters * CHURN_BATCH;
    for (long i = 0; i < c->iters; i++) {
        flux_token *batch = mine + i * CHURN_BATCH;
        for (int k = 0; k < CHURN_BATCH; k++) {
            churn_ctx *x = malloc(sizeof *x);
            REQUIRE(x != NULL);
            atomic_init(&x->alive, 1);
            x->c = c;
            if (flux_register(c->d, churn_cb, x, churn_destroy, &batch[k]) != FLUX_OK)
                atomic_fetch_add(&c->bad_reg, 1);
        }
        /* Keep the batch registered for a couple of dispatches, so callbacks
         * run while other threads register and unregister. */
        long seen = atomic_load(&c->dispatches);
        while (atomic_load(&c->dispatches) < seen + 2 && !atomic_load(&c->stop))
            sched_yield();
        for (int k = CHURN_BATCH - 1; k >= 0; k--)
            if (flux_unregister(c->d, batch[k]) != FLUX_OK)
                atomic_fetch_add(&c->bad_unreg, 1);
    }
    return NULL;
}

static int compare_tokens(const void *a, const void *b)
{
    flux_token x = *(const flux_token *)a, y = *(const flux_token *)b;
    return x < y ? -1 : x > y;
}

static void test_churn_while_dispatching(void)
{
    static struct churn c;
    memset(&c, 0, sizeof c);
    c.d = flux_dispatcher_create();
    REQUIRE(c.d != NULL);
    c.iters = tap_scale(500);
    size_t ntokens = (size_t)CHURN_THREADS * (size_t)c.iters * CHURN_BATCH;
    c.tokens = calloc(ntokens, sizeof *c.tokens);
    REQUIRE(c.tokens != NULL);

    pthread_t disp, th[CHURN_THREADS];
    struct churn_thread args[CHURN_THREADS];
    REQUIRE(pthread_create(&disp, NULL, churn_dispatcher_main, &c) == 0);
    for (int i = 0; i < CHURN_THREADS; i++) {
        args[i] = (struct churn_thread){&c, i};
        REQUIRE(pthread_create(&th[i], NULL, churn_thread_main, &args[i]) == 0);
    }
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&c.stop, 1);
    pthread_join(disp, NULL);

    is_int(atomic_load(&c.bad_reg), 0, "%zu registrations from %d threads succeeded", ntokens,
           CHURN_THREADS);
    is_int(atomic_load(&c.bad_unreg), 0, "and every unregister succeeded");
    is_int(atomic_load(&c.bad_status), 0, "%ld concurrent dispatches all returned FLUX_OK",
           atomic_load(&c.dispatches));
    is_int(atomic_load(&c.destroyed), (long)ntokens, "every context was destroyed once");
    is_int(atomic_load(&c.double_destroy), 0, "none twice");
    is_int(atomic_load(&c.bad_use), 0, "no callback ran with a destroyed context");
    qsort(c.tokens, ntokens, sizeof *c.tokens, compare_tokens);
    size_t dups = 0;
    for (size_t i = 1; i < ntokens; i++)
        dups += c.tokens[i] == c.tokens[i - 1];
    is_uint(dups, 0, "tokens issued concurrently are unique");
    ok(c.tokens[0] != 0, "and never 0");
    diag("%ld callback calls during %ld dispatches", atomic_load(&c.calls),
         atomic_load(&c.dispatches));
    long before = atomic_load(&c.calls);
    EXPECT_OK(flux_dispatch(c.d, NULL));
    is_int(atomic_load(&c.calls) - before, 0, "nothing is left registered");
    free(c.tokens);
    EXPECT_OK(flux_dispatcher_destroy(c.d));
}

/* ---- first use on two threads at once ------------------------------------ */

/* The first dispatchers and failing calls of the process, on two threads at
 * once: each makes the fork registry and the thread-specific key of
 * flux_last_error() if it finds none. Under ThreadSanitizer each was a race
 * report (they were lazy globals, made under swift_once, which it cannot see
 * into); each thread must read its own message. Runs first: no earlier case
 * may have made them. */
typedef struct first_error {
    pthread_barrier_t *start;
    flux_token token;
    char message[128];
} first_error;

static void *first_error_main(void *arg)
{
    first_error *e = arg;
    pthread_barrier_wait(e->start);
    flux_dispatcher *d = flux_dispatcher_create();
    if (d == NULL)
        return NULL;
    flux_unregister(d, e->token);
    snprintf(e->message, sizeof e->message, "%s", flux_last_error());
    flux_dispatcher_destroy(d);
    return NULL;
}

static void test_first_errors_on_two_threads_at_once(void)
{
    pthread_barrier_t start;
    REQUIRE(pthread_barrier_init(&start, NULL, 2) == 0);
    first_error errors[2] = {{&start, 1, ""}, {&start, 2, ""}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&threads[i], NULL, first_error_main, &errors[i]) == 0);
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_join(threads[i], NULL) == 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++) {
        has_prefix(errors[i].message, "flux_unregister:", "thread %d reads its own failure", i);
        has_number(errors[i].message, errors[i].token, "thread %d's names its token", i);
    }
}

/* flux_dispatcher_close() from another thread while a dispatch is held
 * open: refused at once with FLUX_ERR_ALREADY_DISPATCHING, never waiting
 * for it, and nothing changed -- no context destroyed, the dispatch runs
 * whole, and the dispatcher works and closes afterwards. */
static void test_close_from_another_thread_during_a_dispatch_is_refused(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    blocker a;
    tctx b;
    blocker_init(&a, 1, NULL);
    tctx_init(&b, 2, NULL);
    flux_token ta, tb;
    EXPECT_OK(flux_register(d, blocker_cb, &a, blocker_destroy, &ta));
    EXPECT_OK(flux_register(d, tctx_cb, &b, tctx_destroy, &tb));
    dispatch_job j;
    dispatch_job_start(&j, d, &payload_ids[1]);
    REQUIRE(flag_wait(&a.entered, prompt_seconds()));
    /* This thread is not the dispatching one: the call returns (a call that
     * waited for the held dispatch would hang until the watchdog). */
    EXPECT_STATUS(flux_dispatcher_close(d), FLUX_ERR_ALREADY_DISPATCHING);
    EXPECT_STATUS(flux_dispatcher_destroy(d), FLUX_ERR_ALREADY_DISPATCHING);
    is_int(atomic_load(&a.destroyed) + atomic_load(&b.destroyed), 0, "no context was destroyed");
    flag_set(&a.release);
    dispatch_job_join(&j);
    is_int(j.status, FLUX_OK, "the held dispatch finished");
    is_int(atomic_load(&b.calls), 1, "whole: the callback after the held one ran");
    EXPECT_OK(flux_dispatch(d, &payload_ids[2]));
    is_int(atomic_load(&a.calls) + atomic_load(&b.calls), 4, "the dispatcher still works");
    EXPECT_OK(flux_dispatcher_close(d));
    is_int(atomic_load(&a.destroyed) + atomic_load(&b.destroyed), 2, "then closes, destroying each once");
    EXPECT_OK(flux_dispatcher_destroy(d));
    blocker_fini(&a);
}

/* ---- a store destroyed as a dispatch starts ------------------------------ */

/* flux_store_destroy() on one thread while another dispatches back to back:
 * "once it returns FLUX_OK, no dispatch calls the store's reduce, equal or
 * listeners again, on any thread". A dispatch that started between the
 * call's first check and the unregistration used to run the store after
 * the call had returned (its releases deferred to that dispatch's end). The
 * window is a few instructions wide, so this is a stress: each round's
 * store has a slot of its own that outlives it, marked once the destroy
 * returned; a reduce or listener finding the mark is the defect. */
/* At least this many rounds, and on until the dispatches have run this many
 * reduces (the two threads share 2 cores with other tests: the dispatching
 * one may not run for a while), up to the cap. */
enum { STORE_RACE_ROUNDS = 20000, STORE_RACE_REDUCES = 2000, STORE_RACE_CAP = 2000000 };

typedef struct race_slot {
    atomic_int returned;   /* flux_store_destroy returned FLUX_OK */
    atomic_int destroys;
} race_slot;

static atomic_int race_stop;
static atomic_long race_after_return, race_calls, race_dispatches;

static int race_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)payload;
    race_slot *slot = context;
    if (atomic_load(&slot->returned))
        atomic_fetch_add(&race_after_return, 1);
    atomic_fetch_add(&race_calls, 1);
    *next = (void *)((uintptr_t)state + 1);   /* a change: the listener runs */
    return 0;
}

static void race_listener(void *context)
{
    race_slot *slot = context;
    if (atomic_load(&slot->returned))
        atomic_fetch_add(&race_after_return, 1);
}

static void race_destroy(void *context)
{
    atomic_fetch_add(&((race_slot *)context)->destroys, 1);
}

static void *race_dispatcher_main(void *arg)
{
    flux_dispatcher *d = arg;
    unsigned n = 0;
    while (!atomic_load(&race_stop)) {
        if (flux_dispatch(d, NULL) != FLUX_OK)
            atomic_fetch_add(&race_after_return, 1000000);   /* no failure is expected */
        atomic_fetch_add(&race_dispatches, 1);
        if (++n % 4 == 0)
            sched_yield();   /* idle gaps, for the destroys to begin in */
    }
    return NULL;
}

static void test_no_store_call_after_its_destroy_returned(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    long min_rounds = tap_scale(STORE_RACE_ROUNDS), reduces = tap_scale(STORE_RACE_REDUCES);
    long cap = tap_scale(STORE_RACE_CAP);
    race_slot *slots = calloc((size_t)cap, sizeof *slots);
    REQUIRE(slots != NULL);
    atomic_store(&race_stop, 0);
    atomic_store(&race_after_return, 0);
    atomic_store(&race_calls, 0);
    atomic_store(&race_dispatches, 0);
    pthread_t disp;
    REQUIRE(pthread_create(&disp, NULL, race_dispatcher_main, d) == 0);
    while (atomic_load(&race_dispatches) == 0)   /* the two threads overlap from the first round */
        sched_yield();
    long refused = 0, bad = 0, rounds = 0;
    for (long i = 0; i < cap && (i < min_rounds || atomic_load(&race_calls) < reduces); i++) {
        rounds++;
        race_slot *slot = &slots[i];
        flux_store *s = NULL;
        flux_listener_id id;
        if (flux_store_create(d, NULL, race_reduce, NULL, NULL, slot, race_destroy, &s) != FLUX_OK ||
            flux_store_add_listener(s, race_listener, slot, NULL, &id) != FLUX_OK) {
            bad++;
            break;
        }
        flux_status st;
        while ((st = flux_store_destroy(s)) == FLUX_ERR_ALREADY_DISPATCHING)
            refused++;
        if (st != FLUX_OK) {
            bad++;
            break;
        }
        atomic_store(&slot->returned, 1);
    }
    atomic_store(&race_stop, 1);
    pthread_join(disp, NULL);
    is_int(bad, 0, "every store was made and destroyed");
    ok(atomic_load(&race_calls) > 0, "the dispatches ran stores (the threads overlapped)");
    is_int(atomic_load(&race_after_return), 0,
           "no reduce or listener ran after its store's destroy returned (%ld stores, %ld refusals, %ld reduces)",
           rounds, refused, atomic_load(&race_calls));
    long destroys = 0;
    for (long i = 0; i < rounds; i++)
        destroys += atomic_load(&slots[i].destroys);
    is_int(destroys, rounds, "each store's context was destroyed once");
    free(slots);
    EXPECT_OK(flux_dispatcher_destroy(d));
}

int main(void)
{
    tap_init();
    RUN(test_first_errors_on_two_threads_at_once);
    RUN(test_dispatches_serialized);
    RUN(test_second_dispatch_waits);
    RUN(test_try_dispatch_does_not_wait);
    RUN(test_cancelled_waiting_dispatch);
    RUN(test_cancelled_waiting_dispatch_with_a_cancellation_point_in_a_callback);
    RUN(test_waiting_dispatch_runs_after_failed_one);
    RUN(test_signals_do_not_end_a_waiting_dispatch);
    RUN(test_library_leaves_signals_alone);
    RUN(test_other_threads_during_dispatch);
    RUN(test_close_from_another_thread_during_a_dispatch_is_refused);
    RUN(test_wait_for_from_other_thread);
    RUN(test_other_dispatcher_not_blocked);
    RUN(test_dispatchers_dispatching_each_other_do_not_deadlock);
    RUN(test_churn_while_dispatching);
    RUN(test_no_store_call_after_its_destroy_returned);
    return tap_done();
}
