/*
 * test-ownership.c -- destroy(context) runs exactly once per registration: on
 * unregister (deferred to the end of a running dispatch), on dispatcher
 * destroy (in registration order), or at once when flux_register() fails.
 *
 * Contexts are heap blocks freed by their destroy function, so valgrind
 * (make check-memory) also catches a leak, a double destroy or a use after
 * destroy; a magic field catches the latter without valgrind too.
 */
#include "helpers.h"

static const char payload[] = "payload";

enum { ALIVE = 0x0a11fe, DEAD = 0xdead };
enum { MAX_IDS = 64 };

/* What happened to every context, kept outside the contexts themselves. */
static struct ledger {
    int destroyed[MAX_IDS];
    int calls[MAX_IDS];
    trace order;             /* ids in destroy order */
    int bad_destroy;         /* destroy of a context that was not alive */
    int bad_use;             /* callback with a context that was not alive */
} L;

static void ledger_reset(void)
{
    memset(&L, 0, sizeof L);
}

typedef struct owned owned;
typedef int (*owned_fn)(owned *self, const void *payload);

struct owned {
    int magic;
    int id;
    flux_dispatcher *d;
    flux_token token;
    owned_fn fn;             /* optional behaviour inside the callback */
    void *user;
};

static owned *owned_new(int id, flux_dispatcher *d, owned_fn fn, void *user)
{
    owned *o = calloc(1, sizeof *o);
    REQUIRE(o != NULL);
    o->magic = ALIVE;
    o->id = id;
    o->d = d;
    o->fn = fn;
    o->user = user;
    return o;
}

static void owned_destroy(void *context)
{
    owned *o = context;
    if (o->magic != ALIVE) {
        L.bad_destroy++;
        return;
    }
    o->magic = DEAD;
    L.destroyed[o->id]++;
    trace_push(&L.order, o->id);
    free(o);
}

static int owned_cb(void *context, const void *p)
{
    owned *o = context;
    if (o->magic != ALIVE) {
        L.bad_use++;
        return 0;
    }
    L.calls[o->id]++;
    return o->fn ? o->fn(o, p) : 0;
}

/* Registers a new owned context; returns its token. */
static flux_token reg(flux_dispatcher *d, int id, owned_fn fn, void *user)
{
    owned *o = owned_new(id, d, fn, user);
    flux_token t = 0;
    REQUIRE(flux_register(d, owned_cb, o, owned_destroy, &t) == FLUX_OK);
    o->token = t;
    return t;
}

static void check_ledger_clean(void)
{
    is_int(L.bad_destroy, 0, "no context was destroyed twice");
    is_int(L.bad_use, 0, "no callback saw a destroyed context");
}

/* ---- the three ways a registration ends ----------------------------------- */

static void test_destroy_on_unregister(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t = reg(d, 1, NULL, NULL);
    is_int(L.destroyed[1], 0, "destroy does not run on register");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(L.destroyed[1], 0, "nor on dispatch");
    EXPECT_OK(flux_unregister(d, t));
    is_int(L.destroyed[1], 1, "it runs once, before flux_unregister() returns (no dispatch running)");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(L.calls[1], 1, "the callback is gone");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(L.destroyed[1], 1, "dispatcher destroy does not run it again");
    check_ledger_clean();
}

static void test_destroy_on_dispatcher_destroy_in_order(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t[7];
    for (int id = 1; id <= 6; id++)
        t[id] = reg(d, id, NULL, NULL);
    EXPECT_OK(flux_unregister(d, t[3]));
    EXPECT_OK(flux_dispatch(d, payload));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_trace(&L.order, INTS(3, 1, 2, 4, 5, 6),
             "dispatcher destroy ran each remaining destroy once, in registration order");
    check_ledger_clean();
}

static void test_destroy_on_failed_register(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t = 5;
    EXPECT_STATUS(flux_register(d, NULL, owned_new(1, d, NULL, NULL), owned_destroy, &t),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_int(L.destroyed[1], 1, "NULL callback: the context was destroyed at once");
    is_uint(t, 0, "and *out_token is 0");
    EXPECT_STATUS(flux_register(d, owned_cb, owned_new(2, d, NULL, NULL), owned_destroy, NULL),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_int(L.destroyed[2], 1, "NULL out_token: the context was destroyed at once");
    t = 5;
    EXPECT_STATUS(flux_register(NULL, owned_cb, owned_new(3, d, NULL, NULL), owned_destroy, &t),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_int(L.destroyed[3], 1, "NULL dispatcher: the context was destroyed at once");
    is_uint(t, 0, "and *out_token is 0");
    EXPECT_OK(flux_dispatch(d, payload));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_trace(&L.order, INTS(1, 2, 3), "each exactly once, none again at dispatcher destroy");
    check_ledger_clean();
}

/* flux.h, "Ownership": a failing flux_register() runs destroy at once, on
 * the caller's thread -- from inside a callback, that is inside the running
 * dispatch (the one exception to "never inside a running dispatch"), where
 * dispatching the same dispatcher is refused. */
static struct inside_failed {
    flux_dispatcher *d;
    int destroyed;
    int dispatching;
    flux_status dispatch_status;
    flux_status register_status;
} inside_failed;

static void inside_failed_destroy(void *context)
{
    (void)context;
    inside_failed.destroyed++;
    inside_failed.dispatching = flux_is_dispatching(inside_failed.d);
    inside_failed.dispatch_status = flux_dispatch(inside_failed.d, payload);
}

static int register_null_cb(void *context, const void *p)
{
    (void)context;
    (void)p;
    flux_token t = 5;
    inside_failed.register_status = flux_register(inside_failed.d, NULL, NULL, inside_failed_destroy, &t);
    is_int(inside_failed.destroyed, 1, "destroy ran before the failing flux_register() returned");
    return 0;
}

static void test_destroy_of_failed_register_inside_a_callback(void)
{
    memset(&inside_failed, 0, sizeof inside_failed);
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    inside_failed.d = d;
    flux_token t;
    EXPECT_OK(flux_register(d, register_null_cb, NULL, NULL, &t));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(inside_failed.register_status, FLUX_ERR_INVALID_ARGUMENT, "the register inside the callback failed");
    is_int(inside_failed.destroyed, 1, "its destroy ran once");
    is_int(inside_failed.dispatching, 1, "inside the running dispatch");
    is_int(inside_failed.dispatch_status, FLUX_ERR_ALREADY_DISPATCHING,
           "so dispatching the same dispatcher from it is refused");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(inside_failed.destroyed, 1, "and never again");
}

static int null_context_destroyed;
static void null_context_destroy(void *context)
{
    if (context == NULL)
        null_context_destroyed++;
}

static int plain_cb(void *context, const void *p)
{
    (void)p;
    if (context != NULL)
        (*(int *)context)++;
    return 0;
}

static void test_destroy_null_allowed(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    int calls = 0;
    flux_token t1, t2, t3;
    EXPECT_OK(flux_register(d, plain_cb, &calls, NULL, &t1));
    EXPECT_OK(flux_register(d, plain_cb, &calls, NULL, &t2));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(calls, 2, "registrations without a destroy function are called");
    EXPECT_OK(flux_unregister(d, t1));
    EXPECT_STATUS(flux_register(d, NULL, &calls, NULL, &t3), FLUX_ERR_INVALID_ARGUMENT);

    null_context_destroyed = 0;
    EXPECT_OK(flux_register(d, plain_cb, NULL, null_context_destroy, &t3));
    EXPECT_OK(flux_dispatch(d, payload));
    EXPECT_OK(flux_unregister(d, t3));
    is_int(null_context_destroyed, 1, "a NULL context is still handed to destroy, once");
    EXPECT_OK(flux_dispatcher_destroy(d));   /* t2 has no destroy */
    is_int(calls, 3, "all calls accounted for");
}

/* ---- unregistering while a dispatch runs ----------------------------------- */

struct self_check {
    flux_status unregister_status;
    int magic_after;           /* own magic after unregistering itself */
    int destroyed_inside;      /* own destroy count after unregistering */
    int destroyed_seen_later;  /* seen by a later callback in the same dispatch */
};

static int unregister_self_fn(owned *self, const void *p)
{
    (void)p;
    struct self_check *c = self->user;
    c->unregister_status = flux_unregister(self->d, self->token);
    c->magic_after = self->magic;         /* the context must still be valid */
    c->destroyed_inside = L.destroyed[self->id];
    return 0;
}

static int observe_id1(owned *self, const void *p)
{
    (void)p;
    struct self_check *c = self->user;
    c->destroyed_seen_later = L.destroyed[1];
    return 0;
}

static void test_self_unregister_destroy_deferred(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct self_check c = {(flux_status)-1, 0, -1, -1};
    reg(d, 1, unregister_self_fn, &c);
    reg(d, 2, observe_id1, &c);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(c.unregister_status, FLUX_OK, "a callback unregisters itself");
    is_int(c.magic_after, ALIVE, "its context is still valid after flux_unregister() returns");
    is_int(c.destroyed_inside, 0, "its destroy has not run while it is still running");
    is_int(c.destroyed_seen_later, 0, "nor while the dispatch goes on (deferred to its end)");
    is_int(L.destroyed[1], 1, "destroy ran exactly once by the time flux_dispatch() returned");
    is_int(L.calls[2], 1, "the later callback ran");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(L.calls[1], 1, "the self-unregistered callback is not called again");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_trace(&L.order, INTS(1, 2), "no destroy ran twice");
    check_ledger_clean();
}

struct remote {
    flux_token target;
    flux_status status;
    int destroyed_after_call;
    int target_id;
};

static int unregister_target_fn(owned *self, const void *p)
{
    (void)p;
    struct remote *r = self->user;
    r->status = flux_unregister(self->d, r->target);
    r->destroyed_after_call = L.destroyed[r->target_id];
    return 0;
}

static void test_unregister_later_destroy_deferred(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct remote r = {0, (flux_status)-1, -1, 3};
    reg(d, 1, unregister_target_fn, &r);
    reg(d, 2, NULL, NULL);
    r.target = reg(d, 3, NULL, NULL);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(r.status, FLUX_OK, "a callback unregisters a later one");
    is_int(r.destroyed_after_call, 0, "its destroy is deferred while the dispatch runs");
    is_int(L.calls[3], 0, "the unregistered callback was not called");
    is_int(L.destroyed[3], 1, "its destroy ran once by the end of the dispatch");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_trace(&L.order, INTS(3, 1, 2), "each destroy once");
    check_ledger_clean();
}

/* A waits for B; B unregisters A while A is on the stack. */
static int wait_then_check(owned *self, const void *p)
{
    (void)p;
    struct remote *r = self->user;
    r->status = flux_wait_for(self->d, &r->target, 1);
    r->destroyed_after_call = self->magic == ALIVE ? L.destroyed[self->id] : -99;
    return 0;
}

static void test_unregister_waiting_callback(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct remote wait = {0, (flux_status)-1, -1, 1};
    struct remote un = {0, (flux_status)-1, -1, 1};
    flux_token ta = reg(d, 1, wait_then_check, &wait);
    wait.target = reg(d, 2, unregister_target_fn, &un);
    un.target = ta;
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(un.status, FLUX_OK, "a waited-for callback unregisters its waiter");
    is_int(wait.status, FLUX_OK, "the waiter's wait_for still returns OK");
    is_int(wait.destroyed_after_call, 0, "the waiter's context is intact when its wait returns");
    is_int(L.destroyed[1], 1, "its destroy ran once the dispatch finished");
    EXPECT_OK(flux_dispatcher_destroy(d));
    check_ledger_clean();
}

struct join_leave {
    flux_status reg, unreg;
    int destroyed_inside;
};

static int join_and_leave(owned *self, const void *p)
{
    (void)p;
    struct join_leave *j = self->user;
    if (L.calls[self->id] > 1)
        return 0;
    owned *o = owned_new(9, self->d, NULL, NULL);
    flux_token t = 0;
    j->reg = flux_register(self->d, owned_cb, o, owned_destroy, &t);
    j->unreg = flux_unregister(self->d, t);
    j->destroyed_inside = L.destroyed[9];
    return 0;
}

static void test_register_and_unregister_in_one_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct join_leave j = {(flux_status)-1, (flux_status)-1, -1};
    reg(d, 1, join_and_leave, &j);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(j.reg, FLUX_OK, "registered during a dispatch");
    is_int(j.unreg, FLUX_OK, "and unregistered in the same dispatch");
    is_int(j.destroyed_inside, 0, "destroy deferred to the end of the dispatch");
    is_int(L.destroyed[9], 1, "and ran once when it finished");
    is_int(L.calls[9], 0, "the short-lived callback was never called");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(L.calls[9], 0, "not by the next dispatch either");
    EXPECT_OK(flux_dispatcher_destroy(d));
    check_ledger_clean();
}

static int fail_fn(owned *self, const void *p)
{
    (void)self;
    (void)p;
    return 3;
}

static void test_deferred_destroy_after_failed_dispatch(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct self_check c = {(flux_status)-1, 0, -1, -1};
    reg(d, 1, unregister_self_fn, &c);
    flux_token tf = reg(d, 2, fail_fn, NULL);
    reg(d, 3, NULL, NULL);
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    is_int(c.destroyed_inside, 0, "destroy deferred inside the callback");
    is_int(L.destroyed[1], 1, "the deferred destroy still ran when the failed dispatch ended");
    EXPECT_OK(flux_unregister(d, tf));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(L.calls[3], 1, "the dispatcher is usable");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_trace(&L.order, INTS(1, 2, 3), "each destroy once");
    check_ledger_clean();
}

/* ---- destroying the dispatcher from inside a callback ---------------------- */

struct destroy_inside {
    flux_status status;
    char message[256];
    int dispatching_after;
    int destroyed_after;
};

static int destroy_dispatcher_fn(owned *self, const void *p)
{
    (void)p;
    struct destroy_inside *x = self->user;
    if (L.calls[self->id] > 1)
        return 0;
    x->status = flux_dispatcher_destroy(self->d);
    snprintf(x->message, sizeof x->message, "%s", flux_last_error());
    x->dispatching_after = flux_is_dispatching(self->d);
    int n = 0;
    for (int i = 0; i < MAX_IDS; i++)
        n += L.destroyed[i];
    x->destroyed_after = n;
    return 0;
}

static void test_destroy_dispatcher_inside_callback(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct destroy_inside x = {(flux_status)-1, "", -1, -1};
    reg(d, 1, NULL, NULL);
    reg(d, 2, destroy_dispatcher_fn, &x);
    reg(d, 3, NULL, NULL);
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(x.status, FLUX_ERR_ALREADY_DISPATCHING,
           "flux_dispatcher_destroy() from inside a callback -> ALREADY_DISPATCHING");
    has_prefix(x.message, "flux_dispatcher_destroy", "the message names flux_dispatcher_destroy");
    is_int(x.destroyed_after, 0, "no destroy function ran");
    is_int(x.dispatching_after, 1, "the dispatch is still running");
    is_int(L.calls[3], 1, "and went on to the later callback");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(L.calls[1] + L.calls[2] + L.calls[3], 6, "the dispatcher works normally afterwards");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_trace(&L.order, INTS(1, 2, 3), "then destroying it runs every destroy once, in order");
    check_ledger_clean();
}

/* ---- destroy functions that call back into the library --------------------- */

typedef struct reentrant {
    flux_dispatcher *target;       /* registers here from its destroy */
    flux_status reg_status, dispatch_status;
    flux_token new_token;
    int *calls;                    /* counted by the new callback */
    int destroyed;
    bool dispatch_too;
} reentrant;

static void reentrant_destroy(void *context)
{
    reentrant *r = context;
    r->destroyed++;
    r->reg_status = flux_register(r->target, plain_cb, r->calls, NULL, &r->new_token);
    if (r->dispatch_too)
        r->dispatch_status = flux_dispatch(r->target, payload);
}

static int reentrant_cb(void *context, const void *p)
{
    (void)context;
    (void)p;
    return 0;
}

struct unregister_once {
    flux_dispatcher *d;
    flux_token target;
    flux_status status;
    int calls;
};

static int unregister_once_cb(void *context, const void *p)
{
    struct unregister_once *u = context;
    (void)p;
    if (u->calls++ == 0)
        u->status = flux_unregister(u->d, u->target);
    return 0;
}

static void test_destroy_calls_into_library(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d != NULL && d2 != NULL);
    int calls = 0;

    /* 1. Run by flux_unregister() with no dispatch running. */
    reentrant r1 = {d2, (flux_status)-1, (flux_status)-1, 0, &calls, 0, false};
    flux_token t1;
    EXPECT_OK(flux_register(d, reentrant_cb, &r1, reentrant_destroy, &t1));
    EXPECT_OK(flux_unregister(d, t1));
    is_int(r1.destroyed, 1, "destroy ran on unregister");
    is_int(r1.reg_status, FLUX_OK, "a destroy function can register on another dispatcher");
    ok(r1.new_token != 0, "and got a token");
    EXPECT_OK(flux_dispatch(d2, payload));
    is_int(calls, 1, "the callback it registered is called");

    /* 2. Deferred to the end of a dispatch of d; also dispatches d2. */
    reentrant r2 = {d2, (flux_status)-1, (flux_status)-1, 0, &calls, 0, true};
    struct unregister_once u = {d, 0, (flux_status)-1, 0};
    flux_token tu;
    EXPECT_OK(flux_register(d, unregister_once_cb, &u, NULL, &tu));
    EXPECT_OK(flux_register(d, reentrant_cb, &r2, reentrant_destroy, &u.target));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(u.status, FLUX_OK, "unregistered during a dispatch");
    is_int(r2.destroyed, 1, "its destroy ran when the dispatch finished");
    is_int(r2.reg_status, FLUX_OK, "a deferred destroy can register on another dispatcher");
    is_int(r2.dispatch_status, FLUX_OK, "and dispatch it");
    is_int(calls, 3, "that dispatch called both callbacks registered on it");

    /* 3. Run by flux_dispatcher_destroy(). */
    reentrant r3 = {d2, (flux_status)-1, (flux_status)-1, 0, &calls, 0, true};
    flux_token t3;
    EXPECT_OK(flux_register(d, reentrant_cb, &r3, reentrant_destroy, &t3));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(r3.destroyed, 1, "destroy ran at dispatcher destroy");
    is_int(r3.reg_status, FLUX_OK, "and registered on another dispatcher");
    is_int(r3.dispatch_status, FLUX_OK, "and dispatched it");
    is_int(calls, 6, "which called its three callbacks");
    EXPECT_OK(flux_dispatcher_destroy(d2));
}

/* A destroy function run by flux_dispatcher_destroy() that registers on the
 * dispatcher being destroyed: INVALID_ARGUMENT ("the dispatcher is being
 * destroyed"), and the new context is destroyed at once. */
struct closing {
    flux_dispatcher *d;
    flux_status status;
    flux_token token;
    int destroyed_at_once;
};


struct closing_more {
    flux_status dispatch_status, try_dispatch_status, unregister_status, destroy_status, wait_status, wait_none_status;
};
static struct closing_more closing_more;

static void closing_destroy(void *context)
{
    struct closing *c = context;
    c->token = 77;
    c->status = flux_register(c->d, reentrant_cb, owned_new(5, c->d, NULL, NULL), owned_destroy,
                              &c->token);
    c->destroyed_at_once = L.destroyed[5];
    /* Token 2 is registered but not yet destroyed: still refused. */
    closing_more.unregister_status = flux_unregister(c->d, 2);
    closing_more.dispatch_status = flux_dispatch(c->d, payload);
    closing_more.try_dispatch_status = flux_try_dispatch(c->d, payload);
    flux_token two = 2;
    closing_more.wait_status = flux_wait_for(c->d, &two, 1);
    closing_more.wait_none_status = flux_wait_for(c->d, NULL, 0);
    /* Destroying it again must not free it under the outer destroy (which
     * valgrind, in make check-memory, would report as a double free). */
    closing_more.destroy_status = flux_dispatcher_destroy(c->d);
}

static void test_register_while_dispatcher_destroyed(void)
{
    ledger_reset();
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct closing c = {d, (flux_status)-1, 0, -1};
    flux_token t;
    EXPECT_OK(flux_register(d, reentrant_cb, &c, closing_destroy, &t));
    reg(d, 2, NULL, NULL);
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(c.status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_register() on a dispatcher being destroyed -> INVALID_ARGUMENT");
    is_int(c.destroyed_at_once, 1, "its context was destroyed at once");
    is_uint(c.token, 0, "and *out_token is 0");
    is_int(closing_more.unregister_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_unregister() on a dispatcher being destroyed -> INVALID_ARGUMENT");
    is_int(closing_more.dispatch_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_dispatch() on a dispatcher being destroyed -> INVALID_ARGUMENT");
    is_int(closing_more.try_dispatch_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_try_dispatch() on a dispatcher being destroyed -> INVALID_ARGUMENT, as flux_dispatch()");
    is_int(closing_more.wait_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_wait_for() on a dispatcher being destroyed -> INVALID_ARGUMENT (not NOT_DISPATCHING)");
    is_int(closing_more.wait_none_status, FLUX_ERR_INVALID_ARGUMENT, "with no tokens too");
    is_int(closing_more.destroy_status, FLUX_ERR_INVALID_ARGUMENT,
           "flux_dispatcher_destroy() on a dispatcher being destroyed -> INVALID_ARGUMENT");
    is_trace(&L.order, INTS(5, 2), "the other registrations were still destroyed once");
    check_ledger_clean();
}

/* Last: a library that holds a non-recursive lock around destroy would
 * deadlock here, and the watchdog would end the program. */
static void test_destroy_registers_on_same_dispatcher(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    int calls = 0;
    reentrant r = {d, (flux_status)-1, (flux_status)-1, 0, &calls, 0, false};
    flux_token t;
    EXPECT_OK(flux_register(d, reentrant_cb, &r, reentrant_destroy, &t));
    EXPECT_OK(flux_unregister(d, t));
    is_int(r.reg_status, FLUX_OK,
           "a destroy run by flux_unregister() can register on the same dispatcher");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(calls, 1, "and that callback is called by the next dispatch");

    /* Deferred: runs when the dispatch finishes. */
    int calls2 = 0;
    reentrant r2 = {d, (flux_status)-1, (flux_status)-1, 0, &calls2, 0, false};
    struct unregister_once u = {d, 0, (flux_status)-1, 0};
    flux_token tu;
    EXPECT_OK(flux_register(d, unregister_once_cb, &u, NULL, &tu));
    EXPECT_OK(flux_register(d, reentrant_cb, &r2, reentrant_destroy, &u.target));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(r2.destroyed, 1, "a deferred destroy ran at the end of the dispatch");
    is_int(r2.reg_status, FLUX_OK, "and could register on the same dispatcher");
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(calls2, 1, "that callback is called by the next dispatch");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

int main(void)
{
    tap_init();
    RUN(test_destroy_on_unregister);
    RUN(test_destroy_on_dispatcher_destroy_in_order);
    RUN(test_destroy_on_failed_register);
    RUN(test_destroy_of_failed_register_inside_a_callback);
    RUN(test_destroy_null_allowed);
    RUN(test_self_unregister_destroy_deferred);
    RUN(test_unregister_later_destroy_deferred);
    RUN(test_unregister_waiting_callback);
    RUN(test_register_and_unregister_in_one_dispatch);
    RUN(test_deferred_destroy_after_failed_dispatch);
    RUN(test_destroy_dispatcher_inside_callback);
    RUN(test_destroy_calls_into_library);
    RUN(test_register_while_dispatcher_destroyed);
    RUN(test_destroy_registers_on_same_dispatcher);
    return tap_done();
}
