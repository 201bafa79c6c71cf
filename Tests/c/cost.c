/*
 * cost.c -- the driver of `make check-cost`: runs one hot path N times, for
 * support/check-cost.py to count its instructions under cachegrind (two runs,
 * N and 3N: the difference is the path alone, start-up and exit cancel out).
 *
 *   cost SCENARIO N
 *
 * Scenarios: dispatch (one no-op callback), store-same (a reduce store whose
 * reduce changes nothing), store-change (it changes, one listener runs),
 * wait-for (a callback waits for the other of two).
 */
#include <flux.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int noop(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

static flux_token g_second;

static int waiter(void *context, const void *payload)
{
    (void)payload;
    return flux_wait_for(context, &g_second, 1) == FLUX_OK ? 0 : 1;
}

/* Payload 0: no change; otherwise the state (an integer in the pointer) goes
 * up by it -- nothing allocated. */
static int reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    int by = *(const int *)payload;
    if (by != 0)
        *next = (void *)((intptr_t)state + by);
    return 0;
}

static void listener(void *context)
{
    ++*(uint64_t *)context;
}

static void check(flux_status s, const char *what)
{
    if (s != FLUX_OK) {
        fprintf(stderr, "cost: %s: %s\n", what, flux_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: cost dispatch|store-same|store-change|wait-for N\n");
        return 2;
    }
    const char *scenario = argv[1];
    long n = atol(argv[2]);
    flux_dispatcher *d = flux_dispatcher_create();
    if (!d)
        return 1;
    static const int unchanged = 0, changed = 1;
    const int *payload = &unchanged;
    uint64_t heard = 0;
    flux_token t;
    flux_store *store = NULL;
    if (strcmp(scenario, "dispatch") == 0) {
        check(flux_register(d, noop, NULL, NULL, &t), "flux_register");
    } else if (strcmp(scenario, "wait-for") == 0) {
        check(flux_register(d, waiter, d, NULL, &t), "flux_register");
        check(flux_register(d, noop, NULL, NULL, &g_second), "flux_register");
    } else if (strncmp(scenario, "store-", 6) == 0) {
        check(flux_store_create(d, NULL, reduce, NULL, NULL, NULL, NULL, &store), "flux_store_create");
        flux_listener_id id;
        check(flux_store_add_listener(store, listener, &heard, NULL, &id), "flux_store_add_listener");
        if (strcmp(scenario, "store-change") == 0)
            payload = &changed;
        else if (strcmp(scenario, "store-same") != 0)
            return 2;
    } else {
        return 2;
    }
    for (long i = 0; i < n; i++)
        check(flux_dispatch(d, payload), "flux_dispatch");
    if (payload == &changed && heard != (uint64_t)n) {
        fprintf(stderr, "cost: the listener ran %llu times, not %ld\n", (unsigned long long)heard, n);
        return 1;
    }
    if (store)
        check(flux_store_destroy(store), "flux_store_destroy");
    check(flux_dispatcher_destroy(d), "flux_dispatcher_destroy");
    return 0;
}
