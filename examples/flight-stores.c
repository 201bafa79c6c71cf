/*
 * flight-stores.c -- the flight-destination example (examples/flight.c) with
 * libflux's stores: country, city and price are reduce stores, and a store
 * group prints the itinerary once per dispatch, after all three.
 *
 * States are pointers the stores do not own (string literals, and the price
 * as an integer in the pointer), so a reduce that returns the state it got
 * means "no change", and the group sees flux_store_has_changed() per store.
 *
 *   make demo        (or: make build/examples/flight-stores && build/examples/flight-stores)
 */
#include <flux.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct action {
    const char *type;        /* "city-update" or "country-update" */
    const char *selected;
} action;

static flux_store *country, *city, *price;

static void check(flux_status status, const char *what)
{
    if (status != FLUX_OK) {
        fprintf(stderr, "flight-stores: %s: %s (%s)\n", what, flux_status_name(status), flux_last_error());
        exit(1);
    }
}

static const char *default_city(const char *c)
{
    static const char *const table[][2] = {{"australia", "sydney"}, {"france", "paris"}, {"uk", "london"}};
    for (size_t i = 0; c != NULL && i < sizeof table / sizeof table[0]; i++)
        if (strcmp(c, table[i][0]) == 0)
            return table[i][1];
    return NULL;
}

static int fare(const char *c)
{
    static const struct { const char *city; int price; } fares[] = {{"paris", 450}, {"sydney", 1320}, {"london", 390}};
    for (size_t i = 0; c != NULL && i < sizeof fares / sizeof fares[0]; i++)
        if (strcmp(c, fares[i].city) == 0)
            return fares[i].price;
    return 0;
}

/* Waits until store s has handled this payload (it may not have run yet). */
static int wait_for_store(flux_store *s)
{
    flux_token token = flux_store_token(s);
    return flux_wait_for(flux_store_dispatcher(s), &token, 1);
}

static int reduce_country(void *context, void *state, const void *payload, void **next)
{
    (void)context, (void)state;
    const action *a = payload;
    if (strcmp(a->type, "country-update") == 0)
        *next = (void *)a->selected;
    return 0;
}

static int reduce_city(void *context, void *state, const void *payload, void **next)
{
    (void)context, (void)state;
    const action *a = payload;
    if (strcmp(a->type, "city-update") == 0) {
        *next = (void *)a->selected;
    } else if (strcmp(a->type, "country-update") == 0) {
        if (wait_for_store(country) != FLUX_OK)
            return 1;
        *next = (void *)default_city(flux_store_state(country));
    }
    return 0;
}

static int reduce_price(void *context, void *state, const void *payload, void **next)
{
    (void)context, (void)state, (void)payload;
    if (wait_for_store(city) != FLUX_OK)
        return 1;
    *next = (void *)(intptr_t)fare(flux_store_state(city));
    return 0;
}

static void print_itinerary(void *context)
{
    (void)context;
    int changed[3];
    check(flux_store_has_changed(country, &changed[0]), "has_changed");
    check(flux_store_has_changed(city, &changed[1]), "has_changed");
    check(flux_store_has_changed(price, &changed[2]), "has_changed");
    const char *c = flux_store_state(country), *t = flux_store_state(city);
    printf("  itinerary: %s, %s, %d  (changed: country %d, city %d, price %d)\n", c ? c : "(none)",
           t ? t : "(none)", (int)(intptr_t)flux_store_state(price), changed[0], changed[1], changed[2]);
}

int main(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    if (d == NULL)
        return 1;
    /* In reverse, as in flight.c: flux_wait_for puts them in order. */
    check(flux_store_create(d, (void *)0, reduce_price, NULL, NULL, NULL, NULL, &price), "price store");
    check(flux_store_create(d, NULL, reduce_city, NULL, NULL, NULL, NULL, &city), "city store");
    check(flux_store_create(d, NULL, reduce_country, NULL, NULL, NULL, NULL, &country), "country store");
    flux_store *all[] = {country, city, price};
    flux_store_group *itinerary;
    check(flux_store_group_create(all, 3, print_itinerary, NULL, NULL, &itinerary), "group");

    const action actions[] = {{"city-update", "paris"}, {"country-update", "australia"}, {"city-update", "sydney"}};
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++) {
        printf("dispatch %s: %s\n", actions[i].type, actions[i].selected);
        check(flux_dispatch(d, &actions[i]), "dispatch");
    }

    check(flux_store_group_release(itinerary), "release group");
    check(flux_store_destroy(country), "destroy");
    check(flux_store_destroy(city), "destroy");
    check(flux_store_destroy(price), "destroy");
    check(flux_dispatcher_destroy(d), "destroy dispatcher");
    return 0;
}
