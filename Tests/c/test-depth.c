/*
 * test-depth.c -- chains of flux_wait_for() deeper than the stack: the wait
 * that would overflow fails with FLUX_ERR_TOO_DEEP, the dispatch is aborted
 * like a failing callback, and the process and the dispatcher go on.
 */
#include "helpers.h"

#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <ucontext.h>

extern char **environ;

/* A chain that fits on an 8 MiB stack: the bench's 10,000 links; under
 * AddressSanitizer, whose frames are several times bigger, fewer. */
#ifndef __has_feature
#  define __has_feature(x) 0
#endif
#if __has_feature(address_sanitizer) || defined(__SANITIZE_ADDRESS__)
enum { FITS = 1000, UNDER_ASAN = 1 };
#else
enum { FITS = 10000, UNDER_ASAN = 0 };
#endif

/* Callback i waits for callback i+1 while i+1 < depth: a chain `depth` long,
 * the first callback registered at its head. */
enum { MAX_LINKS = 1000000 };
static flux_token tokens[MAX_LINKS];
static flux_status wait_status[MAX_LINKS];
static int calls[MAX_LINKS];
static flux_dispatcher *chain_d;
static size_t depth;
static size_t wait_count = 1;  /* 2: wait on (next, next) -- the many-token path */
static size_t deepest;         /* the deepest index that ran */
static int return_status;      /* return the wait's status (else 0) */

static int link_cb(void *context, const void *payload)
{
    (void)payload;
    size_t i = (size_t)(uintptr_t)context;
    calls[i]++;
    if (i > deepest)
        deepest = i;
    if (i + 1 >= depth)
        return 0;
    flux_token next[2] = {tokens[i + 1], tokens[i + 1]};
    wait_status[i] = flux_wait_for(chain_d, next, wait_count);
    return return_status ? (int)wait_status[i] : 0;
}

static void build_chain(size_t links)
{
    chain_d = flux_dispatcher_create();
    REQUIRE(chain_d != NULL);
    for (size_t i = 0; i < links; i++)
        REQUIRE(flux_register(chain_d, link_cb, (void *)(uintptr_t)i, NULL, &tokens[i]) == FLUX_OK);
}

static void reset(size_t links)
{
    memset(calls, 0, links * sizeof calls[0]);
    memset(wait_status, 0xff, links * sizeof wait_status[0]);
    deepest = 0;
}

/* Runs a chain of `links` and checks it was stopped by the depth check. */
static void expect_too_deep(size_t links, const char *where)
{
    depth = links;
    reset(links);
    flux_status status = flux_dispatch(chain_d, NULL);
    is_int(status, FLUX_ERR_TOO_DEEP, "%s: a %zu-link chain: flux_dispatch returns FLUX_ERR_TOO_DEEP", where, links);
    has_substr(flux_last_error(), "too deep", "%s: the message says why", where);
    is_uint(flux_last_error_token(), tokens[deepest + 1],
            "%s: flux_last_error_token() is the link whose run would have gone too deep", where);
    ok(deepest > 100 && deepest + 1 < links, "%s: it went %zu links deep, then stopped", where, deepest + 1);
    /* Every wait still unwinding reports the abort; nothing ran twice; no
     * callback after the deepest ran (the outer loop stopped too). */
    size_t bad_status = 0, bad_calls = 0;
    for (size_t i = 0; i <= deepest; i++) {
        bad_status += wait_status[i] != FLUX_ERR_TOO_DEEP;
        bad_calls += calls[i] != 1;
    }
    for (size_t i = deepest + 1; i < links; i++)
        bad_calls += calls[i] != 0;
    is_int(bad_status, 0, "%s: the refused wait_for and every one unwinding returned FLUX_ERR_TOO_DEEP", where);
    is_int(bad_calls, 0, "%s: each callback up to the deepest ran once, none after it", where);
    is_int(flux_is_dispatching(chain_d), 0, "%s: the dispatcher is idle", where);
}

static void expect_fits(size_t links, const char *where)
{
    depth = links;
    reset(links);
    EXPECT_OK(flux_dispatch(chain_d, NULL));
    size_t bad = 0;
    for (size_t i = 0; i < links; i++)
        bad += calls[i] != 1 || (i + 1 < links && wait_status[i] != FLUX_OK);
    is_int(bad, 0, "%s: a %zu-link chain: every callback ran once, every wait returned FLUX_OK", where, links);
}

static size_t scaled_links(void)
{
    /* Valgrind runs the same stack at a fraction of the speed. */
    return tap_under_valgrind() ? 200000 : MAX_LINKS;
}

static void test_million_links_main_thread(void)
{
    size_t links = scaled_links();
    build_chain(links);
    expect_too_deep(links, "main thread");
    /* flux.h ("Depth") quotes this measurement; ASan's frames are bigger. */
    if (FITS == 10000)
        ok(deepest + 1 >= 40000, "main thread: %zu links fit on 8 MiB, as flux.h's \"Depth\" says (about 72,000)",
           deepest + 1);
    expect_fits(FITS, "main thread, after the abort");
    return_status = 1;
    expect_too_deep(links, "main thread, callbacks returning the status");
    return_status = 0;
    wait_count = 2;
    expect_too_deep(links, "main thread, two-token waits");
    /* It stopped at about 9,000 while flux.h said 23,000: the many-token
     * wait threw its errors, whose room every link's frame carried. */
    if (FITS == 10000)
        ok(deepest + 1 >= 20000,
           "main thread, two-token waits: %zu links fit on 8 MiB, as flux.h's \"Depth\" says (about 31,000)",
           deepest + 1);
    wait_count = 1;
    expect_fits(FITS, "main thread, again");
    EXPECT_OK(flux_dispatcher_destroy(chain_d));
}

static void *chain_thread(void *arg)
{
    size_t links = (size_t)(uintptr_t)arg;
    expect_too_deep(links, "thread");
    expect_fits(FITS / 40, "thread, after the abort");
    return NULL;
}

static void run_on_thread(size_t stack_size, size_t links)
{
    build_chain(links);
    REQUIRE(run_on_stack(stack_size, chain_thread, (void *)(uintptr_t)links));
    EXPECT_OK(flux_dispatcher_destroy(chain_d));
}

static void test_thread_default_stack(void) { run_on_thread(0, scaled_links()); }

/* A small stack: the margin shrinks to a quarter of it, so short chains
 * still work and a long one still stops cleanly. */
static void test_thread_small_stack(void) { run_on_thread(512 * 1024, 100000); }

/* The smallest stacks, in a fresh process: the first error a process
 * reports takes its deepest path (Swift instantiates metadata on it, about
 * 9 KiB of stack), and a quarter of a 16 or 24 KiB stack once left less than
 * that: SIGSEGV instead of FLUX_ERR_TOO_DEEP. The child is this program run
 * again with "--cold-chain SIZE"; it exits 0 when its first dispatch, on a
 * thread with a SIZE-byte stack, returned FLUX_ERR_TOO_DEEP. */
static flux_status cold_status;

static void *cold_chain_thread(void *arg)
{
    (void)arg;
    depth = 2000;
    cold_status = flux_dispatch(chain_d, NULL);
    return NULL;
}

static int cold_chain(size_t stack_size)
{
    chain_d = flux_dispatcher_create();
    if (!chain_d)
        return 2;
    for (size_t i = 0; i < 2000; i++)
        if (flux_register(chain_d, link_cb, (void *)(uintptr_t)i, NULL, &tokens[i]) != FLUX_OK)
            return 2;
    if (!run_on_stack(stack_size, cold_chain_thread, NULL))
        return 2;
    return cold_status == FLUX_ERR_TOO_DEEP ? 0 : 1;
}

/* A callback waiting for itself on such a stack, in a fresh process: the
 * report of the cycle, the process's first, set up Swift's array types on
 * a path deeper than a 16 KiB stack (SIGSEGV). Where the stack is too small
 * to wait at all, the wait is refused as too deep; elsewhere it reports the
 * cycle. The child ("--cold-circular SIZE") exits 0 when it got either. */
static flux_token self_waiter;
static flux_status self_wait_status = (flux_status)-1;

static int wait_for_itself_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    self_wait_status = flux_wait_for(chain_d, &self_waiter, 1);
    return self_wait_status == FLUX_ERR_TOO_DEEP ? 1 : 0;
}

static void *cold_circular_thread(void *arg)
{
    (void)arg;
    cold_status = flux_dispatch(chain_d, NULL);
    return NULL;
}

static int cold_circular(size_t stack_size)
{
    chain_d = flux_dispatcher_create();
    if (!chain_d || flux_register(chain_d, wait_for_itself_cb, NULL, NULL, &self_waiter) != FLUX_OK)
        return 2;
    if (!run_on_stack(stack_size, cold_circular_thread, NULL))
        return 2;
    bool refused = self_wait_status == FLUX_ERR_TOO_DEEP && cold_status == FLUX_ERR_TOO_DEEP;
    bool reported = self_wait_status == FLUX_ERR_CIRCULAR && cold_status == FLUX_OK;
    return refused || reported ? 0 : 1;
}

static const char *self_path;

static void test_small_stacks_fresh_process(void)
{
    long least = sysconf(_SC_THREAD_STACK_MIN);
    size_t sizes[] = {least > 16384 ? (size_t)least : 16384, 20480, 24576, 32768, 65536};
    /* AddressSanitizer's frames are several times bigger: a 16 KiB stack
     * does not hold even a dispatch's first refusal under it. */
    size_t first = UNDER_ASAN ? 1 : 0;
    for (size_t i = first; i < sizeof sizes / sizeof sizes[0]; i++) {
        char size[32];
        snprintf(size, sizeof size, "%zu", sizes[i]);
        char *args[] = {(char *)self_path, "--cold-chain", size, NULL};
        pid_t child;
        int status = -1;
        REQUIRE(posix_spawn(&child, self_path, NULL, NULL, args, environ) == 0);
        REQUIRE(waitpid(child, &status, 0) == child);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "a %zu-byte thread stack, first dispatch of a fresh process: FLUX_ERR_TOO_DEEP (%s %d)", sizes[i],
           WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        char *circular_args[] = {(char *)self_path, "--cold-circular", size, NULL};
        REQUIRE(posix_spawn(&child, self_path, NULL, NULL, circular_args, environ) == 0);
        REQUIRE(waitpid(child, &status, 0) == child);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "a %zu-byte thread stack, a fresh process's callback waiting for itself: FLUX_ERR_TOO_DEEP or "
           "FLUX_ERR_CIRCULAR (%s %d)",
           sizes[i], WIFSIGNALED(status) ? "signal" : "exit",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
}

/* One wait on another stack -- a fiber's, from makecontext() -- must not
 * turn the check off for the rest of the dispatch: flux.h ("Depth") leaves
 * only chains on such a stack unprotected. Here the first callback waits,
 * on a fiber, for a trivial one; then a chain far deeper than the stack runs
 * on the thread's own stack, and must stop with FLUX_ERR_TOO_DEEP. It
 * overflowed the stack instead: the wait on the fiber had left the dispatch
 * with no limit. The child is this program run again with "--fiber-chain";
 * it exits 0 when its dispatch returned FLUX_ERR_TOO_DEEP. */
static ucontext_t fiber_caller, fiber_context;
static flux_token fiber_target;
static flux_status fiber_wait_status = (flux_status)-1;
static void *fiber_stack;  /* the fiber's stack when set, else malloc'd */

static void fiber_main(void)
{
    fiber_wait_status = flux_wait_for(chain_d, &fiber_target, 1);
}

static int on_fiber_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    size_t size = 256 * 1024;
    void *stack = fiber_stack ? fiber_stack : malloc(size);
    if (!stack || getcontext(&fiber_context) != 0)
        return 1;
    fiber_context.uc_stack.ss_sp = stack;
    fiber_context.uc_stack.ss_size = size;
    fiber_context.uc_link = &fiber_caller;
    makecontext(&fiber_context, fiber_main, 0);
    int swapped = swapcontext(&fiber_caller, &fiber_context);
    if (stack != fiber_stack)
        free(stack);
    return swapped != 0 || fiber_wait_status != FLUX_OK;
}

static int plain_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

static int fiber_chain(void)
{
    chain_d = flux_dispatcher_create();
    flux_token t;
    if (!chain_d || flux_register(chain_d, on_fiber_cb, NULL, NULL, &t) != FLUX_OK
        || flux_register(chain_d, plain_cb, NULL, NULL, &fiber_target) != FLUX_OK)
        return 2;
    for (size_t i = 0; i < MAX_LINKS; i++)
        if (flux_register(chain_d, link_cb, (void *)(uintptr_t)i, NULL, &tokens[i]) != FLUX_OK)
            return 2;
    depth = MAX_LINKS;
    flux_status status = flux_dispatch(chain_d, NULL);
    return status == FLUX_ERR_TOO_DEEP && fiber_wait_status == FLUX_OK ? 0 : 1;
}

static void test_wait_on_a_fiber_keeps_the_check(void)
{
    char *args[] = {(char *)self_path, "--fiber-chain", NULL};
    pid_t child;
    int status = -1;
    REQUIRE(posix_spawn(&child, self_path, NULL, NULL, args, environ) == 0);
    REQUIRE(waitpid(child, &status, 0) == child);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
       "a wait on a fiber, then a chain deeper than the thread's stack: FLUX_ERR_TOO_DEEP (%s %d)",
       WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* A fiber whose stack lies right below the thread's -- as a stack malloc'd
 * on a thread often is, mapped just under the thread's own -- is another
 * stack: a one-link wait on it runs (flux.h, "Depth": the check is off
 * there). It was refused with FLUX_ERR_TOO_DEEP: anything up to two margins
 * below the thread's low-water mark passed for the thread's own stack. One
 * mapping holds both, so the fiber's is certain to be adjacent. */
static flux_status adjacent_status;

static void *adjacent_fiber_thread(void *arg)
{
    (void)arg;
    adjacent_status = flux_dispatch(chain_d, NULL);
    return NULL;
}

static void test_wait_on_a_fiber_below_the_threads_stack(void)
{
    if (tap_under_valgrind()) {
        /* memcheck takes the switch to a stack right below the thread's for
         * the thread's stack growing, and reports the fiber's frames as
         * uninitialised: nothing of libflux's to check there. */
        ok(1, "skipped under valgrind");
        return;
    }
    size_t fiber_size = 256 * 1024, thread_size = 1024 * 1024;
    char *block = mmap(NULL, fiber_size + thread_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(block != MAP_FAILED);
    chain_d = flux_dispatcher_create();
    REQUIRE(chain_d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(chain_d, on_fiber_cb, NULL, NULL, &t));
    EXPECT_OK(flux_register(chain_d, plain_cb, NULL, NULL, &fiber_target));
    fiber_stack = block;
    fiber_wait_status = (flux_status)-1;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    REQUIRE(pthread_attr_setstack(&attributes, block + fiber_size, thread_size) == 0);
    pthread_t thread;
    REQUIRE(pthread_create(&thread, &attributes, adjacent_fiber_thread, NULL) == 0);
    pthread_join(thread, NULL);
    pthread_attr_destroy(&attributes);
    is_int(fiber_wait_status, FLUX_OK, "a wait on a fiber whose stack lies right below the thread's runs");
    is_int(adjacent_status, FLUX_OK, "and the dispatch returns FLUX_OK");
    fiber_stack = NULL;
    EXPECT_OK(flux_dispatcher_destroy(chain_d));
    munmap(block, fiber_size + thread_size);
}

/* A chain that fits is unaffected (10,000 links: what make bench measures). */
static void test_ten_thousand_links(void)
{
    build_chain(FITS);
    expect_fits(FITS, "a chain that fits");
    EXPECT_OK(flux_dispatcher_destroy(chain_d));
}

/* FLUX_ERR_TOO_DEEP through flux_enqueue: it returns it for its own
 * dispatch, and done and the observer's dispatch_end get it, for that
 * dispatch and for a queued one (flux.h lists it for all three). */
static flux_status done_status[4];
static void *done_context[4];
static int done_calls;
static void depth_done(void *context, void *payload, flux_status status)
{
    (void)payload;
    if (done_calls < 4) {
        done_status[done_calls] = status;
        done_context[done_calls] = context;
    }
    done_calls++;
}

static flux_status end_status[4];
static int end_calls;
static void on_dispatch_end(void *context, const void *payload, flux_status status)
{
    (void)context;
    (void)payload;
    if (end_calls < 4)
        end_status[end_calls] = status;
    end_calls++;
}

/* Registered last: when queue_again is set, it queues one more dispatch, a
 * chain queue_again links long, as a cascading action would. */
static size_t queue_again;
static char tag_own, tag_queued;
static int enqueue_again_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    if (queue_again) {
        depth = queue_again;
        queue_again = 0;
        flux_enqueue(chain_d, NULL, depth_done, &tag_queued);
    }
    return 0;
}

static void *enqueue_chain_thread(void *arg)
{
    size_t links = (size_t)(uintptr_t)arg;
    depth = links;
    reset(links);
    done_calls = end_calls = 0;
    flux_status status = flux_enqueue(chain_d, NULL, depth_done, &tag_own);
    is_int(status, FLUX_ERR_TOO_DEEP, "flux_enqueue, idle: returns FLUX_ERR_TOO_DEEP for its own dispatch");
    ok(done_calls == 1 && done_status[0] == FLUX_ERR_TOO_DEEP && done_context[0] == &tag_own,
       "its done ran once, with FLUX_ERR_TOO_DEEP and its context");
    ok(end_calls == 1 && end_status[0] == FLUX_ERR_TOO_DEEP, "dispatch_end reported FLUX_ERR_TOO_DEEP");

    /* A short chain whose last callback queues the long one. */
    depth = 1;
    reset(links);
    done_calls = end_calls = 0;
    queue_again = links;
    status = flux_enqueue(chain_d, NULL, depth_done, &tag_own);
    is_int(status, FLUX_OK, "the outer call returns its own dispatch's status, not the queued one's");
    ok(done_calls == 2 && done_status[0] == FLUX_OK && done_status[1] == FLUX_ERR_TOO_DEEP &&
           done_context[1] == &tag_queued,
       "the queued dispatch went too deep: its done got FLUX_ERR_TOO_DEEP and its context");
    ok(end_calls == 2 && end_status[0] == FLUX_OK && end_status[1] == FLUX_ERR_TOO_DEEP,
       "dispatch_end reported FLUX_OK, then FLUX_ERR_TOO_DEEP for the queued dispatch");
    return NULL;
}

static void test_too_deep_through_enqueue(void)
{
    size_t links = 100000;
    build_chain(links);
    flux_token t;
    REQUIRE(flux_register(chain_d, enqueue_again_cb, NULL, NULL, &t) == FLUX_OK);
    flux_observer hooks = {FLUX_OBSERVER_VERSION, NULL, on_dispatch_end, NULL, NULL, NULL};
    REQUIRE(flux_dispatcher_set_observer(chain_d, &hooks, NULL, NULL) == FLUX_OK);
    REQUIRE(run_on_stack(512 * 1024, enqueue_chain_thread, (void *)(uintptr_t)links));
    EXPECT_OK(flux_dispatcher_destroy(chain_d));
}

/* "The default stack": 8 MiB, whatever the parent's `ulimit -s`. Under
 * `unlimited` the main thread's stack has no bound a million links could
 * reach; under a smaller limit the chains flux.h says fit do not. The soft
 * limit set now bounds the main thread's stack as it grows (the kernel
 * checks it then; libflux reads it at the first wait), and the children
 * this program starts inherit it. False when the hard limit is below. */
static bool use_an_8_mib_main_stack(void)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_STACK, &limit) != 0)
        return false;
    if (limit.rlim_cur == 8u << 20)
        return true;
    if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < 8u << 20)
        return false;
    limit.rlim_cur = 8u << 20;
    return setrlimit(RLIMIT_STACK, &limit) == 0;
}

/* This program run again with "--fits-main-thread": exits 0 when, set up as
 * main() does, a FITS-link chain runs on the main thread. */
static int fits_main_thread(void)
{
    if (!use_an_8_mib_main_stack())
        return 2;
    build_chain(FITS);
    depth = FITS;
    return flux_dispatch(chain_d, NULL) == FLUX_OK ? 0 : 1;
}

/* The set-up holds whatever stack limit the parent left: run again with a
 * 1 MiB soft limit, this program still fits FITS links on its main thread
 * (it did not: `ulimit -S -s 1024` failed eight of its tests). */
static void test_a_smaller_stack_limit_left_by_the_parent_is_raised(void)
{
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        struct rlimit limit;
        if (getrlimit(RLIMIT_STACK, &limit) != 0)
            _exit(3);
        limit.rlim_cur = 1u << 20;
        if (setrlimit(RLIMIT_STACK, &limit) != 0)
            _exit(3);
        char *args[] = {(char *)self_path, "--fits-main-thread", NULL};
        execv(self_path, args);
        _exit(4);
    }
    int status = -1;
    REQUIRE(waitpid(child, &status, 0) == child);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
       "run with a 1 MiB stack limit, a %d-link chain still fits on the main thread (%s %d)", FITS,
       WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--cold-chain") == 0)
        return cold_chain((size_t)strtoul(argv[2], NULL, 10));
    if (argc == 3 && strcmp(argv[1], "--cold-circular") == 0)
        return cold_circular((size_t)strtoul(argv[2], NULL, 10));
    if (argc == 2 && strcmp(argv[1], "--fiber-chain") == 0)
        return fiber_chain();
    if (argc == 2 && strcmp(argv[1], "--fits-main-thread") == 0)
        return fits_main_thread();
    self_path = argv[0];
    tap_init();
    REQUIRE(use_an_8_mib_main_stack()); /* else the hard limit is below 8 MiB */
    RUN(test_ten_thousand_links);
    RUN(test_million_links_main_thread);
    RUN(test_thread_default_stack);
    RUN(test_thread_small_stack);
    RUN(test_small_stacks_fresh_process);
    RUN(test_wait_on_a_fiber_keeps_the_check);
    RUN(test_wait_on_a_fiber_below_the_threads_stack);
    RUN(test_too_deep_through_enqueue);
    RUN(test_a_smaller_stack_limit_left_by_the_parent_is_raised);
    return tap_done();
}
