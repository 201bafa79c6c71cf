/*
 * test-error-values.c -- errors as data: flux_last_error_token() and
 * flux_last_error_cycle() for every status that carries a token or a cycle,
 * 0 for the others, the cycle's capacity rules, and their lifetime (per
 * thread, unchanged by success and by reading).
 */
#include "helpers.h"

#include <inttypes.h>

static const char payload[] = "payload";

static int ok_cb(void *context, const void *p)
{
    (void)context;
    (void)p;
    return 0;
}

static int fail_cb(void *context, const void *p)
{
    (void)context;
    (void)p;
    return 7;
}

/* ---- FLUX_ERR_CALLBACK_FAILED -------------------------------------------- */

static flux_dispatcher *wd;
static flux_token waited;
static flux_status wait_status;
static flux_token token_seen_by_waiter;

static int waits_for_failing(void *context, const void *p)
{
    (void)context;
    (void)p;
    wait_status = flux_wait_for(wd, &waited, 1);
    token_seen_by_waiter = flux_last_error_token();
    return 0;
}

static void test_callback_failed_names_the_failing_callback(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token a, failing;
    EXPECT_OK(flux_register(d, ok_cb, NULL, NULL, &a));
    EXPECT_OK(flux_register(d, fail_cb, NULL, NULL, &failing));
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_uint(flux_last_error_token(), failing, "flux_dispatch: the token is the callback that failed");
    is_uint(flux_last_error_cycle(NULL, 0), 0, "no cycle for a failed callback");

    EXPECT_OK(flux_dispatcher_destroy(d));

    /* The same failure seen by a wait that ran it: the waiter registered
     * first, so its wait runs the failing callback. */
    flux_token waiter;
    d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    wd = d;
    EXPECT_OK(flux_register(d, waits_for_failing, NULL, NULL, &waiter));
    EXPECT_OK(flux_register(d, fail_cb, NULL, NULL, &waited));
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(wait_status, FLUX_ERR_CALLBACK_FAILED, "the wait that ran the failing callback returns CALLBACK_FAILED");
    is_uint(token_seen_by_waiter, waited, "flux_wait_for: the token is the callback that failed, not the waiter");
    is_uint(flux_last_error_token(), waited, "flux_dispatch: the same token");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- a store's failing reduce and listener ------------------------------ */

static int failing_reduce(void *context, void *state, const void *p, void **next)
{
    (void)context;
    (void)p;
    *next = state;
    return 3;
}

static int changing_reduce(void *context, void *state, const void *p, void **next)
{
    (void)context;
    (void)state;
    *next = (void *)p;
    return 0;
}

static void failing_listener(void *context)
{
    flux_store_listener_fail((flux_dispatcher *)context, 5);
}

static void test_store_failures_name_the_store(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token before;
    EXPECT_OK(flux_register(d, ok_cb, NULL, NULL, &before));
    flux_store *s = NULL;
    EXPECT_OK(flux_store_create(d, NULL, failing_reduce, NULL, NULL, NULL, NULL, &s));
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_uint(flux_last_error_token(), flux_store_token(s), "a failing reduce: the token is the store's own");
    EXPECT_OK(flux_store_destroy(s));

    EXPECT_OK(flux_store_create(d, NULL, changing_reduce, NULL, NULL, NULL, NULL, &s));
    flux_listener_id listener;
    EXPECT_OK(flux_store_add_listener(s, failing_listener, d, NULL, &listener));
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_uint(flux_last_error_token(), flux_store_token(s), "a failing listener: the token is its store's");

    /* A listener id is not a token (flux.h, flux_listener_id): an unknown
     * one is FLUX_ERR_UNKNOWN_TOKEN with no token, not the id. */
    EXPECT_STATUS(flux_unregister(d, 4242), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_OK(flux_store_remove_listener(s, listener));
    EXPECT_STATUS(flux_store_remove_listener(s, listener), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), 0, "a removed listener id: 0, not the id nor the earlier token");
    EXPECT_STATUS(flux_store_remove_listener(s, 77), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), 0, "a never-issued listener id: 0");
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- FLUX_ERR_UNKNOWN_TOKEN ---------------------------------------------- */

static flux_token wait_list[3];
static size_t wait_list_count;

static int waits_for_list(void *context, const void *p)
{
    (void)p;
    flux_token *seen = context;
    wait_status = flux_wait_for(wd, wait_list, wait_list_count);
    *seen = flux_last_error_token();
    return 0;
}

static void test_unknown_token_names_the_first_rejected(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    EXPECT_STATUS(flux_unregister(d, 4242), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), 4242, "flux_unregister: the rejected token");
    EXPECT_STATUS(flux_unregister(d, 0), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), 0, "token 0 rejected: 0");

    flux_token gone, seen = 0, waiter;
    EXPECT_OK(flux_register(d, ok_cb, NULL, NULL, &gone));
    EXPECT_OK(flux_unregister(d, gone));
    EXPECT_STATUS(flux_unregister(d, gone), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), gone, "an unregistered token: that token");

    flux_token fine;
    wd = d;
    EXPECT_OK(flux_register(d, waits_for_list, &seen, NULL, &waiter));
    EXPECT_OK(flux_register(d, ok_cb, NULL, NULL, &fine));
    wait_list[0] = fine;
    wait_list[1] = 9001;
    wait_list[2] = 9002;
    wait_list_count = 3;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(wait_status, FLUX_ERR_UNKNOWN_TOKEN, "flux_wait_for with an unknown token in its list fails");
    is_uint(seen, 9001, "flux_wait_for: the first token it rejected, not a later one");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- FLUX_ERR_CIRCULAR ----------------------------------------------------- */

enum { RING = 3 };
static flux_token ring[RING];
static flux_status ring_status[RING];
static flux_token ring_token[RING];
static flux_token ring_cycle[RING][8];
static size_t ring_cycle_length[RING];

/* Callback i waits for callback (i + 1) % RING. */
static int ring_cb(void *context, const void *p)
{
    (void)p;
    size_t i = (size_t)(uintptr_t)context;
    flux_token next = ring[(i + 1) % RING];
    ring_status[i] = flux_wait_for(wd, &next, 1);
    if (ring_status[i] == FLUX_ERR_CIRCULAR) {
        ring_token[i] = flux_last_error_token();
        ring_cycle_length[i] = flux_last_error_cycle(ring_cycle[i], 8);
    }
    return 0;
}

static int self_cb(void *context, const void *p)
{
    (void)p;
    flux_token *me = context;
    wait_status = flux_wait_for(wd, me, 1);
    token_seen_by_waiter = flux_last_error_token();
    ring_cycle_length[0] = flux_last_error_cycle(ring_cycle[0], 8);
    return 0;
}

static void test_circular_gives_the_cycle(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    wd = d;
    for (size_t i = 0; i < RING; i++)
        EXPECT_OK(flux_register(d, ring_cb, (void *)(uintptr_t)i, NULL, &ring[i]));
    memset(ring_status, 0xff, sizeof ring_status);
    EXPECT_OK(flux_dispatch(d, payload));
    /* ring[0] runs from the loop and waits for 1, which waits for 2, which
     * asks for 0: the cycle is found by 2's wait. */
    is_int(ring_status[2], FLUX_ERR_CIRCULAR, "the third callback's wait closes the cycle");
    is_uint(ring_token[2], ring[0], "the token is the pending one the wait asked for");
    is_uint(ring_cycle_length[2], 4, "a three-callback cycle has four entries (waiter ... waiter)");
    ok(ring_cycle[2][0] == ring[2] && ring_cycle[2][1] == ring[0] && ring_cycle[2][2] == ring[1] &&
           ring_cycle[2][3] == ring[2],
       "the cycle is {waiter, asked for, ..., waiter}: {%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "}",
       ring_cycle[2][0], ring_cycle[2][1], ring_cycle[2][2], ring_cycle[2][3]);
    /* The waits that unwound returned OK, so this thread's last failure is
     * still that wait's: the message names the same tokens in the same order. */
    char want[160];
    snprintf(want, sizeof want, "token %" PRIu64 " waits for %" PRIu64 ", which is waiting for %" PRIu64
             ", which is waiting for %" PRIu64, ring[2], ring[0], ring[1], ring[2]);
    has_substr(flux_last_error(), want, "the message names the cycle the values give");
    EXPECT_OK(flux_dispatcher_destroy(d));

    /* A callback waiting for itself: {me, me}. */
    d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    wd = d;
    static flux_token me;
    EXPECT_OK(flux_register(d, self_cb, &me, NULL, &me));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(wait_status, FLUX_ERR_CIRCULAR, "a callback waiting for itself: CIRCULAR");
    is_uint(token_seen_by_waiter, me, "its token is its own");
    is_uint(ring_cycle_length[0], 2, "the cycle has two entries");
    ok(ring_cycle[0][0] == me && ring_cycle[0][1] == me, "the cycle is {me, me}");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* The cycle's capacity rules, and reading changes nothing. */
static void test_cycle_capacity(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    wd = d;
    for (size_t i = 0; i < RING; i++)
        EXPECT_OK(flux_register(d, ring_cb, (void *)(uintptr_t)i, NULL, &ring[i]));
    EXPECT_OK(flux_dispatch(d, payload));
    /* The outer callbacks' waits returned OK: this thread's last failure is
     * still the third wait's cycle. */
    is_uint(flux_last_error_cycle(NULL, 0), 4, "NULL with capacity 0 gives the length");
    flux_token two[4] = {11, 11, 11, 11};
    is_uint(flux_last_error_cycle(two, 2), 4, "a capacity of 2 still returns the whole length");
    ok(two[0] == ring[2] && two[1] == ring[0], "and copies the first two tokens");
    ok(two[2] == 11 && two[3] == 11, "and nothing past the capacity");
    flux_token all[6] = {0, 0, 0, 0, 99, 99};
    is_uint(flux_last_error_cycle(all, 6), 4, "a larger capacity: the length");
    ok(all[3] == ring[2] && all[4] == 99, "copies four tokens, leaves the rest");
    is_uint(flux_last_error_token(), ring[0], "reading the cycle does not change the token");
    is_uint(flux_last_error_cycle(NULL, 0), 4, "nor the cycle");
    has_substr(flux_last_error(), "waits for", "nor the message");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- long cycles, and cycles through another dispatcher ------------------ */

enum { LONG_RING = 300 };
static flux_token long_ring[LONG_RING];
static flux_status long_status;
static flux_token long_token;
static flux_token long_cycle[LONG_RING + 2];
static size_t long_length;

/* Callback i waits for callback (i + 1) % LONG_RING; the last one's wait
 * closes the cycle and keeps its values. */
static int long_ring_cb(void *context, const void *p)
{
    (void)p;
    size_t i = (size_t)(uintptr_t)context;
    flux_token next = long_ring[(i + 1) % LONG_RING];
    flux_status st = flux_wait_for(wd, &next, 1);
    if (st == FLUX_ERR_CIRCULAR) {
        long_status = st;
        long_token = flux_last_error_token();
        long_length = flux_last_error_cycle(long_cycle, LONG_RING + 2);
    }
    return 0;
}

static void test_a_long_cycle_is_given_whole(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    wd = d;
    for (size_t i = 0; i < LONG_RING; i++)
        REQUIRE(flux_register(d, long_ring_cb, (void *)(uintptr_t)i, NULL, &long_ring[i]) == FLUX_OK);
    long_status = FLUX_OK;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(long_status, FLUX_ERR_CIRCULAR, "the last callback's wait closes a %d-callback cycle", LONG_RING);
    is_uint(long_token, long_ring[0], "the token is the pending one it asked for");
    is_uint(long_length, LONG_RING + 1, "the cycle has one entry per callback, and the waiter again");
    bool in_order = long_cycle[0] == long_ring[LONG_RING - 1] && long_cycle[LONG_RING] == long_ring[LONG_RING - 1];
    for (size_t i = 1; in_order && i < LONG_RING; i++)
        in_order = long_cycle[i] == long_ring[i - 1];
    ok(in_order, "{waiter, asked for, ..., waiter}, every link in order");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* A callback of another dispatcher, run by a dispatch from inside one of d's
 * callbacks, counts as inside that callback (flux.h, flux_wait_for()): its
 * wait for that callback, or for one the callback's wait is running, is a
 * cycle through the callbacks of d. */
static flux_dispatcher *outer_d, *inner_d;
static flux_token outer_a, outer_b, inner_asks_for;
static flux_token inner_cycle[8];
static size_t inner_length;

static int inner_cb(void *context, const void *p)
{
    (void)context;
    (void)p;
    wait_status = flux_wait_for(outer_d, &inner_asks_for, 1);
    token_seen_by_waiter = flux_last_error_token();
    inner_length = flux_last_error_cycle(inner_cycle, 8);
    return 0;
}

static int dispatches_inner(void *context, const void *p)
{
    (void)context;
    (void)p;
    return flux_dispatch(inner_d, payload) == FLUX_OK ? 0 : 1;
}

/* outer_a: the loop's callback; it waits for outer_b, which dispatches inner_d. */
static int waits_for_b(void *context, const void *p)
{
    (void)context;
    (void)p;
    return flux_wait_for(outer_d, &outer_b, 1) == FLUX_OK ? 0 : 1;
}

static void test_a_cycle_through_another_dispatcher(void)
{
    outer_d = flux_dispatcher_create();
    inner_d = flux_dispatcher_create();
    REQUIRE(outer_d && inner_d);
    flux_token inner;
    EXPECT_OK(flux_register(outer_d, dispatches_inner, NULL, NULL, &outer_a));
    EXPECT_OK(flux_register(inner_d, inner_cb, NULL, NULL, &inner));
    inner_asks_for = outer_a;
    wait_status = FLUX_OK;
    EXPECT_OK(flux_dispatch(outer_d, payload));
    is_int(wait_status, FLUX_ERR_CIRCULAR, "waiting for the callback whose dispatch runs it: CIRCULAR");
    is_uint(token_seen_by_waiter, outer_a, "naming that callback");
    is_uint(inner_length, 2, "the cycle is that callback waiting for itself");
    ok(inner_cycle[0] == outer_a && inner_cycle[1] == outer_a, "{a, a}");
    EXPECT_OK(flux_dispatcher_destroy(outer_d));

    outer_d = flux_dispatcher_create();
    REQUIRE(outer_d != NULL);
    EXPECT_OK(flux_register(outer_d, waits_for_b, NULL, NULL, &outer_a));
    EXPECT_OK(flux_register(outer_d, dispatches_inner, NULL, NULL, &outer_b));
    inner_asks_for = outer_a;
    wait_status = FLUX_OK;
    EXPECT_OK(flux_dispatch(outer_d, payload));
    is_int(wait_status, FLUX_ERR_CIRCULAR, "waiting for the callback whose wait runs it: CIRCULAR");
    is_uint(token_seen_by_waiter, outer_a, "naming the callback asked for");
    is_uint(inner_length, 3, "the cycle runs through the callback that dispatched");
    ok(inner_cycle[0] == outer_b && inner_cycle[1] == outer_a && inner_cycle[2] == outer_b, "{b, a, b}");
    EXPECT_OK(flux_dispatcher_destroy(outer_d));
    EXPECT_OK(flux_dispatcher_destroy(inner_d));
}

/* ---- statuses with no token; lifetime ----------------------------------- */

static void *read_values(void *arg)
{
    flux_token *out = arg;
    out[0] = flux_last_error_token();
    out[1] = flux_last_error_cycle(NULL, 0);
    return NULL;
}

static void test_other_statuses_and_lifetime(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    EXPECT_STATUS(flux_unregister(d, 555), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), 555, "set up: a token");
    flux_token t;
    EXPECT_OK(flux_register(d, ok_cb, NULL, NULL, &t));
    EXPECT_OK(flux_dispatch(d, payload));
    is_uint(flux_last_error_token(), 555, "successful calls leave the token unchanged");

    pthread_t th;
    flux_token other[2] = {1, 1};
    REQUIRE(pthread_create(&th, NULL, read_values, other) == 0);
    pthread_join(th, NULL);
    is_uint(other[0], 0, "another thread has its own: 0 before it failed");
    is_uint(other[1], 0, "and no cycle");

    EXPECT_STATUS(flux_wait_for(d, &t, 1), FLUX_ERR_NOT_DISPATCHING);
    is_uint(flux_last_error_token(), 0, "FLUX_ERR_NOT_DISPATCHING carries no token");
    EXPECT_STATUS(flux_register(NULL, ok_cb, NULL, NULL, &t), FLUX_ERR_INVALID_ARGUMENT);
    is_uint(flux_last_error_token(), 0, "FLUX_ERR_INVALID_ARGUMENT carries no token");
    is_uint(flux_last_error_cycle(NULL, 0), 0, "nor a cycle");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- a done's own failures --------------------------------------------- */

static flux_status done_saw;
static char done_read[160];

/* Reads the failure it reports, then fails a call of its own. */
static void failing_done(void *context, void *p, flux_status status)
{
    (void)context;
    (void)p;
    done_saw = status;
    snprintf(done_read, sizeof done_read, "%s", flux_last_error());
    flux_token none = 0;
    (void)flux_wait_for(NULL, &none, 1);
}

/* flux_enqueue's done runs before flux_enqueue returns; a call it fails is
 * its own business: what the caller reads afterwards is flux_enqueue's
 * failure, whatever refused the payload. */
static void test_a_done_failing_a_call_leaves_flux_enqueues_error(void)
{
    done_saw = FLUX_OK;
    done_read[0] = '\0';
    EXPECT_STATUS(flux_enqueue(NULL, (void *)payload, failing_done, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_int(done_saw, FLUX_ERR_INVALID_ARGUMENT, "a NULL dispatcher: done gets the refusal");
    has_substr(done_read, "flux_enqueue: the dispatcher is NULL", "and reads it");
    has_substr(flux_last_error(), "flux_enqueue: the dispatcher is NULL",
               "after the call: flux_enqueue's error, not the done's");

    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token failing;
    EXPECT_OK(flux_register(d, fail_cb, NULL, NULL, &failing));
    EXPECT_STATUS(flux_enqueue(d, (void *)payload, failing_done, NULL), FLUX_ERR_CALLBACK_FAILED);
    is_int(done_saw, FLUX_ERR_CALLBACK_FAILED, "a failed dispatch: done gets its status");
    has_substr(flux_last_error(), "flux_enqueue: callback for token", "after the call: flux_enqueue's error");
    is_uint(flux_last_error_token(), failing, "and its token");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

int main(void)
{
    tap_init();
    RUN(test_other_statuses_and_lifetime);
    RUN(test_callback_failed_names_the_failing_callback);
    RUN(test_store_failures_name_the_store);
    RUN(test_unknown_token_names_the_first_rejected);
    RUN(test_circular_gives_the_cycle);
    RUN(test_cycle_capacity);
    RUN(test_a_long_cycle_is_given_whole);
    RUN(test_a_cycle_through_another_dispatcher);
    RUN(test_a_done_failing_a_call_leaves_flux_enqueues_error);
    return tap_done();
}
