/*
 * header.c -- include/flux.h compiles alone, as C99 -pedantic -Werror and as
 * C++11 -pedantic -Werror (make check-header), and declares what flux.h
 * documents: every FLUX_API function with its exact signature (make
 * check-header fails when one is not pinned here). Compiled only, never
 * linked or run.
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

/* Every declaration has exactly the signature flux.h documents: assigning
 * to a pointer of that type would not compile otherwise. */
struct header_api {
    flux_dispatcher *(*dispatcher_create)(void);
    flux_status (*dispatcher_destroy)(flux_dispatcher *);
    flux_status (*dispatcher_close)(flux_dispatcher *);
    flux_status (*register_)(flux_dispatcher *, flux_callback, void *, flux_destroy, flux_token *);
    flux_status (*unregister)(flux_dispatcher *, flux_token);
    flux_status (*dispatch)(flux_dispatcher *, const void *);
    flux_status (*try_dispatch)(flux_dispatcher *, const void *);
    flux_status (*wait_for)(flux_dispatcher *, const flux_token *, size_t);
    int (*is_dispatching)(const flux_dispatcher *);
    const char *(*status_name)(flux_status);
    const char *(*last_error)(void);
    flux_token (*last_error_token)(void);
    size_t (*last_error_cycle)(flux_token *, size_t);
    unsigned (*version)(void);
    const char *(*version_string)(void);
    int (*callback)(void *, const void *);
    void (*destroy)(void *);
    flux_status (*enqueue)(flux_dispatcher *, void *, flux_done_fn, void *);
    void (*done)(void *, void *, flux_status);
    flux_status (*set_observer)(flux_dispatcher *, const flux_observer *, void *, void (*)(void *));
};

/* The "Stores" section, with the signatures of DESIGN.md section 6. */
struct header_store_api {
    flux_status (*store_create)(flux_dispatcher *, void *, int (*)(void *, void *, const void *, void **),
                                int (*)(void *, const void *, const void *), void (*)(void *, void *),
                                void *, void (*)(void *), flux_store **);
    void *(*store_state)(const flux_store *);
    flux_token (*store_token)(const flux_store *);
    flux_dispatcher *(*store_dispatcher)(const flux_store *);
    int (*store_is_emitting)(const flux_store *);
    flux_status (*store_has_changed)(const flux_store *, int *);
    flux_status (*store_emit_change)(flux_store *);
    flux_status (*store_add_listener)(flux_store *, void (*)(void *), void *, void (*)(void *), flux_listener_id *);
    flux_status (*store_remove_listener)(flux_store *, flux_listener_id);
    flux_status (*store_destroy)(flux_store *);
    flux_status (*store_group_create)(flux_store *const *, size_t, void (*)(void *), void *, void (*)(void *),
                                      flux_store_group **);
    flux_status (*store_group_release)(flux_store_group *);
    flux_token (*store_group_token)(const flux_store_group *);
    flux_status (*store_listener_fail)(flux_dispatcher *, int);
    flux_reduce_fn reduce;
    flux_equal_fn equal;
    flux_release_fn release;
    flux_listener_fn listener;
};

HEADER_ASSERT(observer_version_is_1, FLUX_OBSERVER_VERSION == 1);

/* The "Trampolines and dynamic calls" section. */
struct header_closure_api {
    flux_status (*closure_create)(const char *, void (*)(void *, void *, void **), void *, void (*)(void *),
                                  flux_closure **);
    void *(*closure_code)(const flux_closure *);
    flux_status (*closure_destroy)(flux_closure *);
    flux_status (*call)(void *, const char *, void *, void **);
    flux_closure_handler handler;
};

HEADER_ASSERT(ret_size_is_8, FLUX_CLOSURE_RET_SIZE == 8);
HEADER_ASSERT(max_args_is_16, FLUX_SIGNATURE_MAX_ARGS == 16);

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
    api.dispatcher_close = flux_dispatcher_close;
    api.register_ = flux_register;
    api.unregister = flux_unregister;
    api.dispatch = flux_dispatch;
    api.try_dispatch = flux_try_dispatch;
    api.wait_for = flux_wait_for;
    api.is_dispatching = flux_is_dispatching;
    api.status_name = flux_status_name;
    api.last_error = flux_last_error;
    api.last_error_token = flux_last_error_token;
    api.last_error_cycle = flux_last_error_cycle;
    api.version = flux_version;
    api.version_string = flux_version_string;
    api.callback = cb;
    api.destroy = destroy;
    api.enqueue = flux_enqueue;
    api.done = (flux_done_fn)0;
    api.set_observer = flux_dispatcher_set_observer;
    return api;
}

struct header_store_api header_test_store_api(void);
struct header_store_api header_test_store_api(void)
{
    struct header_store_api api;
    api.store_create = flux_store_create;
    api.store_state = flux_store_state;
    api.store_token = flux_store_token;
    api.store_dispatcher = flux_store_dispatcher;
    api.store_is_emitting = flux_store_is_emitting;
    api.store_has_changed = flux_store_has_changed;
    api.store_emit_change = flux_store_emit_change;
    api.store_add_listener = flux_store_add_listener;
    api.store_remove_listener = flux_store_remove_listener;
    api.store_destroy = flux_store_destroy;
    api.store_group_create = flux_store_group_create;
    api.store_group_release = flux_store_group_release;
    api.store_group_token = flux_store_group_token;
    api.store_listener_fail = flux_store_listener_fail;
    api.reduce = 0;
    api.equal = 0;
    api.release = 0;
    api.listener = 0;
    return api;
}

struct header_closure_api header_test_closure_api(void);
struct header_closure_api header_test_closure_api(void)
{
    struct header_closure_api api;
    api.closure_create = flux_closure_create;
    api.closure_code = flux_closure_code;
    api.closure_destroy = flux_closure_destroy;
    api.call = flux_call;
    api.handler = 0;
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

/* The observer struct, filled field by field (C99 and C++ alike). */
flux_observer header_test_observer(void);
flux_observer header_test_observer(void)
{
    flux_observer o;
    o.version = FLUX_OBSERVER_VERSION;
    o.dispatch_begin = 0;
    o.dispatch_end = 0;
    o.callback_begin = 0;
    o.callback_end = 0;
    o.wait_for = 0;
    return o;
}

#ifdef __cplusplus
}
#endif
