/*
 * flight.c -- the flight-destination example from Facebook's Flux docs (as
 * told in CLAFluxDispatcher's README), in C against flux.h.
 *
 * Three stores: the selected country, the selected city, and the flight
 * price. When a country is selected the city store picks that country's
 * default city, so it must wait for the country store; the price store needs
 * both, so it waits for the city store. The stores are registered in reverse
 * (price, city, country) to show that flux_wait_for(), not registration
 * order, puts them in the right order.
 *
 *   make demo        (or: make build/examples/flight && build/examples/flight)
 */
#include <flux.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The payload: an action type and its argument. */
typedef struct action {
    const char *type;        /* "city-update" or "country-update" */
    const char *selected;    /* the city or the country */
} action;

typedef struct country_store {
    flux_token token;
    const char *country;
} country_store;

typedef struct city_store {
    flux_token token;
    const char *city;
} city_store;

typedef struct price_store {
    flux_token token;
    int price;
} price_store;

/* Everything the callbacks need: the dispatcher (for flux_wait_for) and the
 * stores they read. */
typedef struct app {
    flux_dispatcher *dispatcher;
    country_store countries;
    city_store cities;
    price_store prices;
} app;

static void check(flux_status status, const char *what)
{
    if (status != FLUX_OK) {
        fprintf(stderr, "flight: %s failed: %s (%s)\n", what, flux_status_name(status),
                flux_last_error());
        exit(1);
    }
}

static const char *default_city(const char *country)
{
    static const char *const table[][2] = {
        {"australia", "sydney"}, {"france", "paris"}, {"japan", "tokyo"}, {"uk", "london"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (country != NULL && strcmp(country, table[i][0]) == 0)
            return table[i][1];
    return NULL;
}

/* A made-up base fare by city. */
static int flight_price(const char *country, const char *city)
{
    static const struct { const char *city; int price; } fares[] = {
        {"paris", 450}, {"sydney", 1320}, {"tokyo", 980}, {"london", 390},
    };
    (void)country;
    for (size_t i = 0; i < sizeof fares / sizeof fares[0]; i++)
        if (city != NULL && strcmp(city, fares[i].city) == 0)
            return fares[i].price;
    return 0;
}

static const char *or_none(const char *s)
{
    return s ? s : "(none)";
}

static int country_store_on_dispatch(void *context, const void *payload)
{
    app *a = context;
    const action *act = payload;
    if (strcmp(act->type, "country-update") == 0) {
        a->countries.country = act->selected;
        printf("  countryStore: %s\n", a->countries.country);
    }
    return 0;
}

static int city_store_on_dispatch(void *context, const void *payload)
{
    app *a = context;
    const action *act = payload;
    if (strcmp(act->type, "city-update") == 0) {
        a->cities.city = act->selected;
        printf("  cityStore: %s\n", a->cities.city);
    } else if (strcmp(act->type, "country-update") == 0) {
        /* The country store may not have run yet: make sure it has. */
        printf("  cityStore: waiting for countryStore\n");
        flux_status s = flux_wait_for(a->dispatcher, &a->countries.token, 1);
        if (s != FLUX_OK) {
            fprintf(stderr, "cityStore: %s\n", flux_last_error());
            return 1;   /* aborts the dispatch */
        }
        a->cities.city = default_city(a->countries.country);
        printf("  cityStore: %s (default for %s)\n", or_none(a->cities.city),
               a->countries.country);
    }
    return 0;
}

static int price_store_on_dispatch(void *context, const void *payload)
{
    app *a = context;
    const action *act = payload;
    if (strcmp(act->type, "country-update") != 0 && strcmp(act->type, "city-update") != 0)
        return 0;
    /* The price depends on the city, whichever action changed it. (The
     * README's version skips this wait on city-update because its price
     * store happens to be registered after the city store.) */
    printf("  flightPriceStore: waiting for cityStore\n");
    flux_status s = flux_wait_for(a->dispatcher, &a->cities.token, 1);
    if (s != FLUX_OK) {
        fprintf(stderr, "flightPriceStore: %s\n", flux_last_error());
        return 1;
    }
    a->prices.price = flight_price(a->countries.country, a->cities.city);
    printf("  flightPriceStore: %d for %s, %s\n", a->prices.price, or_none(a->cities.city),
           or_none(a->countries.country));
    return 0;
}

static void dispatch(app *a, const char *type, const char *selected)
{
    action act = {type, selected};
    printf("dispatch %s: %s\n", type, selected);
    check(flux_dispatch(a->dispatcher, &act), "flux_dispatch");
}

int main(void)
{
    app a = {0};
    a.dispatcher = flux_dispatcher_create();
    if (a.dispatcher == NULL) {
        fprintf(stderr, "flight: out of memory\n");
        return 1;
    }
    /* The stores are plain structs in `a`: no destroy function needed. */
    check(flux_register(a.dispatcher, price_store_on_dispatch, &a, NULL, &a.prices.token),
          "registering flightPriceStore");
    check(flux_register(a.dispatcher, city_store_on_dispatch, &a, NULL, &a.cities.token),
          "registering cityStore");
    check(flux_register(a.dispatcher, country_store_on_dispatch, &a, NULL, &a.countries.token),
          "registering countryStore");

    dispatch(&a, "city-update", "paris");
    dispatch(&a, "country-update", "australia");

    printf("final state: country=%s city=%s price=%d\n", or_none(a.countries.country),
           or_none(a.cities.city), a.prices.price);
    check(flux_dispatcher_destroy(a.dispatcher), "flux_dispatcher_destroy");
    return 0;
}
