/*
 * test-stores-nomem.c -- the stores under allocation failure: every create
 * and add reports FLUX_ERR_NO_MEMORY (never traps), releases what was handed
 * over exactly once, and leaves no trace (ids, group counts, the
 * dispatcher's count of stores).
 *
 * This program defines malloc(), which the dynamic linker then uses for
 * libflux too, and makes the n-th call after arming fail. Under valgrind
 * or a sanitizer, which own malloc, it skips.
 */
#include "helpers.h"

extern void *__libc_malloc(size_t size);
extern void *__libc_realloc(void *p, size_t size);

static int fail_countdown; /* > 0: the fail_countdown-th malloc from now fails */

/* Set: the thread whose malloc fails next then runs after_failure() at its
 * next realloc -- where the library records that failure as the thread's
 * last error, its own locks released, before the call returns. */
static void (*after_failure)(void);

#if TEST_CAN_INTERPOSE_MALLOC
static pthread_t failed_thread;
static atomic_int after_failure_pending;

void *malloc(size_t size)
{
    if (fail_countdown > 0 && --fail_countdown == 0) {
        if (after_failure != NULL) {
            failed_thread = pthread_self();
            atomic_store(&after_failure_pending, 1);
        }
        return NULL;
    }
    return __libc_malloc(size);
}

void *realloc(void *p, size_t size)
{
    if (atomic_load(&after_failure_pending) && pthread_equal(pthread_self(), failed_thread)) {
        atomic_store(&after_failure_pending, 0);
        void (*hook)(void) = after_failure;
        after_failure = NULL;
        hook();
    }
    return __libc_realloc(p, size);
}
#endif

static trace events;
enum { EV_RELEASE = 100, EV_DESTROY = 200 };

static void release_state(void *context, void *state)
{
    (void)context;
    trace_push(&events, EV_RELEASE + *(int *)state);
}

static void destroy_context(void *context)
{
    trace_push(&events, EV_DESTROY + *(int *)context);
}

static int reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)state;
    (void)payload;
    (void)next;
    return 0;
}

static void listener(void *context)
{
    (void)context;
}

static int noop(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

static int state_value = 5, context_value = 1;

/* flux_store_create with the n-th allocation failing. */
static void store_create_fails(int n, const char *what)
{
    events.n = 0;
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_store *s = (flux_store *)&s;
    fail_countdown = n;
    EXPECT_STATUS(flux_store_create(d, &state_value, reduce, NULL, release_state, &context_value, destroy_context, &s),
                  FLUX_ERR_NO_MEMORY);
    fail_countdown = 0;
    diag("%s", what);
    is_ptr(s, NULL, "*out is NULL");
    is_trace(&events, INTS(EV_RELEASE + 5, EV_DESTROY + 1), "state released, then context destroyed, once each");
    EXPECT_OK(flux_dispatcher_destroy(d)); /* the failed store does not count */
}

static void store_create_out_of_memory(void)
{
    store_create_fails(1, "the store's block");
    store_create_fails(2, "the store's listener core");
}

static void store_create_register_out_of_memory(void)
{
    /* Fill the dispatcher's table (8 slots) so the store's registration must
     * grow it: the third allocation of flux_store_create. */
    events.n = 0;
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t;
    for (int i = 0; i < 8; i++)
        REQUIRE(flux_register(d, noop, NULL, NULL, &t) == FLUX_OK);
    flux_store *s = (flux_store *)&s;
    fail_countdown = 3;
    EXPECT_STATUS(flux_store_create(d, &state_value, reduce, NULL, release_state, &context_value, destroy_context, &s),
                  FLUX_ERR_NO_MEMORY);
    fail_countdown = 0;
    is_ptr(s, NULL, "*out is NULL");
    is_trace(&events, INTS(EV_RELEASE + 5, EV_DESTROY + 1), "state released, then context destroyed, once each");
    EXPECT_OK(flux_store_create(d, &state_value, reduce, NULL, NULL, NULL, NULL, &s));
    EXPECT_OK(flux_dispatch(d, NULL));
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void add_listener_out_of_memory(void)
{
    events.n = 0;
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_store *s;
    REQUIRE(flux_store_create(d, NULL, reduce, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
    flux_token id = 99;
    int listener_context = 2;
    fail_countdown = 1;
    EXPECT_STATUS(flux_store_add_listener(s, listener, &listener_context, destroy_context, &id), FLUX_ERR_NO_MEMORY);
    fail_countdown = 0;
    is_uint(id, 0, "*out is 0");
    is_trace(&events, INTS(EV_DESTROY + 2), "the listener's context was destroyed once");
    EXPECT_OK(flux_store_add_listener(s, listener, NULL, NULL, &id));
    is_uint(id, 1, "the failed add used no id");
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void group_create_out_of_memory(void)
{
    for (int n = 1; n <= 2; n++) {
        events.n = 0;
        flux_dispatcher *d = flux_dispatcher_create();
        REQUIRE(d != NULL);
        flux_store *s;
        REQUIRE(flux_store_create(d, NULL, reduce, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
        flux_token t;
        if (n == 2) /* the group's registration must grow the table */
            for (int i = 0; i < 7; i++)
                REQUIRE(flux_register(d, noop, NULL, NULL, &t) == FLUX_OK);
        int group_context = 3;
        flux_store_group *g = (flux_store_group *)&g;
        fail_countdown = n;
        EXPECT_STATUS(flux_store_group_create(&s, 1, listener, &group_context, destroy_context, &g), FLUX_ERR_NO_MEMORY);
        fail_countdown = 0;
        diag("%s", n == 1 ? "the group's block" : "the group's registration");
        is_ptr(g, NULL, "*out is NULL");
        is_trace(&events, INTS(EV_DESTROY + 3), "the group's context was destroyed once");
        EXPECT_OK(flux_store_destroy(s)); /* the store does not count as grouped */
        EXPECT_OK(flux_dispatcher_destroy(d));
    }
}

/* flux_store_group_release from a listener, during a dispatch, with the n-th
 * allocation failing: noting the removal needs memory then, as
 * flux_unregister's does. The release is refused and changes nothing: the
 * group still runs and still holds its store; releasing it later works. */
static flux_store_group *release_me;
static int release_failing_at, release_status = -1, group_calls;

static void count_group_call(void *context)
{
    (void)context;
    group_calls++;
}

static void release_from_listener(void *context)
{
    (void)context;
    if (release_me == NULL)
        return;
    fail_countdown = release_failing_at;
    release_status = flux_store_group_release(release_me);
    fail_countdown = 0;
}

static int changing_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    (void)payload;
    *next = (char *)state + 1;
    return 0;
}

static void group_release_out_of_memory_during_a_dispatch(void)
{
    for (int n = 1; n <= 2; n++) {
        events.n = 0;
        flux_dispatcher *d = flux_dispatcher_create();
        REQUIRE(d != NULL);
        flux_store *s;
        REQUIRE(flux_store_create(d, NULL, changing_reduce, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
        flux_listener_id id;
        REQUIRE(flux_store_add_listener(s, release_from_listener, NULL, NULL, &id) == FLUX_OK);
        int group_context = 4;
        flux_store_group *g;
        REQUIRE(flux_store_group_create(&s, 1, count_group_call, &group_context, destroy_context, &g) == FLUX_OK);
        group_calls = 0;
        release_me = g;
        release_failing_at = n;
        EXPECT_OK(flux_dispatch(d, NULL));
        release_me = NULL;
        diag("allocation %d fails", n);
        is_int(release_status, FLUX_ERR_NO_MEMORY, "the release reports FLUX_ERR_NO_MEMORY");
        is_str(flux_status_name((flux_status)release_status), "FLUX_ERR_NO_MEMORY", "by name");
        is_int(group_calls, 1, "the group still ran in that dispatch");
        is_int((int)events.n, 0, "nothing was destroyed");
        EXPECT_STATUS(flux_store_destroy(s), FLUX_ERR_INVALID_ARGUMENT); /* still grouped */
        EXPECT_OK(flux_dispatch(d, NULL));
        is_int(group_calls, 2, "the group is still registered");
        EXPECT_OK(flux_store_group_release(g));
        is_trace(&events, INTS(EV_DESTROY + 4), "a later release destroys the context once");
        EXPECT_OK(flux_store_destroy(s));
        EXPECT_OK(flux_dispatcher_destroy(d));
    }
}

/* flux_store_group_release on one thread, out of memory, while another
 * thread's dispatch ends and that thread destroys the group's store right
 * after: the store must be refused (the group is still live), at every
 * moment of the failing release -- here, between its failure and its return.
 * Were the stores let go of before the release is certain, the destroy would
 * free the store in that moment, and the group would count in it after. */
typedef struct racing_destroy {
    flux_dispatcher *d;
    flux_store *s;
    flag in_dispatch, finish;
    pthread_t thread;
    int joined;
    flux_status destroy_status;
} racing_destroy;

static racing_destroy racing;

static int hold_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    flag_set(&racing.in_dispatch);
    flag_wait(&racing.finish, 10);
    return 0;
}

static void *dispatch_then_destroy(void *arg)
{
    (void)arg;
    REQUIRE(flux_dispatch(racing.d, NULL) == FLUX_OK);
    racing.destroy_status = flux_store_destroy(racing.s);
    return NULL;
}

/* In the failing release, once it has failed: the dispatch ends and the
 * store's destroy runs, before the release returns. */
static void end_dispatch_and_destroy(void)
{
    flag_set(&racing.finish);
    pthread_join(racing.thread, NULL);
    racing.joined = 1;
}

static void group_release_out_of_memory_while_a_store_is_destroyed(void)
{
    events.n = 0;
    memset(&racing, 0, sizeof racing);
    racing.destroy_status = -1;
    flag_init(&racing.in_dispatch);
    flag_init(&racing.finish);
    racing.d = flux_dispatcher_create();
    REQUIRE(racing.d != NULL);
    flux_token t;
    REQUIRE(flux_register(racing.d, hold_cb, NULL, NULL, &t) == FLUX_OK);
    REQUIRE(flux_store_create(racing.d, NULL, changing_reduce, NULL, NULL, NULL, NULL, &racing.s) == FLUX_OK);
    int group_context = 6;
    flux_store_group *g;
    REQUIRE(flux_store_group_create(&racing.s, 1, count_group_call, &group_context, destroy_context, &g) == FLUX_OK);
    group_calls = 0;
    REQUIRE(pthread_create(&racing.thread, NULL, dispatch_then_destroy, NULL) == 0);
    REQUIRE(flag_wait(&racing.in_dispatch, 10));
    after_failure = end_dispatch_and_destroy;
    fail_countdown = 1; /* noting the removal during the dispatch */
    EXPECT_STATUS(flux_store_group_release(g), FLUX_ERR_NO_MEMORY);
    fail_countdown = 0;
    after_failure = NULL;
    if (!racing.joined) {
        diag("the release recorded its failure without realloc: the destroy ran after it");
        end_dispatch_and_destroy();
    }
    is_int(racing.destroy_status, FLUX_ERR_INVALID_ARGUMENT,
           "the store's destroy is refused: its group is still live (0: the store was freed under it)");
    if (racing.destroy_status == FLUX_OK)
        return; /* the group holds a freed store: leave it, and the dispatcher */
    is_int((int)events.n, 0, "nothing was destroyed");
    EXPECT_OK(flux_dispatch(racing.d, NULL));
    is_int(group_calls, 2, "the group still runs");
    EXPECT_STATUS(flux_store_destroy(racing.s), FLUX_ERR_INVALID_ARGUMENT); /* still grouped */
    EXPECT_OK(flux_store_group_release(g));
    is_trace(&events, INTS(EV_DESTROY + 6), "a later release destroys the context once");
    EXPECT_OK(flux_store_destroy(racing.s));
    EXPECT_OK(flux_dispatcher_destroy(racing.d));
    flag_fini(&racing.in_dispatch);
    flag_fini(&racing.finish);
}

/* Runs every path once first: the Swift runtime allocates some metadata
 * lazily, on first use, which would shift the count of allocations. */
static void warm_up(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t;
    for (int i = 0; i < 8; i++)
        REQUIRE(flux_register(d, noop, NULL, NULL, &t) == FLUX_OK);
    flux_store *s;
    REQUIRE(flux_store_create(d, NULL, reduce, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
    REQUIRE(flux_store_add_listener(s, listener, NULL, NULL, &t) == FLUX_OK);
    flux_store_group *g;
    REQUIRE(flux_store_group_create(&s, 1, listener, NULL, NULL, &g) == FLUX_OK);
    REQUIRE(flux_dispatch(d, NULL) == FLUX_OK);
    REQUIRE(flux_store_group_release(g) == FLUX_OK);
    REQUIRE(flux_store_destroy(s) == FLUX_OK);
    REQUIRE(flux_dispatcher_destroy(d) == FLUX_OK);
}

int main(void)
{
    tap_init();
    if (tap_under_valgrind() || !TEST_CAN_INTERPOSE_MALLOC) {
        printf("ok 1 - allocation failures # SKIP valgrind or a sanitizer owns malloc\n1..1\n");
        return 0;
    }
    warm_up();
    RUN(store_create_out_of_memory);
    RUN(store_create_register_out_of_memory);
    RUN(add_listener_out_of_memory);
    RUN(group_create_out_of_memory);
    RUN(group_release_out_of_memory_during_a_dispatch);
    RUN(group_release_out_of_memory_while_a_store_is_destroyed);
    return tap_done();
}
