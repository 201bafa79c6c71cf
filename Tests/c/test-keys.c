/*
 * test-keys.c -- libflux in a process that has used up its thread-specific
 * keys (PTHREAD_KEYS_MAX) before libflux asked for one: the library keeps
 * working, reports its errors with a fixed message instead of recording them,
 * and never writes a value under a key it does not own (its keys were once
 * key 0 when pthread_key_create failed: some other library's). Its own
 * process, so that no earlier test has made libflux's keys.
 */
#include "helpers.h"

#define MAX_KEYS 4096

static pthread_key_t keys[MAX_KEYS];
static int key_values[MAX_KEYS];
static size_t key_count;

/* Takes every key left, each holding the address of its own int. */
static void use_up_keys(void)
{
    while (key_count < MAX_KEYS && pthread_key_create(&keys[key_count], NULL) == 0) {
        REQUIRE(pthread_setspecific(keys[key_count], &key_values[key_count]) == 0);
        key_count++;
    }
    REQUIRE(key_count < MAX_KEYS); /* pthread_key_create failed: none left */
}

/* Whether every key this test owns still holds what it put there. */
static bool keys_untouched(void)
{
    for (size_t i = 0; i < key_count; i++)
        if (pthread_getspecific(keys[i]) != &key_values[i])
            return false;
    return true;
}

typedef struct waiter {
    flux_dispatcher *d;
    flux_token other;
} waiter;

static int waiter_cb(void *context, const void *payload)
{
    (void)payload;
    waiter *w = context;
    return flux_wait_for(w->d, &w->other, 1) == FLUX_OK ? 0 : 1;
}

static int count_cb(void *context, const void *payload)
{
    (void)payload;
    (*(int *)context)++;
    return 0;
}

static void test_a_failing_call_reports_a_fixed_message_without_a_key(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    EXPECT_STATUS(flux_unregister(d, 12345), FLUX_ERR_UNKNOWN_TOKEN);
    has_substr(flux_last_error(), "PTHREAD_KEYS_MAX", "flux_last_error() says no key was left");
    is_uint(flux_last_error_token(), 0, "no token is recorded");
    is_uint(flux_last_error_cycle(NULL, 0), 0, "no cycle is recorded");
    EXPECT_OK(flux_dispatcher_destroy(d));
    ok(keys_untouched(), "no key of the test was written");
}

static void test_dispatch_and_wait_work_without_a_key(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    int counted = 0;
    waiter w = {d, 0};
    flux_token token = 0;
    /* The waiter first, so its wait runs the counter (the stack bounds it
     * checks are computed each time: there is no key to cache them in). */
    EXPECT_OK(flux_register(d, waiter_cb, &w, NULL, &token));
    EXPECT_OK(flux_register(d, count_cb, &counted, NULL, &w.other));
    int payload = 1;
    for (int i = 0; i < 3; i++)
        EXPECT_OK(flux_dispatch(d, &payload));
    is_int(counted, 3, "each dispatch ran the counter once, through the wait");
    EXPECT_OK(flux_dispatcher_destroy(d));
    ok(keys_untouched(), "no key of the test was written");
}

static void test_errors_are_recorded_once_a_key_is_free(void)
{
    /* Give one back: the next failing call makes libflux's key from it. */
    key_count--;
    REQUIRE(pthread_key_delete(keys[key_count]) == 0);
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    EXPECT_STATUS(flux_unregister(d, 777), FLUX_ERR_UNKNOWN_TOKEN);
    has_prefix(flux_last_error(), "flux_unregister:", "the error is recorded again");
    is_uint(flux_last_error_token(), 777, "with its token");
    EXPECT_OK(flux_dispatcher_destroy(d));
    ok(keys_untouched(), "no key of the test was written");
}

int main(void)
{
    tap_init();
    use_up_keys();
    RUN(test_a_failing_call_reports_a_fixed_message_without_a_key);
    RUN(test_dispatch_and_wait_work_without_a_key);
    RUN(test_errors_are_recorded_once_a_key_is_free);
    return tap_done();
}
