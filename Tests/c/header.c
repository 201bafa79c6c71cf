/*
 * header.c -- include/flux.h compiles alone, as C99 -pedantic -Werror and as
 * C++11 -pedantic -Werror (make check-header), and declares what DESIGN.md 3
 * fixes. Compiled only, never linked or run.
 */
#include <flux.h>
#include <flux.h> /* the include guard works */

#ifndef FLUX_API
#error "FLUX_API is not defined"
#endif

#if !defined(FLUX_VERSION_MAJOR) || !defined(FLUX_VERSION_MINOR) || !defined(FLUX_VERSION_PATCH)
#error "version macros missing"
#endif

#if FLUX_VERSION_NUMBER != FLUX_VERSION_MAJOR * 10000 + FLUX_VERSION_MINOR * 100 + FLUX_VERSION_PATCH
#error "FLUX_VERSION_NUMBER is not MAJOR*10000 + MINOR*100 + PATCH"
#endif

#if !FLUX_VERSION_CHECK(0, 1, 0)
#error "FLUX_VERSION_CHECK(0, 1, 0) is false"
#endif

/* Compile-time checks usable in both C99 and C++11. */
#ifdef __cplusplus
#define HEADER_ASSERT(name, cond) static_assert(cond, #name)
#else
#define HEADER_ASSERT(name, cond) typedef char header_assert_##name[(cond) ? 1 : -1]
#endif

HEADER_ASSERT(token_is_8_bytes, sizeof(flux_token) == 8);
HEADER_ASSERT(token_is_unsigned, (flux_token)-1 > 0);
HEADER_ASSERT(ok_is_0, FLUX_OK == 0);
HEADER_ASSERT(invalid_argument_is_1, FLUX_ERR_INVALID_ARGUMENT == 1);
HEADER_ASSERT(unknown_token_is_2, FLUX_ERR_UNKNOWN_TOKEN == 2);
HEADER_ASSERT(already_dispatching_is_3, FLUX_ERR_ALREADY_DISPATCHING == 3);
HEADER_ASSERT(not_dispatching_is_4, FLUX_ERR_NOT_DISPATCHING == 4);
HEADER_ASSERT(circular_is_5, FLUX_ERR_CIRCULAR == 5);
HEADER_ASSERT(callback_failed_is_6, FLUX_ERR_CALLBACK_FAILED == 6);
HEADER_ASSERT(no_memory_is_7, FLUX_ERR_NO_MEMORY == 7);
HEADER_ASSERT(too_deep_is_8, FLUX_ERR_TOO_DEEP == 8);
HEADER_ASSERT(version_string_is_a_literal, sizeof(FLUX_VERSION_STRING) >= 6);

/* Every declaration has exactly the signature DESIGN.md fixes: assigning to
 * a pointer of that type would not compile otherwise. */
struct header_api {
    flux_dispatcher *(*dispatcher_create)(void);
    flux_status (*dispatcher_destroy)(flux_dispatcher *);
    flux_status (*register_)(flux_dispatcher *, flux_callback, void *, flux_destroy, flux_token *);
    flux_status (*unregister)(flux_dispatcher *, flux_token);
    flux_status (*dispatch)(flux_dispatcher *, const void *);
    flux_status (*wait_for)(flux_dispatcher *, const flux_token *, size_t);
    int (*is_dispatching)(const flux_dispatcher *);
    const char *(*status_name)(flux_status);
    const char *(*last_error)(void);
    unsigned (*version)(void);
    const char *(*version_string)(void);
    int (*callback)(void *, const void *);
    void (*destroy)(void *);
};

#ifdef __cplusplus
extern "C" {
#endif

int header_test_callback(void *context, const void *payload);
int header_test_callback(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

struct header_api header_test_api(void);
struct header_api header_test_api(void)
{
    struct header_api api;
    flux_callback cb = header_test_callback;
    flux_destroy destroy = 0;
    api.dispatcher_create = flux_dispatcher_create;
    api.dispatcher_destroy = flux_dispatcher_destroy;
    api.register_ = flux_register;
    api.unregister = flux_unregister;
    api.dispatch = flux_dispatch;
    api.wait_for = flux_wait_for;
    api.is_dispatching = flux_is_dispatching;
    api.status_name = flux_status_name;
    api.last_error = flux_last_error;
    api.version = flux_version;
    api.version_string = flux_version_string;
    api.callback = cb;
    api.destroy = destroy;
    return api;
}

/* Types usable as values: enum, token, opaque pointer. */
flux_status header_test_values(flux_dispatcher *d, flux_token token);
flux_status header_test_values(flux_dispatcher *d, flux_token token)
{
    flux_status s = FLUX_ERR_CIRCULAR;
    const char *version = FLUX_VERSION_STRING;
    unsigned number = FLUX_VERSION_NUMBER;
    (void)version;
    (void)number;
    return d == 0 || token == 0 ? FLUX_ERR_INVALID_ARGUMENT : s;
}

#ifdef __cplusplus
}
#endif
