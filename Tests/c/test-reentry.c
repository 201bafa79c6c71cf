/*
 * test-reentry.c -- the re-entrancy matrix: from every kind of user code the
 * library calls (a callback, a store's reduce, equal and release_state, a
 * listener, every destroy, a group function, a done, each observer hook, a
 * closure handler), call every public function on the same dispatcher,
 * store, group or registration, and check the status flux.h documents for
 * that situation.
 *
 * Each cell runs in a fresh world (one dispatcher with an observer, a
 * callback, a store with a listener, a group on that store and a closure
 * registered as a callback), triggered the way that kind of user code runs;
 * the probe fires once, at the first call of the kind's user code. Every
 * context and state is a heap block freed by its own release function, so
 * ASan (make check-address) and valgrind (make check-memory) report a leak,
 * a double release or a use after release in any cell.
 */
/* This test's own fields of the world (world.h has the rest). */
#define WORLD_FIELDS \
    int fired;               /* the probe ran (exactly once) */ \
    long got;                /* what the probed call returned */ \
    int probe_done_runs;     /* the probed enqueue's done */ \
    flux_status probe_done_status; \
    int trigger_done_runs;
#define WORLD_OWN "own"
#include "world.h"

/* How the world is driven to run that site. */
enum trigger {
    T_DISPATCH,             /* flux_dispatch() */
    T_ENQUEUE,              /* flux_enqueue() while idle */
    T_UNREGISTER,           /* flux_unregister() of the callback while idle */
    T_UNREGISTER_SELF,      /* the callback unregisters itself in a dispatch */
    T_DISPATCHER_DESTROY,   /* group and store gone, then the dispatcher */
    T_REMOVE_LISTENER,      /* flux_store_remove_listener() while idle */
    T_REMOVE_LISTENER_SELF, /* the listener removes itself in its emit */
    T_STORE_DESTROY,        /* group released, then flux_store_destroy() */
    T_GROUP_RELEASE,        /* flux_store_group_release() while idle */
    T_GROUP_RELEASE_SELF,   /* the group function releases its group */
    T_OBSERVER_REPLACE,     /* flux_dispatcher_set_observer() while idle */
    T_OBSERVER_REPLACE_IN,  /* the callback replaces the observer in a dispatch */
    T_FAILED_CREATE,        /* a create that fails (row's failing) while idle */
    T_FAILED_CREATE_IN,     /* the same from inside the callback */
};

/* Which create fails, by an argument it refuses, for T_FAILED_CREATE*. */
enum failing {
    FAIL_NONE, FAIL_REGISTER, FAIL_STORE_CREATE, FAIL_GROUP_CREATE, FAIL_ADD_LISTENER,
    FAIL_SET_OBSERVER, FAIL_CLEAR_OBSERVER, FAIL_CLOSURE_CREATE, FAIL_ENQUEUE,
};

/*
 * One row per kind of user code. Each expectation string has one entry per
 * column of enum fn, in that order (spaces ignored): a digit is the
 * flux_status expected (or, for is_dispatching, is_emitting and the
 * readers/version checks, the int expected), '-' a cell not run because
 * flux.h leaves it undefined or the object is already gone.
 *
 *   D dispatch  T try_dispatch  E enqueue  R register  U unregister(own)
 *   W wait_for(own)  I is_dispatching  X dispatcher_destroy  O set_observer
 *   o clear observer  C store_create  S store_destroy(own)  A add_listener
 *   r remove_listener  M emit_change  H has_changed  F listener_fail
 *   G group_create  g group_release(own)  e is_emitting  q readers
 *   c closure  n dispatcher_create  v errors/version  K dispatcher_close
 *
 * "Own token": the callback's or closure's for those, the store's for the
 * store's user code and the group's function (flux_unregister() refuses a
 * store's token: INVALID_ARGUMENT), the plain callback's for the rest.
 */
struct row {
    const char *name;
    enum site site;
    enum trigger trigger;
    const char *expect;
    enum failing failing;
};

/* Inside a dispatch, on its thread ("Threading", "Stores", "Observer"). */
#define IN_CALLBACK   "3 3 0 0 0 5 1 3 0 0 0 3 0 0 4 0 4 0 0 0 1 0 0 1 3"
/* An observer hook or a done: like a callback, but no wait ("Observer"). */
#define IN_HOOK       "3 3 0 0 0 4 1 3 0 0 0 3 0 0 4 0 4 0 0 0 1 0 0 1 3"
/* Outside any dispatch, with the world's store and group alive (so K, close,
 * is refused: "d still has stores or groups"). */
#define IDLE(U, S, r, g) "0 0 0 0 " U " 4 0 1 0 0 0 " S " 0 " r " 4 4 4 0 " g " 0 1 0 0 1 1"
/* While flux_store_destroy() runs the store's releases ("Ownership"). */
#define IN_STORE_DESTROY "0 0 0 0 2 4 0 1 0 0 0 1 1 2 4 4 4 1 - 0 1 0 0 1 1"

static const struct row rows[] = {
    {"callback", SITE_CALLBACK, T_DISPATCH, IN_CALLBACK, FAIL_NONE},
    {"closure handler registered as a callback", SITE_CLOSURE, T_DISPATCH, IN_CALLBACK, FAIL_NONE},
    /* The store's callback is running: a wait for it is circular; only the
     * reduce may emit; only a listener or group function may fail itself. */
    {"reduce", SITE_REDUCE, T_DISPATCH, "3 3 0 0 1 5 1 3 0 0 0 3 0 0 0 0 4 0 0 0 1 0 0 1 3", FAIL_NONE},
    {"equal", SITE_EQUAL, T_DISPATCH, "3 3 0 0 1 5 1 3 0 0 0 3 0 0 4 0 4 0 0 0 1 0 0 1 3", FAIL_NONE},
    {"release_state in a dispatch", SITE_RELEASE, T_DISPATCH,
     "3 3 0 0 1 5 1 3 0 0 0 3 0 0 4 0 4 0 0 0 1 0 0 1 3", FAIL_NONE},
    {"listener", SITE_LISTENER, T_DISPATCH, "3 3 0 0 1 5 1 3 0 0 0 3 0 0 4 0 0 0 0 1 1 0 0 1 3", FAIL_NONE},
    /* The group waits for the store, which has finished: waiting again is
     * a no-op. */
    {"group function", SITE_GROUP, T_DISPATCH, "3 3 0 0 1 0 1 3 0 0 0 3 0 0 4 0 0 0 0 0 1 0 0 1 3", FAIL_NONE},
    {"observer dispatch_begin", SITE_DISPATCH_BEGIN, T_DISPATCH, IN_HOOK, FAIL_NONE},
    {"observer callback_begin", SITE_CALLBACK_BEGIN, T_DISPATCH, IN_HOOK, FAIL_NONE},
    {"observer callback_end", SITE_CALLBACK_END, T_DISPATCH, IN_HOOK, FAIL_NONE},
    {"observer wait_for", SITE_WAIT_FOR, T_DISPATCH, IN_HOOK, FAIL_NONE},
    {"observer dispatch_end", SITE_DISPATCH_END, T_DISPATCH, IN_HOOK, FAIL_NONE},
    {"enqueue's done", SITE_DONE, T_ENQUEUE, IN_HOOK, FAIL_NONE},
    /* A registration's destroy never runs inside a dispatch ("Ownership"). */
    {"registration destroy on unregister", SITE_REG_DESTROY, T_UNREGISTER, IDLE("2", "1", "0", "0"), FAIL_NONE},
    {"registration destroy deferred to the dispatch's end", SITE_REG_DESTROY, T_UNREGISTER_SELF,
     IDLE("2", "1", "0", "0"), FAIL_NONE},
    /* "calls on the dispatcher being destroyed fail with
     * FLUX_ERR_INVALID_ARGUMENT"; its store and group are gone already.
     * flux_dispatcher_close() too: it answered FLUX_OK ("closed already"),
     * promising a d that stays valid, which the outer destroy then frees. */
    {"registration destroy in flux_dispatcher_destroy", SITE_REG_DESTROY, T_DISPATCHER_DESTROY,
     "1 1 1 1 1 1 - 1 1 1 1 - - - - - 1 - - - - 0 0 1 1", FAIL_NONE},
    {"listener destroy on remove", SITE_LISTENER_DESTROY, T_REMOVE_LISTENER,
     IDLE("1", "1", "2", "0"), FAIL_NONE},
    /* Run right after the listener returns, still inside the emit. */
    {"listener destroy of a listener removing itself", SITE_LISTENER_DESTROY,
     T_REMOVE_LISTENER_SELF, "3 3 0 0 1 5 1 3 0 0 0 3 0 2 4 0 4 0 0 - 1 0 0 1 3", FAIL_NONE},
    {"listener destroy in flux_store_destroy", SITE_LISTENER_DESTROY, T_STORE_DESTROY,
     IN_STORE_DESTROY, FAIL_NONE},
    {"release_state in flux_store_destroy", SITE_RELEASE, T_STORE_DESTROY, IN_STORE_DESTROY, FAIL_NONE},
    {"store context destroy", SITE_STORE_DESTROY, T_STORE_DESTROY, IN_STORE_DESTROY, FAIL_NONE},
    /* The group's own release from its destroy is a second release: '-'. */
    {"group destroy on release", SITE_GROUP_DESTROY, T_GROUP_RELEASE, IDLE("1", "0", "0", "-"), FAIL_NONE},
    {"group destroy deferred to the dispatch's end", SITE_GROUP_DESTROY, T_GROUP_RELEASE_SELF,
     IDLE("1", "0", "0", "-"), FAIL_NONE},
    {"observer destroy on replace", SITE_OBSERVER_DESTROY, T_OBSERVER_REPLACE,
     IDLE("0", "1", "0", "0"), FAIL_NONE},
    {"observer destroy deferred to the dispatch's end", SITE_OBSERVER_DESTROY,
     T_OBSERVER_REPLACE_IN, IDLE("0", "1", "0", "0"), FAIL_NONE},
    /* A failing create's destroy runs at once on the caller's thread: idle,
     * or inside the caller's callback, where it acts as the callback does
     * ("Ownership"); a refused enqueue's done likewise (flux_done_fn). */
    {"destroy of a failed flux_register", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_REGISTER},
    {"destroy of a failed flux_register in a callback", SITE_FAILED_DESTROY, T_FAILED_CREATE_IN,
     IN_CALLBACK, FAIL_REGISTER},
    {"destroy of a failed flux_store_create", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_STORE_CREATE},
    {"destroy of a failed flux_store_create in a callback", SITE_FAILED_DESTROY,
     T_FAILED_CREATE_IN, IN_CALLBACK, FAIL_STORE_CREATE},
    {"destroy of a failed flux_store_group_create", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_GROUP_CREATE},
    {"destroy of a failed flux_store_group_create in a callback", SITE_FAILED_DESTROY,
     T_FAILED_CREATE_IN, IN_CALLBACK, FAIL_GROUP_CREATE},
    {"destroy of a failed flux_store_add_listener", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_ADD_LISTENER},
    {"destroy of a failed flux_store_add_listener in a callback", SITE_FAILED_DESTROY,
     T_FAILED_CREATE_IN, IN_CALLBACK, FAIL_ADD_LISTENER},
    {"destroy of a refused observer", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_SET_OBSERVER},
    {"destroy of a refused observer in a callback", SITE_FAILED_DESTROY, T_FAILED_CREATE_IN,
     IN_CALLBACK, FAIL_SET_OBSERVER},
    {"destroy of a clearing's context", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_CLEAR_OBSERVER},
    {"destroy of a clearing's context in a callback", SITE_FAILED_DESTROY, T_FAILED_CREATE_IN,
     IN_CALLBACK, FAIL_CLEAR_OBSERVER},
    {"destroy of a failed flux_closure_create", SITE_FAILED_DESTROY, T_FAILED_CREATE,
     IDLE("0", "1", "0", "0"), FAIL_CLOSURE_CREATE},
    {"destroy of a failed flux_closure_create in a callback", SITE_FAILED_DESTROY,
     T_FAILED_CREATE_IN, IN_CALLBACK, FAIL_CLOSURE_CREATE},
    {"done of a refused flux_enqueue", SITE_DONE, T_FAILED_CREATE, IDLE("0", "1", "0", "0"),
     FAIL_ENQUEUE},
    /* Refused for a NULL dispatcher, it has no dispatcher to refuse a wait
     * for: it waits as the callback that enqueued it does (flux_done_fn). */
    {"done of a refused flux_enqueue in a callback", SITE_DONE, T_FAILED_CREATE_IN, IN_CALLBACK,
     FAIL_ENQUEUE},
};

enum { ROWS = sizeof rows / sizeof rows[0] };

/* ---- the world -------------------------------------------------------- */

static void probe_done(void *context, void *p, flux_status status)
{
    (void)context; (void)p;
    W.probe_done_runs++;
    W.probe_done_status = status;
}

static flux_token own_token(enum site site)
{
    switch (site) {
    case SITE_CLOSURE: return W.closure_token;
    case SITE_REDUCE: case SITE_EQUAL: case SITE_RELEASE: case SITE_LISTENER:
    case SITE_GROUP: case SITE_LISTENER_DESTROY: case SITE_STORE_DESTROY:
    case SITE_GROUP_DESTROY:
        return W.store_token;
    default: return W.callback_token;
    }
}

static void probe(enum site site)
{
    if (W.row == NULL || W.row->site != site || W.fired)
        return;
    W.fired = 1;
    W.got = call_fn(site, true);
}

/* ---- the user code ------------------------------------------------------ */

static void trigger_done(void *context, void *p, flux_status status);

static void failed_destroy(void *context)
{
    probe(SITE_FAILED_DESTROY);
    free(context);
}

/* Makes the row's create fail on an argument it refuses; its destroy (or
 * done) has run by the time it returns. */
static void fail_a_create(void)
{
    flux_status st = FLUX_OK;
    flux_token token = 1;
    flux_store *s = W.s;
    flux_store_group *g = W.g;
    flux_listener_id id = 1;
    flux_closure *c = W.closure;
    const flux_observer bad = {0, NULL, NULL, NULL, NULL, NULL};
    switch (W.row->failing) {
    case FAIL_REGISTER:
        st = flux_register(W.d, NULL, block(), failed_destroy, &token);
        REQUIRE(token == 0);
        break;
    case FAIL_STORE_CREATE:
        st = flux_store_create(W.d, block(), NULL, NULL, free_state, block(), failed_destroy, &s);
        REQUIRE(s == NULL);
        break;
    case FAIL_GROUP_CREATE:
        st = flux_store_group_create(&W.s, 0, quiet_listener, block(), failed_destroy, &g);
        REQUIRE(g == NULL);
        break;
    case FAIL_ADD_LISTENER:
        st = flux_store_add_listener(W.s, NULL, block(), failed_destroy, &id);
        REQUIRE(id == 0);
        break;
    case FAIL_SET_OBSERVER:
        st = flux_dispatcher_set_observer(W.d, &bad, block(), failed_destroy);
        break;
    case FAIL_CLEAR_OBSERVER:
        /* Succeeds, but takes no context: destroyed at once all the same. */
        REQUIRE(flux_dispatcher_set_observer(W.d, NULL, block(), failed_destroy) == FLUX_OK);
        return;
    case FAIL_CLOSURE_CREATE:
        st = flux_closure_create("i(pq)", quiet_handler, block(), failed_destroy, &c);
        REQUIRE(c == NULL);
        break;
    case FAIL_ENQUEUE:
        st = flux_enqueue(NULL, (void *)payload, trigger_done, NULL);
        REQUIRE(W.trigger_done_runs == 1);
        break;
    case FAIL_NONE:
        break;
    }
    REQUIRE(st == FLUX_ERR_INVALID_ARGUMENT);
}

static int world_callback(void *context, const void *p)
{
    (void)context; (void)p;
    probe(SITE_CALLBACK);
    if (W.row->trigger == T_UNREGISTER_SELF)
        REQUIRE(flux_unregister(W.d, W.callback_token) == FLUX_OK);
    if (W.row->trigger == T_OBSERVER_REPLACE_IN)
        REQUIRE(flux_dispatcher_set_observer(W.d, &quiet_hooks, block(), free_context) == FLUX_OK);
    if (W.row->trigger == T_FAILED_CREATE_IN && !W.fired)
        fail_a_create();
    return 0;
}

static void world_callback_destroy(void *context)
{
    probe(SITE_REG_DESTROY);
    free(context);
}

static void world_store_destroy(void *context)
{
    probe(SITE_STORE_DESTROY);
    free(context);
}

static void world_listener(void *context)
{
    (void)context;
    probe(SITE_LISTENER);
    if (W.row->trigger == T_REMOVE_LISTENER_SELF)
        REQUIRE(flux_store_remove_listener(W.s, W.listener) == FLUX_OK);
}

static void world_listener_destroy(void *context)
{
    probe(SITE_LISTENER_DESTROY);
    free(context);
}

static void world_group(void *context)
{
    (void)context;
    probe(SITE_GROUP);
    if (W.row->trigger == T_GROUP_RELEASE_SELF && W.g != NULL) {
        REQUIRE(flux_store_group_release(W.g) == FLUX_OK);
        W.g = NULL;
    }
}

static void world_group_destroy(void *context)
{
    probe(SITE_GROUP_DESTROY);
    free(context);
}

static void world_observer_destroy(void *context)
{
    probe(SITE_OBSERVER_DESTROY);
    free(context);
}

static void trigger_done(void *context, void *p, flux_status status)
{
    (void)context; (void)p; (void)status;
    probe(SITE_DONE);
    W.trigger_done_runs++;
}

static void world_setup(const struct row *row, enum fn fn)
{
    memset(&W, 0, sizeof W);
    W.fn = fn;
    world_create(NULL, NULL, world_store_destroy);
    W.row = row;   /* from here on, the probe may fire */
}

/* Releases the group, then destroys the store (a store in a live group
 * cannot be destroyed, nor a dispatcher that has stores). */
static void destroy_group_and_store(void)
{
    REQUIRE(flux_store_group_release(W.g) == FLUX_OK);
    W.g = NULL;
    REQUIRE(flux_store_destroy(W.s) == FLUX_OK);
    W.s = NULL;
}

static void run_trigger(void)
{
    switch (W.row->trigger) {
    case T_DISPATCH: case T_UNREGISTER_SELF: case T_REMOVE_LISTENER_SELF:
    case T_GROUP_RELEASE_SELF: case T_OBSERVER_REPLACE_IN: case T_FAILED_CREATE_IN:
        (void)flux_dispatch(W.d, payload);   /* a listener_fail may fail it */
        break;
    case T_ENQUEUE:
        (void)flux_enqueue(W.d, (void *)payload, trigger_done, NULL);
        REQUIRE(W.trigger_done_runs == 1);
        break;
    case T_UNREGISTER:
        REQUIRE(flux_unregister(W.d, W.callback_token) == FLUX_OK);
        break;
    case T_DISPATCHER_DESTROY:
        destroy_group_and_store();
        REQUIRE(flux_dispatcher_destroy(W.d) == FLUX_OK);
        W.d = NULL;
        break;
    case T_REMOVE_LISTENER:
        REQUIRE(flux_store_remove_listener(W.s, W.listener) == FLUX_OK);
        break;
    case T_STORE_DESTROY:
        destroy_group_and_store();
        break;
    case T_GROUP_RELEASE:
        REQUIRE(flux_store_group_release(W.g) == FLUX_OK);
        W.g = NULL;
        break;
    case T_OBSERVER_REPLACE:
        REQUIRE(flux_dispatcher_set_observer(W.d, &quiet_hooks, block(), free_context) == FLUX_OK);
        break;
    case T_FAILED_CREATE:
        fail_a_create();
        break;
    }
}

/* Lets go of everything, each step with the status flux.h promises once no
 * dispatch runs; ASan and valgrind see what is left over. */
static void world_teardown(void)
{
    world_release_stores();
    if (W.d != NULL) {
        is_int(flux_is_dispatching(W.d), 0, "the dispatcher is idle afterwards");
        EXPECT_OK(flux_dispatcher_destroy(W.d));
    }
    EXPECT_OK(flux_closure_destroy(W.closure));
}

static void run_cell(const struct row *row, enum fn fn, long want)
{
    world_setup(row, fn);
    run_trigger();
    int fired = W.fired;
    long got = W.got;
    int enqueued = fn == F_ENQUEUE && got == FLUX_OK;
    int done_runs = W.probe_done_runs;
    flux_status done_status = W.probe_done_status;
    world_teardown();
    if (!ok(fired, "%s: the probe ran", row->name))
        return;
    if (got != want)
        diag("flux_last_error(): \"%s\"", flux_last_error());
    is_int(got, want, "%s: %s -> %ld", row->name, fn_names[fn], want);
    if (fn == F_ENQUEUE)
        ok(done_runs == 1 && (!enqueued || done_status == FLUX_OK),
           "%s: the enqueued payload's done ran once (%d times, %s)", row->name, done_runs,
           flux_status_name(done_status));
}

static void test_matrix(void)
{
    int cells = 0;
    for (size_t r = 0; r < ROWS; r++) {
        int want[F_COUNT];
        parse_expect(rows[r].expect, want);
        for (int fn = 0; fn < F_COUNT; fn++) {
            if (want[fn] >= 0) {
                run_cell(&rows[r], (enum fn)fn, want[fn]);
                cells++;
            }
        }
    }
    diag("%d kinds x %d functions: %d cells run", (int)ROWS, (int)F_COUNT, cells);
}

int main(void)
{
    tap_init();
    tap_watchdog_seconds *= 4;   /* one case runs the whole matrix */
    RUN(test_matrix);
    return tap_done();
}
