/*
 * test-oom.c -- out of memory, SQLite's way: for every k, make the k-th
 * allocation of an operation fail (once, and then from the k-th on), and
 * check each time that the operation reports FLUX_ERR_NO_MEMORY (or NULL
 * where the header says so), that every context handed over is destroyed
 * exactly once, that nothing leaked, and that the dispatcher still works.
 *
 * The allocator is interposed here, in the executable: libflux's calls to
 * malloc, calloc, realloc and posix_memalign bind to these definitions (the
 * executable comes first in symbol lookup), which count and forward to
 * glibc's own. Scenarios are rows of a table: a new API (the flux_store_*
 * functions, say) is covered by adding a row.
 *
 * Sanitizers and valgrind replace the allocator themselves; there this
 * program skips.
 */
#include "helpers.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>

#define OOM_INTERPOSE TEST_CAN_INTERPOSE_MALLOC

/* ---- the interposed allocator ------------------------------------------ */

static long alloc_count;   /* allocations attempted while armed */
static long fail_at;       /* the allocation to fail (1-based); 0: none */
static bool fail_after;    /* and every one after it */
static long failures;      /* allocations refused */
static long live;          /* blocks allocated and not freed (always tracked) */

#if OOM_INTERPOSE
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static bool refuse(void)
{
    if (fail_at == 0)
        return false;
    long n = __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
    if (n == fail_at || (fail_after && n > fail_at)) {
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        errno = ENOMEM;
        return true;
    }
    return false;
}

static void *counted(void *p)
{
    if (p)
        __atomic_add_fetch(&live, 1, __ATOMIC_RELAXED);
    return p;
}

void *malloc(size_t size)
{
    return refuse() ? NULL : counted(__libc_malloc(size));
}

void *calloc(size_t count, size_t size)
{
    return refuse() ? NULL : counted(__libc_calloc(count, size));
}

void *realloc(void *p, size_t size)
{
    if (p == NULL)
        return malloc(size);
    if (refuse())
        return NULL;  /* p stays valid, as the standard says */
    return __libc_realloc(p, size);  /* one block in, one block out */
}

int posix_memalign(void **out, size_t alignment, size_t size)
{
    if (refuse())
        return ENOMEM;
    void *p = counted(__libc_memalign(alignment, size));
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size)
{
    return refuse() ? NULL : counted(__libc_memalign(alignment, size));
}

void *memalign(size_t alignment, size_t size)
{
    return aligned_alloc(alignment, size);
}

void free(void *p)
{
    if (p) {
        __atomic_sub_fetch(&live, 1, __ATOMIC_RELAXED);
        __libc_free(p);
    }
}
#endif

static void arm(long k, bool after)
{
    alloc_count = 0;
    failures = 0;
    fail_after = after;
    __atomic_store_n(&fail_at, k, __ATOMIC_SEQ_CST);
}

static void disarm(void)
{
    __atomic_store_n(&fail_at, 0, __ATOMIC_SEQ_CST);
}

/* ---- what the scenarios share ------------------------------------------ */

typedef struct counter {
    int calls;
    int destroyed;
} counter;

static int count_cb(void *context, const void *payload)
{
    (void)payload;
    ((counter *)context)->calls++;
    return 0;
}

static void count_destroy(void *context)
{
    ((counter *)context)->destroyed++;
}

#if OOM_INTERPOSE
/* What flux_last_error() reads when its record could not be made (flux.h). */
static const char *const oom_message = "flux: out of memory while recording an error message";
#endif

enum { MAX_CTX = 32 };

typedef struct world {
    flux_dispatcher *d;
    counter ctx[MAX_CTX];   /* ctx[0..n-1] registered by the setup */
    int n;
    counter extra;          /* what the armed operation hands over */
    flux_token extra_token;
    flux_status status;     /* the armed operation's result */
    long k;
    bool after;
    flux_closure *closure;
} world;

/* One row: setup (unarmed), the armed operation, then checks and teardown
 * (unarmed). run returns the operation's status; checks record problems. */
typedef struct scenario {
    const char *name;
    void (*setup)(world *w);
    flux_status (*run)(world *w);
    /* After a failure or a success: the world is consistent and usable. */
    bool (*check)(world *w, char *why, size_t size);
    void (*teardown)(world *w);
    /* false: the operation must make no allocation at all (so it cannot
     * run out of memory). */
    bool allocates;
} scenario;

static void setup_dispatcher(world *w, int registrations)
{
    w->d = flux_dispatcher_create();
    REQUIRE(w->d != NULL);
    for (int i = 0; i < registrations; i++) {
        flux_token t;
        REQUIRE(flux_register(w->d, count_cb, &w->ctx[i], count_destroy, &t) == FLUX_OK);
    }
    w->n = registrations;
}

/* The dispatcher works: a dispatch reaches every registered callback once,
 * and a register/unregister pair goes through. */
static bool dispatcher_usable(world *w, bool extra_registered, char *why, size_t size)
{
    int before[MAX_CTX];
    for (int i = 0; i < w->n; i++)
        before[i] = w->ctx[i].calls;
    int extra_before = w->extra.calls;
    if (flux_dispatch(w->d, NULL) != FLUX_OK) {
        snprintf(why, size, "dispatch failed: %s", flux_last_error());
        return false;
    }
    for (int i = 0; i < w->n; i++) {
        if (w->ctx[i].calls != before[i] + 1) {
            snprintf(why, size, "callback %d ran %d times", i, w->ctx[i].calls - before[i]);
            return false;
        }
    }
    if (w->extra.calls - extra_before != (extra_registered ? 1 : 0)) {
        snprintf(why, size, "the new callback ran %d times", w->extra.calls - extra_before);
        return false;
    }
    counter probe = {0, 0};
    flux_token t;
    if (flux_register(w->d, count_cb, &probe, count_destroy, &t) != FLUX_OK ||
        flux_unregister(w->d, t) != FLUX_OK || probe.destroyed != 1) {
        snprintf(why, size, "register/unregister after it failed: %s", flux_last_error());
        return false;
    }
    return true;
}

static void teardown_dispatcher(world *w)
{
    if (w->d)
        REQUIRE(flux_dispatcher_destroy(w->d) == FLUX_OK);
    w->d = NULL;
}

/* ---- flux_dispatcher_create --------------------------------------------- */

static void create_setup(world *w) { (void)w; }

static flux_status create_run(world *w)
{
    w->d = flux_dispatcher_create();
    return w->d ? FLUX_OK : FLUX_ERR_NO_MEMORY;  /* NULL only on no memory */
}

static bool create_check(world *w, char *why, size_t size)
{
    if (!w->d)
        return true;  /* nothing to use; the leak check covers the rest */
    return dispatcher_usable(w, false, why, size);
}

/* ---- flux_register, idle ------------------------------------------------ */

/* Eight registrations fill the first table: the ninth must grow it. */
static void register_setup(world *w) { setup_dispatcher(w, 8); }

static flux_status register_run(world *w)
{
    w->extra_token = 99;
    return flux_register(w->d, count_cb, &w->extra, count_destroy, &w->extra_token);
}

static bool register_check(world *w, char *why, size_t size)
{
    bool ok = w->status == FLUX_OK;
    if (ok ? w->extra_token == 0 : w->extra_token != 0) {
        snprintf(why, size, "out_token is %llu", (unsigned long long)w->extra_token);
        return false;
    }
    if (w->extra.destroyed != (ok ? 0 : 1)) {
        snprintf(why, size, "the context was destroyed %d times", w->extra.destroyed);
        return false;
    }
    return dispatcher_usable(w, ok, why, size);
}

static void register_teardown(world *w)
{
    bool ok = w->status == FLUX_OK;
    teardown_dispatcher(w);
    int bad = 0;
    for (int i = 0; i < w->n; i++)
        bad += w->ctx[i].destroyed != 1;
    if (bad || w->extra.destroyed != 1)
        diag("k=%ld: after destroy, %d setup contexts not destroyed once; the new one %d times (%s)",
             w->k, bad, w->extra.destroyed, ok ? "registered" : "refused");
    REQUIRE(bad == 0 && w->extra.destroyed == 1);
}

/* ---- flux_register, during a dispatch ------------------------------------ */

static world *dispatching_world;

/* The first callback registers, armed, while the dispatch runs. */
static int register_while_dispatching_cb(void *context, const void *payload)
{
    (void)payload;
    world *w = dispatching_world;
    ((counter *)context)->calls++;
    if (w->status == (flux_status)-1) {
        w->extra_token = 99;
        arm(w->k, w->after);
        w->status = flux_register(w->d, count_cb, &w->extra, count_destroy, &w->extra_token);
        disarm();
    }
    return 0;
}

static void register_during_setup(world *w)
{
    w->d = flux_dispatcher_create();
    REQUIRE(w->d != NULL);
    flux_token t;
    REQUIRE(flux_register(w->d, register_while_dispatching_cb, &w->ctx[0], count_destroy, &t) == FLUX_OK);
    for (int i = 1; i < 8; i++)
        REQUIRE(flux_register(w->d, count_cb, &w->ctx[i], count_destroy, &t) == FLUX_OK);
    w->n = 8;
    dispatching_world = w;
}

/* Arms itself inside the callback; the dispatch around it is not armed. */
static flux_status register_during_run(world *w)
{
    disarm();
    w->status = (flux_status)-1;
    flux_status dispatched = flux_dispatch(w->d, NULL);
    REQUIRE(dispatched == FLUX_OK);
    return w->status;
}

/* ---- flux_closure_create ------------------------------------------------- */

static void closure_handler(void *userdata, void *ret, void **args)
{
    (void)args;
    ((counter *)userdata)->calls++;
    *(int32_t *)ret = 7;
}

static void closure_setup(world *w) { w->closure = NULL; }

static flux_status closure_run(world *w)
{
    w->closure = (flux_closure *)&w->closure;  /* must become NULL on failure */
    return flux_closure_create("i(pp)", closure_handler, &w->extra, count_destroy, &w->closure);
}

static bool closure_check(world *w, char *why, size_t size)
{
    if (w->status != FLUX_OK) {
        if (w->closure != NULL || w->extra.destroyed != 1) {
            snprintf(why, size, "out %p, userdata destroyed %d times", (void *)w->closure, w->extra.destroyed);
            return false;
        }
        return true;
    }
    flux_callback fn = (flux_callback)flux_closure_code(w->closure);
    if (!fn || fn(NULL, NULL) != 7 || w->extra.calls != 1 || w->extra.destroyed != 0) {
        snprintf(why, size, "the trampoline does not work");
        return false;
    }
    return true;
}

static void closure_teardown(world *w)
{
    if (w->status == FLUX_OK) {
        REQUIRE(flux_closure_destroy(w->closure) == FLUX_OK);
        REQUIRE(w->extra.destroyed == 1);
    }
}

/* ---- flux_dispatcher_destroy --------------------------------------------- */

static flux_status destroy_run(world *w)
{
    flux_status status = flux_dispatcher_destroy(w->d);
    if (status == FLUX_OK)
        w->d = NULL;
    return status;
}

static bool destroy_check(world *w, char *why, size_t size)
{
    for (int i = 0; i < w->n; i++) {
        if (w->ctx[i].destroyed != 1) {
            snprintf(why, size, "context %d destroyed %d times", i, w->ctx[i].destroyed);
            return false;
        }
    }
    return w->status == FLUX_OK;
}

/* ---- flux_dispatcher_close ----------------------------------------------- */

/* flux.h: "Allocates nothing, so it cannot run out of memory" -- with an
 * observer to clear too. */
static void close_setup(world *w)
{
    setup_dispatcher(w, 8);
    static const flux_observer hooks = {FLUX_OBSERVER_VERSION, NULL, NULL, NULL, NULL, NULL};
    REQUIRE(flux_dispatcher_set_observer(w->d, &hooks, &w->extra, count_destroy) == FLUX_OK);
}

static flux_status close_run(world *w) { return flux_dispatcher_close(w->d); }

static bool close_check(world *w, char *why, size_t size)
{
    if (w->extra.destroyed != 1) {
        snprintf(why, size, "the observer's context destroyed %d times", w->extra.destroyed);
        return false;
    }
    return destroy_check(w, why, size);
}

/* ---- flux_unregister, idle ------------------------------------------------ */

/* flux.h: "With no dispatch running, a call that succeeds allocates nothing." */
static void unregister_idle_setup(world *w)
{
    setup_dispatcher(w, 8);
    REQUIRE(flux_register(w->d, count_cb, &w->extra, count_destroy, &w->extra_token) == FLUX_OK);
}

static flux_status unregister_idle_run(world *w) { return flux_unregister(w->d, w->extra_token); }

static bool unregister_idle_check(world *w, char *why, size_t size)
{
    if (w->status != FLUX_OK || w->extra.destroyed != 1) {
        snprintf(why, size, "status %d, the context destroyed %d times", (int)w->status, w->extra.destroyed);
        return false;
    }
    return dispatcher_usable(w, false, why, size);
}

/* ---- flux_unregister, during a dispatch ---------------------------------- */

/* The first callback unregisters the second, armed, while the dispatch runs. */
static flux_token second_token;

static int unregister_while_dispatching_cb(void *context, const void *payload)
{
    (void)payload;
    world *w = dispatching_world;
    ((counter *)context)->calls++;
    if (w->status == (flux_status)-1) {
        arm(w->k, w->after);
        w->status = flux_unregister(w->d, second_token);
        disarm();
    }
    return 0;
}

static void unregister_during_setup(world *w)
{
    w->d = flux_dispatcher_create();
    REQUIRE(w->d != NULL);
    flux_token t;
    REQUIRE(flux_register(w->d, unregister_while_dispatching_cb, &w->ctx[0], count_destroy, &t) == FLUX_OK);
    REQUIRE(flux_register(w->d, count_cb, &w->extra, count_destroy, &second_token) == FLUX_OK);
    for (int i = 1; i < 8; i++)
        REQUIRE(flux_register(w->d, count_cb, &w->ctx[i], count_destroy, &t) == FLUX_OK);
    w->n = 8;
    dispatching_world = w;
}

static flux_status unregister_during_run(world *w)
{
    disarm();
    w->status = (flux_status)-1;
    REQUIRE(flux_dispatch(w->d, NULL) == FLUX_OK);
    return w->status;
}

static bool unregister_check(world *w, char *why, size_t size)
{
    bool gone = w->status == FLUX_OK;
    /* Unregistered: not called after the unregister, destroyed when the
     * dispatch ended. Refused: still registered, still called. */
    if (w->extra.calls != (gone ? 0 : 1) || w->extra.destroyed != (gone ? 1 : 0)) {
        snprintf(why, size, "the second callback: %d calls, destroyed %d times", w->extra.calls, w->extra.destroyed);
        return false;
    }
    return dispatcher_usable(w, !gone, why, size);
}

static void unregister_teardown(world *w)
{
    teardown_dispatcher(w);
    REQUIRE(w->extra.destroyed == 1);
}

/* ---- flux_enqueue, during a dispatch (the queue grows) ------------------- */

static int done_calls;
static flux_status done_status;
static void *done_context;

static void count_done(void *context, void *payload, flux_status status)
{
    (void)payload;
    done_calls++;
    done_status = status;
    done_context = context;
}

/* The first callback enqueues, armed, while the dispatch runs: the queue
 * must grow, so the allocation can fail. */
static int enqueue_while_dispatching_cb(void *context, const void *payload)
{
    (void)payload;
    world *w = dispatching_world;
    ((counter *)context)->calls++;
    if (w->status == (flux_status)-1) {
        arm(w->k, w->after);
        w->status = flux_enqueue(w->d, &w->extra, count_done, &done_calls);
        disarm();
    }
    return 0;
}

static void enqueue_during_setup(world *w)
{
    w->d = flux_dispatcher_create();
    REQUIRE(w->d != NULL);
    flux_token t;
    REQUIRE(flux_register(w->d, enqueue_while_dispatching_cb, &w->ctx[0], count_destroy, &t) == FLUX_OK);
    for (int i = 1; i < 8; i++)
        REQUIRE(flux_register(w->d, count_cb, &w->ctx[i], count_destroy, &t) == FLUX_OK);
    w->n = 8;
    dispatching_world = w;
    done_calls = 0;
    done_status = (flux_status)-1;
    done_context = NULL;
}

static flux_status enqueue_during_run(world *w)
{
    disarm();
    w->status = (flux_status)-1;
    REQUIRE(flux_dispatch(w->d, NULL) == FLUX_OK);
    return w->status;
}

static bool enqueue_check(world *w, char *why, size_t size)
{
    /* Queued: dispatched after the outer dispatch, before it returned, with
     * FLUX_OK. Refused: done ran at once with FLUX_ERR_NO_MEMORY. Either
     * way exactly once, with the call's context, and each callback ran once per dispatch made. */
    flux_status want = w->status == FLUX_OK ? FLUX_OK : FLUX_ERR_NO_MEMORY;
    int dispatches = w->status == FLUX_OK ? 2 : 1;
    if (done_calls != 1 || done_status != want) {
        snprintf(why, size, "done ran %d times, last with %s", done_calls, flux_status_name(done_status));
        return false;
    }
    if (done_context != &done_calls) {
        snprintf(why, size, "done got context %p, not its call's %p", done_context, (void *)&done_calls);
        return false;
    }
    for (int i = 0; i < w->n; i++) {
        if (w->ctx[i].calls != dispatches) {
            snprintf(why, size, "callback %d ran %d times for %d dispatches", i, w->ctx[i].calls, dispatches);
            return false;
        }
    }
    return dispatcher_usable(w, false, why, size);
}

/* A payload refused from inside a callback has its done run at once, inside
 * that callback's flux_enqueue(); like any done it must not be able to wait
 * (flux.h: flux_wait_for() from a done fails with FLUX_ERR_NOT_DISPATCHING)
 * -- a wait there would run a later callback out of turn. */
#if OOM_INTERPOSE
static flux_dispatcher *refusing_d;
static flux_token refusing_later;
static flux_status refused_enqueue, refused_done, wait_from_refused_done;
static trace refusing_log;

static void wait_from_done(void *context, void *payload, flux_status status)
{
    (void)context;
    (void)payload;
    disarm();
    refused_done = status;
    trace_push(&refusing_log, 9);
    wait_from_refused_done = flux_wait_for(refusing_d, &refusing_later, 1);
}

static int enqueue_refused_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    trace_push(&refusing_log, 1);
    arm(1, false);  /* the queue's first block */
    refused_enqueue = flux_enqueue(refusing_d, NULL, wait_from_done, NULL);
    disarm();
    trace_push(&refusing_log, -1);
    return 0;
}

static int later_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    trace_push(&refusing_log, 2);
    return 0;
}

#endif

static void test_a_refused_payloads_done_cannot_wait(void)
{
#if OOM_INTERPOSE
    refusing_d = flux_dispatcher_create();
    REQUIRE(refusing_d != NULL);
    flux_token t;
    REQUIRE(flux_register(refusing_d, enqueue_refused_cb, NULL, NULL, &t) == FLUX_OK);
    REQUIRE(flux_register(refusing_d, later_cb, NULL, NULL, &refusing_later) == FLUX_OK);
    memset(&refusing_log, 0, sizeof refusing_log);
    refused_enqueue = refused_done = wait_from_refused_done = (flux_status)-1;
    EXPECT_OK(flux_dispatch(refusing_d, NULL));
    is_int(refused_enqueue, FLUX_ERR_NO_MEMORY, "the enqueue from the callback was refused");
    is_int(refused_done, FLUX_ERR_NO_MEMORY, "its done ran at once with that status");
    is_int(wait_from_refused_done, FLUX_ERR_NOT_DISPATCHING, "flux_wait_for() from that done is refused");
    is_trace(&refusing_log, INTS(1, 9, -1, 2), "the later callback ran in its turn, not from the done");
    EXPECT_OK(flux_dispatcher_destroy(refusing_d));
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* An observed flux_wait_for() -- one token, as every link of a chain, or
 * several -- hands the wait_for hook its tokens without allocating: an
 * allocation there could only trap when memory runs out, since the wait has
 * no way to report FLUX_ERR_NO_MEMORY. */
#if OOM_INTERPOSE
static flux_dispatcher *observed_d;
static flux_token observed_first;
static size_t observed_count;
static long observed_allocations;
static flux_status observed_wait;
static int observed_reports;

static void count_wait_hook(void *context, flux_token waiter, const flux_token *tokens, size_t count)
{
    (void)context;
    (void)waiter;
    observed_reports += count == observed_count && tokens[0] == observed_first;
}

static int waits_observed_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    flux_token tokens[2] = {observed_first, observed_first};
    arm(LONG_MAX, false);  /* counts allocations, fails none */
    observed_wait = flux_wait_for(observed_d, tokens, observed_count);
    observed_allocations = alloc_count;
    disarm();
    return 0;
}

#endif

static void test_an_observed_wait_allocates_nothing(void)
{
#if OOM_INTERPOSE
    observed_d = flux_dispatcher_create();
    REQUIRE(observed_d != NULL);
    counter first = {0, 0};
    flux_token t;
    REQUIRE(flux_register(observed_d, count_cb, &first, NULL, &observed_first) == FLUX_OK);
    REQUIRE(flux_register(observed_d, waits_observed_cb, NULL, NULL, &t) == FLUX_OK);
    flux_observer hooks = {FLUX_OBSERVER_VERSION, NULL, NULL, NULL, NULL, count_wait_hook};
    REQUIRE(flux_dispatcher_set_observer(observed_d, &hooks, NULL, NULL) == FLUX_OK);
    for (observed_count = 1; observed_count <= 2; observed_count++) {
        observed_reports = 0;
        observed_wait = (flux_status)-1;
        EXPECT_OK(flux_dispatch(observed_d, NULL));
        is_int(observed_wait, FLUX_OK, "a wait for %zu token(s) under an observer", observed_count);
        is_int(observed_reports, 1, "the wait_for hook saw it");
        is_int(observed_allocations, 0, "and it allocated nothing");
    }
    EXPECT_OK(flux_dispatcher_destroy(observed_d));
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* A callback that fails because memory ran out: the dispatch reports
 * FLUX_ERR_CALLBACK_FAILED, and recording that error allocates nothing it
 * cannot do without (a Swift string of the message trapped). */
#if OOM_INTERPOSE
static bool fail_allocations_in_cb;

static int fails_out_of_memory_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    if (fail_allocations_in_cb)
        arm(1, true); /* every allocation from here on fails */
    return -7;
}

static flux_status oom_done_status;

static void oom_done(void *context, void *payload, flux_status status)
{
    (void)context;
    (void)payload;
    oom_done_status = status;
}
#endif

static void test_a_callback_failing_out_of_memory(void)
{
#if OOM_INTERPOSE
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t;
    REQUIRE(flux_register(d, fails_out_of_memory_cb, NULL, NULL, &t) == FLUX_OK);
    /* Once with memory: the types the error path uses are set up by the
     * Swift runtime on first use (allocations no code here can avoid). */
    fail_allocations_in_cb = false;
    is_int(flux_dispatch(d, NULL), FLUX_ERR_CALLBACK_FAILED, "a failing callback fails the dispatch");
    fail_allocations_in_cb = true;
    flux_status s = flux_dispatch(d, NULL);
    disarm();
    is_int(s, FLUX_ERR_CALLBACK_FAILED, "flux_dispatch reports the callback's failure");
    is_str(flux_last_error(), oom_message,
           "with no memory for the record, the message says so (flux.h, flux_last_error)");
    s = flux_enqueue(d, NULL, oom_done, NULL);
    disarm();
    is_int(s, FLUX_ERR_CALLBACK_FAILED, "so does flux_enqueue");
    is_int(oom_done_status, FLUX_ERR_CALLBACK_FAILED, "and its done gets that status");
    /* With memory, the message is as before. */
    fail_allocations_in_cb = false;
    s = flux_dispatch(d, NULL);
    is_int(s, FLUX_ERR_CALLBACK_FAILED, "with memory too");
    char want[128];
    snprintf(want, sizeof want, "flux_dispatch: callback for token %llu returned -7; the dispatch was aborted",
             (unsigned long long)t);
    is_str(flux_last_error(), want, "the message names the token and the value");
    is_int((int)flux_last_error_token(), (int)t, "and the token is recorded");
    EXPECT_OK(flux_dispatcher_destroy(d));
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* Errors whose messages name numbers (an unknown token, a bad count, a
 * store's listener) are reported with no memory at all: their messages are
 * made without allocating, and the record, which needs memory, reads the
 * out-of-memory message instead. Each is made once with memory first: the
 * Swift runtime sets up the types an error path uses on first use, with
 * allocations no code here can avoid. */
#if OOM_INTERPOSE
static int nothing_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

static int no_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)state;
    (void)payload;
    (void)next;
    return 0;
}

static void nothing_listener(void *context)
{
    (void)context;
}

static flux_status waited_status;
static int wait_for_unknown_cb(void *context, const void *payload)
{
    (void)payload;
    flux_token unknown = 999;
    arm(1, true);
    waited_status = flux_wait_for(*(flux_dispatcher **)context, &unknown, 1);
    disarm();
    return 0;
}

/* Runs call once with memory, then with every allocation failing; checks
 * both give status, and the second the out-of-memory message. */
#define BOTH_WAYS(call, status, what)                                                                  \
    do {                                                                                               \
        is_int((call), (status), what ", with memory");                                                \
        arm(1, true);                                                                                  \
        flux_status s_ = (call);                                                                       \
        disarm();                                                                                      \
        is_int(s_, (status), what ", with no memory");                                                 \
        is_str(flux_last_error(), oom_message, what ": the message says memory ran out");             \
    } while (0)
#endif

static void test_errors_naming_numbers_with_no_memory(void)
{
#if OOM_INTERPOSE
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t;
    REQUIRE(flux_register(d, nothing_cb, NULL, NULL, &t) == FLUX_OK);
    BOTH_WAYS(flux_unregister(d, 999), FLUX_ERR_UNKNOWN_TOKEN, "flux_unregister of a token never issued");
    BOTH_WAYS(flux_unregister(d, 0), FLUX_ERR_UNKNOWN_TOKEN, "flux_unregister of token 0");
    BOTH_WAYS(flux_wait_for(d, NULL, 3), FLUX_ERR_INVALID_ARGUMENT, "flux_wait_for of NULL tokens");
    BOTH_WAYS(flux_wait_for(d, &t, (size_t)-1), FLUX_ERR_INVALID_ARGUMENT, "flux_wait_for of a huge count");
    BOTH_WAYS(flux_register(NULL, nothing_cb, NULL, NULL, &t), FLUX_ERR_INVALID_ARGUMENT,
              "flux_register with no dispatcher");

    flux_store *s = NULL;
    REQUIRE(flux_store_create(d, NULL, no_reduce, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
    flux_listener_id id;
    REQUIRE(flux_store_add_listener(s, nothing_listener, NULL, NULL, &id) == FLUX_OK);
    BOTH_WAYS(flux_store_remove_listener(s, 42), FLUX_ERR_UNKNOWN_TOKEN, "flux_store_remove_listener of an id never issued");
    BOTH_WAYS(flux_unregister(d, flux_store_token(s)), FLUX_ERR_INVALID_ARGUMENT, "flux_unregister of a store's token");
    BOTH_WAYS(flux_dispatcher_destroy(d), FLUX_ERR_INVALID_ARGUMENT, "flux_dispatcher_destroy with a store left");
    flux_store *twice[] = {s, NULL};
    flux_store_group *g = NULL;
    BOTH_WAYS(flux_store_group_create(twice, 2, nothing_listener, NULL, NULL, &g), FLUX_ERR_INVALID_ARGUMENT,
              "flux_store_group_create with a NULL store");
    EXPECT_OK(flux_store_destroy(s));
    /* Not a malformed signature, so not one of flux.h's three known gaps. */
    BOTH_WAYS(flux_call((void *)nothing_cb, "i(pp)", NULL, NULL), FLUX_ERR_INVALID_ARGUMENT,
              "flux_call with NULL args for two arguments");

    /* From inside a dispatch: the wait for an unknown token. */
    flux_dispatcher *w = flux_dispatcher_create();
    REQUIRE(w != NULL);
    flux_token u;
    REQUIRE(flux_register(w, wait_for_unknown_cb, &w, NULL, &u) == FLUX_OK);
    EXPECT_OK(flux_dispatch(w, NULL));
    is_int(waited_status, FLUX_ERR_UNKNOWN_TOKEN, "flux_wait_for of an unknown token, with no memory");
    is_str(flux_last_error(), oom_message, "flux_wait_for of an unknown token: the message says memory ran out");
    EXPECT_OK(flux_dispatcher_destroy(w));
    EXPECT_OK(flux_dispatcher_destroy(d));
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* Two threads, each inside a callback of its own dispatcher, dispatch each
 * other's dispatcher (flux.h, "Threading"): the first to wait is noted, so
 * that the second's wait, which would close the cycle, is refused. When
 * there is no memory to note the first wait, sleeping unnoted would let the
 * second sleep too, and both would wait for good: the first is refused
 * with FLUX_ERR_NO_MEMORY instead, having run nothing, and both go on. */
#if OOM_INTERPOSE
typedef struct crossing {
    flux_dispatcher *own, *other;
    bool oom;            /* make every allocation of the inner dispatch fail */
    flag entered, go;
    flux_status outer, inner;
} crossing;

static int crossing_cb(void *context, const void *payload)
{
    crossing *c = context;
    if (payload != c)
        return 0; /* the other thread's inner dispatch */
    flag_set(&c->entered);
    if (!flag_wait(&c->go, prompt_seconds()))
        return 1;
    if (c->oom)
        arm(1, true);
    c->inner = flux_dispatch(c->other, NULL);
    if (c->oom)
        disarm();
    return 0;
}

static void *crossing_main(void *arg)
{
    crossing *c = arg;
    c->outer = flux_dispatch(c->own, c);
    return NULL;
}

/* c2 waits first (with memory failing when oom), then c1 closes the cycle. */
static bool run_crossing(crossing *c1, crossing *c2, bool oom)
{
    *c1 = (crossing){.outer = (flux_status)-1, .inner = (flux_status)-1};
    *c2 = *c1;
    c1->own = c2->other = flux_dispatcher_create();
    c2->own = c1->other = flux_dispatcher_create();
    REQUIRE(c1->own != NULL && c2->own != NULL);
    c2->oom = oom;
    flag_init(&c1->entered), flag_init(&c1->go), flag_init(&c2->entered), flag_init(&c2->go);
    flux_token t;
    REQUIRE(flux_register(c1->own, crossing_cb, c1, NULL, &t) == FLUX_OK);
    REQUIRE(flux_register(c2->own, crossing_cb, c2, NULL, &t) == FLUX_OK);
    pthread_t t1, t2;
    REQUIRE(pthread_create(&t1, NULL, crossing_main, c1) == 0);
    REQUIRE(pthread_create(&t2, NULL, crossing_main, c2) == 0);
    REQUIRE(flag_wait(&c1->entered, prompt_seconds()) && flag_wait(&c2->entered, prompt_seconds()));
    flag_set(&c2->go);
    sleep_ms(200); /* c2's inner dispatch now waits (or was refused) */
    if (oom)
        disarm(); /* in case c2's call still has not returned */
    flag_set(&c1->go);
    /* Both outer dispatches end within a few seconds, or they never will. */
    bool finished = false;
    for (int i = 0; i < 300 && !finished; i++) {
        sleep_ms(10);
        finished = __atomic_load_n(&c1->outer, __ATOMIC_SEQ_CST) != (flux_status)-1
                   && __atomic_load_n(&c2->outer, __ATOMIC_SEQ_CST) != (flux_status)-1;
    }
    if (!finished)
        return false; /* they wait for good: leave them be */
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    EXPECT_OK(flux_dispatcher_destroy(c1->own));
    EXPECT_OK(flux_dispatcher_destroy(c2->own));
    return true;
}
#endif

static void test_a_wait_that_cannot_be_noted_is_refused(void)
{
#if OOM_INTERPOSE
    static crossing c1, c2;
    /* With memory: as test-threads shows, the wait closing the cycle is refused. */
    REQUIRE(run_crossing(&c1, &c2, false));
    is_int(c1.inner, FLUX_ERR_ALREADY_DISPATCHING, "with memory, the wait that would close the cycle is refused");
    is_int(c2.inner, FLUX_OK, "and the first one then runs");
    bool finished = run_crossing(&c1, &c2, true);
    ok(finished, "with no memory to note the first wait, both threads still finish");
    if (!finished)
        return;
    is_int(c2.inner, FLUX_ERR_NO_MEMORY, "the wait that could not be noted is refused with FLUX_ERR_NO_MEMORY");
    is_int(c1.inner, FLUX_OK, "the other thread's inner dispatch then runs");
    is_int(c1.outer, FLUX_OK, "both outer dispatches return OK");
    is_int(c2.outer, FLUX_OK, "both outer dispatches return OK (2)");
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* ---- flux_dispatcher_set_observer, idle and during a dispatch ----------- */

static void noop_begin(void *context, const void *payload)
{
    (void)payload;
    ((counter *)context)->calls++;
}

static const flux_observer counting_hooks = {FLUX_OBSERVER_VERSION, noop_begin, NULL, NULL, NULL, NULL};

static void observer_setup(world *w) { setup_dispatcher(w, 8); }

static flux_status observer_run(world *w)
{
    return flux_dispatcher_set_observer(w->d, &counting_hooks, &w->extra, count_destroy);
}

/* The first callback sets the observer, armed, while the dispatch runs. */
static int observe_while_dispatching_cb(void *context, const void *payload)
{
    (void)payload;
    world *w = dispatching_world;
    ((counter *)context)->calls++;
    if (w->status == (flux_status)-1) {
        arm(w->k, w->after);
        w->status = flux_dispatcher_set_observer(w->d, &counting_hooks, &w->extra, count_destroy);
        disarm();
    }
    return 0;
}

static void observer_during_setup(world *w)
{
    w->d = flux_dispatcher_create();
    REQUIRE(w->d != NULL);
    flux_token t;
    REQUIRE(flux_register(w->d, observe_while_dispatching_cb, &w->ctx[0], count_destroy, &t) == FLUX_OK);
    for (int i = 1; i < 8; i++)
        REQUIRE(flux_register(w->d, count_cb, &w->ctx[i], count_destroy, &t) == FLUX_OK);
    w->n = 8;
    dispatching_world = w;
}

static flux_status observer_during_run(world *w)
{
    disarm();
    w->status = (flux_status)-1;
    REQUIRE(flux_dispatch(w->d, NULL) == FLUX_OK);
    return w->status;
}

/* Set: the next dispatch reports to it (one dispatch_begin). Refused: its
 * context was destroyed at once and nothing reports. */
static bool observer_check(world *w, char *why, size_t size)
{
    bool set = w->status == FLUX_OK;
    if (w->extra.destroyed != (set ? 0 : 1) || w->extra.calls != 0) {
        snprintf(why, size, "observer context: destroyed %d times, %d events before any dispatch",
                 w->extra.destroyed, w->extra.calls);
        return false;
    }
    /* dispatcher_usable dispatches once; extra.calls then counts its begin. */
    if (!dispatcher_usable(w, set, why, size))
        return false;
    return true;
}

static void observer_teardown(world *w)
{
    teardown_dispatcher(w);
    REQUIRE(w->extra.destroyed == 1);
}

/* ---- an observer change refused during a dispatch ------------------------ */

/* flux.h: set during a dispatch with no memory to note the change, the call
 * fails with FLUX_ERR_NO_MEMORY: "the running call keeps its observer, and
 * the one set before, if any, stays pending" -- and the refused context is
 * destroyed at once. Four changes fill the room the first one reserves; the
 * fifth must grow it, and that allocation is made to fail. */
enum { PENDING_SETS = 5 };
#if OOM_INTERPOSE
static counter pending_ctx[PENDING_SETS], running_ctx;
static flux_status pending_status[PENDING_SETS];
static int pending_destroyed_inside;

static int sets_observers_cb(void *context, const void *payload)
{
    flux_dispatcher *d = context;
    if (payload != NULL)
        return 0;
    for (int i = 0; i < PENDING_SETS; i++) {
        if (i == PENDING_SETS - 1)
            arm(1, true);
        pending_status[i] = flux_dispatcher_set_observer(d, &counting_hooks, &pending_ctx[i], count_destroy);
        disarm();
    }
    pending_destroyed_inside = 0;
    for (int i = 0; i < PENDING_SETS - 1; i++)
        pending_destroyed_inside += pending_ctx[i].destroyed;
    return 0;
}
#endif

static void test_a_refused_observer_change_keeps_the_pending_one(void)
{
#if OOM_INTERPOSE
    memset(pending_ctx, 0, sizeof pending_ctx);
    memset(&running_ctx, 0, sizeof running_ctx);
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t;
    REQUIRE(flux_register(d, sets_observers_cb, d, NULL, &t) == FLUX_OK);
    REQUIRE(flux_dispatcher_set_observer(d, &counting_hooks, &running_ctx, count_destroy) == FLUX_OK);
    EXPECT_OK(flux_dispatch(d, NULL));
    for (int i = 0; i < PENDING_SETS - 1; i++)
        EXPECT_OK(pending_status[i]);
    is_int(pending_status[PENDING_SETS - 1], FLUX_ERR_NO_MEMORY, "the change that needed memory was refused");
    is_int(pending_ctx[PENDING_SETS - 1].destroyed, 1, "its context was destroyed at once");
    is_int(pending_destroyed_inside, 0, "no replaced context was destroyed inside the dispatch");
    is_int(running_ctx.calls, 1, "the running call kept its observer");
    is_int(running_ctx.destroyed, 1, "which was destroyed once the call returned");
    for (int i = 0; i < PENDING_SETS - 2; i++)
        is_int(pending_ctx[i].destroyed, 1, "replaced pending observer %d destroyed once", i + 1);
    is_int(pending_ctx[PENDING_SETS - 2].destroyed, 0, "the one set before the refusal is live");
    EXPECT_OK(flux_dispatch(d, &t));
    is_int(pending_ctx[PENDING_SETS - 2].calls, 1, "and the next dispatch reports to it");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(pending_ctx[PENDING_SETS - 2].destroyed, 1, "destroyed once, with the dispatcher");
    int total = running_ctx.destroyed;
    for (int i = 0; i < PENDING_SETS; i++)
        total += pending_ctx[i].destroyed;
    is_int(total, PENDING_SETS + 1, "every context destroyed exactly once");
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* ---- the table ----------------------------------------------------------- */

/* (Unused when a sanitizer owns the allocator and the test skips.) */
__attribute__((unused)) static const scenario scenarios[] = {
    {"flux_dispatcher_create", create_setup, create_run, create_check, teardown_dispatcher, true},
    {"flux_register (idle, growing the table)", register_setup, register_run, register_check, register_teardown,
     true},
    {"flux_register (during a dispatch)", register_during_setup, register_during_run, register_check,
     register_teardown, true},
    {"flux_unregister (during a dispatch)", unregister_during_setup, unregister_during_run, unregister_check,
     unregister_teardown, true},
    {"flux_dispatcher_destroy", register_setup, destroy_run, destroy_check, teardown_dispatcher, false},
    {"flux_dispatcher_close", close_setup, close_run, close_check, teardown_dispatcher, false},
    {"flux_unregister (idle)", unregister_idle_setup, unregister_idle_run, unregister_idle_check,
     teardown_dispatcher, false},
    {"flux_closure_create", closure_setup, closure_run, closure_check, closure_teardown, true},
    {"flux_enqueue (during a dispatch, growing the queue)", enqueue_during_setup, enqueue_during_run, enqueue_check,
     teardown_dispatcher, true},
    {"flux_dispatcher_set_observer (idle)", observer_setup, observer_run, observer_check, observer_teardown, false},
    {"flux_dispatcher_set_observer (during a dispatch)", observer_during_setup, observer_during_run, observer_check,
     observer_teardown, true},
};

/* Runs one scenario with the k-th allocation failing (k = 0: none). */
__attribute__((unused)) static bool run_once(const scenario *s, long k, bool after, char *why, size_t size, long *reached)
{
    world w;
    memset(&w, 0, sizeof w);
    w.k = k;
    w.after = after;
    /* Normalize this thread's error buffer: one block, there from the start. */
    (void)flux_unregister(NULL, 0);
    long live_before = live;
    s->setup(&w);
    arm(k, after);
    w.status = s->run(&w);
    disarm();
    *reached = failures;
    bool good = true;
    if (w.status != FLUX_OK && w.status != FLUX_ERR_NO_MEMORY) {
        snprintf(why, size, "status %s: %s", flux_status_name(w.status), flux_last_error());
        good = false;
    }
    if (good && w.status == FLUX_ERR_NO_MEMORY && s->run != create_run &&
        strstr(flux_last_error(), "out of memory") == NULL) {
        snprintf(why, size, "message \"%s\"", flux_last_error());
        good = false;
    }
    if (good)
        good = s->check(&w, why, size);
    s->teardown(&w);
    (void)flux_unregister(NULL, 0);
    if (good && live != live_before) {
        snprintf(why, size, "%ld blocks leaked", live - live_before);
        good = false;
    }
    return good;
}

static void test_every_allocation_fails_in_turn(void)
{
#if OOM_INTERPOSE
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        const scenario *s = &scenarios[i];
        char why[256] = "";
        long reached;
        /* Unarmed, twice: the first run makes the runtime's lazy state
         * (type metadata and the like, kept for good), so only the second
         * is held to the leak check. */
        (void)run_once(s, 0, false, why, sizeof why, &reached);
        ok(run_once(s, 0, false, why, sizeof why, &reached), "%s: works with memory to spare %s", s->name, why);
        for (int after = 0; after < 2; after++) {
            long k = 1, bad = 0, refused = 0;
            char first_bad[300] = "";
            for (;; k++) {
                REQUIRE(k < 10000);
                /* Each failure first once unchecked: an error path the
                 * unarmed runs never took makes the runtime's lazy state
                 * (generic metadata, kept for good) the first time; a leak
                 * loses memory every time, so the second run still shows it. */
                (void)run_once(s, k, after, why, sizeof why, &reached);
                if (!run_once(s, k, after, why, sizeof why, &reached)) {
                    if (!bad++)
                        snprintf(first_bad, sizeof first_bad, "k=%ld: %s", k, why);
                }
                if (reached == 0)
                    break;  /* the operation made fewer than k allocations */
                refused++;
            }
            if (s->allocates)
                ok(refused > 0, "%s: %ld allocations, each made to fail in turn%s", s->name, refused,
                   after ? " (and every one after it)" : "");
            else
                is_int(refused, 0, "%s: allocates nothing, so cannot run out of memory", s->name);
            is_int(bad, 0, "%s%s: NO_MEMORY, contexts destroyed once, no leak, still usable %s", s->name,
                   after ? ", failing from k on" : "", first_bad);
        }
    }
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* flux.h promises these allocate nothing -- a trampoline's call ("nothing
 * is allocated per call"), flux_call() ("Nothing is allocated"), an idle
 * flux_store_group_release() ("this call allocates nothing") -- so none can
 * run out of memory, which neither a trampoline nor flux_call() could
 * report. Each runs once first: the Swift runtime sets up some types
 * lazily, on first use. */
#if OOM_INTERPOSE
static void no_allocation_handler(void *userdata, void *ret, void **args)
{
    ((counter *)userdata)->calls++;
    *(int32_t *)ret = *(const int32_t *)args[0] + 1;
}

static int32_t add_one(int32_t x) { return x + 1; }

static void group_noop(void *context) { (void)context; }

static int store_keep(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)state;
    (void)payload;
    (void)next;
    return 0;
}
#endif

static void test_calls_and_an_idle_group_release_allocate_nothing(void)
{
#if OOM_INTERPOSE
    counter handled = {0, 0};
    flux_closure *c = NULL;
    REQUIRE(flux_closure_create("i(i)", no_allocation_handler, &handled, count_destroy, &c) == FLUX_OK);
    int32_t (*fn)(int32_t) = (int32_t (*)(int32_t))(uintptr_t)flux_closure_code(c);
    int32_t x = 41, r = 0;
    void *args[] = {&x};
    for (int round = 0; round < 2; round++) {
        arm(LONG_MAX, false); /* counts allocations, fails none */
        int32_t direct = fn(1);
        flux_status through_trampoline = flux_call((void *)(uintptr_t)fn, "i(i)", &r, args);
        disarm();
        long trampoline_allocations = alloc_count;
        arm(LONG_MAX, false);
        flux_status plain = flux_call((void *)(uintptr_t)add_one, "i(i)", &r, args);
        disarm();
        if (round == 0)
            continue;
        is_int(direct, 2, "a trampoline's call returned its handler's value");
        EXPECT_OK(through_trampoline);
        is_int(trampoline_allocations, 0, "calling a trampoline, directly and by flux_call, allocated nothing");
        EXPECT_OK(plain);
        is_int(r, 42, "flux_call of a C function returned its value");
        is_int((int)alloc_count, 0, "and allocated nothing");
    }
    is_int(handled.calls, 4, "the handler ran for every call");
    EXPECT_OK(flux_closure_destroy(c));
    is_int(handled.destroyed, 1, "destroy(userdata) ran once");

    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_store *s = NULL;
    REQUIRE(flux_store_create(d, NULL, store_keep, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
    for (int round = 0; round < 2; round++) {
        counter group = {0, 0};
        flux_store_group *g = NULL;
        REQUIRE(flux_store_group_create(&s, 1, group_noop, &group, count_destroy, &g) == FLUX_OK);
        arm(LONG_MAX, false);
        flux_status released = flux_store_group_release(g);
        disarm();
        if (round == 0)
            continue;
        EXPECT_OK(released);
        is_int((int)alloc_count, 0, "an idle flux_store_group_release allocated nothing");
        is_int(group.destroyed, 1, "and destroyed the group's context");
    }
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(d));
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* flux_store_destroy() "allocates nothing, so never fails for memory": it
 * succeeds with no memory at all, releasing everything. */
static void test_an_idle_store_destroy_needs_no_memory(void)
{
#if OOM_INTERPOSE
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    for (int round = 0; round < 2; round++) {
        counter store = {0, 0}, listener = {0, 0};
        flux_store *s = NULL;
        flux_listener_id id;
        REQUIRE(flux_store_create(d, NULL, store_keep, NULL, NULL, &store, count_destroy, &s) == FLUX_OK);
        REQUIRE(flux_store_add_listener(s, group_noop, &listener, count_destroy, &id) == FLUX_OK);
        arm(1, true); /* every allocation fails */
        flux_status destroyed = flux_store_destroy(s);
        disarm();
        if (round == 0) {
            REQUIRE(destroyed == FLUX_OK);
            continue;
        }
        EXPECT_OK(destroyed);
        is_int(listener.destroyed + store.destroyed, 2, "the listener's and the store's contexts were destroyed");
    }
    EXPECT_OK(flux_dispatcher_destroy(d));
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

/* flux_closure_destroy() "frees its code and memory, then runs
 * destroy(userdata)": by the time destroy runs, the closure's blocks are
 * back (a destroy that frees the arena userdata lives in, say, may rely on
 * that). */
#if OOM_INTERPOSE
static long live_in_destroy;

static void never_runs(void *userdata, void *ret, void **args)
{
    (void)userdata;
    (void)ret;
    (void)args;
}

static void note_live(void *userdata)
{
    ((counter *)userdata)->destroyed++;
    live_in_destroy = live;
}
#endif

static void test_closure_destroy_frees_before_destroy_runs(void)
{
#if OOM_INTERPOSE
    for (int round = 0; round < 2; round++) {
        counter cnt = {0, 0};
        long before = live;
        flux_closure *c = NULL;
        REQUIRE(flux_closure_create("v()", never_runs, &cnt, note_live, &c) == FLUX_OK);
        REQUIRE(live > before); /* the closure holds at least one block */
        EXPECT_OK(flux_closure_destroy(c));
        if (round == 0)
            continue;
        is_int(cnt.destroyed, 1, "destroy(userdata) ran once");
        is_int((int)(live_in_destroy - before), 0, "every block of the closure was freed before it ran");
    }
#else
    ok(1, "skipped: a sanitizer replaces the allocator");
#endif
}

int main(void)
{
    tap_init();
    if (tap_under_valgrind()) {
        /* valgrind replaces malloc in the executable too: nothing to inject. */
        ok(1, "skipped under valgrind");
        return tap_done();
    }
    RUN(test_every_allocation_fails_in_turn);
    RUN(test_a_refused_payloads_done_cannot_wait);
    RUN(test_a_refused_observer_change_keeps_the_pending_one);
    RUN(test_an_observed_wait_allocates_nothing);
    RUN(test_a_wait_that_cannot_be_noted_is_refused);
    RUN(test_a_callback_failing_out_of_memory);
    RUN(test_errors_naming_numbers_with_no_memory);
    RUN(test_calls_and_an_idle_group_release_allocate_nothing);
    RUN(test_an_idle_store_destroy_needs_no_memory);
    RUN(test_closure_destroy_frees_before_destroy_runs);
    return tap_done();
}
