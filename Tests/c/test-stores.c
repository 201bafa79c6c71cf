/*
 * test-stores.c -- flux_store_* and flux_store_group_*: the cases of
 * Facebook's FluxStore-test.js, FluxReduceStore-test.js and
 * FluxStoreGroup-test.js (same names), then every rule of DESIGN.md
 * section 6's "Details", ownership under failure, and the edges: listeners
 * that add, remove or dispatch during an emit, reduce failing mid-chain,
 * stores and dispatchers destroyed at the wrong time.
 *
 * States and contexts are heap blocks freed by their release/destroy
 * functions, with a magic field, so a double release or a use after release
 * shows up without valgrind, and a leak under it (make check-memory).
 */
#include "helpers.h"

enum { ALIVE = 0x57a7e, DEAD = 0xdead };

/* ---- states: heap integers, released exactly once ----------------------- */

typedef struct st {
    int magic;
    int v;
} st;

static struct {
    int live;            /* states allocated and not yet released */
    int released;        /* release_state calls */
    int bad;             /* release or use of a state that was not alive */
    trace events;        /* what happened, in order (see EV_*) */
} L;

/* Event codes in L.events. */
enum {
    EV_REDUCE = 100,      /* + store id */
    EV_RELEASE = 200,     /* + state value */
    EV_LISTENER = 300,    /* + listener id */
    EV_LISTENER_END = 400,
    EV_LISTENER_DESTROY = 500,
    EV_CONTEXT_DESTROY = 600, /* + store id */
    EV_GROUP = 700,
    EV_GROUP_DESTROY = 800,
    EV_EQUAL = 900,
    EV_CALLBACK = 1000,
};

static void ledger_reset(void)
{
    memset(&L, 0, sizeof L);
}

static st *st_new(int v)
{
    st *s = malloc(sizeof *s);
    REQUIRE(s != NULL);
    s->magic = ALIVE;
    s->v = v;
    L.live++;
    return s;
}

static int st_value(const void *p)
{
    const st *s = p;
    if (s == NULL)
        return -1;
    if (s->magic != ALIVE) {
        L.bad++;
        return -2;
    }
    return s->v;
}

static void st_free(st *s)
{
    if (s->magic != ALIVE) {
        L.bad++;
        return;
    }
    s->magic = DEAD;
    L.live--;
    free(s);
}

static void st_release(void *context, void *state)
{
    (void)context;
    st *s = state;
    L.released++;
    if (s == NULL)
        return;
    trace_push(&L.events, EV_RELEASE + (s->magic == ALIVE ? s->v : 99));
    st_free(s);
}

static int st_equal(void *context, const void *a, const void *b)
{
    (void)context;
    trace_push(&L.events, EV_EQUAL + st_value(a) * 10 + st_value(b));
    return st_value(a) == st_value(b);
}

/* ---- a scriptable store context ---------------------------------------- */

typedef struct tstore tstore;
/* Runs inside reduce, before the action; non-zero fails the reduce. */
typedef int (*reduce_hook)(tstore *t, void *state, const char *action, void **next);

struct tstore {
    int magic;
    int id;
    flux_dispatcher *d;
    flux_store *s;
    int reduces;
    reduce_hook hook;
    void *user;
    flux_status emit_status;
};

static int destroyed_contexts;

static tstore *tstore_new(int id, flux_dispatcher *d)
{
    tstore *t = calloc(1, sizeof *t);
    REQUIRE(t != NULL);
    t->magic = ALIVE;
    t->id = id;
    t->d = d;
    t->emit_status = (flux_status)-1;
    return t;
}

static void tstore_destroy(void *context)
{
    tstore *t = context;
    if (t->magic != ALIVE) {
        L.bad++;
        return;
    }
    t->magic = DEAD;
    trace_push(&L.events, EV_CONTEXT_DESTROY + t->id);
    destroyed_contexts++;
    free(t);
}

/*
 * Actions (the payload is a string):
 *   "inc"    next = a new state v+1          "same"  next = state
 *   "equal"  next = a new state, same v      "emit"  emit_change, next = state
 *   "fail"   returns 7, allocates nothing    "fail-new"  allocates a new
 *            state, sets *next to it, frees it itself, returns 7
 *   anything else: next = state
 */
static int t_reduce(void *context, void *state, const void *payload, void **next)
{
    tstore *t = context;
    if (t->magic != ALIVE) {
        L.bad++;
        return 0;
    }
    t->reduces++;
    trace_push(&L.events, EV_REDUCE + t->id);
    const char *action = payload;
    if (*next != state)
        L.bad++; /* *next must hold state on entry */
    if (t->hook) {
        int r = t->hook(t, state, action, next);
        if (r != 0)
            return r;
        if (*next != state)
            return 0;
    }
    if (action == NULL)
        return 0;
    if (strcmp(action, "inc") == 0) {
        *next = st_new(st_value(state) + 1);
    } else if (strcmp(action, "equal") == 0) {
        *next = st_new(st_value(state));
    } else if (strcmp(action, "emit") == 0) {
        t->emit_status = flux_store_emit_change(t->s);
    } else if (strcmp(action, "fail") == 0) {
        return 7;
    } else if (strcmp(action, "fail-new") == 0) {
        st *n = st_new(st_value(state) + 50);
        *next = n;
        st_free(n);
        return 7;
    }
    return 0;
}

/* A store with state value v, the scriptable reduce, st_equal (or NULL). */
static tstore *make_store(flux_dispatcher *d, int id, int v, bool with_equal)
{
    tstore *t = tstore_new(id, d);
    flux_status s = flux_store_create(d, st_new(v), t_reduce, with_equal ? st_equal : NULL,
                                      st_release, t, tstore_destroy, &t->s);
    REQUIRE(s == FLUX_OK);
    return t;
}

/* ---- listeners ------------------------------------------------------------ */

typedef struct lis lis;
typedef void (*lis_hook)(lis *self);

struct lis {
    int magic;
    int id;
    int calls;
    flux_store *s;
    flux_token token;
    lis_hook hook;
    void *user;
    flux_status status;      /* what the hook's call returned */
    bool heap;               /* freed by its destroy */
};

static lis *lis_new(int id, flux_store *s)
{
    lis *l = calloc(1, sizeof *l);
    REQUIRE(l != NULL);
    l->magic = ALIVE;
    l->id = id;
    l->s = s;
    l->heap = true;
    l->status = (flux_status)-1;
    return l;
}

static void lis_fn(void *context)
{
    lis *l = context;
    if (l->magic != ALIVE) {
        L.bad++;
        return;
    }
    l->calls++;
    trace_push(&L.events, EV_LISTENER + l->id);
    if (l->hook)
        l->hook(l);
    trace_push(&L.events, EV_LISTENER_END + l->id);
}

static void lis_destroy(void *context)
{
    lis *l = context;
    if (l->magic != ALIVE) {
        L.bad++;
        return;
    }
    trace_push(&L.events, EV_LISTENER_DESTROY + l->id);
    l->magic = DEAD;
    if (l->heap)
        free(l);
}

/* Adds a heap listener with id to the store; returns it (owned by the store). */
static lis *listen(flux_store *s, int id, lis_hook hook)
{
    lis *l = lis_new(id, s);
    l->hook = hook;
    REQUIRE(flux_store_add_listener(s, lis_fn, l, lis_destroy, &l->token) == FLUX_OK);
    return l;
}

/* Counts the events equal to code in the trace. */
static int count_events(int code)
{
    int n = 0;
    for (size_t i = 0; i < L.events.n; i++)
        n += L.events.ev[i] == code;
    return n;
}

/* Destroys the store and the dispatcher and checks nothing leaked. */
static void teardown(flux_dispatcher *d, tstore **stores, size_t n)
{
    for (size_t i = 0; i < n; i++)
        REQUIRE(flux_store_destroy(stores[i]->s) == FLUX_OK);
    REQUIRE(flux_dispatcher_destroy(d) == FLUX_OK);
    is_int(L.live, 0, "every state was released");
    is_int(L.bad, 0, "no state, context or listener was used or released after its release");
}

static flux_dispatcher *new_dispatcher(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    return d;
}

/* ======================================================================== */
/* FluxStore-test.js                                                        */
/* ======================================================================== */

/* TestFluxStore: emits a change for "store-will-change-state" only. */
static int flux_store_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)state;
    (void)next;
    tstore *t = context;
    t->reduces++;
    if (strcmp(payload, "store-will-change-state") == 0)
        t->emit_status = flux_store_emit_change(t->s);
    return 0;
}

static tstore *make_flux_store(flux_dispatcher *d, int id)
{
    tstore *t = tstore_new(id, d);
    REQUIRE(flux_store_create(d, NULL, flux_store_reduce, NULL, NULL, t, tstore_destroy, &t->s) == FLUX_OK);
    return t;
}

static void registers_a_callback_with_the_dispatcher(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    ok(flux_store_token(t->s) != 0, "the store has a dispatch token");
    EXPECT_OK(flux_dispatch(d, "action-type"));
    is_int(t->reduces, 1, "one dispatch calls the store's reduce once");
    /* The next registration gets the next token: the store took exactly one. */
    node n;
    node_init(&n, 1, d, NULL);
    EXPECT_OK(node_register(&n));
    is_uint(n.token, flux_store_token(t->s) + 1, "the store registered exactly one callback");
    EXPECT_OK(flux_unregister(d, n.token));
    teardown(d, &t, 1);
}

static void requires_that_subclasses_override_the___onDispatch_method(void)
{
    /* C's counterpart: a store without reduce is refused, and what was
     * handed over is released (state first, then context). */
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = tstore_new(1, d);
    flux_store *s = (flux_store *)&s;
    EXPECT_STATUS(flux_store_create(d, st_new(5), NULL, NULL, st_release, t, tstore_destroy, &s),
                  FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "reduce", "the message names reduce");
    is_ptr(s, NULL, "*out is NULL");
    is_trace(&L.events, INTS(EV_RELEASE + 5, EV_CONTEXT_DESTROY + 1),
             "release_state(initial state), then destroy(context), once each");
    tstore *good = make_flux_store(d, 2);
    EXPECT_OK(flux_dispatch(d, "action-type"));
    is_int(good->reduces, 1, "a store with a reduce handles payloads");
    teardown(d, &good, 1);
}

static void throws_when___emitChange_is_invoked_outside_of_a_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    EXPECT_STATUS(flux_store_emit_change(t->s), FLUX_ERR_NOT_DISPATCHING);
    has_substr(flux_last_error(), "flux_store_emit_change", "the message names the function");
    teardown(d, &t, 1);
}

static void throws_when_hasChanged_is_invoked_outside_of_a_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    int changed = 7;
    EXPECT_STATUS(flux_store_has_changed(t->s, &changed), FLUX_ERR_NOT_DISPATCHING);
    is_int(changed, 0, "*changed is 0 on failure");
    teardown(d, &t, 1);
}

static void emits_an_event_on_state_change(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    lis *l = listen(t->s, 1, NULL);
    EXPECT_OK(flux_dispatch(d, "store-will-change-state"));
    is_int(t->emit_status, FLUX_OK, "emit_change from the reduce succeeds");
    is_int(l->calls, 1, "the listener ran once");
    EXPECT_OK(flux_dispatch(d, "store-will-ignore"));
    is_int(l->calls, 1, "no change, no listener");
    teardown(d, &t, 1);
}

/* A callback that waits for a store, then records has_changed. */
typedef struct watcher {
    flux_dispatcher *d;
    flux_store *s;
    flux_status wait_status;
    flux_status status;
    int changed;
    void *state;
    bool wait;
} watcher;

static int watcher_cb(void *context, const void *payload)
{
    (void)payload;
    watcher *w = context;
    if (w->wait) {
        flux_token token = flux_store_token(w->s);
        w->wait_status = flux_wait_for(w->d, &token, 1);
    }
    w->changed = -1;
    w->status = flux_store_has_changed(w->s, &w->changed);
    w->state = flux_store_state(w->s);
    return 0;
}

static void exposes_whether_the_state_has_changed_during_current_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    watcher w = {.d = d, .s = t->s};
    flux_token wt;
    EXPECT_OK(flux_register(d, watcher_cb, &w, NULL, &wt));
    EXPECT_OK(flux_dispatch(d, "store-will-change-state"));
    EXPECT_OK(w.status);
    is_int(w.changed, 1, "hasChanged() is true after a change");
    EXPECT_OK(flux_dispatch(d, "store-will-ignore"));
    EXPECT_OK(w.status);
    is_int(w.changed, 0, "hasChanged() is false after an ignored action");
    EXPECT_OK(flux_unregister(d, wt));
    teardown(d, &t, 1);
}

static void exposes_the_dispatch_token_in_a_getter(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    ok(flux_store_token(t->s) != 0, "flux_store_token() is truthy");
    is_ptr(flux_store_dispatcher(t->s), d, "flux_store_dispatcher() is the store's dispatcher");
    flux_token tokens[1] = {flux_store_token(t->s)};
    node n;
    node_init(&n, 1, d, NULL);
    node_wait_on(&n, 1, tokens);
    EXPECT_OK(node_register(&n));
    EXPECT_OK(flux_dispatch(d, "x"));
    is_int(n.wait_status, FLUX_OK, "the token works with flux_wait_for()");
    EXPECT_OK(flux_unregister(d, n.token));
    teardown(d, &t, 1);
}

static void wraps_EventEmitter_addListener_with_an_addListener_method(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_flux_store(d, 1);
    lis *l = lis_new(1, t->s);
    flux_token id = 0;
    EXPECT_OK(flux_store_add_listener(t->s, lis_fn, l, lis_destroy, &id));
    is_uint(id, 1, "the first listener's id is 1");
    EXPECT_OK(flux_dispatch(d, "store-will-change-state"));
    is_int(l->calls, 1, "the listener is called on a change");
    EXPECT_OK(flux_store_remove_listener(t->s, id));
    is_int(count_events(EV_LISTENER_DESTROY + 1), 1, "remove runs the listener's destroy");
    EXPECT_OK(flux_dispatch(d, "store-will-change-state"));
    is_int(count_events(EV_LISTENER + 1), 1, "a removed listener is not called");
    teardown(d, &t, 1);
}

/* ======================================================================== */
/* FluxReduceStore-test.js                                                  */
/* ======================================================================== */

/* Immutable.Map's part: a small immutable record; set() returns the same
 * record when nothing changes (which is why === detects empty changes). */
typedef struct rec {
    int magic;
    bool has_foo, has_bar;
    int foo, bar;
} rec;

static int recs_live;

static rec *rec_new(const rec *from)
{
    rec *r = malloc(sizeof *r);
    REQUIRE(r != NULL);
    if (from)
        *r = *from;
    else
        memset(r, 0, sizeof *r);
    r->magic = ALIVE;
    recs_live++;
    return r;
}

static void rec_release(void *context, void *state)
{
    (void)context;
    rec *r = state;
    if (r->magic != ALIVE) {
        L.bad++;
        return;
    }
    r->magic = DEAD;
    recs_live--;
    free(r);
}

typedef struct action {
    const char *type;
    int foo, bar;
} action;

static rec *rec_set(rec *r, bool foo_field, int value)
{
    bool *has = foo_field ? &r->has_foo : &r->has_bar;
    int *field = foo_field ? &r->foo : &r->bar;
    if (*has && *field == value)
        return r;
    rec *n = rec_new(r);
    *(foo_field ? &n->has_foo : &n->has_bar) = true;
    *(foo_field ? &n->foo : &n->bar) = value;
    return n;
}

static int foo_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context;
    rec *r = state;
    const action *a = payload;
    if (strcmp(a->type, "foo") == 0) {
        *next = rec_set(r, true, a->foo);
    } else if (strcmp(a->type, "bar") == 0) {
        *next = rec_set(r, false, a->bar);
    } else if (strcmp(a->type, "foobar") == 0) {
        rec *with_foo = rec_set(r, true, a->foo);
        rec *both = rec_set(with_foo, false, a->bar);
        if (with_foo != r && with_foo != both)
            rec_release(NULL, with_foo); /* an intermediate the reduce owns */
        *next = both;
    } else if (strcmp(a->type, "boom") == 0) {
        *next = (r->has_foo || r->has_bar) ? rec_new(NULL) : r;
    }
    return 0;
}

static void count_emit(void *context)
{
    (*(int *)context)++;
}

typedef struct foo_fixture {
    flux_dispatcher *d;
    flux_store *store;
    int on_change;
} foo_fixture;

static void foo_setup(foo_fixture *f)
{
    ledger_reset();
    recs_live = 0;
    f->d = new_dispatcher();
    f->on_change = 0;
    REQUIRE(flux_store_create(f->d, rec_new(NULL), foo_reduce, NULL, rec_release, NULL, NULL, &f->store) == FLUX_OK);
    flux_token id;
    REQUIRE(flux_store_add_listener(f->store, count_emit, &f->on_change, NULL, &id) == FLUX_OK);
}

static void foo_teardown(foo_fixture *f)
{
    EXPECT_OK(flux_store_destroy(f->store));
    EXPECT_OK(flux_dispatcher_destroy(f->d));
    is_int(recs_live, 0, "every state was released once");
    is_int(L.bad, 0, "no state was released twice");
}

static const rec *foo_state(foo_fixture *f)
{
    return flux_store_state(f->store);
}

static void should_respond_to_actions(void)
{
    foo_fixture f;
    foo_setup(&f);
    ok(!foo_state(&f)->has_foo, "foo is undefined at first");
    action a = {"foo", 100, 0};
    EXPECT_OK(flux_dispatch(f.d, &a));
    ok(foo_state(&f)->has_foo, "state has foo");
    is_int(foo_state(&f)->foo, 100, "foo is 100");
    foo_teardown(&f);
}

static void should_only_emit_one_change_for_multiple_cache_changes(void)
{
    foo_fixture f;
    foo_setup(&f);
    action a = {"foo", 100, 0};
    EXPECT_OK(flux_dispatch(f.d, &a));
    is_int(f.on_change, 1, "one change emitted");
    is_int(foo_state(&f)->foo, 100, "foo is 100");
    action b = {"foobar", 200, 400};
    EXPECT_OK(flux_dispatch(f.d, &b));
    is_int(f.on_change, 2, "two fields changed, one more change emitted");
    is_int(foo_state(&f)->foo, 200, "foo is 200");
    is_int(foo_state(&f)->bar, 400, "bar is 400");
    foo_teardown(&f);
}

static void should_not_emit_for_empty_changes(void)
{
    foo_fixture f;
    foo_setup(&f);
    action a = {"foo", 100, 0};
    EXPECT_OK(flux_dispatch(f.d, &a));
    is_int(f.on_change, 1, "one change emitted");
    const rec *before = foo_state(&f);
    EXPECT_OK(flux_dispatch(f.d, &a));
    is_int(f.on_change, 1, "the same value again emits nothing");
    is_ptr(foo_state(&f), before, "the state is the same record");
    is_int(foo_state(&f)->foo, 100, "foo is still 100");
    foo_teardown(&f);
}

static void should_clear_the_cache(void)
{
    foo_fixture f;
    foo_setup(&f);
    action a = {"foo", 100, 0};
    EXPECT_OK(flux_dispatch(f.d, &a));
    is_int(f.on_change, 1, "one change emitted");
    action boom = {"boom", 0, 0};
    EXPECT_OK(flux_dispatch(f.d, &boom));
    is_int(f.on_change, 2, "clearing is a change");
    ok(!foo_state(&f)->has_foo, "foo is undefined again");
    foo_teardown(&f);
}

/* ======================================================================== */
/* FluxStoreGroup-test.js                                                   */
/* ======================================================================== */

/* SimpleStore: emits a change on every payload. */
static int simple_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)state;
    (void)payload;
    (void)next;
    tstore *t = context;
    t->reduces++;
    trace_push(&L.events, EV_REDUCE + t->id);
    return flux_store_emit_change(t->s) == FLUX_OK ? 0 : 9;
}

static tstore *make_simple(flux_dispatcher *d, int id)
{
    tstore *t = tstore_new(id, d);
    REQUIRE(flux_store_create(d, NULL, simple_reduce, NULL, NULL, t, tstore_destroy, &t->s) == FLUX_OK);
    return t;
}

typedef struct gctx {
    int magic;
    int calls;
    flux_dispatcher *d;      /* for group_fail_fn */
    flux_store *a, *b;
    int a_changed, b_changed;
    flux_status a_status, b_status;
    bool heap;
} gctx;

static void group_fn(void *context)
{
    gctx *g = context;
    g->calls++;
    trace_push(&L.events, EV_GROUP);
    if (g->a)
        g->a_status = flux_store_has_changed(g->a, &g->a_changed);
    if (g->b)
        g->b_status = flux_store_has_changed(g->b, &g->b_changed);
}

static void group_destroy(void *context)
{
    gctx *g = context;
    if (g->magic != ALIVE) {
        L.bad++;
        return;
    }
    g->magic = DEAD;
    trace_push(&L.events, EV_GROUP_DESTROY);
    if (g->heap)
        free(g);
}

static gctx *gctx_new(void)
{
    gctx *g = calloc(1, sizeof *g);
    REQUIRE(g != NULL);
    g->magic = ALIVE;
    g->heap = true;
    return g;
}

static void should_register_a_callback_with_the_dispatcher(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *s[2] = {make_simple(d, 1), make_simple(d, 2)};
    flux_store *stores[2] = {s[0]->s, s[1]->s};
    gctx *g = gctx_new();
    flux_store_group *group = NULL;
    EXPECT_OK(flux_store_group_create(stores, 2, group_fn, g, group_destroy, &group));
    ok(group != NULL, "the group was created");
    EXPECT_OK(flux_dispatch(d, "foo"));
    is_int(g->calls, 1, "the callback was called");
    EXPECT_OK(flux_store_group_release(group));
    is_int(count_events(EV_GROUP_DESTROY), 1, "release destroys the group's context once");
    teardown(d, s, 2);
}

static void should_wait_for_the_store_dependencies(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    /* The group first, then the stores: it must wait for them. */
    tstore *a = make_simple(d, 1);
    tstore *b = make_simple(d, 2);
    flux_store *stores[2] = {a->s, b->s};
    gctx g = {.magic = ALIVE, .a = a->s, .b = b->s};
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 2, group_fn, &g, NULL, &group));
    EXPECT_OK(flux_dispatch(d, "foo"));
    is_int(g.calls, 1, "the callback was called");
    EXPECT_OK(g.a_status);
    EXPECT_OK(g.b_status);
    is_int(g.a_changed, 1, "storeA.hasChanged() is true in the callback");
    is_int(g.b_changed, 1, "storeB.hasChanged() is true in the callback");
    is_trace(&L.events, INTS(EV_REDUCE + 1, EV_REDUCE + 2, EV_GROUP), "both stores ran before the group");
    EXPECT_OK(flux_store_group_release(group));
    tstore *all[2] = {a, b};
    teardown(d, all, 2);
}

static void should_not_run_the_callback_after_being_released(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *s[2] = {make_simple(d, 1), make_simple(d, 2)};
    flux_store *stores[2] = {s[0]->s, s[1]->s};
    gctx *g = gctx_new();
    int *calls = &g->calls;
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 2, group_fn, g, group_destroy, &group));
    EXPECT_OK(flux_store_group_release(group));
    EXPECT_OK(flux_dispatch(d, "foo"));
    (void)calls; /* g is freed: the trace tells */
    is_int(count_events(EV_GROUP), 0, "the callback was not called");
    is_int(count_events(EV_GROUP_DESTROY), 1, "the group's context was destroyed once");
    teardown(d, s, 2);
}

static void should_have_at_least_one_store(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_simple(d, 1);
    flux_store *stores[1] = {t->s};
    gctx *g = gctx_new();
    flux_store_group *group = (flux_store_group *)&group;
    EXPECT_STATUS(flux_store_group_create(stores, 0, group_fn, g, group_destroy, &group), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "at least one store", "the message says why");
    is_ptr(group, NULL, "*out is NULL");
    is_int(count_events(EV_GROUP_DESTROY), 1, "the context was destroyed once");
    teardown(d, &t, 1);
}

static void should_make_sure_dispatchers_are_uniform_in_DEV(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    flux_dispatcher *other = new_dispatcher();
    tstore *a = make_simple(d, 1);
    tstore *c = make_simple(other, 3);
    flux_store *stores[2] = {a->s, c->s};
    gctx *g = gctx_new();
    flux_store_group *group = (flux_store_group *)&group;
    EXPECT_STATUS(flux_store_group_create(stores, 2, group_fn, g, group_destroy, &group), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "dispatcher", "the message says why");
    is_ptr(group, NULL, "*out is NULL");
    is_int(count_events(EV_GROUP_DESTROY), 1, "the context was destroyed once");
    EXPECT_OK(flux_store_destroy(a->s)); /* neither store counts as grouped */
    teardown(other, &c, 1);
    REQUIRE(flux_dispatcher_destroy(d) == FLUX_OK);
}

/* ======================================================================== */
/* DESIGN.md section 6: Details                                             */
/* ======================================================================== */

static void same_state_pointer_is_not_compared_nor_released(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 3, true);
    lis *l = listen(t->s, 1, NULL);
    void *before = flux_store_state(t->s);
    EXPECT_OK(flux_dispatch(d, "same"));
    is_int(count_events(EV_EQUAL + 33), 0, "equal is not called when *next == state");
    is_int(L.released, 0, "nothing is released");
    is_ptr(flux_store_state(t->s), before, "the state is kept");
    is_int(l->calls, 0, "no listener runs");
    teardown(d, &t, 1);
}

static void equal_gets_current_then_next_and_equal_next_is_released(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 3, true);
    lis *l = listen(t->s, 1, NULL);
    void *before = flux_store_state(t->s);
    EXPECT_OK(flux_dispatch(d, "equal"));
    is_trace(&L.events, INTS(EV_REDUCE + 1, EV_EQUAL + 33, EV_RELEASE + 3),
             "reduce, equal(current, next), then the equal new state is released");
    is_ptr(flux_store_state(t->s), before, "the old state is kept");
    is_int(l->calls, 0, "no listener runs");
    L.events.n = 0;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_trace(&L.events, INTS(EV_REDUCE + 1, EV_EQUAL + 34, EV_RELEASE + 3, EV_LISTENER + 1, EV_LISTENER_END + 1),
             "equal(3, 4) is false: the old state is released, before the listener runs");
    is_int(st_value(flux_store_state(t->s)), 4, "the new state is kept");
    teardown(d, &t, 1);
}

static void null_equal_is_pointer_identity(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 3, false);
    lis *l = listen(t->s, 1, NULL);
    EXPECT_OK(flux_dispatch(d, "equal"));
    is_int(l->calls, 1, "a new pointer with the same value is a change when equal is NULL");
    is_int(st_value(flux_store_state(t->s)), 3, "the new state is kept");
    is_trace(&L.events, INTS(EV_REDUCE + 1, EV_RELEASE + 3, EV_LISTENER + 1, EV_LISTENER_END + 1),
             "the old state is released before the listener");
    teardown(d, &t, 1);
}

static void failing_reduce_keeps_state_and_ignores_next(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    /* A callback before the store waits for it, then asks has_changed. */
    watcher w = {.d = d, .wait = false};
    flux_token wt;
    EXPECT_OK(flux_register(d, watcher_cb, &w, NULL, &wt));
    tstore *t = make_store(d, 1, 3, true);
    w.s = t->s;
    lis *l = listen(t->s, 1, NULL);
    EXPECT_OK(flux_dispatch(d, "inc")); /* has_changed would say 1 from here */
    w.wait = true;
    w.changed = 9;
    void *before = flux_store_state(t->s);
    L.events.n = 0;
    L.released = 0;
    EXPECT_STATUS(flux_dispatch(d, "fail-new"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), flux_store_token(t->s), "the error names the store's token");
    has_number(flux_last_error(), 7, "and the value its reduce returned");
    is_ptr(flux_store_state(t->s), before, "the store keeps its state");
    is_int(L.released, 0, "*next is ignored (the reduce freed it), nothing released");
    is_int(l->calls, 1, "no listener ran (only the earlier dispatch's)");
    is_int(w.wait_status, FLUX_ERR_CALLBACK_FAILED, "a wait for the failed store reports the failure");
    EXPECT_OK(w.status);
    is_int(w.changed, 0, "has_changed then reports false");
    EXPECT_OK(flux_unregister(d, wt));
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(st_value(flux_store_state(t->s)), 5, "the store goes on with the next dispatch");
    teardown(d, &t, 1);
}

/* Store 1's reduce waits for store 2 and ignores the failure, returning a
 * new state anyway. */
static int wait_and_ignore(tstore *t, void *state, const char *action, void **next)
{
    (void)action;
    tstore *other = t->user;
    flux_token token = flux_store_token(other->s);
    t->emit_status = flux_wait_for(t->d, &token, 1);
    *next = st_new(st_value(state) + 10);
    return 0;
}

static void reduce_failing_mid_chain(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *top = make_store(d, 1, 1, false);
    tstore *mid = make_store(d, 2, 2, false);
    tstore *low = make_store(d, 3, 3, false);
    top->hook = wait_and_ignore;
    top->user = mid;
    mid->hook = wait_and_ignore;
    mid->user = low;
    lis *l1 = listen(top->s, 1, NULL);
    lis *l2 = listen(mid->s, 2, NULL);
    lis *l3 = listen(low->s, 3, NULL);
    node after;
    node_init(&after, 9, d, NULL);
    EXPECT_OK(node_register(&after));
    EXPECT_STATUS(flux_dispatch(d, "fail"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), flux_store_token(low->s), "the error names the store that failed");
    is_int(mid->emit_status, FLUX_ERR_CALLBACK_FAILED, "the middle store's wait reported the failure");
    is_int(top->emit_status, FLUX_ERR_CALLBACK_FAILED, "so did the top store's");
    is_int(st_value(flux_store_state(top->s)), 1, "the top store kept its state");
    is_int(st_value(flux_store_state(mid->s)), 2, "the middle store kept its state");
    is_int(st_value(flux_store_state(low->s)), 3, "the failing store kept its state");
    is_int(count_events(EV_RELEASE + 12), 1, "the middle store's new state (after the abort) was released");
    is_int(count_events(EV_RELEASE + 11), 1, "so was the top store's");
    is_int(l1->calls + l2->calls + l3->calls, 0, "no listener ran");
    is_int(after.calls, 0, "no later callback ran");
    EXPECT_OK(flux_unregister(d, after.token));
    top->hook = mid->hook = NULL;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(l1->calls + l2->calls + l3->calls, 3, "the next dispatch works for all three");
    tstore *all[3] = {top, mid, low};
    teardown(d, all, 3);
}

/* Store 1's reduce waits for store 2, which fails, and then fails too,
 * leaving a new state in *next that it still owns (it frees it later). */
static st *kept_by_reduce;

static int wait_then_fail_with_next(tstore *t, void *state, const char *action, void **next)
{
    (void)action;
    tstore *other = t->user;
    flux_token token = flux_store_token(other->s);
    t->emit_status = flux_wait_for(t->d, &token, 1);
    kept_by_reduce = st_new(st_value(state) + 30);
    *next = kept_by_reduce;
    return 8;
}

/* DESIGN.md 6: "the store ignores *next (a failure after an abort too)":
 * a reduce that fails once the dispatch is aborted owns what it set, so
 * the store must not release it (unlike a succeeding reduce's *next). */
static void reduce_failing_after_an_abort_has_its_next_ignored(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *top = make_store(d, 1, 1, false);
    tstore *low = make_store(d, 2, 2, false);
    top->hook = wait_then_fail_with_next;
    top->user = low;
    lis *l = listen(top->s, 1, NULL);
    kept_by_reduce = NULL;
    EXPECT_STATUS(flux_dispatch(d, "fail"), FLUX_ERR_CALLBACK_FAILED);
    is_int(top->emit_status, FLUX_ERR_CALLBACK_FAILED, "the wait reported the failure");
    has_number(flux_last_error(), flux_store_token(low->s), "the error names the store that failed first");
    is_int(st_value(flux_store_state(top->s)), 1, "the store kept its state");
    is_int(L.released, 0, "*next was not released: the failing reduce still owns it");
    is_int(l->calls, 0, "no listener ran");
    REQUIRE(kept_by_reduce != NULL);
    if (L.released == 0)
        st_free(kept_by_reduce); /* the reduce's own clean-up, late */
    is_int(L.bad, 0, "nothing released twice");
    top->hook = NULL;
    tstore *all[2] = {top, low};
    teardown(d, all, 2);
}

/* The abort met after the reduce: store 1's equal, or its release of the
 * replaced state, waits for store 2 (t->user), which fails. */
static int next_plus_one(tstore *t, void *state, const char *action, void **next)
{
    (void)t;
    (void)action;
    *next = st_new(st_value(state) + 1);
    return 0;
}

static int equal_after_waiting(void *context, const void *a, const void *b)
{
    tstore *t = context;
    if (t->user != NULL) {
        flux_token token = flux_store_token(((tstore *)t->user)->s);
        t->emit_status = flux_wait_for(t->d, &token, 1);
    }
    return st_equal(context, a, b);
}

static void release_after_waiting(void *context, void *state)
{
    tstore *t = context;
    if (t->user != NULL) {
        flux_token token = flux_store_token(((tstore *)t->user)->s);
        t->emit_status = flux_wait_for(t->d, &token, 1);
    }
    st_release(context, state);
}

/* flux.h: "Once a dispatch is aborted ..., a store keeps its old state and
 * runs no listener whatever its reduce returns" -- also when the failure
 * is met after the reduce, by a flux_wait_for() in equal (the new state is
 * released) or in the release of the replaced state (which runs once the
 * new state is kept: no listener runs). The store kept the new state and
 * its first listener ran in the aborted dispatch. */
static void an_abort_met_by_equal_or_release_runs_no_listener(void)
{
    for (int by_release = 0; by_release < 2; by_release++) {
        ledger_reset();
        flux_dispatcher *d = new_dispatcher();
        tstore *top = tstore_new(1, d);
        REQUIRE(flux_store_create(d, st_new(1), t_reduce, by_release ? NULL : equal_after_waiting,
                                  release_after_waiting, top, tstore_destroy, &top->s) == FLUX_OK);
        tstore *low = make_store(d, 2, 5, false); /* registered after: the wait runs it */
        top->hook = next_plus_one;
        top->user = low;
        lis *l = listen(top->s, 1, NULL);
        const char *by = by_release ? "release_state" : "equal";
        EXPECT_STATUS(flux_dispatch(d, "fail"), FLUX_ERR_CALLBACK_FAILED);
        is_int(top->emit_status, FLUX_ERR_CALLBACK_FAILED, "%s: its wait met the failure", by);
        has_number(flux_last_error(), flux_store_token(low->s), "%s: the error names the store that failed", by);
        is_int(l->calls, 0, "%s: no listener ran", by);
        if (!by_release) {
            is_int(st_value(flux_store_state(top->s)), 1, "equal: the store kept its old state");
            is_int(count_events(EV_RELEASE + 2), 1, "equal: the new state was released");
        }
        top->user = NULL;
        top->hook = NULL;
        EXPECT_OK(flux_dispatch(d, "inc"));
        is_int(l->calls, 1, "%s: the next dispatch runs the listener", by);
        tstore *all[2] = {top, low};
        teardown(d, all, 2);
    }
}

static void destroy_releases_listeners_then_state_then_context(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 3, false);
    listen(t->s, 1, NULL);
    listen(t->s, 2, NULL);
    EXPECT_OK(flux_store_destroy(t->s));
    is_trace(&L.events, INTS(EV_LISTENER_DESTROY + 1, EV_LISTENER_DESTROY + 2, EV_RELEASE + 3, EV_CONTEXT_DESTROY + 1),
             "listeners (in add order), then release_state, then destroy(context), once each");
    teardown(d, NULL, 0);
}

/* A listener's destroy that adds a listener to its store (which is being
 * destroyed): the add is refused and its context destroyed at once, so
 * every destroy still comes before release_state and destroy(context). */
static flux_status g_add_while_destroyed = FLUX_OK;
static flux_listener_id g_add_while_destroyed_id = 99;

static void lis_destroy_then_add(void *context)
{
    lis *l = context;
    flux_store *s = l->s;
    lis_destroy(context);
    lis *late = lis_new(9, s);
    g_add_while_destroyed = flux_store_add_listener(s, lis_fn, late, lis_destroy, &g_add_while_destroyed_id);
}

static void listener_added_by_a_destroy_during_store_destroy_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 3, false);
    lis *l = lis_new(1, t->s);
    REQUIRE(flux_store_add_listener(t->s, lis_fn, l, lis_destroy_then_add, &l->token) == FLUX_OK);
    EXPECT_OK(flux_store_destroy(t->s));
    is_int(g_add_while_destroyed, FLUX_ERR_INVALID_ARGUMENT,
           "add_listener from a listener's destroy while the store is destroyed: INVALID_ARGUMENT");
    is_int((int)g_add_while_destroyed_id, 0, "and *out is 0");
    is_trace(&L.events, INTS(EV_LISTENER_DESTROY + 1, EV_LISTENER_DESTROY + 9, EV_RELEASE + 3, EV_CONTEXT_DESTROY + 1),
             "the refused listener destroyed at once: every listener before release_state and destroy(context)");
    teardown(d, NULL, 0);
}

/* A listener's destroy that makes a group of its store (which is being
 * destroyed, and freed once the destroys return): refused, as the add is,
 * the group's context destroyed at once -- not a group counting in, and
 * waiting for, a freed store. */
static flux_status g_group_while_destroyed = FLUX_OK;
static flux_store_group *g_group_while_destroyed_out;

static void lis_destroy_then_group(void *context)
{
    lis *l = context;
    flux_store *s = l->s;
    lis_destroy(context);
    gctx *g = gctx_new();
    g_group_while_destroyed = flux_store_group_create(&s, 1, group_fn, g, group_destroy, &g_group_while_destroyed_out);
}

static void group_made_by_a_destroy_during_store_destroy_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 3, false);
    lis *l = lis_new(1, t->s);
    REQUIRE(flux_store_add_listener(t->s, lis_fn, l, lis_destroy_then_group, &l->token) == FLUX_OK);
    EXPECT_OK(flux_store_destroy(t->s));
    is_int(g_group_while_destroyed, FLUX_ERR_INVALID_ARGUMENT,
           "group_create from a listener's destroy while its store is destroyed: INVALID_ARGUMENT");
    ok(g_group_while_destroyed_out == NULL, "and *out is NULL");
    is_int(count_events(EV_GROUP_DESTROY), 1, "the group's context destroyed at once");
    teardown(d, NULL, 0);
}

/* emit_change from the reduce of another store, called from this one's. */
static int wait_for_user(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    tstore *other = t->user;
    flux_token token = flux_store_token(other->s);
    return flux_wait_for(t->d, &token, 1) == FLUX_OK ? 0 : 8;
}

static int emit_for_user(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    tstore *other = t->user;
    t->emit_status = flux_store_emit_change(other->s);
    return 0;
}

static void emit_hook(lis *l)
{
    l->status = flux_store_emit_change(l->s);
}

/* Emits a change on the store in user (not the one listened to). */
static void emit_other_hook(lis *l)
{
    l->status = flux_store_emit_change(((tstore *)l->user)->s);
}

static void emit_change_only_during_its_own_reduce(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *a = make_store(d, 1, 1, false);
    tstore *b = make_store(d, 2, 2, false);
    /* a's reduce waits for b; b's reduce emits a change on a: legal, a's
     * reduce is on the stack. */
    a->hook = wait_for_user;
    a->user = b;
    b->hook = emit_for_user;
    b->user = a;
    lis *la = listen(a->s, 1, emit_hook);
    EXPECT_OK(flux_dispatch(d, "same"));
    is_int(b->emit_status, FLUX_OK, "emit_change from something a's reduce calls is legal");
    is_int(la->calls, 1, "so a's listener ran");
    is_int(la->status, FLUX_ERR_NOT_DISPATCHING, "emit_change from a listener: NOT_DISPATCHING");
    /* b changes itself now: b's listener runs in b's callback, which a's
     * wait runs inside a's reduce -- so it may emit a's change. */
    b->user = b;
    lis *lb = listen(b->s, 2, emit_other_hook);
    lb->user = a;
    EXPECT_OK(flux_dispatch(d, "same"));
    is_int(lb->calls, 1, "b's listener ran, inside a's reduce");
    is_int(lb->status, FLUX_OK, "emit_change of a from another store's listener that a's reduce runs is legal");
    is_int(la->calls, 2, "so a's listener ran again");
    EXPECT_OK(flux_store_remove_listener(b->s, lb->token));
    b->user = a;
    /* b's reduce runs on its own now (a no longer waits): a is not reducing. */
    a->hook = NULL;
    EXPECT_OK(flux_dispatch(d, "same"));
    is_int(b->emit_status, FLUX_ERR_NOT_DISPATCHING, "emit_change on a store whose reduce is not running: NOT_DISPATCHING");
    /* a callback (not a reduce) emitting: refused too. */
    tstore *all[2] = {a, b};
    teardown(d, all, 2);
}

static void has_changed_reports_the_previous_result_before_the_store_runs(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    watcher w = {.d = d};
    flux_token wt;
    EXPECT_OK(flux_register(d, watcher_cb, &w, NULL, &wt)); /* before the store */
    tstore *t = make_store(d, 1, 1, false);
    w.s = t->s;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(w.status);
    is_int(w.changed, 0, "first dispatch: the store has not run, nothing changed yet");
    EXPECT_OK(flux_dispatch(d, "same"));
    is_int(w.changed, 1, "next dispatch, before the store runs: the previous result (changed)");
    w.wait = true;
    EXPECT_OK(flux_dispatch(d, "same"));
    is_int(w.changed, 0, "after wait_for on the store: this dispatch's result");
    int changed = 5;
    EXPECT_STATUS(flux_store_has_changed(t->s, NULL), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_store_has_changed(NULL, &changed), FLUX_ERR_INVALID_ARGUMENT);
    is_int(changed, 0, "*changed is 0 on failure");
    EXPECT_OK(flux_unregister(d, wt));
    teardown(d, &t, 1);
}

/* ---- listeners during an emit ------------------------------------------- */

static void remove_user_hook(lis *l)
{
    lis *victim = l->user;
    l->status = flux_store_remove_listener(l->s, victim->token);
}

static void add_hook(lis *l)
{
    if (l->user == NULL) {
        lis *added = lis_new(l->id * 10, l->s);
        REQUIRE(flux_store_add_listener(l->s, lis_fn, added, lis_destroy, &added->token) == FLUX_OK);
        l->user = added;
    }
}

static void remove_self_hook(lis *l)
{
    l->status = flux_store_remove_listener(l->s, l->token);
}

static void dispatch_hook(lis *l)
{
    l->status = flux_dispatch(flux_store_dispatcher(l->s), "inc");
}

static void destroy_store_hook(lis *l)
{
    l->status = flux_store_destroy(l->s);
}

static void destroy_dispatcher_hook(lis *l)
{
    l->status = flux_dispatcher_destroy(flux_store_dispatcher(l->s));
}

static void listener_ids_count_from_1_and_are_never_reused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *a = listen(t->s, 1, NULL);
    is_uint(a->token, 1, "the first id is 1");
    lis *b = lis_new(2, t->s);
    flux_token id = 99;
    EXPECT_STATUS(flux_store_add_listener(t->s, NULL, b, lis_destroy, &id), FLUX_ERR_INVALID_ARGUMENT);
    is_uint(id, 0, "a failed add sets *out to 0");
    is_int(count_events(EV_LISTENER_DESTROY + 2), 1, "and destroys the context");
    EXPECT_STATUS(flux_store_add_listener(t->s, lis_fn, NULL, NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_store_add_listener(NULL, lis_fn, NULL, NULL, &id), FLUX_ERR_INVALID_ARGUMENT);
    lis *c = listen(t->s, 3, NULL);
    is_uint(c->token, 2, "a failed add used no id");
    EXPECT_OK(flux_store_remove_listener(t->s, a->token));
    lis *e = listen(t->s, 4, NULL);
    is_uint(e->token, 3, "removed ids are not reused");
    EXPECT_STATUS(flux_store_remove_listener(t->s, 1), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_STATUS(flux_store_remove_listener(t->s, 0), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_STATUS(flux_store_remove_listener(t->s, 42), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_STATUS(flux_store_remove_listener(NULL, 2), FLUX_ERR_INVALID_ARGUMENT);
    teardown(d, &t, 1);
}

static void listener_removed_by_an_earlier_listener_is_not_called(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *first = listen(t->s, 1, remove_user_hook);
    lis *second = listen(t->s, 2, NULL);
    first->user = second;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(first->status);
    is_trace(&L.events, INTS(EV_REDUCE + 1, EV_RELEASE + 1, EV_LISTENER + 1, EV_LISTENER_DESTROY + 2, EV_LISTENER_END + 1),
             "the second listener is destroyed at once and never called");
    first->hook = NULL;
    teardown(d, &t, 1);
}

static void listener_added_during_an_emit_runs_from_the_next(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *first = listen(t->s, 1, add_hook);
    EXPECT_OK(flux_dispatch(d, "inc"));
    lis *added = first->user;
    REQUIRE(added != NULL);
    is_int(added->calls, 0, "not called by the emit it was added in");
    is_uint(added->token, 2, "it got the next id");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(added->calls, 1, "called by the next emit");
    is_int(first->calls, 2, "the first listener ran both times");
    teardown(d, &t, 1);
}

/* During an emit, a listener removes another and adds one: whatever the
 * table's size (one of them makes the add find it full with a removed entry),
 * the emit must not move the entries under it -- the added listener waits
 * for the next emit and no other is skipped or run twice. */
static lis *added_during_emit;
static void remove_then_add_hook(lis *l)
{
    if (added_during_emit != NULL)
        return;
    lis *victim = l->user;
    l->status = flux_store_remove_listener(l->s, victim->token);
    added_during_emit = lis_new(50, l->s);
    REQUIRE(flux_store_add_listener(l->s, lis_fn, added_during_emit, lis_destroy, &added_during_emit->token) == FLUX_OK);
}

static void listener_added_after_a_removal_during_an_emit_runs_from_the_next(void)
{
    for (int n = 2; n <= 12; n++) {
        ledger_reset();
        flux_dispatcher *d = new_dispatcher();
        tstore *t = make_store(d, 1, 1, false);
        added_during_emit = NULL;
        lis *l[12];
        for (int i = 0; i < n; i++)
            l[i] = listen(t->s, i + 1, NULL);
        l[0]->hook = remove_then_add_hook;
        l[0]->user = l[1];
        EXPECT_OK(flux_dispatch(d, "inc"));
        EXPECT_OK(l[0]->status);
        REQUIRE(added_during_emit != NULL);
        int others = 0;
        for (int i = 2; i < n; i++)
            others += l[i]->calls == 1;
        is_int(others, n - 2, "%d listeners: each of the others ran once", n);
        is_int(added_during_emit->calls, 0, "%d listeners: the added one was not called by that emit", n);
        EXPECT_OK(flux_dispatch(d, "inc"));
        is_int(added_during_emit->calls, 1, "%d listeners: it was called by the next", n);
        teardown(d, &t, 1);
    }
}

static void listener_removing_itself_is_destroyed_after_it_returns(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *self = listen(t->s, 1, remove_self_hook);
    lis *next = listen(t->s, 2, NULL);
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_trace(&L.events,
             INTS(EV_REDUCE + 1, EV_RELEASE + 1, EV_LISTENER + 1, EV_LISTENER_END + 1, EV_LISTENER_DESTROY + 1,
                  EV_LISTENER + 2, EV_LISTENER_END + 2),
             "its destroy runs right after it returns, before the next listener");
    (void)self;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(next->calls, 2, "the others go on");
    is_int(count_events(EV_LISTENER + 1), 1, "the removed one is not called again");
    teardown(d, &t, 1);
}

static void listener_dispatching_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *l = listen(t->s, 1, dispatch_hook);
    lis *other = listen(t->s, 2, NULL);
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(l->status, FLUX_ERR_ALREADY_DISPATCHING, "dispatch from a listener: ALREADY_DISPATCHING");
    is_int(other->calls, 1, "the emit went on");
    is_int(st_value(flux_store_state(t->s)), 2, "and the state changed once");
    teardown(d, &t, 1);
}

static void store_destroyed_during_a_dispatch_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *l = listen(t->s, 1, destroy_store_hook);
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(l->status, FLUX_ERR_ALREADY_DISPATCHING, "flux_store_destroy from its listener: ALREADY_DISPATCHING");
    is_int(count_events(EV_CONTEXT_DESTROY + 1), 0, "nothing was released");
    /* From a plain callback too. */
    l->hook = NULL;
    node n;
    node_init(&n, 5, d, NULL);
    EXPECT_OK(node_register(&n));
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(st_value(flux_store_state(t->s)), 3, "the store still works");
    EXPECT_OK(flux_unregister(d, n.token));
    teardown(d, &t, 1);
}

static void dispatcher_destroyed_while_stores_exist_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *l = listen(t->s, 1, destroy_dispatcher_hook);
    EXPECT_STATUS(flux_dispatcher_destroy(d), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "store", "the message says stores remain");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(l->status, FLUX_ERR_ALREADY_DISPATCHING, "from a listener: ALREADY_DISPATCHING, checked first");
    l->hook = NULL;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(st_value(flux_store_state(t->s)), 3, "the dispatcher and the store still work");
    /* A group counts too. */
    flux_store *stores[1] = {t->s};
    flux_store_group *g;
    gctx gc = {.magic = ALIVE};
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, &gc, NULL, &g));
    EXPECT_OK(flux_store_destroy(NULL)); /* no-op */
    EXPECT_STATUS(flux_store_destroy(t->s), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "group", "a store in a live group cannot be destroyed");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(gc.calls, 1, "the group still works");
    EXPECT_OK(flux_store_group_release(g));
    EXPECT_OK(flux_store_group_release(NULL));
    /* One group listing the store twice: one group, two memberships, and
     * the refusal says so (it said "in 2 live group(s)"). */
    flux_store *twice[2] = {t->s, t->s};
    EXPECT_OK(flux_store_group_create(twice, 2, group_fn, &gc, NULL, &g));
    EXPECT_STATUS(flux_store_destroy(t->s), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "a live group (2 membership(s))", "memberships, not groups, are counted");
    EXPECT_OK(flux_store_group_release(g));
    teardown(d, &t, 1);
}

/* ---- groups ----------------------------------------------------------- */

static void group_release_when_idle_is_immediate(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    gctx *g = gctx_new();
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, g, group_destroy, &group));
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(count_events(EV_GROUP), 1, "the group ran");
    EXPECT_OK(flux_store_group_release(group));
    is_int(count_events(EV_GROUP_DESTROY), 1, "released at once when idle");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(count_events(EV_GROUP), 1, "a released group does not run");
    teardown(d, &t, 1);
}

static void release_group_hook(lis *l)
{
    flux_store_group **g = l->user;
    l->status = flux_store_group_release(*g);
    int destroyed_now = count_events(EV_GROUP_DESTROY);
    l->calls += destroyed_now * 100; /* recorded for the test below */
}

static void group_released_from_a_listener(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    gctx *g = gctx_new();
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, g, group_destroy, &group));
    lis *l = listen(t->s, 1, release_group_hook);
    l->user = &group;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(l->status);
    is_int(l->calls, 1, "the group's destroy had not run inside the dispatch");
    is_int(count_events(EV_GROUP), 0, "the released group was not called later in that dispatch");
    is_int(count_events(EV_GROUP_DESTROY), 1, "its destroy ran once the dispatch ended");
    l->hook = NULL;
    EXPECT_OK(flux_store_destroy(t->s)); /* no longer grouped */
    teardown(d, NULL, 0);
}

/* Released while its own callback waits for its stores -- by a listener
 * that wait runs, on the dispatching thread -- the group's function is
 * not called by that dispatch once the release has returned (flux.h,
 * flux_store_group_release: "the group is not called again by it"). It
 * used to be: the callback went on from its wait straight into fn. */
static void group_released_while_it_waits_for_its_stores_is_not_called(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    node waiter; /* registered first: its wait for the group runs the group early */
    node_init(&waiter, 9, d, NULL);
    EXPECT_OK(node_register(&waiter));
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    gctx *g = gctx_new();
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, g, group_destroy, &group));
    waiter.wait = true;
    waiter.waits[0] = flux_store_group_token(group);
    waiter.nwait = 1;
    lis *l = listen(t->s, 1, release_group_hook);
    l->user = &group;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(l->status);
    EXPECT_OK(waiter.wait_status);
    is_int(count_events(EV_GROUP), 0, "the group's function did not run after its release returned");
    is_int(count_events(EV_GROUP_DESTROY), 1, "its destroy ran once the dispatch ended");
    l->hook = NULL;
    waiter.wait = false;
    EXPECT_OK(flux_unregister(d, waiter.token));
    teardown(d, &t, 1);
}

/* A group released during a dispatch is freed as the dispatch ends, after
 * the dispatcher is idle again; its stores no longer count it from the
 * moment the release returned, so a destroy running at that end (here one
 * registered before the group, so it runs before the group's own) may
 * destroy them. (It used to get FLUX_ERR_INVALID_ARGUMENT: "in 1 live group".) */
static struct {
    flux_dispatcher *d;
    flux_store_group *group;
    flux_store *store;
    flux_token self;
    flux_status release_status, unregister_status, destroy_status;
    int destroy_dispatching;
} RG;

static int releasing_cb(void *context, const void *payload)
{
    (void)context, (void)payload;
    RG.release_status = flux_store_group_release(RG.group);
    RG.unregister_status = flux_unregister(RG.d, RG.self);
    return 0;
}

static void releasing_destroy(void *context)
{
    (void)context;
    RG.destroy_dispatching = flux_is_dispatching(RG.d);
    RG.destroy_status = flux_store_destroy(RG.store);
}

static void store_of_a_group_released_mid_dispatch_is_free_once_it_ends(void)
{
    ledger_reset();
    memset(&RG, 0, sizeof RG);
    RG.destroy_status = (flux_status)-1;
    flux_dispatcher *d = new_dispatcher();
    RG.d = d;
    REQUIRE(flux_register(d, releasing_cb, NULL, releasing_destroy, &RG.self) == FLUX_OK);
    tstore *t = make_store(d, 1, 1, false);
    RG.store = t->s;
    flux_store *stores[1] = {t->s};
    gctx *g = gctx_new();
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, g, group_destroy, &RG.group));
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(RG.release_status);
    EXPECT_OK(RG.unregister_status);
    is_int(RG.destroy_dispatching, 0, "the destroy ran once the dispatch was over");
    is_int(RG.destroy_status, FLUX_OK, "and destroyed the released group's store");
    is_int(count_events(EV_GROUP_DESTROY), 1, "the group's destroy ran once");
    teardown(d, NULL, 0);
}

/* flux.h: a store's destroy runs while the store still counts as its
 * dispatcher's, so it cannot destroy that dispatcher. */
static flux_status dispatcher_destroy_from_store_destroy;
static int keep_state(void *context, void *state, const void *payload, void **next)
{
    (void)context, (void)state, (void)payload, (void)next;
    return 0;
}

static void destroy_the_dispatcher(void *context)
{
    dispatcher_destroy_from_store_destroy = flux_dispatcher_destroy(context);
}

static void store_destroy_cannot_destroy_its_dispatcher(void)
{
    flux_dispatcher *d = new_dispatcher();
    flux_store *s;
    dispatcher_destroy_from_store_destroy = (flux_status)-1;
    EXPECT_OK(flux_store_create(d, NULL, keep_state, NULL, NULL, d, destroy_the_dispatcher, &s));
    EXPECT_OK(flux_store_destroy(s));
    is_int(dispatcher_destroy_from_store_destroy, FLUX_ERR_INVALID_ARGUMENT,
           "flux_dispatcher_destroy from the store's destroy: FLUX_ERR_INVALID_ARGUMENT");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void group_bad_arguments_destroy_the_context(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[2] = {t->s, NULL};
    flux_store_group *g = (flux_store_group *)&g;
    gctx *c;
    c = gctx_new();
    EXPECT_STATUS(flux_store_group_create(stores, 2, group_fn, c, group_destroy, &g), FLUX_ERR_INVALID_ARGUMENT);
    is_ptr(g, NULL, "NULL store in the array: *out is NULL");
    c = gctx_new();
    EXPECT_STATUS(flux_store_group_create(NULL, 1, group_fn, c, group_destroy, &g), FLUX_ERR_INVALID_ARGUMENT);
    c = gctx_new();
    EXPECT_STATUS(flux_store_group_create(stores, 1, NULL, c, group_destroy, &g), FLUX_ERR_INVALID_ARGUMENT);
    c = gctx_new();
    EXPECT_STATUS(flux_store_group_create(stores, 1, group_fn, c, group_destroy, NULL), FLUX_ERR_INVALID_ARGUMENT);
    c = gctx_new();
    EXPECT_STATUS(flux_store_group_create(stores, (size_t)-1, group_fn, c, group_destroy, &g), FLUX_ERR_INVALID_ARGUMENT);
    is_int(count_events(EV_GROUP_DESTROY), 5, "each failed create destroyed its context once");
    EXPECT_OK(flux_store_destroy(t->s)); /* none of them left it grouped */
    teardown(d, NULL, 0);
}

/* Every refused group create sets *out to NULL (not only the first: each
 * call here starts from a non-NULL *out), and "more than SIZE_MAX / 2" is
 * refused from SIZE_MAX / 2 + 1 on, not only for (size_t)-1. */
static void group_create_refusals_each_set_out_to_null(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    flux_dispatcher *other = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    tstore *o = make_store(other, 2, 1, false);
    flux_store *one[1] = {t->s};
    flux_store *mixed[2] = {t->s, o->s};
    flux_store *with_null[2] = {NULL, t->s};
    struct {
        const char *what;
        flux_store *const *stores;
        size_t count;
        flux_listener_fn fn;
    } cases[] = {
        {"count 0", one, 0, group_fn},
        {"count SIZE_MAX / 2 + 1", one, SIZE_MAX / 2 + 1, group_fn},
        {"stores NULL", NULL, 1, group_fn},
        {"stores[0] NULL", with_null, 2, group_fn},
        {"fn NULL", one, 1, NULL},
        {"stores on two dispatchers", mixed, 2, group_fn},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        flux_store_group *g = (flux_store_group *)&g;
        L.events.n = 0;
        EXPECT_STATUS(flux_store_group_create(cases[i].stores, cases[i].count, cases[i].fn, gctx_new(),
                                              group_destroy, &g),
                      FLUX_ERR_INVALID_ARGUMENT);
        is_ptr(g, NULL, "%s: *out is NULL", cases[i].what);
        is_int(count_events(EV_GROUP_DESTROY), 1, "%s: the context was destroyed once", cases[i].what);
    }
    has_substr(flux_last_error(), "dispatcher", "the last refusal says why");
    EXPECT_OK(flux_store_destroy(t->s)); /* no refused create left it grouped */
    EXPECT_OK(flux_store_destroy(o->s));
    REQUIRE(flux_dispatcher_destroy(other) == FLUX_OK);
    teardown(d, NULL, 0);
}

/* "a group created during a dispatch first runs in the next one", made
 * from a listener of its own store -- whose callback has run, so only the
 * group's registration joining late keeps it out of this dispatch. */
static void create_group_hook(lis *l)
{
    flux_store_group **out = l->user;
    if (*out == NULL)
        l->status = flux_store_group_create(&l->s, 1, group_fn, gctx_new(), group_destroy, out);
}

static void group_created_during_a_dispatch_first_runs_in_the_next_one(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store_group *group = NULL;
    lis *l = listen(t->s, 1, create_group_hook);
    l->user = &group;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(l->status);
    is_int(count_events(EV_GROUP), 0, "the group did not run in the dispatch that created it");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(count_events(EV_GROUP), 1, "it runs in the next one");
    EXPECT_OK(flux_store_group_release(group));
    l->hook = NULL;
    teardown(d, &t, 1);
}

/* "the array is copied": what the caller's array holds after the create
 * changes nothing -- the group still waits for, and holds, the stores it
 * was given. */
static void group_keeps_its_stores_when_the_callers_array_changes(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *a = make_store(d, 1, 1, false);
    tstore *b = make_store(d, 2, 1, false);
    flux_store *stores[1] = {a->s};
    gctx g = {.magic = ALIVE};
    g.a = a->s;
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, &g, NULL, &group));
    stores[0] = b->s;
    EXPECT_OK(flux_store_destroy(b->s)); /* never in the group */
    EXPECT_STATUS(flux_store_destroy(a->s), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(g.calls, 1, "the group ran");
    is_int(g.a_changed, 1, "after the store it was given, which had changed");
    EXPECT_OK(flux_store_group_release(group));
    teardown(d, &a, 1);
}

static void group_does_not_run_when_a_store_fails(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    gctx g = {.magic = ALIVE};
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, &g, NULL, &group));
    EXPECT_STATUS(flux_dispatch(d, "fail"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), flux_store_token(t->s), "the failure reported is the store's");
    is_int(g.calls, 0, "the group did not run");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(g.calls, 1, "it runs on the next dispatch");
    EXPECT_OK(flux_store_group_release(group));
    teardown(d, &t, 1);
}

/* ---- dependencies, NULLs, create failure -------------------------------- */

static void another_store_waits_for_a_store_and_reads_its_new_state(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    watcher w = {.d = d, .wait = true};
    flux_token wt;
    EXPECT_OK(flux_register(d, watcher_cb, &w, NULL, &wt));
    tstore *t = make_store(d, 1, 1, false);
    w.s = t->s;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(w.wait_status);
    is_int(st_value(w.state), 2, "after wait_for the store's new state is visible");
    is_int(w.changed, 1, "and has_changed says so");
    EXPECT_OK(flux_unregister(d, wt));
    teardown(d, &t, 1);
}

static void null_arguments(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    is_ptr(flux_store_state(NULL), NULL, "flux_store_state(NULL) is NULL");
    is_uint(flux_store_token(NULL), 0, "flux_store_token(NULL) is 0");
    is_ptr(flux_store_dispatcher(NULL), NULL, "flux_store_dispatcher(NULL) is NULL");
    EXPECT_STATUS(flux_store_emit_change(NULL), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_OK(flux_store_destroy(NULL));
    EXPECT_OK(flux_store_group_release(NULL));
    tstore *t = tstore_new(1, d);
    flux_store *s = (flux_store *)&s;
    EXPECT_STATUS(flux_store_create(NULL, st_new(4), t_reduce, NULL, st_release, t, tstore_destroy, &s),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_ptr(s, NULL, "*out is NULL on failure");
    is_trace(&L.events, INTS(EV_RELEASE + 4, EV_CONTEXT_DESTROY + 1), "NULL dispatcher: state released, then context");
    L.events.n = 0;
    t = tstore_new(2, d);
    EXPECT_STATUS(flux_store_create(d, st_new(6), t_reduce, NULL, st_release, t, tstore_destroy, NULL),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_trace(&L.events, INTS(EV_RELEASE + 6, EV_CONTEXT_DESTROY + 2), "NULL out: state released, then context");
    /* NULL release_state: the state is not owned; NULL destroy: nothing to run. */
    static st unowned = {ALIVE, 1};
    EXPECT_STATUS(flux_store_create(d, &unowned, NULL, NULL, NULL, NULL, NULL, &s), FLUX_ERR_INVALID_ARGUMENT);
    teardown(d, NULL, 0);
}

typedef struct closer {
    flux_dispatcher *d;
    flux_status store_status;
    flux_store *out;
} closer;

static void closer_destroy(void *context)
{
    closer *c = context;
    tstore *t = tstore_new(7, c->d);
    c->out = (flux_store *)c;
    c->store_status = flux_store_create(c->d, st_new(8), t_reduce, NULL, st_release, t, tstore_destroy, &c->out);
}

static int noop_cb(void *context, const void *payload)
{
    (void)context;
    (void)payload;
    return 0;
}

static void closed_dispatcher_create(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    closer c = {.d = d};
    flux_token token;
    EXPECT_OK(flux_register(d, noop_cb, &c, closer_destroy, &token));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(c.store_status, FLUX_ERR_INVALID_ARGUMENT, "a store created while its dispatcher is destroyed fails");
    is_ptr(c.out, NULL, "*out is NULL");
    is_trace(&L.events, INTS(EV_RELEASE + 8, EV_CONTEXT_DESTROY + 7), "state released, then context, once each");
    is_int(L.live, 0, "nothing leaked");
}

/* ---- flux_store_listener_fail ------------------------------------------- */

static void fail_hook(lis *l)
{
    l->status = flux_store_listener_fail(flux_store_dispatcher(l->s), 5);
}

static void group_fail_fn(void *context)
{
    gctx *g = context;
    g->calls++;
    g->a_status = flux_store_listener_fail(g->d, 6);
}

static void a_failing_listener_stops_the_emit_and_fails_the_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *failing = listen(t->s, 1, fail_hook);
    lis *next = listen(t->s, 2, NULL);
    node after;
    node_init(&after, 9, d, NULL);
    EXPECT_OK(node_register(&after));
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), flux_store_token(t->s), "the error names the store's token");
    has_number(flux_last_error(), 5, "and the value");
    EXPECT_OK(failing->status);
    is_int(next->calls, 0, "the emit stopped: the next listener did not run");
    is_int(after.calls, 0, "the dispatch was aborted: no later callback ran");
    is_int(st_value(flux_store_state(t->s)), 2, "the state had changed before its listeners ran, and stays");
    failing->hook = NULL;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(next->calls, 1, "the next dispatch runs every listener");
    EXPECT_OK(flux_unregister(d, after.token));
    EXPECT_STATUS(flux_store_listener_fail(d, 5), FLUX_ERR_NOT_DISPATCHING);
    EXPECT_STATUS(flux_store_listener_fail(d, 0), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_store_listener_fail(NULL, 5), FLUX_ERR_INVALID_ARGUMENT);
    teardown(d, &t, 1);
}

/* What flux_store_is_emitting() read: in a reduce, in a listener, and on
 * another thread while that listener ran. */
static int emitting_in_reduce = -1, emitting_in_listener = -1, emitting_elsewhere = -1;

static int emitting_reduce_hook(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    emitting_in_reduce = flux_store_is_emitting(t->s);
    return 0;
}

static void *read_emitting(void *store)
{
    emitting_elsewhere = flux_store_is_emitting(store);
    return NULL;
}

static void emitting_hook(lis *l)
{
    emitting_in_listener = flux_store_is_emitting(l->s);
    pthread_t other;
    REQUIRE(pthread_create(&other, NULL, read_emitting, l->s) == 0);
    REQUIRE(pthread_join(other, NULL) == 0);
}

static void is_emitting_exactly_while_the_listeners_run(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    t->hook = emitting_reduce_hook;
    is_int(flux_store_is_emitting(NULL), 0, "NULL: 0");
    is_int(flux_store_is_emitting(t->s), 0, "no dispatch: 0");
    lis *reader = listen(t->s, 1, emitting_hook);
    lis *failing = listen(t->s, 2, fail_hook);
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    is_int(emitting_in_reduce, 0, "0 in its reduce, before the emit");
    is_int(emitting_in_listener, 1, "1 in a listener");
    is_int(emitting_elsewhere, 1, "1 on another thread while a listener runs");
    is_int(flux_store_is_emitting(t->s), 0, "0 once the emit stopped at a failing listener");
    failing->hook = NULL;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(flux_store_is_emitting(t->s), 0, "0 once the emit ended");
    EXPECT_OK(failing->status);
    (void)reader;
    teardown(d, &t, 1);
}

static int fail_from_reduce(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    t->emit_status = flux_store_listener_fail(t->d, 5);
    return 0;
}

static void fail_twice_hook(lis *l)
{
    flux_dispatcher *d = flux_store_dispatcher(l->s);
    l->status = flux_store_listener_fail(d, 5);
    if (l->status == FLUX_OK)
        l->status = flux_store_listener_fail(d, 9);
}

static void listener_fail_again_replaces_the_value(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *failing = listen(t->s, 1, fail_twice_hook);
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    EXPECT_OK(failing->status);
    has_substr(flux_last_error(), "returned 9", "the second value replaced the first");
    teardown(d, &t, 1);
}

/* Value 0 is refused even inside a listener, and a refused call changes
 * nothing: the listener is not failed and the emit goes on. */
static void fail_with_zero_hook(lis *l)
{
    l->status = flux_store_listener_fail(flux_store_dispatcher(l->s), 0);
}

static void listener_fail_with_0_in_a_listener_fails_nothing(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *zero = listen(t->s, 1, fail_with_zero_hook);
    lis *next = listen(t->s, 2, NULL);
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(zero->status, FLUX_ERR_INVALID_ARGUMENT, "listener_fail(d, 0) in a listener: INVALID_ARGUMENT");
    is_int(next->calls, 1, "the emit went on");
    zero->hook = NULL;
    teardown(d, &t, 1);
}

/* The failure is noted per dispatcher, but only the dispatching thread may
 * note it: another thread calling while a listener runs is refused, and
 * the listener it might have failed is not. */
typedef struct outsider {
    flag running, called;
    flux_dispatcher *d;
    flux_status status;
} outsider;

static void wait_for_outsider_hook(lis *l)
{
    outsider *o = l->user;
    flag_set(&o->running);
    REQUIRE(flag_wait(&o->called, prompt_seconds()));
}

static void *outsider_thread(void *arg)
{
    outsider *o = arg;
    REQUIRE(flag_wait(&o->running, prompt_seconds()));
    o->status = flux_store_listener_fail(o->d, 5);
    flag_set(&o->called);
    return NULL;
}

static void listener_fail_from_another_thread_while_a_listener_runs_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    outsider o;
    memset(&o, 0, sizeof o);
    flag_init(&o.running);
    flag_init(&o.called);
    o.d = d;
    o.status = (flux_status)-1;
    lis *waiting = listen(t->s, 1, wait_for_outsider_hook);
    waiting->user = &o;
    lis *next = listen(t->s, 2, NULL);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, outsider_thread, &o) == 0);
    EXPECT_OK(flux_dispatch(d, "inc"));
    pthread_join(th, NULL);
    is_int(o.status, FLUX_ERR_NOT_DISPATCHING, "from another thread while a listener runs: NOT_DISPATCHING");
    is_int(next->calls, 1, "the running listener was not failed: the emit went on");
    waiting->hook = NULL;
    flag_fini(&o.running);
    flag_fini(&o.called);
    teardown(d, &t, 1);
}

static void listener_fail_outside_a_listener_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    t->hook = fail_from_reduce;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(t->emit_status, FLUX_ERR_NOT_DISPATCHING, "from a reduce: NOT_DISPATCHING");
    t->hook = NULL;
    teardown(d, &t, 1);
}

/* flux.h, "Ownership": during flux_dispatcher_destroy(), calls on the
 * dispatcher being destroyed fail with FLUX_ERR_INVALID_ARGUMENT -- this one
 * too, from a destroy that the destroy of d runs (not NOT_DISPATCHING). */
typedef struct fail_closer {
    flux_dispatcher *d;
    flux_status status;
} fail_closer;

static void fail_closer_destroy(void *context)
{
    fail_closer *c = context;
    c->status = flux_store_listener_fail(c->d, 5);
}

static void listener_fail_on_a_dispatcher_being_destroyed_is_invalid(void)
{
    flux_dispatcher *d = new_dispatcher();
    fail_closer c = {.d = d, .status = FLUX_OK};
    flux_token token;
    EXPECT_OK(flux_register(d, noop_cb, &c, fail_closer_destroy, &token));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(c.status, FLUX_ERR_INVALID_ARGUMENT, "from a destroy the dispatcher's destroy runs: INVALID_ARGUMENT");
}

/* A listener waits for another store, whose reduce calls
 * flux_store_listener_fail(): "inside a listener" counts what the listener
 * calls, so the waiting listener is the one that fails. */
static void wait_for_b_hook(lis *l)
{
    tstore *b = l->user;
    flux_token token = flux_store_token(b->s);
    l->status = flux_wait_for(flux_store_dispatcher(l->s), &token, 1);
}

static void listener_fail_from_what_a_listener_waits_for_fails_that_listener(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t[2] = {make_store(d, 1, 1, false), make_store(d, 2, 1, false)};
    t[1]->hook = fail_from_reduce;
    lis *waiting = listen(t[0]->s, 1, wait_for_b_hook);
    waiting->user = t[1];
    lis *next = listen(t[0]->s, 2, NULL);
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    is_int(t[1]->emit_status, FLUX_OK, "the call from the reduce the listener's wait ran is accepted");
    EXPECT_OK(waiting->status);
    has_number(flux_last_error(), flux_store_token(t[0]->s), "the failure is the waiting listener's store's");
    has_number(flux_last_error(), 5, "with the value given");
    is_int(next->calls, 0, "that store's emit stopped");
    t[1]->hook = NULL;
    teardown(d, t, 2);
}

static void a_failing_group_function_fails_the_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    gctx g = {.magic = ALIVE, .d = d};
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fail_fn, &g, NULL, &group));
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), 6, "the error carries the group function's value");
    /* flux_store_listener_fail(): "naming the store's token (for a group
     * function, the group's)" -- not its store's. */
    is_uint(flux_last_error_token(), flux_store_group_token(group), "and names the group's token");
    EXPECT_OK(g.a_status);
    EXPECT_OK(flux_store_group_release(group));
    teardown(d, &t, 1);
}

/* reduce marks the store changed, then fails: the failure wins, so a wait
 * for the store then reads has_changed 0 (flux.h), not the emit's 1. */
static int emit_then_fail(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    t->emit_status = flux_store_emit_change(t->s);
    return 7;
}

static void reduce_failing_after_emit_change_reports_no_change(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    watcher w = {.d = d, .wait = true, .changed = 9};
    flux_token wt;
    EXPECT_OK(flux_register(d, watcher_cb, &w, NULL, &wt));
    tstore *t = make_store(d, 1, 3, false);
    w.s = t->s;
    t->hook = emit_then_fail;
    lis *l = listen(t->s, 1, NULL);
    EXPECT_STATUS(flux_dispatch(d, "x"), FLUX_ERR_CALLBACK_FAILED);
    EXPECT_OK(t->emit_status);
    is_int(w.wait_status, FLUX_ERR_CALLBACK_FAILED, "the wait for the store reports its failure");
    EXPECT_OK(w.status);
    is_int(w.changed, 0, "has_changed then reports 0, despite the emit_change before the failure");
    is_int(l->calls, 0, "no listener ran");
    EXPECT_OK(flux_unregister(d, wt));
    teardown(d, &t, 1);
}

/* A store created during a dispatch joins when it ends; until then its token
 * is still the store's own: flux_unregister() must refuse it, as it does
 * for a store already in the table (it would free the store under its owner). */
static flux_status joined_unregister_status;
static int create_store_then_unregister_hook(node *self, const void *p)
{
    (void)p;
    tstore **out = self->user;
    *out = make_store(self->d, 2, 1, false);
    joined_unregister_status = flux_unregister(self->d, flux_store_token((*out)->s));
    return 0;
}

static void unregister_of_a_store_token_created_during_the_dispatch_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = NULL;
    node n;
    node_init(&n, 9, d, NULL);
    n.hook = create_store_then_unregister_hook;
    n.user = &t;
    EXPECT_OK(node_register(&n));
    joined_unregister_status = (flux_status)-1;
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(flux_unregister(d, n.token));
    is_int(joined_unregister_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_unregister of a store's token that joined during the dispatch is refused");
    is_int(count_events(EV_CONTEXT_DESTROY + 2), 0, "the store was not released");
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(st_value(flux_store_state(t->s)), 2, "the store handles the next dispatch");
    teardown(d, &t, 1);
}

/* A store's reduce waits for its own group: the group's wait for the store
 * closes a cycle, so the group fails (it must not skip its function and
 * report success, which would hide the cycle). */
static flux_token group_token_to_wait;
static int wait_for_group(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    t->emit_status = flux_wait_for(t->d, &group_token_to_wait, 1);
    return 0;
}

static void a_store_waiting_for_its_own_group_fails_the_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    gctx g = {.magic = ALIVE, .d = d};
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, &g, NULL, &group));
    group_token_to_wait = flux_store_group_token(group);
    t->hook = wait_for_group;
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), group_token_to_wait, "the failure is the group's");
    is_int(t->emit_status, FLUX_ERR_CALLBACK_FAILED, "the store's wait reports the group's failure");
    is_int(g.calls, 0, "the group's function did not run");
    is_int(st_value(flux_store_state(t->s)), 1, "the store kept its state");
    t->hook = NULL;
    EXPECT_OK(flux_store_group_release(group));
    teardown(d, &t, 1);
}

/* A listener sets its failure, then its wait runs another store whose
 * listener does not fail: the nested listener must not clear the outer one's
 * failure. */
static void fail_then_wait_for_b_hook(lis *l)
{
    l->status = flux_store_listener_fail(flux_store_dispatcher(l->s), 5);
    tstore *b = l->user;
    flux_token token = flux_store_token(b->s);
    flux_status waited = flux_wait_for(flux_store_dispatcher(l->s), &token, 1);
    if (l->status == FLUX_OK)
        l->status = waited;
}

static void listener_fail_survives_a_nested_listener_that_does_not_fail(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t[2] = {make_store(d, 1, 1, false), make_store(d, 2, 1, false)};
    lis *failing = listen(t[0]->s, 1, fail_then_wait_for_b_hook);
    failing->user = t[1];
    lis *nested = listen(t[1]->s, 2, NULL);
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    EXPECT_OK(failing->status);
    is_int(nested->calls, 1, "the other store's listener ran inside the wait");
    has_number(flux_last_error(), flux_store_token(t[0]->s), "the failure is the first store's listener's");
    has_number(flux_last_error(), 5, "with the value set before the wait");
    teardown(d, t, 2);
}

/* ---- threads ------------------------------------------------------------- */

typedef struct other {
    flag in_reduce, checked;
    flux_store *s;
    lis *added;
    flux_token remove_id;
    flux_status has_changed, emit, add, remove, destroy, dispatcher_destroy;
    flux_status observer, create, group_create, group_release;
    tstore *created; /* a store made from the other thread */
    int changed;
} other;

static void noop_fn(void *context) { (void)context; }

static int blocking_hook(tstore *t, void *state, const char *action, void **next)
{
    (void)state;
    (void)action;
    (void)next;
    other *o = t->user;
    flag_set(&o->in_reduce);
    REQUIRE(flag_wait(&o->checked, prompt_seconds()));
    return 0;
}

static void *other_thread(void *arg)
{
    other *o = arg;
    REQUIRE(flag_wait(&o->in_reduce, prompt_seconds()));
    o->changed = 7;
    o->has_changed = flux_store_has_changed(o->s, &o->changed);
    o->emit = flux_store_emit_change(o->s);
    o->added = lis_new(5, o->s);
    o->add = flux_store_add_listener(o->s, lis_fn, o->added, lis_destroy, &o->added->token);
    o->remove = flux_store_remove_listener(o->s, o->remove_id);
    o->destroy = flux_store_destroy(o->s);
    o->dispatcher_destroy = flux_dispatcher_destroy(flux_store_dispatcher(o->s));
    /* The reduce waits for this thread: any of these waiting for the
     * dispatch to end would hold both for good (and the REQUIREs fail). */
    flux_dispatcher *d = flux_store_dispatcher(o->s);
    static const flux_observer no_hooks = {FLUX_OBSERVER_VERSION, NULL, NULL, NULL, NULL, NULL};
    o->observer = flux_dispatcher_set_observer(d, &no_hooks, NULL, NULL);
    if (o->observer == FLUX_OK)
        o->observer = flux_dispatcher_set_observer(d, NULL, NULL, NULL);
    o->created = tstore_new(9, d);
    o->create = flux_store_create(d, st_new(1), t_reduce, NULL, st_release, o->created, tstore_destroy,
                                  &o->created->s);
    flux_store_group *group = NULL;
    o->group_create = flux_store_group_create(&o->s, 1, noop_fn, NULL, NULL, &group);
    o->group_release = group ? flux_store_group_release(group) : FLUX_ERR_INVALID_ARGUMENT;
    flag_set(&o->checked);
    return NULL;
}

static void another_thread_during_a_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    other o;
    memset(&o, 0, sizeof o);
    flag_init(&o.in_reduce);
    flag_init(&o.checked);
    o.s = t->s;
    lis *kept = listen(t->s, 1, NULL);
    lis *gone = listen(t->s, 2, NULL);
    o.remove_id = gone->token;
    t->user = &o;
    t->hook = blocking_hook;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, other_thread, &o) == 0);
    EXPECT_OK(flux_dispatch(d, "inc"));
    pthread_join(th, NULL);
    is_int(o.has_changed, FLUX_ERR_NOT_DISPATCHING, "has_changed from another thread: NOT_DISPATCHING");
    is_int(o.changed, 0, "and *changed is 0");
    is_int(o.emit, FLUX_ERR_NOT_DISPATCHING, "emit_change from another thread during the reduce: NOT_DISPATCHING");
    is_int(o.add, FLUX_OK, "add_listener from another thread works");
    is_int(o.remove, FLUX_OK, "remove_listener from another thread works");
    is_int(o.destroy, FLUX_ERR_ALREADY_DISPATCHING, "flux_store_destroy during a dispatch: ALREADY_DISPATCHING");
    is_int(o.dispatcher_destroy, FLUX_ERR_ALREADY_DISPATCHING, "flux_dispatcher_destroy during a dispatch: ALREADY_DISPATCHING");
    is_int(o.observer, FLUX_OK, "set_observer from another thread, set and cleared, without waiting");
    is_int(o.create, FLUX_OK, "flux_store_create from another thread, without waiting");
    is_int(o.group_create, FLUX_OK, "flux_store_group_create from another thread, without waiting");
    is_int(o.group_release, FLUX_OK, "flux_store_group_release from another thread, without waiting");
    is_int(kept->calls, 1, "the kept listener ran");
    is_int(o.added->calls, 1, "one added before the emit began runs in it");
    is_int(count_events(EV_LISTENER + 2), 0, "the removed one did not");
    t->hook = NULL;
    flag_fini(&o.in_reduce);
    flag_fini(&o.checked);
    tstore *both[2] = {t, o.created};
    teardown(d, both, 2);
}

typedef struct remover {
    flag running, removed;
    flux_store *s;
    flux_token id;
    flux_status status;
    int destroyed_before_return;
} remover;

static void wait_hook(lis *l)
{
    remover *r = l->user;
    flag_set(&r->running);
    REQUIRE(flag_wait(&r->removed, prompt_seconds()));
    r->destroyed_before_return = count_events(EV_LISTENER_DESTROY + l->id);
}

static void *remover_thread(void *arg)
{
    remover *r = arg;
    REQUIRE(flag_wait(&r->running, prompt_seconds()));
    r->status = flux_store_remove_listener(r->s, r->id);
    flag_set(&r->removed);
    return NULL;
}

static void listener_removed_by_another_thread_while_running(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    remover r;
    memset(&r, 0, sizeof r);
    flag_init(&r.running);
    flag_init(&r.removed);
    lis *l = listen(t->s, 1, wait_hook);
    l->user = &r;
    r.s = t->s;
    r.id = l->token;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, remover_thread, &r) == 0);
    EXPECT_OK(flux_dispatch(d, "inc"));
    pthread_join(th, NULL);
    EXPECT_OK(r.status);
    is_int(r.destroyed_before_return, 0, "the listener's destroy did not run under it");
    is_trace(&L.events, INTS(EV_REDUCE + 1, EV_RELEASE + 1, EV_LISTENER + 1, EV_LISTENER_END + 1, EV_LISTENER_DESTROY + 1),
             "it ran right after the listener returned");
    flag_fini(&r.running);
    flag_fini(&r.removed);
    teardown(d, &t, 1);
}

/* ---- a store's and a group's registration belong to them (issue 15) ----- */

typedef struct unreg {
    flux_token store_token, group_token;
    flux_status store_status, group_status;
    char store_error[256], group_error[256];
} unreg;

/* From inside a dispatch: flux_unregister of the store's and the group's tokens. */
static int unregister_owned_hook(node *n, const void *payload)
{
    (void)payload;
    unreg *u = n->user;
    u->store_status = flux_unregister(n->d, u->store_token);
    snprintf(u->store_error, sizeof u->store_error, "%s", flux_last_error());
    u->group_status = flux_unregister(n->d, u->group_token);
    snprintf(u->group_error, sizeof u->group_error, "%s", flux_last_error());
    return 0;
}

static void unregister_of_a_store_or_group_token_is_refused(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *l = listen(t->s, 1, NULL);
    flux_store *stores[1] = {t->s};
    gctx *g = gctx_new();
    flux_store_group *group;
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, g, group_destroy, &group));
    node n;
    node_init(&n, 9, d, NULL);
    EXPECT_OK(node_register(&n));
    unreg u = {.store_token = flux_store_token(t->s), .group_token = flux_store_group_token(group)};

    EXPECT_STATUS(flux_unregister(d, u.store_token), FLUX_ERR_INVALID_ARGUMENT);
    has_prefix(flux_last_error(), "flux_unregister: ", "the message names the function");
    has_substr(flux_last_error(), "flux_store_destroy", "and says to use flux_store_destroy");
    has_number(flux_last_error(), u.store_token, "and names the token");
    EXPECT_STATUS(flux_unregister(d, u.group_token), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "flux_store_group_release", "a group's: use flux_store_group_release");
    is_int(count_events(EV_CONTEXT_DESTROY + 1) + count_events(EV_GROUP_DESTROY) + count_events(EV_LISTENER_DESTROY + 1),
           0, "nothing was released");

    /* From inside a dispatch (the removal would be deferred): refused too. */
    n.hook = unregister_owned_hook;
    n.user = &u;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(u.store_status, FLUX_ERR_INVALID_ARGUMENT, "from a callback: the store's token is refused");
    has_substr(u.store_error, "flux_store_destroy", "with the same advice");
    is_int(u.group_status, FLUX_ERR_INVALID_ARGUMENT, "from a callback: the group's token is refused");
    has_substr(u.group_error, "flux_store_group_release", "with the same advice");
    n.hook = NULL;

    /* The store and the group still work, every dispatch. */
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(st_value(flux_store_state(t->s)), 3, "the store handled both dispatches");
    is_int(l->calls, 2, "its listener ran in both");
    is_int(g->calls, 2, "the group ran in both");
    EXPECT_OK(flux_unregister(d, n.token));
    /* Their owners end them, once each. */
    EXPECT_STATUS(flux_store_destroy(t->s), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_OK(flux_store_group_release(group));
    is_int(count_events(EV_GROUP_DESTROY), 1, "the group's context was destroyed once");
    teardown(d, &t, 1);
    is_int(count_events(EV_LISTENER_DESTROY + 1), 1, "the listener was destroyed once");
    is_int(count_events(EV_CONTEXT_DESTROY + 1), 1, "the store's context was destroyed once");
}

/* ---- flux_store_group_token: the group's registration ------------------- */

static struct {
    flux_dispatcher *d;
    flux_store_group *group;
    flux_token token;
    gctx *g;
    int calls_seen; /* the group's calls when the wait returned */
    flux_status wait_status, release_status, asked_status;
} GT;

/* Registered after the group: waits for it, so it ran before this reads. */
static int wait_for_the_group_cb(void *context, const void *payload)
{
    (void)context, (void)payload;
    GT.wait_status = flux_wait_for(GT.d, &GT.token, 1);
    GT.calls_seen = GT.g->calls;
    return 0;
}

/* Releases the group mid-dispatch (the release itself waits for the end),
 * then asks flux_unregister() what a binding that lost the status would. */
static int release_then_ask_cb(void *context, const void *payload)
{
    (void)context, (void)payload;
    GT.release_status = flux_store_group_release(GT.group);
    GT.asked_status = flux_unregister(GT.d, GT.token);
    return 0;
}

static void group_token_is_its_registration_and_answers_whether_it_is_live(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    flux_store *stores[1] = {t->s};
    memset(&GT, 0, sizeof GT);
    GT.d = d;
    GT.g = gctx_new();
    is_uint(flux_store_group_token(NULL), 0, "flux_store_group_token(NULL) is 0");
    EXPECT_OK(flux_store_group_create(stores, 1, group_fn, GT.g, group_destroy, &GT.group));
    GT.token = flux_store_group_token(GT.group);
    is_uint(GT.token, flux_store_token(t->s) + 1, "the group's token is the registration after the store's");

    /* A callback registered after the group waits for it by that token. */
    flux_token first;
    EXPECT_OK(flux_register(d, wait_for_the_group_cb, NULL, NULL, &first));
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(GT.wait_status);
    is_int(GT.calls_seen, 1, "a wait for the group's token returns after its fn ran");
    EXPECT_OK(flux_unregister(d, first));

    /* Live: flux_unregister refuses its token and changes nothing. */
    EXPECT_STATUS(flux_unregister(d, GT.token), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(GT.g->calls, 2, "the group still runs");

    /* Released during a dispatch: its token is unknown at once. */
    flux_token releaser;
    EXPECT_OK(flux_register(d, release_then_ask_cb, NULL, NULL, &releaser));
    EXPECT_OK(flux_dispatch(d, "inc"));
    EXPECT_OK(GT.release_status);
    is_int(GT.asked_status, FLUX_ERR_UNKNOWN_TOKEN, "released mid-dispatch: the token is unknown");
    is_int(count_events(EV_GROUP_DESTROY), 1, "and the group was released once, as that dispatch ended");
    EXPECT_STATUS(flux_unregister(d, GT.token), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_OK(flux_unregister(d, releaser));
    teardown(d, &t, 1);
}

/* ---- a listener's wait that meets a failure stops the emit (issue 15) ---- */

static void wait_ignoring_hook(lis *l)
{
    node *failing = l->user;
    l->status = flux_wait_for(failing->d, &failing->token, 1);
    /* ...and returns as if nothing happened. */
}

static void a_listener_whose_wait_meets_a_failure_stops_the_emit(void)
{
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    node failing;
    node_init(&failing, 9, d, NULL);
    failing.fail_times = 1;
    failing.fail_value = 4;
    EXPECT_OK(node_register(&failing));
    lis *waiting = listen(t->s, 1, wait_ignoring_hook);
    waiting->user = &failing;
    lis *next = listen(t->s, 2, NULL);
    EXPECT_STATUS(flux_dispatch(d, "inc"), FLUX_ERR_CALLBACK_FAILED);
    has_number(flux_last_error(), failing.token, "the dispatch reports the callback that failed");
    is_int(waiting->status, FLUX_ERR_CALLBACK_FAILED, "the listener's wait reported the failure");
    is_int(next->calls, 0, "the dispatch is aborted: the store runs no further listener");
    is_int(failing.calls, 1, "the failing callback ran once (in the wait), not again");
    waiting->hook = NULL;
    EXPECT_OK(flux_dispatch(d, "inc"));
    is_int(next->calls, 1, "the next dispatch runs every listener");
    EXPECT_OK(flux_unregister(d, failing.token));
    teardown(d, &t, 1);
}

/* ---- many removals keep every listener rule (removal by id, no scan) ---- */

/* The listener calls in L.events (EV_LISTENER + id) from index from, in order. */
static void listener_calls(trace *out, size_t from)
{
    out->n = 0;
    for (size_t i = from; i < L.events.n; i++)
        if (L.events.ev[i] >= EV_LISTENER && L.events.ev[i] < EV_LISTENER_END)
            trace_push(out, L.events.ev[i]);
}

static void listener_rules_hold_across_many_removals(void)
{
    enum { N = 40 };
    ledger_reset();
    flux_dispatcher *d = new_dispatcher();
    tstore *t = make_store(d, 1, 1, false);
    lis *l[N + 1];
    flux_token token[N + 1]; /* kept: a removed listener is freed */
    for (int id = 1; id <= N; id++) {
        l[id] = listen(t->s, id, NULL);
        token[id] = l[id]->token;
    }
    /* Every third removed while idle: enough to drop removed entries on the
     * way, and to leave some for the emit to skip. */
    for (int id = 3; id <= N; id += 3)
        EXPECT_OK(flux_store_remove_listener(t->s, l[id]->token));
    for (int id = 3; id <= N; id += 3)
        is_int(count_events(EV_LISTENER_DESTROY + id), 1, "listener %d destroyed once, at once", id);
    EXPECT_STATUS(flux_store_remove_listener(t->s, token[3]), FLUX_ERR_UNKNOWN_TOKEN);
    has_substr(flux_last_error(), "already removed", "removed twice: already removed");
    EXPECT_STATUS(flux_store_remove_listener(t->s, token[N - 1]), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_STATUS(flux_store_remove_listener(t->s, 1000), FLUX_ERR_UNKNOWN_TOKEN);
    has_substr(flux_last_error(), "never added", "an id never issued: never added");
    EXPECT_STATUS(flux_store_remove_listener(t->s, 0), FLUX_ERR_UNKNOWN_TOKEN);

    /* During the emit: 1 removes 40 before it runs, 10 removes itself, 5 adds one. */
    l[1]->hook = remove_user_hook;
    l[1]->user = l[N];
    l[10]->hook = remove_self_hook;
    l[5]->hook = add_hook;
    size_t from = L.events.n;
    EXPECT_OK(flux_dispatch(d, "inc"));
    trace got, want = {.n = 0};
    listener_calls(&got, from);
    for (int id = 1; id < N; id++)
        if (id % 3 != 0)
            trace_push(&want, EV_LISTENER + id);
    tap_is_trace(&got, want.ev, want.n, "listener calls", __FILE__, __LINE__,
                 "the others ran in add order, skipping the removed ones");
    is_int(count_events(EV_LISTENER_DESTROY + N), 1, "the one removed by an earlier listener was destroyed once");
    is_int(count_events(EV_LISTENER_DESTROY + 10), 1, "the one removing itself was destroyed once");
    lis *added = l[5]->user;
    REQUIRE(added != NULL);
    is_uint(added->token, N + 1, "ids go on counting up");
    is_int(added->calls, 0, "one added during the emit did not run in it");
    l[1]->hook = l[5]->hook = NULL;

    from = L.events.n;
    EXPECT_OK(flux_dispatch(d, "inc"));
    listener_calls(&got, from);
    want.n = 0;
    for (int id = 1; id < N; id++)
        if (id % 3 != 0 && id != 10)
            trace_push(&want, EV_LISTENER + id);
    trace_push(&want, EV_LISTENER + added->id);
    tap_is_trace(&got, want.ev, want.n, "listener calls", __FILE__, __LINE__,
                 "the next emit: the same order, the added one last");
    /* The rest, removed from the front while idle: the last one left runs alone. */
    for (int id = 1; id < N - 1; id++)
        if (id % 3 != 0 && id != 10)
            EXPECT_OK(flux_store_remove_listener(t->s, l[id]->token));
    from = L.events.n;
    EXPECT_OK(flux_dispatch(d, "inc"));
    listener_calls(&got, from);
    int last = added->id;
    is_trace(&got, INTS(EV_LISTENER + last), "only the last one runs");
    teardown(d, &t, 1);
    int wrong = 0;
    for (int id = 1; id <= N; id++)
        wrong += count_events(EV_LISTENER_DESTROY + id) != 1;
    is_int(wrong, 0, "every listener was destroyed exactly once");
    is_int(count_events(EV_LISTENER_DESTROY + last), 1, "the added one too");
}

/* ---- adders and removers on other threads against a stream of emits ---- */

enum { RACE_THREADS = 2, RACE_PER_THREAD = 400, RACE_WINDOW = 3 };

/* One listener of the race: the emits that called it, by number. */
typedef struct racer {
    _Atomic int destroyed;  /* destroy calls */
    int bad;                /* calls after its destroy, or twice in one emit */
    int calls;
    int first, last;        /* the first and last emit that called it */
    int added_before;       /* the reduce count before add was called: no earlier emit calls it */
    int added_after;        /* the reduce count once add returned: later emits must call it */
    int removed_after;      /* the dispatch count before remove was called: emits up to it too */
    int gone_after;         /* the count of emits past their first listener once remove
                             * returned: later emits reach it after that, so must not call it */
    _Atomic int remove_returned;
    int misplaced_destroy;  /* a destroy neither inside remove nor right after its own call */
} racer;

static struct {
    _Atomic int reduced;    /* reduce calls so far: the number of the running dispatch */
    _Atomic int done;       /* dispatches returned so far */
    _Atomic int passed;     /* emits whose first listener has returned */
    _Atomic int finished;   /* threads done */
    pthread_t dispatching;  /* the main thread, the one that dispatches */
    racer *last_returned;   /* the listener that returned last on it */
    int tearing_down;       /* flux_store_destroy is releasing the rest */
    flux_store *s;
    racer r[RACE_THREADS][RACE_PER_THREAD];
    flux_status status[RACE_THREADS];
} R;

static int race_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context, (void)payload;
    atomic_fetch_add(&R.reduced, 1);
    *next = (void *)((intptr_t)state + 1);
    return 0;
}

static void race_listener(void *context)
{
    racer *r = context;
    int emit = atomic_load(&R.reduced);  /* only the dispatching thread reduces */
    if (atomic_load(&r->destroyed) != 0 || r->last == emit)
        r->bad++;
    if (r->calls++ == 0)
        r->first = emit;
    r->last = emit;
    R.last_returned = r;
}

/* Always the first: takes its time, so that removals land mid-emit, and
 * counts the emits it is done with. */
static void race_first(void *context)
{
    (void)context;
    for (int spin = 0; spin < 2000; spin++)
        atomic_load_explicit(&R.done, memory_order_relaxed);
    atomic_fetch_add(&R.passed, 1);
}

/* The contract: at once, inside the remove; or, the listener running then,
 * on the dispatching thread right after it returns (before any other
 * listener of the store runs). */
static void race_destroy(void *context)
{
    racer *r = context;
    if (!R.tearing_down) {
        if (pthread_equal(pthread_self(), R.dispatching) ? R.last_returned != r
                                                         : atomic_load(&r->remove_returned) != 0)
            r->misplaced_destroy++;
    }
    atomic_fetch_add(&r->destroyed, 1);
}

static void *race_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    flux_token ids[RACE_PER_THREAD];
    for (int i = 0; i < RACE_PER_THREAD; i++) {
        racer *r = &R.r[t][i];
        r->added_before = atomic_load(&R.reduced);
        flux_status st = flux_store_add_listener(R.s, race_listener, r, race_destroy, &ids[i]);
        r->added_after = atomic_load(&R.reduced);
        if (st != FLUX_OK) {
            R.status[t] = st;
            break;
        }
        if (i >= RACE_WINDOW) {
            racer *old = &R.r[t][i - RACE_WINDOW];
            old->removed_after = atomic_load(&R.done);
            st = flux_store_remove_listener(R.s, ids[i - RACE_WINDOW]);
            atomic_store(&old->remove_returned, 1);
            old->gone_after = atomic_load(&R.passed);
            if (st != FLUX_OK) {
                R.status[t] = st;
                break;
            }
        }
        /* Let an emit or two go by now and then (the main thread
         * dispatches all along), so the listeners come and go mid-stream. */
        int until = atomic_load(&R.done) + i % 3;
        while (atomic_load(&R.done) < until)
            sched_yield();
    }
    atomic_fetch_add(&R.finished, 1);
    return NULL;
}

static void listeners_added_and_removed_by_other_threads_during_emits(void)
{
    ledger_reset();
    memset(&R, 0, sizeof R);
    R.dispatching = pthread_self();
    flux_dispatcher *d = new_dispatcher();
    REQUIRE(flux_store_create(d, NULL, race_reduce, NULL, NULL, NULL, NULL, &R.s) == FLUX_OK);
    flux_token first;
    REQUIRE(flux_store_add_listener(R.s, race_first, NULL, NULL, &first) == FLUX_OK);
    pthread_t th[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++)
        REQUIRE(pthread_create(&th[t], NULL, race_thread, (void *)(intptr_t)t) == 0);
    int failed = 0;
    /* Emits until both threads are done, and a few more. */
    for (int extra = 0; extra < 3;) {
        if (flux_dispatch(d, "inc") != FLUX_OK)
            failed++;
        atomic_fetch_add(&R.done, 1);
        if (atomic_load(&R.finished) == RACE_THREADS)
            extra++;
    }
    for (int t = 0; t < RACE_THREADS; t++)
        pthread_join(th[t], NULL);
    is_int(failed, 0, "every dispatch succeeded");
    for (int t = 0; t < RACE_THREADS; t++)
        is_int(R.status[t], FLUX_OK, "thread %d's adds and removes succeeded", t);
    int bad = 0, missed = 0, late = 0, undestroyed = 0, removed = 0, misplaced = 0;
    for (int t = 0; t < RACE_THREADS; t++)
        for (int i = 0; i < RACE_PER_THREAD - RACE_WINDOW; i++) {
            racer *r = &R.r[t][i];
            removed++;
            bad += r->bad;
            /* Called in emits first..last, each once (else bad): none skipped
             * between (it was present), none before it was added or after
             * its removal returned, and every emit it was present for,
             * whole -- from added_after + 1 to removed_after -- among them. */
            if (r->calls > 0 && r->calls != r->last - r->first + 1)
                missed++;
            if (r->removed_after > r->added_after
                && (r->calls == 0 || r->first > r->added_after + 1 || r->last < r->removed_after))
                missed++;
            if (r->calls > 0 && (r->first < r->added_before || r->last > r->gone_after))
                late++;
            undestroyed += atomic_load(&r->destroyed) != 1;
            misplaced += r->misplaced_destroy;
        }
    int ran = 0;
    for (int t = 0; t < RACE_THREADS; t++)
        for (int i = 0; i < RACE_PER_THREAD; i++)
            ran += R.r[t][i].calls > 0;
    diag("%d dispatches; %d of %d listeners ran", atomic_load(&R.done), ran, RACE_THREADS * RACE_PER_THREAD);
    is_int(bad, 0, "no listener ran twice in one emit, or after its destroy");
    is_int(missed, 0, "each ran in every emit it was present for, whole");
    is_int(late, 0, "none ran in an emit over before it was added, or reaching it after its removal returned");
    is_int(undestroyed, 0, "each of the %d removed was destroyed exactly once", removed);
    is_int(misplaced, 0, "each inside its remove, or right after its running call returned");
    R.tearing_down = 1;
    EXPECT_OK(flux_store_destroy(R.s));
    int wrong = 0;
    for (int t = 0; t < RACE_THREADS; t++)
        for (int i = 0; i < RACE_PER_THREAD; i++)
            wrong += atomic_load(&R.r[t][i].destroyed) != 1;
    is_int(wrong, 0, "and the rest by flux_store_destroy");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* flux_dispatcher_destroy on a dispatcher with a store, as a dispatch on
 * another thread ends: refused (FLUX_ERR_ALREADY_DISPATCHING while it runs,
 * FLUX_ERR_INVALID_ARGUMENT once it has ended), never done. It used to skip
 * the store check whenever a dispatch ran, leaving the refusal to the close,
 * which found the dispatcher idle when that dispatch had ended meanwhile --
 * and freed the store under its owner. A race: many rounds, each releasing
 * the dispatch a little earlier or later against the destroy. */
typedef struct ending {
    /* Spun on, not waited: a wake-up is too slow. On a loaded machine a
     * bare spin held the CPU the other thread needed, a scheduler tick per
     * round (30 s for the 3000), so the spins yield -- the callback's only
     * after a while, to end its dispatch right after `go` when it can. */
    atomic_int entered, go;
} ending;

static int ending_cb(void *context, const void *payload)
{
    (void)payload;
    ending *e = context;
    atomic_store(&e->entered, 1);
    for (int spins = 0; !atomic_load(&e->go); spins++)
        if (spins > 10000)
            sched_yield();
    return 0;
}

static void *ending_dispatch(void *arg)
{
    flux_dispatcher *d = arg;
    REQUIRE(flux_dispatch(d, NULL) == FLUX_OK);
    return NULL;
}

/* flux_store_create() and flux_store_group_create() -- "any thread, any
 * time" -- on one thread while the dispatching thread runs listeners and
 * group functions of the same dispatcher, with no synchronization between
 * them: the store count those calls change and the listener cells
 * flux_store_listener_fail() uses are separate memory, and must be separate
 * accesses too (under ThreadSanitizer, make check-thread-c, this is a race
 * report otherwise). */
static struct side_race {
    atomic_int stop;
    atomic_int listened;
    atomic_int made;
    int destroyed;
    flux_status status;
} SR;

static int side_reduce(void *context, void *state, const void *payload, void **next)
{
    (void)context, (void)payload;
    *next = (void *)((intptr_t)state + 1);
    return 0;
}

static void side_listener(void *context)
{
    (void)context;
    atomic_fetch_add_explicit(&SR.listened, 1, memory_order_relaxed);
}

static void *side_thread(void *arg)
{
    flux_dispatcher *d = arg;
    while (!atomic_load_explicit(&SR.stop, memory_order_relaxed)) {
        flux_store *s;
        flux_status st = flux_store_create(d, NULL, side_reduce, NULL, NULL, NULL, NULL, &s);
        if (st != FLUX_OK) {
            SR.status = st;
            break;
        }
        atomic_fetch_add(&SR.made, 1);
        flux_store_group *g;
        st = flux_store_group_create(&s, 1, side_listener, NULL, NULL, &g);
        if (st == FLUX_OK)
            st = flux_store_group_release(g);
        if (st != FLUX_OK) {
            SR.status = st;
            break;
        }
        /* Refused while a dispatch runs: try again until it is idle. */
        while ((st = flux_store_destroy(s)) == FLUX_ERR_ALREADY_DISPATCHING)
            sched_yield();
        if (st != FLUX_OK) {
            SR.status = st;
            break;
        }
        SR.destroyed++;
    }
    return NULL;
}

static void stores_made_on_another_thread_while_listeners_run(void)
{
    memset(&SR, 0, sizeof SR);
    flux_dispatcher *d = new_dispatcher();
    flux_store *s;
    REQUIRE(flux_store_create(d, NULL, side_reduce, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
    flux_listener_id id;
    REQUIRE(flux_store_add_listener(s, side_listener, NULL, NULL, &id) == FLUX_OK);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, side_thread, d) == 0);
    int failed = 0;
    long rounds = tap_scale(20000), i;
    /* Until the other thread has been through its loop a few times too.
     * Its destroy needs the dispatcher idle: a yield now and then makes
     * sure it sees it so. Without, valgrind's one-thread-at-a-time
     * scheduling could switch to it only mid-dispatch, for good (a
     * livelock that depended on the size of the environment). */
    for (i = 0; i < rounds || atomic_load(&SR.made) < 50; i++) {
        failed += flux_dispatch(d, "inc") != FLUX_OK;
        if (i % 64 == 63)
            sched_yield();
    }
    atomic_store(&SR.stop, 1);
    pthread_join(th, NULL);
    is_int(failed, 0, "every dispatch succeeded");
    is_int(SR.status, FLUX_OK, "every create, group and destroy on the other thread succeeded");
    is_int(SR.destroyed, atomic_load(&SR.made), "each store made there was destroyed (%d)", SR.destroyed);
    ok(atomic_load(&SR.listened) >= i, "the listener ran in every dispatch");
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void dispatcher_with_stores_is_not_destroyed_as_a_dispatch_ends(void)
{
    int rounds = tap_under_valgrind() ? 50 : 3000, destroyed = 0, refused = 0;
    for (int round = 0; round < rounds && destroyed == 0; round++) {
        flux_dispatcher *d = new_dispatcher();
        flux_store *s;
        REQUIRE(flux_store_create(d, NULL, keep_state, NULL, NULL, NULL, NULL, &s) == FLUX_OK);
        ending e = {0, 0};
        flux_token token;
        REQUIRE(flux_register(d, ending_cb, &e, NULL, &token) == FLUX_OK);
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, ending_dispatch, d) == 0);
        while (!atomic_load(&e.entered))
            sched_yield();
        atomic_store(&e.go, 1);
        for (volatile int spin = 0; spin < round % 1000; spin++) {
        }
        flux_status status = flux_dispatcher_destroy(d);
        pthread_join(th, NULL);
        if (status == FLUX_OK) {
            destroyed++; /* d and s are gone: nothing more to do with them */
            continue;
        }
        if (status == FLUX_ERR_ALREADY_DISPATCHING || status == FLUX_ERR_INVALID_ARGUMENT)
            refused++;
        REQUIRE(flux_store_destroy(s) == FLUX_OK);
        REQUIRE(flux_dispatcher_destroy(d) == FLUX_OK);
    }
    is_int(destroyed, 0, "never destroyed while its store lives");
    ok(refused > 0, "refused instead (%d rounds)", refused);
}

int main(void)
{
    tap_init();
    /* FluxStore-test.js */
    RUN(registers_a_callback_with_the_dispatcher);
    RUN(requires_that_subclasses_override_the___onDispatch_method);
    RUN(throws_when___emitChange_is_invoked_outside_of_a_dispatch);
    RUN(throws_when_hasChanged_is_invoked_outside_of_a_dispatch);
    RUN(emits_an_event_on_state_change);
    RUN(exposes_whether_the_state_has_changed_during_current_dispatch);
    RUN(exposes_the_dispatch_token_in_a_getter);
    RUN(wraps_EventEmitter_addListener_with_an_addListener_method);
    /* FluxReduceStore-test.js */
    RUN(should_respond_to_actions);
    RUN(should_only_emit_one_change_for_multiple_cache_changes);
    RUN(should_not_emit_for_empty_changes);
    RUN(should_clear_the_cache);
    /* FluxStoreGroup-test.js */
    RUN(should_register_a_callback_with_the_dispatcher);
    RUN(should_wait_for_the_store_dependencies);
    RUN(should_not_run_the_callback_after_being_released);
    RUN(should_have_at_least_one_store);
    RUN(should_make_sure_dispatchers_are_uniform_in_DEV);
    /* DESIGN.md section 6 */
    RUN(same_state_pointer_is_not_compared_nor_released);
    RUN(equal_gets_current_then_next_and_equal_next_is_released);
    RUN(null_equal_is_pointer_identity);
    RUN(failing_reduce_keeps_state_and_ignores_next);
    RUN(reduce_failing_mid_chain);
    RUN(reduce_failing_after_an_abort_has_its_next_ignored);
    RUN(an_abort_met_by_equal_or_release_runs_no_listener);
    RUN(destroy_releases_listeners_then_state_then_context);
    RUN(listener_added_by_a_destroy_during_store_destroy_is_refused);
    RUN(group_made_by_a_destroy_during_store_destroy_is_refused);
    RUN(emit_change_only_during_its_own_reduce);
    RUN(has_changed_reports_the_previous_result_before_the_store_runs);
    RUN(listener_ids_count_from_1_and_are_never_reused);
    RUN(listener_removed_by_an_earlier_listener_is_not_called);
    RUN(listener_added_during_an_emit_runs_from_the_next);
    RUN(listener_added_after_a_removal_during_an_emit_runs_from_the_next);
    RUN(listener_removing_itself_is_destroyed_after_it_returns);
    RUN(listener_dispatching_is_refused);
    RUN(store_destroyed_during_a_dispatch_is_refused);
    RUN(dispatcher_destroyed_while_stores_exist_is_refused);
    RUN(group_release_when_idle_is_immediate);
    RUN(group_released_from_a_listener);
    RUN(group_released_while_it_waits_for_its_stores_is_not_called);
    RUN(store_of_a_group_released_mid_dispatch_is_free_once_it_ends);
    RUN(store_destroy_cannot_destroy_its_dispatcher);
    RUN(group_bad_arguments_destroy_the_context);
    RUN(group_create_refusals_each_set_out_to_null);
    RUN(group_keeps_its_stores_when_the_callers_array_changes);
    RUN(group_created_during_a_dispatch_first_runs_in_the_next_one);
    RUN(group_does_not_run_when_a_store_fails);
    RUN(another_store_waits_for_a_store_and_reads_its_new_state);
    RUN(null_arguments);
    RUN(closed_dispatcher_create);
    RUN(a_failing_listener_stops_the_emit_and_fails_the_dispatch);
    RUN(is_emitting_exactly_while_the_listeners_run);
    RUN(listener_fail_outside_a_listener_is_refused);
    RUN(listener_fail_with_0_in_a_listener_fails_nothing);
    RUN(listener_fail_from_another_thread_while_a_listener_runs_is_refused);
    RUN(listener_fail_on_a_dispatcher_being_destroyed_is_invalid);
    RUN(listener_fail_from_what_a_listener_waits_for_fails_that_listener);
    RUN(listener_fail_again_replaces_the_value);
    RUN(a_failing_group_function_fails_the_dispatch);
    RUN(reduce_failing_after_emit_change_reports_no_change);
    RUN(unregister_of_a_store_token_created_during_the_dispatch_is_refused);
    RUN(a_store_waiting_for_its_own_group_fails_the_dispatch);
    RUN(listener_fail_survives_a_nested_listener_that_does_not_fail);
    RUN(another_thread_during_a_dispatch);
    RUN(listener_removed_by_another_thread_while_running);
    RUN(unregister_of_a_store_or_group_token_is_refused);
    RUN(group_token_is_its_registration_and_answers_whether_it_is_live);
    RUN(a_listener_whose_wait_meets_a_failure_stops_the_emit);
    RUN(listener_rules_hold_across_many_removals);
    RUN(listeners_added_and_removed_by_other_threads_during_emits);
    RUN(stores_made_on_another_thread_while_listeners_run);
    RUN(dispatcher_with_stores_is_not_destroyed_as_a_dispatch_ends);
    return tap_done();
}
