/*
 * world.h -- the world the re-entrancy matrices share (test-reentry.c, one
 * thread; test-crossthread.c, another thread): the sites where user code
 * runs, the public calls probed (the columns), the world's objects and the
 * user code that only reports its site.
 *
 * Includes helpers.h. The includer first defines WORLD_FIELDS (its own
 * fields of W) and WORLD_OWN (how its column names call the world's store
 * and group: the test names stay as they were), and afterwards its struct
 * row (only W.row's pointer is stored here) and the functions declared
 * below as the test's own.
 */
#ifndef FLUX_TEST_WORLD_H
#define FLUX_TEST_WORLD_H

#include "helpers.h"

/* Where user code runs: each site calls probe() when it is entered. */
enum site {
    SITE_CALLBACK, SITE_CLOSURE, SITE_REDUCE, SITE_EQUAL, SITE_RELEASE,
    SITE_LISTENER, SITE_GROUP, SITE_DISPATCH_BEGIN, SITE_CALLBACK_BEGIN,
    SITE_CALLBACK_END, SITE_WAIT_FOR, SITE_DISPATCH_END, SITE_DONE,
    SITE_REG_DESTROY, SITE_LISTENER_DESTROY, SITE_STORE_DESTROY,
    SITE_GROUP_DESTROY, SITE_OBSERVER_DESTROY,
    SITE_FAILED_DESTROY,    /* the destroy a failing create runs at once */
};

/* The functions called from (or alongside) the site, one column each. */
enum fn {
    F_DISPATCH, F_TRY_DISPATCH, F_ENQUEUE, F_REGISTER, F_UNREGISTER_OWN,
    F_WAIT_FOR_OWN, F_IS_DISPATCHING, F_DISPATCHER_DESTROY, F_SET_OBSERVER,
    F_CLEAR_OBSERVER, F_STORE_CREATE, F_STORE_DESTROY, F_ADD_LISTENER,
    F_REMOVE_LISTENER, F_EMIT_CHANGE, F_HAS_CHANGED, F_LISTENER_FAIL,
    F_GROUP_CREATE, F_GROUP_RELEASE, F_IS_EMITTING, F_STORE_READERS,
    F_CLOSURE, F_DISPATCHER_CREATE, F_ERRORS_VERSION, F_DISPATCHER_CLOSE,
    F_COUNT
};

static const char *const fn_names[F_COUNT] = {
    "flux_dispatch", "flux_try_dispatch", "flux_enqueue", "flux_register",
    "flux_unregister(own token)", "flux_wait_for(own token)", "flux_is_dispatching",
    "flux_dispatcher_destroy", "flux_dispatcher_set_observer",
    "flux_dispatcher_set_observer(NULL)", "flux_store_create",
    "flux_store_destroy(" WORLD_OWN " store)", "flux_store_add_listener",
    "flux_store_remove_listener(the listener)", "flux_store_emit_change",
    "flux_store_has_changed", "flux_store_listener_fail", "flux_store_group_create",
    "flux_store_group_release(" WORLD_OWN " group)", "flux_store_is_emitting",
    "flux_store_state/token/dispatcher", "flux_closure_create/code/call/destroy",
    "flux_dispatcher_create/destroy", "flux_status_name/last_error*/version*",
    "flux_dispatcher_close",
};

static struct world {
    const struct row *row;   /* NULL: the probe may not fire */
    enum fn fn;
    flux_dispatcher *d;
    flux_store *s;
    flux_store_group *g;
    flux_closure *closure;
    flux_token callback_token, closure_token, store_token;
    flux_listener_id listener;
    /* Made by the probed call, let go of after the cell. */
    flux_store *extra_store;
    flux_store_group *extra_group;
    atomic_int dispatch_ends;   /* observer dispatch_end hooks seen */
    WORLD_FIELDS
} W;

static const char payload[] = "payload";
static const char payload2[] = "payload2";

/* The test's own: what differs between the two matrices. */
static void probe(enum site site);
static void probe_done(void *context, void *p, flux_status status);
static flux_token own_token(enum site site);
static int world_callback(void *context, const void *p);
static void world_callback_destroy(void *context);
static void world_listener(void *context);
static void world_listener_destroy(void *context);
static void world_group(void *context);
static void world_group_destroy(void *context);
static void world_observer_destroy(void *context);

static void *block(void)
{
    int *p = malloc(sizeof *p);
    REQUIRE(p != NULL);
    *p = 1;
    return p;
}

static void free_context(void *context) { free(context); }
static void free_state(void *context, void *state) { (void)context; free(state); }
static void quiet_listener(void *context) { (void)context; }
static int quiet_callback(void *context, const void *p) { (void)context; (void)p; return 0; }
static int quiet_reduce(void *context, void *state, const void *p, void **next)
{
    (void)context; (void)state; (void)p; (void)next;
    return 0;
}
static void quiet_handler(void *userdata, void *ret, void **args)
{
    (void)userdata; (void)args; (void)ret;
}

static const flux_observer quiet_hooks = {FLUX_OBSERVER_VERSION, NULL, NULL, NULL, NULL, NULL};

/* Calls W.fn as from the site, returning its result. read_state: whether
 * the store's state may be read (not while another thread may replace it). */
static long call_fn(enum site site, bool read_state)
{
    flux_token own = own_token(site);
    flux_token token = 0;
    flux_listener_id id = 0;
    int changed = -1;
    flux_status st;
    switch (W.fn) {
    case F_DISPATCH: return flux_dispatch(W.d, payload2);
    case F_TRY_DISPATCH: return flux_try_dispatch(W.d, payload2);
    case F_ENQUEUE: return flux_enqueue(W.d, (void *)payload2, probe_done, NULL);
    case F_REGISTER:
        st = flux_register(W.d, quiet_callback, block(), free_context, &token);
        return (st == FLUX_OK) != (token != 0) ? 99 : st;
    case F_UNREGISTER_OWN: return flux_unregister(W.d, own);
    case F_WAIT_FOR_OWN: return flux_wait_for(W.d, &own, 1);
    case F_IS_DISPATCHING: return flux_is_dispatching(W.d);
    case F_DISPATCHER_DESTROY:
        st = flux_dispatcher_destroy(W.d);
        if (st == FLUX_OK)
            W.d = NULL;   /* gone: the teardown must not touch it */
        return st;
    case F_SET_OBSERVER: return flux_dispatcher_set_observer(W.d, &quiet_hooks, block(), free_context);
    case F_CLEAR_OBSERVER: return flux_dispatcher_set_observer(W.d, NULL, NULL, NULL);
    case F_STORE_CREATE: {
        flux_store *s = NULL;
        st = flux_store_create(W.d, block(), quiet_reduce, NULL, free_state, block(),
                               free_context, &s);
        W.extra_store = s;
        return (st == FLUX_OK) != (s != NULL) ? 99 : st;
    }
    case F_STORE_DESTROY:
        st = flux_store_destroy(W.s);
        if (st == FLUX_OK)
            W.s = NULL;
        return st;
    case F_ADD_LISTENER:
        st = flux_store_add_listener(W.s, quiet_listener, block(), free_context, &id);
        return (st == FLUX_OK) != (id != 0) ? 99 : st;
    case F_REMOVE_LISTENER: return flux_store_remove_listener(W.s, W.listener);
    case F_EMIT_CHANGE: return flux_store_emit_change(W.s);
    case F_HAS_CHANGED:
        st = flux_store_has_changed(W.s, &changed);
        return changed != 0 && changed != 1 ? 99 : st;
    case F_LISTENER_FAIL: return flux_store_listener_fail(W.d, 7);
    case F_GROUP_CREATE: {
        flux_store_group *g = NULL;
        st = flux_store_group_create(&W.s, 1, quiet_listener, block(), free_context, &g);
        W.extra_group = g;
        return (st == FLUX_OK) != (g != NULL) ? 99 : st;
    }
    case F_GROUP_RELEASE:
        st = flux_store_group_release(W.g);
        if (st == FLUX_OK)
            W.g = NULL;
        return st;
    case F_IS_EMITTING: return flux_store_is_emitting(W.s);
    case F_STORE_READERS:
        if (read_state)
            (void)flux_store_state(W.s);
        return flux_store_token(W.s) == W.store_token && flux_store_dispatcher(W.s) == W.d;
    case F_CLOSURE: {
        flux_closure *c = NULL;
        st = flux_closure_create("v(p)", quiet_handler, block(), free_context, &c);
        if (st != FLUX_OK)
            return st;
        void *arg = NULL;
        void *args[] = {&arg};
        st = flux_call(flux_closure_code(c), "v(p)", NULL, args);
        flux_status st2 = flux_closure_destroy(c);
        return st != FLUX_OK ? st : st2;
    }
    case F_DISPATCHER_CREATE: {
        flux_dispatcher *d = flux_dispatcher_create();
        return d == NULL ? FLUX_ERR_NO_MEMORY : flux_dispatcher_destroy(d);
    }
    case F_ERRORS_VERSION:
        return flux_version() == FLUX_VERSION_NUMBER
            && strcmp(flux_version_string(), FLUX_VERSION_STRING) == 0
            && strcmp(flux_status_name(FLUX_ERR_CIRCULAR), "FLUX_ERR_CIRCULAR") == 0
            && flux_last_error() != NULL && flux_last_error_cycle(NULL, 0) < 1000
            && flux_last_error_token() < 1000000;
    case F_DISPATCHER_CLOSE: return flux_dispatcher_close(W.d);
    case F_COUNT: break;
    }
    return 99;
}

/* A row's expectation string, one entry per column of enum fn (spaces
 * ignored): want[fn] is the digit, or -1 for '-' (a cell not run). */
static void parse_expect(const char *e, int want[F_COUNT])
{
    int column = 0;
    for (; *e != '\0'; e++) {
        if (*e == ' ')
            continue;
        REQUIRE(column < F_COUNT);
        REQUIRE(*e == '-' || (*e >= '0' && *e <= '9'));
        want[column++] = *e == '-' ? -1 : *e - '0';
    }
    REQUIRE(column == F_COUNT);   /* a row of the wrong length is a typo */
}

/* ---- user code that only reports its site ------------------------------ */

static void world_handler(void *userdata, void *ret, void **args)
{
    (void)userdata; (void)args;
    probe(SITE_CLOSURE);
    *(int32_t *)ret = 0;
}

static int world_reduce(void *context, void *state, const void *p, void **next)
{
    (void)context; (void)p;
    probe(SITE_REDUCE);
    int *n = malloc(sizeof *n);
    if (n == NULL)
        return 1;
    *n = *(int *)state + 1;
    *next = n;
    return 0;
}

static int world_equal(void *context, const void *a, const void *b)
{
    (void)context;
    probe(SITE_EQUAL);
    return *(const int *)a == *(const int *)b;
}

static void world_release(void *context, void *state)
{
    (void)context;
    probe(SITE_RELEASE);
    free(state);
}

static void hook_dispatch_begin(void *context, const void *p)
{
    (void)context; (void)p;
    probe(SITE_DISPATCH_BEGIN);
}
static void hook_dispatch_end(void *context, const void *p, flux_status status)
{
    (void)context; (void)p; (void)status;
    atomic_fetch_add(&W.dispatch_ends, 1);
    probe(SITE_DISPATCH_END);
}
static void hook_callback_begin(void *context, flux_token token)
{
    (void)context; (void)token;
    probe(SITE_CALLBACK_BEGIN);
}
static void hook_callback_end(void *context, flux_token token, int result)
{
    (void)context; (void)token; (void)result;
    probe(SITE_CALLBACK_END);
}
static void hook_wait_for(void *context, flux_token waiter, const flux_token *tokens, size_t count)
{
    (void)context; (void)waiter; (void)tokens; (void)count;
    probe(SITE_WAIT_FOR);
}

static const flux_observer world_hooks = {
    FLUX_OBSERVER_VERSION, hook_dispatch_begin, hook_dispatch_end, hook_callback_begin,
    hook_callback_end, hook_wait_for,
};

/* ---- building and letting go of the world -------------------------------- */

/* Creates, in this registration order: the observer, the waiter (if any),
 * the callback, the store with its listener, the group, the closure as a
 * callback; so one dispatch runs every site. */
static void world_create(flux_callback waiter, flux_token *waiter_token,
                         flux_destroy store_destroy)
{
    W.d = flux_dispatcher_create();
    REQUIRE(W.d != NULL);
    REQUIRE(flux_dispatcher_set_observer(W.d, &world_hooks, block(), world_observer_destroy) == FLUX_OK);
    if (waiter != NULL)
        REQUIRE(flux_register(W.d, waiter, block(), free_context, waiter_token) == FLUX_OK);
    REQUIRE(flux_register(W.d, world_callback, block(), world_callback_destroy, &W.callback_token) == FLUX_OK);
    REQUIRE(flux_store_create(W.d, block(), world_reduce, world_equal, world_release, block(),
                              store_destroy, &W.s) == FLUX_OK);
    W.store_token = flux_store_token(W.s);
    REQUIRE(flux_store_add_listener(W.s, world_listener, block(), world_listener_destroy,
                                    &W.listener) == FLUX_OK);
    REQUIRE(flux_store_group_create(&W.s, 1, world_group, block(), world_group_destroy, &W.g) == FLUX_OK);
    REQUIRE(flux_closure_create("i(pp)", world_handler, NULL, NULL, &W.closure) == FLUX_OK);
    REQUIRE(flux_register(W.d, (flux_callback)flux_closure_code(W.closure), NULL, NULL,
                          &W.closure_token) == FLUX_OK);
}

/* Lets go of what the probed call made, then of the group and the store,
 * each with the status flux.h promises once no dispatch runs. */
static void world_release_stores(void)
{
    W.row = NULL;
    if (W.extra_group != NULL)
        EXPECT_OK(flux_store_group_release(W.extra_group));
    if (W.extra_store != NULL)
        EXPECT_OK(flux_store_destroy(W.extra_store));
    if (W.g != NULL)
        EXPECT_OK(flux_store_group_release(W.g));
    if (W.s != NULL)
        EXPECT_OK(flux_store_destroy(W.s));
}

#endif
