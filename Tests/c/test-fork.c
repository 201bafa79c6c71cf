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

static void test_child_fails_fast_on_a_dispatch_another_thread_was_running(void)
{
    shared s = {0};
    flag_init(&s.entered);
    flag_init(&s.release);
    s.d = flux_dispatcher_create();
    REQUIRE(s.d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(s.d, blocking_cb, &s, NULL, &t));
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, dispatching_thread, &s) == 0);
    REQUIRE(flag_wait(&s.entered, 10));
    int child = in_child(child_fails_fast, &s);
    is_int(child, 0, "the child's dispatch fails with FLUX_ERR_ALREADY_DISPATCHING at once (100: it hung)");
    flag_set(&s.release);
    pthread_join(thread, NULL);
    EXPECT_OK(flux_dispatch(s.d, NULL));
    EXPECT_OK(flux_dispatcher_destroy(s.d));
    flag_fini(&s.entered);
    flag_fini(&s.release);
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
    shared s = {0};
    flag_init(&s.entered);
    flag_init(&s.release);
    s.d = flux_dispatcher_create();
    REQUIRE(s.d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(s.d, blocking_cb, &s, NULL, &t));
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, dispatching_thread, &s) == 0);
    REQUIRE(flag_wait(&s.entered, 10));
    int child = in_child(child_refuses_enqueue, &s);
    is_int(child, 0,
           "the child's flux_enqueue is refused with FLUX_ERR_ALREADY_DISPATCHING, its done run at once, "
           "exactly once, with the error and its context (1: not refused; 3: done did not run)");
    flag_set(&s.release);
    pthread_join(thread, NULL);
    EXPECT_OK(flux_dispatch(s.d, NULL));
    EXPECT_OK(flux_dispatcher_destroy(s.d));
    flag_fini(&s.entered);
    flag_fini(&s.release);
}

/* The same with a second parent thread waiting in flux_dispatch: the child
 * forgets it. */
static void *waiting_thread(void *arg)
{
    shared *s = arg;
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
    sleep_ms(100);  /* the second thread is waiting in flux_dispatch by now */
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

int main(void)
{
    tap_init();
    RUN(test_child_may_use_a_dispatcher_idle_at_the_fork);
    RUN(test_child_fails_fast_on_a_dispatch_another_thread_was_running);
    RUN(test_child_fails_fast_with_waiters_too);
    RUN(test_child_refuses_enqueue_on_a_dispatch_another_thread_was_running);
    RUN(test_fork_from_a_callback);
    return tap_done();
}
