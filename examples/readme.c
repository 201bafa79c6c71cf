#include <flux.h>
#include <stdio.h>
#include <string.h>

static flux_dispatcher *d;
static flux_token country_token, city_token;
static const char *country = "?", *city = "?";

static int country_store(void *ctx, const void *p) { (void)ctx; country = p; return 0; }
static int city_store(void *ctx, const void *payload) {
    (void)ctx; (void)payload;
    flux_wait_for(d, &country_token, 1);                      /* country_store has run now */
    city = strcmp(country, "australia") == 0 ? "sydney" : "?"; return 0;
}

int main(void) {
    if ((d = flux_dispatcher_create()) == NULL) return 1;     /* out of memory */
    flux_register(d, city_store, NULL, NULL, &city_token);   /* registered first ... */
    flux_register(d, country_store, NULL, NULL, &country_token);
    flux_status status = flux_dispatch(d, "australia");      /* ... but runs second */
    printf("%s / %s: %s\n", country, city, flux_status_name(status));
    return flux_dispatcher_destroy(d);
}
