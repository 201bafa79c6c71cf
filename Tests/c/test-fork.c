/*
 * test-fork.c -- what a child process may do with a dispatcher it inherited
 * from fork() (flux.h, "fork"): one idle at the fork works fully; one that
 * another thread of the parent was dispatching fails fast, never hangs (a
 * flux_enqueue on it is refused, its done run at once); one
 * this thread was dispatching (fork() from a callback) finishes its dispatch.
 */
#include "helpers.h"

#include <sys/wait.h>

static int counting_cb(void *context, const void *payload)
{
    (void)payload;
    (*(int *)context)++;
    return 0;
}

/* Runs body in a child with a watchdog; returns its exit status (0: passed;
 * 100: hung). The child reports its own checks by exit code, not TAP. */
static int in_child(int (*body)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(10);  /* a hang becomes SIGALRM */
        _exit(body(arg));
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status))
        return WTERMSIG(status) == SIGALRM ? 100 : 200 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* ---- idle at the fork ---------------------------------------------------- */

typedef struct shared {
    flux_dispatcher *d;
    int calls;
    flag entered, release;
    pthread_t dispatching; /* the parent thread inside blocking_cb */
    _Atomic pid_t waiter;  /* waiting_thread's thread_id() */
    flux_token token;      /* blocking_cb's registration */
    int child_result;      /* child_thread_checks' */
} shared;

static int child_uses_idle_dispatcher(void *arg)
{
    shared *s = arg;
    int before = s->calls;
    if (flux_dispatch(s->d, NULL) != FLUX_OK || s->calls != before + 1)
        return 1;
    flux_token t;
    int other = 0;
    if (flux_register(s->d, counting_cb, &other, NULL, &t) != FLUX_OK)
        return 2;
    if (flux_dispatch(s->d, NULL) != FLUX_OK || other != 1)
        return 3;
    if (flux_dispatcher_destroy(s->d) != FLUX_OK)
        return 4;
    return 0;
}

static void test_child_may_use_a_dispatcher_idle_at_the_fork(void)
{
    shared s = {0};
    s.d = flux_dispatcher_create();
    REQUIRE(s.d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(s.d, counting_cb, &s.calls, NULL, &t));
    EXPECT_OK(flux_dispatch(s.d, NULL));
    is_int(in_child(child_uses_idle_dispatcher, &s), 0, "the child dispatches, registers and destroys it");
    EXPECT_OK(flux_dispatch(s.d, NULL));
    is_int(s.calls, 2, "the parent's copy is unaffected");
    EXPECT_OK(flux_dispatcher_destroy(s.d));
}

/* ---- another thread dispatching at the fork ------------------------------ */

static int blocking_cb(void *context, const void *payload)
{
    (void)payload;
    shared *s = context;
    s->dispatching = pthread_self();
    flag_set(&s->entered);
    flag_wait(&s->release, 30);
    return 0;
}

static void *dispatching_thread(void *arg)
{
    shared *s = arg;
    flux_status st = flux_dispatch(s->d, NULL);
    REQUIRE(st == FLUX_OK);
    return NULL;
}

/* A new thread of the child. glibc hands it the stack of a parent thread
 * that died with the fork, so it usually has the very pthread_t of the
 * thread that was dispatching: it must not be taken for that thread. */
static void *child_thread_checks(void *arg)
{
    shared *s = arg;
    flux_token t = 1;
    s->child_result = 0;
    if (flux_wait_for(s->d, &t, 1) != FLUX_ERR_NOT_DISPATCHING)
        s->child_result = 1;
    else if (flux_dispatch(s->d, NULL) != FLUX_ERR_ALREADY_DISPATCHING || !strstr(flux_last_error(), "forked"))
        s->child_result = 2;
    return NULL;
}

static int child_fails_fast(void *arg)
{
    shared *s = arg;
    if (flux_dispatch(s->d, NULL) != FLUX_ERR_ALREADY_DISPATCHING)
        return 1;
    if (strstr(flux_last_error(), "forked") == NULL)
        return 2;
    if (!flux_is_dispatching(s->d))
        return 3;
    if (flux_try_dispatch(s->d, NULL) != FLUX_ERR_ALREADY_DISPATCHING || !strstr(flux_last_error(), "forked"))
        return 17; /* a try is refused as the orphaned dispatch's, not as another thread's */
    flux_token t = 1;
    if (flux_wait_for(s->d, &t, 1) != FLUX_ERR_NOT_DISPATCHING)
        return 4;
    if (flux_dispatcher_destroy(s->d) != FLUX_ERR_ALREADY_DISPATCHING)
        return 5;
    /* A dispatcher of its own works. */
    flux_dispatcher *mine = flux_dispatcher_create();
    int calls = 0;
    flux_token mt;
    if (!mine || flux_register(mine, counting_cb, &calls, NULL, &mt) != FLUX_OK ||
        flux_dispatch(mine, NULL) != FLUX_OK || calls != 1 || flux_dispatcher_destroy(mine) != FLUX_OK)
        return 6;
    pthread_t thread;
    if (pthread_create(&thread, NULL, child_thread_checks, s) != 0 || pthread_join(thread, NULL) != 0)
        return 7;
    if (s->child_result != 0)
        return 7 + s->child_result; /* 8: its wait ran the orphaned dispatch; 9: wrong refusal */
    return 0;
}

/* Forks while another thread holds a dispatch of a fresh dispatcher open,
 * runs body in the child (see in_child), then lets the parent's dispatch end
 * and checks the dispatcher still works there. Returns the child's status. */
static int in_child_of_a_held_dispatch(int (*body)(void *))
{
    shared s = {0};
    flag_init(&s.entered);
    flag_init(&s.release);
    s.d = flux_dispatcher_create();
    REQUIRE(s.d != NULL);
    EXPECT_OK(flux_register(s.d, blocking_cb, &s, NULL, &s.token));
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, dispatching_thread, &s) == 0);
    REQUIRE(flag_wait(&s.entered, 10));
    int child = in_child(body, &s);
    flag_set(&s.release);
    pthread_join(thread, NULL);
    EXPECT_OK(flux_dispatch(s.d, NULL));
    EXPECT_OK(flux_dispatcher_destroy(s.d));
    flag_fini(&s.entered);
    flag_fini(&s.release);
    return child;
}

static void test_child_fails_fast_on_a_dispatch_another_thread_was_running(void)
{
    is_int(in_child_of_a_held_dispatch(child_fails_fast), 0,
           "the child's dispatch fails with FLUX_ERR_ALREADY_DISPATCHING at once (100: it hung)");
}

/* flux_enqueue on the orphaned dispatcher: refused like flux_dispatch, and
 * its done runs at once, exactly once, with the error and its context (it
 * would otherwise be queued for a dispatch that can never end here). */
typedef struct done_record {
    int calls;
    flux_status status;
    void *context;
    void *payload;
    int dispatching;
    char message[160];
} done_record;

static done_record child_done;

static void child_done_fn(void *context, void *payload, flux_status status)
{
    child_done.calls++;
    child_done.status = status;
    child_done.context = context;
    child_done.payload = payload;
    snprintf(child_done.message, sizeof child_done.message, "%s", flux_last_error());
}

static int child_refuses_enqueue(void *arg)
{
    shared *s = arg;
    int payload = 0, tag = 0;
    memset(&child_done, 0, sizeof child_done);
    flux_status st = flux_enqueue(s->d, &payload, child_done_fn, &tag);
    if (st != FLUX_ERR_ALREADY_DISPATCHING)
        return 1;
    if (strstr(flux_last_error(), "forked") == NULL)
        return 2;
    if (child_done.calls != 1)
        return 3; /* done must have run, at once, exactly once */
    if (child_done.status != FLUX_ERR_ALREADY_DISPATCHING || child_done.context != &tag ||
        child_done.payload != &payload)
        return 4;
    if (strstr(child_done.message, "forked") == NULL)
        return 5;
    if (flux_enqueue(s->d, &payload, NULL, &tag) != FLUX_ERR_ALREADY_DISPATCHING)
        return 6; /* a NULL done: refused all the same */
    if (child_done.calls != 1)
        return 7;
    return 0;
}

static void test_child_refuses_enqueue_on_a_dispatch_another_thread_was_running(void)
{
    is_int(in_child_of_a_held_dispatch(child_refuses_enqueue), 0,
           "the child's flux_enqueue is refused with FLUX_ERR_ALREADY_DISPATCHING, its done run at once, "
           "exactly once, with the error and its context (1: not refused; 3: done did not run)");
}

/* The same with a second parent thread waiting in flux_dispatch: the child
 * forgets it. */
static void *waiting_thread(void *arg)
{
    shared *s = arg;
    atomic_store(&s->waiter, thread_id());
    REQUIRE(flux_dispatch(s->d, NULL) == FLUX_OK);
    return NULL;
}

static void test_child_fails_fast_with_waiters_too(void)
{
    shared s = {0};
    flag_init(&s.entered);
    flag_init(&s.release);
    s.d = flux_dispatcher_create();
    REQUIRE(s.d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(s.d, blocking_cb, &s, NULL, &t));
    pthread_t first, second;
    REQUIRE(pthread_create(&first, NULL, dispatching_thread, &s) == 0);
    REQUIRE(flag_wait(&s.entered, 10));
    REQUIRE(pthread_create(&second, NULL, waiting_thread, &s) == 0);
    REQUIRE(wait_until_blocked(&s.waiter, prompt_seconds())); /* in flux_dispatch */
    is_int(in_child(child_fails_fast, &s), 0, "with a waiter in the parent too, the child fails fast");
    flag_set(&s.release);
    pthread_join(first, NULL);
    pthread_join(second, NULL);
    EXPECT_OK(flux_dispatcher_destroy(s.d));
    flag_fini(&s.entered);
    flag_fini(&s.release);
}

/* ---- fork() from inside a callback ---------------------------------------- */

typedef struct from_callback {
    flux_dispatcher *d;
    int later_calls;
    int child_status;
} from_callback;

static int child_in_callback(void *arg)
{
    from_callback *f = arg;
    /* Still inside the dispatch: the rest of it runs when this returns. */
    return flux_dispatch(f->d, NULL) == FLUX_ERR_ALREADY_DISPATCHING ? 0 : 1;
}

static int forking_cb(void *context, const void *payload)
{
    (void)payload;
    from_callback *f = context;
    if (f->child_status < 0)
        f->child_status = in_child(child_in_callback, f);
    return 0;
}

/* flux_dispatcher_set_observer on the orphaned dispatcher: no dispatch can
 * ever end there, so a change would stay pending, and its context held,
 * for good (set_observer said FLUX_OK, destroy never ran). Refused like
 * flux_enqueue instead: FLUX_ERR_ALREADY_DISPATCHING, destroy(context) at
 * once, exactly once; clearing is refused the same way. */
static int child_observer_destroyed;
static void child_observer_destroy(void *context)
{
    (void)context;
    child_observer_destroyed++;
}

static int child_refuses_observer(void *arg)
{
    shared *s = arg;
    static const flux_observer hooks = {FLUX_OBSERVER_VERSION, NULL, NULL, NULL, NULL, NULL};
    int tag = 0;
    child_observer_destroyed = 0;
    flux_status st = flux_dispatcher_set_observer(s->d, &hooks, &tag, child_observer_destroy);
    if (st != FLUX_ERR_ALREADY_DISPATCHING)
        return 1;
    if (strstr(flux_last_error(), "forked") == NULL)
        return 2;
    if (child_observer_destroyed != 1)
        return 3; /* destroy must have run, at once, exactly once */
    if (flux_dispatcher_set_observer(s->d, NULL, &tag, child_observer_destroy) != FLUX_ERR_ALREADY_DISPATCHING)
        return 4;
    if (child_observer_destroyed != 2)
        return 5;
    return 0;
}

static void test_child_refuses_an_observer_on_a_dispatch_another_thread_was_running(void)
{
    is_int(in_child_of_a_held_dispatch(child_refuses_observer), 0,
           "the child's flux_dispatcher_set_observer is refused with FLUX_ERR_ALREADY_DISPATCHING and "
           "destroy(context) runs at once (1: not refused; 3: destroy did not run)");
}

/* flux_register and flux_unregister on the orphaned dispatcher: refused as
 * flux_dispatcher_set_observer is. A registration would join the table when
 * the orphaned dispatch ends, and an unregistration run its destroy then:
 * never. Both returned FLUX_OK, and destroy(context) never ran (flux.h,
 * "Ownership": exactly once). A refused register runs it at once. */
static int child_destroyed;
static void child_destroy(void *context)
{
    (void)context;
    child_destroyed++;
}

static int child_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)state;
    (void)payload;
    (void)next;
    return 0;
}

static int child_refuses_registrations(void *arg)
{
    shared *s = arg;
    int tag = 0;
    flux_token t = 99;
    child_destroyed = 0;
    if (flux_register(s->d, counting_cb, &tag, child_destroy, &t) != FLUX_ERR_ALREADY_DISPATCHING)
        return 1;
    if (strstr(flux_last_error(), "forked") == NULL)
        return 2;
    if (child_destroyed != 1 || t != 0)
        return 3; /* destroy must have run, at once, exactly once */
    if (flux_unregister(s->d, s->token) != FLUX_ERR_ALREADY_DISPATCHING)
        return 4;
    if (strstr(flux_last_error(), "forked") == NULL)
        return 5;
    /* A store registers the same way: refused, its context destroyed. */
    flux_store *store = (flux_store *)&tag;
    if (flux_store_create(s->d, NULL, child_reduce, NULL, NULL, &tag, child_destroy, &store)
        != FLUX_ERR_ALREADY_DISPATCHING)
        return 6;
    if (child_destroyed != 2 || store != NULL)
        return 7;
    return 0;
}

static void test_child_refuses_registrations_on_a_dispatch_another_thread_was_running(void)
{
    is_int(in_child_of_a_held_dispatch(child_refuses_registrations), 0,
           "the child's flux_register and flux_unregister are refused with FLUX_ERR_ALREADY_DISPATCHING, "
           "and so is flux_store_create, each destroy(context) run at once (1, 4, 6: not refused; 3, 7: destroy did not run)");
}

static void test_fork_from_a_callback(void)
{
    from_callback f = {0};
    f.child_status = -1;
    f.d = flux_dispatcher_create();
    REQUIRE(f.d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(f.d, forking_cb, &f, NULL, &t));
    EXPECT_OK(flux_register(f.d, counting_cb, &f.later_calls, NULL, &t));
    EXPECT_OK(flux_dispatch(f.d, NULL));
    is_int(f.child_status, 0, "in the child, the dispatch of the forking thread is still its own");
    is_int(f.later_calls, 1, "the parent's dispatch went on");
    EXPECT_OK(flux_dispatcher_destroy(f.d));
}

/* ---- a parent thread waiting for the forking thread ---------------------- */

/* A thread of the parent asleep in flux_dispatch, waiting for the forking
 * thread's dispatch, is on the engine's list of who waits for whom (which
 * refuses a wait that would close a cycle). In the child that thread is
 * gone; a new thread that got its pthread_t and dispatches a second
 * dispatcher must not pass for it: the forking thread's wait for that
 * dispatch is no cycle, and sleeps until it ends. */
typedef struct stale_wait {
    flux_dispatcher *d, *other;
    pthread_t waiter;   /* the parent thread asleep in flux_dispatch(d) */
    _Atomic pid_t waiter_id; /* its thread_id() */
    _Atomic pid_t forking_id; /* (child) the forking thread's thread_id() */
    int child_status;
    flag held;          /* (child) the new thread is dispatching other */
    int other_calls;
} stale_wait;

static int holding_cb(void *context, const void *payload)
{
    (void)payload;
    stale_wait *w = context;
    w->other_calls++;
    flag_set(&w->held);
    /* Held until the forking thread waits for this dispatch (the first). */
    if (w->other_calls == 1 && !wait_until_blocked(&w->forking_id, prompt_seconds()))
        return 1;
    return 0;
}

typedef struct child_thread {
    stale_wait *w;
    flag go;
    int dispatches; /* the one with the waiter's pthread_t */
} child_thread;

static void *child_thread_run(void *arg)
{
    child_thread *c = arg;
    if (!flag_wait(&c->go, 10))
        return NULL;
    if (c->dispatches && flux_dispatch(c->w->other, NULL) != FLUX_OK)
        return c; /* failed */
    return NULL;
}

enum { CHILD_THREADS = 32 };

static int child_waits_for_a_thread_with_a_dead_waiters_id(void *arg)
{
    stale_wait *w = arg;
    atomic_store(&w->forking_id, thread_id());
    flag_init(&w->held);
    w->other = flux_dispatcher_create();
    flux_token t;
    if (w->other == NULL || flux_register(w->other, holding_cb, w, NULL, &t) != FLUX_OK)
        return 1;
    /* glibc gives new threads the stacks of the parent's, which died with the
     * fork: make threads until one has the waiter's pthread_t. */
    static child_thread threads[CHILD_THREADS];
    pthread_t ids[CHILD_THREADS];
    int made = 0, found = -1;
    while (made < CHILD_THREADS && found < 0) {
        threads[made].w = w;
        threads[made].dispatches = 0;
        flag_init(&threads[made].go);
        if (pthread_create(&ids[made], NULL, child_thread_run, &threads[made]) != 0)
            return 2;
        if (pthread_equal(ids[made], w->waiter))
            found = made;
        made++;
    }
    int result = 0;
    if (found < 0) {
        result = 50; /* no thread got it: nothing to check here */
    } else {
        threads[found].dispatches = 1;
        flag_set(&threads[found].go);
        if (!flag_wait(&w->held, 10))
            result = 3;
        else if (flux_dispatch(w->other, NULL) != FLUX_OK)
            result = strstr(flux_last_error(), "deadlock") ? 4 : 5;
        else if (w->other_calls != 2)
            result = 6;
    }
    for (int i = 0; i < made; i++) {
        flag_set(&threads[i].go);
        void *failed = NULL;
        pthread_join(ids[i], &failed);
        if (failed != NULL && result == 0)
            result = 7;
    }
    if (result == 0 && flux_dispatcher_destroy(w->other) != FLUX_OK)
        result = 8;
    return result;
}

static int forking_after_waiter_cb(void *context, const void *payload)
{
    (void)payload;
    stale_wait *w = context;
    if (w->child_status < 0) {
        if (!wait_until_blocked(&w->waiter_id, prompt_seconds())) /* asleep in flux_dispatch(d) */
            return 1;
        w->child_status = in_child(child_waits_for_a_thread_with_a_dead_waiters_id, w);
    }
    return 0;
}

static void *stale_waiter_thread(void *arg)
{
    stale_wait *w = arg;
    atomic_store(&w->waiter_id, thread_id());
    REQUIRE(flux_dispatch(w->d, NULL) == FLUX_OK);
    return NULL;
}

static int start_waiter_cb(void *context, const void *payload)
{
    (void)payload;
    stale_wait *w = context;
    if (w->child_status < 0)
        REQUIRE(pthread_create(&w->waiter, NULL, stale_waiter_thread, w) == 0);
    return 0;
}

static void test_child_forgets_the_waits_of_the_parents_threads(void)
{
    stale_wait w = {0};
    w.child_status = -1;
    w.d = flux_dispatcher_create();
    REQUIRE(w.d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(w.d, start_waiter_cb, &w, NULL, &t));
    EXPECT_OK(flux_register(w.d, forking_after_waiter_cb, &w, NULL, &t));
    EXPECT_OK(flux_dispatch(w.d, NULL));
    if (w.child_status == 50)
        diag("no thread of the child got the waiter's pthread_t: nothing to check");
    is_int(w.child_status == 50 ? 0 : w.child_status, 0,
           "a child thread with a dead waiter's pthread_t is not taken for it: the forking thread's wait "
           "for it is no deadlock (4: refused as one; 100: it hung)");
    pthread_join(w.waiter, NULL);
    EXPECT_OK(flux_dispatcher_destroy(w.d));
}

int main(void)
{
    tap_init();
    RUN(test_child_may_use_a_dispatcher_idle_at_the_fork);
    RUN(test_child_fails_fast_on_a_dispatch_another_thread_was_running);
    RUN(test_child_fails_fast_with_waiters_too);
    RUN(test_child_refuses_enqueue_on_a_dispatch_another_thread_was_running);
    RUN(test_child_refuses_an_observer_on_a_dispatch_another_thread_was_running);
    RUN(test_child_refuses_registrations_on_a_dispatch_another_thread_was_running);
    RUN(test_fork_from_a_callback);
    RUN(test_child_forgets_the_waits_of_the_parents_threads);
    return tap_done();
}
