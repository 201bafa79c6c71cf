/*
 * cflux.h -- include/flux.h for Swift, plus what Swift cannot take from it as
 * C needs it: FLUX_VERSION_STRING in static storage (Swift imports a string
 * macro as a String), FLUX_VERSION_NUMBER beside it, and the enumerators'
 * names. Everything is static inline, so this adds no symbol to libflux.so.
 */
#ifndef FLUX_CFLUX_H
#define FLUX_CFLUX_H

#include "../../include/flux.h"

/* flux_closure's handler writes its return value into a uint64_t of the Swift
 * side (Exports+Closure.swift): the header's size must be that one. */
typedef char cflux_ret_size_is_8[FLUX_CLOSURE_RET_SIZE == 8 ? 1 : -1];

static inline unsigned cflux_version_number(void) { return FLUX_VERSION_NUMBER; }
static inline const char *cflux_version_string(void) { return FLUX_VERSION_STRING; }

/* The enumerator's own spelling, in static storage; NULL for a value that is
 * not a flux_status. One line per enumerator of flux.h (the Python tests check
 * that every enumerator of the header has its name here). */
static inline const char *cflux_status_name(int status)
{
#define CFLUX_NAME(code) case code: return #code;
    switch (status) {
    CFLUX_NAME(FLUX_OK)
    CFLUX_NAME(FLUX_ERR_INVALID_ARGUMENT)
    CFLUX_NAME(FLUX_ERR_UNKNOWN_TOKEN)
    CFLUX_NAME(FLUX_ERR_ALREADY_DISPATCHING)
    CFLUX_NAME(FLUX_ERR_NOT_DISPATCHING)
    CFLUX_NAME(FLUX_ERR_CIRCULAR)
    CFLUX_NAME(FLUX_ERR_CALLBACK_FAILED)
    CFLUX_NAME(FLUX_ERR_NO_MEMORY)
    CFLUX_NAME(FLUX_ERR_TOO_DEEP)
    default: return 0;
    }
#undef CFLUX_NAME
}

#endif /* FLUX_CFLUX_H */
