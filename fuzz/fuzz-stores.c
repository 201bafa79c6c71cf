/*
 * fuzz-stores.c -- libFuzzer target: random operation programs over a few
 * reduce stores, their listeners, groups and plain callbacks on one
 * dispatcher, run against libflux and against a small reference model of
 * flux.h's "Stores" section and DESIGN.md section 6 (the model runs first,
 * then libflux), compared after every step: the order in which reduces,
 * equal, release_state, listeners, group functions and callbacks ran, what
 * each call made inside them returned, every destroy and release (in the
 * trace, so their timing is checked too), each dispatch's status, the
 * listener ids, flux_store_state() of every store, and after a failed
 * wait what flux_last_error_token() and flux_last_error_cycle() read.
 *
 * States are numbered (a serial per state made, shared by both sides since
 * they make states at the same points). A store keeps its state either as
 * an integer in the pointer ((serial << 8) | value, no allocation; with or
 * without release_state) or as a heap box freed by release_state, so a
 * double release or a leak shows up under ASan. equal, when the store has
 * one, compares the values; otherwise pointer identity.
 *
 * The input is a program; each operation is a byte (op = byte % 9), with
 * operands in the bytes after it:
 *   0 [s] [cfg] [rf] [w] [e] [h] [kl]  create store s (if free): cfg bit 0
 *       box state, bit 1 equal, bit 2 release_state (always for a box),
 *       bits 3-7 the first value. Its reduce, in this order: rf bit 0
 *       wait_for store w's token; bit 1 emit_change on store e; bit 2
 *       has_changed on store h; bit 3 remove listener kl; bit 4 add a plain
 *       listener kl (kl: store (kl >> 3) & 3, slot kl & 7); then returns
 *       what the payload says for it (below)
 *   1 [s]  destroy store s (refused while it is in a live group)
 *   2 [s] [l] [f] [r] [a] [w] [h] [g]  add listener slot l to store s (if
 *       free), which in this order: f bit 0 waits for store w's token;
 *       bit 1 has_changed on store h; bit 2 emit_change on store h; bit 3
 *       removes listener r (r bit 7: itself; else bit 6: slot r & 7 of its
 *       own store, an earlier or a later one; else store/slot as kl); bit 7
 *       creates store a's slot (if free: a box store with no hooks, which
 *       first handles the next dispatch, and whose token a wait in this one
 *       finds unknown); bit 4 adds a plain listener a; bit 5 releases group
 *       g & 1; g bit 1 creates group g & 1 (if free) over the stores in
 *       (g >> 2) & 15 (first run by the next dispatch), whose function does
 *       g bit 6 has_changed on h and g bit 7 fails; bit 6
 *       flux_store_listener_fail()
 *   3 [s] [l]  remove listener slot l of store s (live, already removed or
 *       never added)
 *   4 [p]  dispatch: store s's reduce does (p >> 2s) & 3 -- 0 keeps the
 *       state (*next == state), 1 a new state value + 1, 2 a new state with
 *       the same value (equal, or a change under pointer identity), 3 fails
 *   5 [g] [mask] [gf] [h]  create group g (if free) over the live stores
 *       in mask (none: INVALID_ARGUMENT, its destroy at once); its function:
 *       gf bit 0 has_changed on store h, bit 1 flux_store_listener_fail()
 *   6 [g]  release group g
 *   7 [c] [f] [w] [h]  register plain callback c (or unregister it when
 *       registered): f bit 0 wait_for store w, bit 1 has_changed on h,
 *       bit 2 emit_change on h (never legal here: nothing waits for a
 *       callback, so no reduce is on the stack when one runs), bit 3 fails
 *   8 [s]  outside a dispatch: has_changed, emit_change, listener_fail,
 *       wait_for (all NOT_DISPATCHING), unregister of a store's token
 *       (refused), flux_dispatcher_destroy with stores or groups (refused),
 *       flux_store_create with a NULL reduce (releases, then destroys)
 *
 * Left out, since the rules are not ones the model can state with
 * confidence (or they belong to other targets):
 *   - flux_store_listener_fail() from a reduce or a plain callback that
 *     a listener's wait runs (flux.h: it fails that listener; test-stores.c
 *     holds it): only listeners and group functions call it, directly;
 *   - destroys of groups released during a dispatch: they run when it
 *     ends, in an order flux.h does not give, so only their counts are
 *     compared; and a group releasing itself from its own function;
 *   - waits on a group's token, unregistering plain callbacks from inside
 *     (fuzz-ops covers the dispatcher's own rules), threads, flux_enqueue,
 *     the observer, running out of memory.
 *
 * Two rules the header leaves implicit are modelled as StoreCore.handle
 * implements them (and as the header reads): a reduce that calls
 * emit_change and then returns a new state equal to the old one still
 * counts as changed (changed = emitted, or the new state kept); and
 * has_changed on a store whose reduce is on the stack reports the flag as
 * reset when that reduce began, plus any emit_change since. Once the
 * dispatch is aborted, a store whose reduce returns has changed = 0.
 *
 * Any disagreement aborts: libFuzzer reports it as a crash.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flux.h>

enum { STORES = 4, LSLOTS = 8, GROUPS = 2, PLAINS = 2, TRACE = 8192, MAX_STEPS = 64, SERIALS = 1024 };
/* Registrations in the model: stores 0-3, groups 4-5, plain callbacks 6-7. */
enum { REGS = STORES + GROUPS + PLAINS, G0 = STORES, C0 = STORES + GROUPS };
#define MODEL_SLOTS REGS
#include "model.h"
enum { SAME, CHANGE, EQUAL, FAIL };
enum { ALIVE = 0x5a5a, DEAD = 0xdead };
/* Trace events: EV(kind, a, b). */
enum {
    REDUCE = 1, REDUCE_END, EQUALS, RELEASE, LISTENER, LISTENER_END, LDESTROY, SDESTROY,
    STATUS, HAS_CHANGED, GROUP, GROUP_END, PLAIN, PLAIN_END, ADDED,
    ERR_TOKEN, ERR_CYCLE /* after a failed wait: flux_last_error_token(), the cycle's length */
};
/* Which call a STATUS event is about. */
enum { W_REDUCE = 1, EMIT_REDUCE, REMOVE, W_LISTENER, EMIT_LISTENER, FAIL_LISTENER, RELEASE_GROUP,
       W_PLAIN, EMIT_PLAIN, FAIL_GROUP };
#define EV(kind, a, b) ((kind) * 1000000 + (a) * 1000 + (b))

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz-stores: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                \
        }                                                                           \
    } while (0)

typedef struct sconfig {
    bool box, equal, release;
    bool wait, emit, has, remove, add;
    int w, e, h, ks, kl;
} sconfig;

typedef struct gbehaviour {
    bool has, fail;
    int h;
} gbehaviour;

typedef struct lbehaviour {
    bool wait, has, emit, remove, add, release_group, fail, create, create_group;
    int rs, rl, as, al, w, h, g, gmask;
    gbehaviour gb;
} lbehaviour;

typedef struct cbehaviour {
    bool wait, has, emit, fail;
    int w, h;
} cbehaviour;

/* Behaviours, shared by both sides (set outside a dispatch). */
static sconfig scfg[STORES + 1]; /* [STORES]: the store whose create fails */
static cbehaviour cbeh[PLAINS];

/* ---- libflux ----------------------------------------------------------- */

typedef struct box {
    int magic, serial, value;
} box;

typedef struct sctx {
    int magic, s;
} sctx;

typedef struct gctx {
    int magic, g;
    gbehaviour b;
} gctx;

typedef struct lctx {
    int magic, s, l;
    lbehaviour b;
} lctx;

static flux_dispatcher *d;
static flux_store *r_store[STORES];
static flux_token r_stoken[STORES];  /* latest token (stale once destroyed) */
static bool r_llive[STORES][LSLOTS];
static flux_listener_id r_lid[STORES][LSLOTS];
static flux_store_group *r_group[GROUPS];
static bool r_plain_live[PLAINS];
static flux_token r_ptoken[PLAINS];
static int r_gdestroyed[GROUPS], r_pdestroyed[PLAINS];
static int r_serial, r_released[SERIALS];
static trace r_trace;
static int r_payload;

static void *r_new_state(int s, int value)
{
    int serial = ++r_serial;
    CHECK(serial < SERIALS);
    value &= 0xff;
    if (!scfg[s].box)
        return (void *)(uintptr_t)(((uintptr_t)serial << 8) | (uintptr_t)value);
    box *b = malloc(sizeof *b);
    CHECK(b != NULL);
    b->magic = ALIVE;
    b->serial = serial;
    b->value = value;
    return b;
}

static void r_decode(int s, const void *state, int *serial, int *value)
{
    if (scfg[s].box) {
        const box *b = state;
        CHECK(b != NULL && b->magic == ALIVE);
        *serial = b->serial;
        *value = b->value;
    } else {
        *serial = (int)((uintptr_t)state >> 8);
        *value = (int)((uintptr_t)state & 0xff);
    }
}

static void r_release(void *context, void *state)
{
    const sctx *c = context;
    CHECK(c->magic == ALIVE);
    int serial, value;
    r_decode(c->s, state, &serial, &value);
    push(&r_trace, EV(RELEASE, c->s, serial));
    r_released[serial]++;
    if (scfg[c->s].box) {
        ((box *)state)->magic = DEAD;
        free(state);
    }
}

static int r_equal(void *context, const void *a, const void *b)
{
    const sctx *c = context;
    CHECK(c->magic == ALIVE);
    int sa, va, sb, vb;
    r_decode(c->s, a, &sa, &va);
    r_decode(c->s, b, &sb, &vb);
    push(&r_trace, EV(EQUALS, c->s, 0));
    return va == vb;
}

static void r_store_destroy_ctx(void *context)
{
    sctx *c = context;
    CHECK(c->magic == ALIVE);
    push(&r_trace, EV(SDESTROY, c->s, 0));
    c->magic = DEAD;
    free(c);
}

static void r_listener_destroy(void *context)
{
    lctx *c = context;
    CHECK(c->magic == ALIVE);
    push(&r_trace, EV(LDESTROY, c->s, c->l));
    c->magic = DEAD;
    free(c);
}

static void r_listener(void *context);

static void r_add(int k, int l, const lbehaviour *b)
{
    if (!r_store[k] || r_llive[k][l])
        return;
    lctx *c = malloc(sizeof *c);
    CHECK(c != NULL);
    c->magic = ALIVE;
    c->s = k;
    c->l = l;
    c->b = *b;
    flux_listener_id id = 0;
    CHECK(flux_store_add_listener(r_store[k], r_listener, c, r_listener_destroy, &id) == FLUX_OK);
    r_llive[k][l] = true;
    r_lid[k][l] = id;
    push(&r_trace, EV(ADDED, k * LSLOTS + l, (int)id));
}

static void r_remove(int k, int l)
{
    if (!r_store[k])
        return;
    flux_status st = flux_store_remove_listener(r_store[k], r_lid[k][l]);
    if (st == FLUX_OK)
        r_llive[k][l] = false;
    push(&r_trace, EV(STATUS, REMOVE, st));
}

static void r_has_changed(int h)
{
    if (!r_store[h])
        return;
    int changed = 7;
    flux_status st = flux_store_has_changed(r_store[h], &changed);
    push(&r_trace, EV(HAS_CHANGED, h, (int)st * 10 + changed));
}

static void r_emit(int which, int h)
{
    if (r_store[h])
        push(&r_trace, EV(STATUS, which, flux_store_emit_change(r_store[h])));
}

static void r_wait(int which, int w)
{
    flux_token t = r_stoken[w];
    flux_status st = flux_wait_for(d, &t, 1);
    push(&r_trace, EV(STATUS, which, st));
    if (st != FLUX_OK) {
        push(&r_trace, EV(ERR_TOKEN, 0, 0) + (int)flux_last_error_token());
        push(&r_trace, EV(ERR_CYCLE, 0, (int)flux_last_error_cycle(NULL, 0)));
    }
}

static const lbehaviour plain_listener;
/* The store a listener creates during a dispatch: a box, released, no
 * equal, a reduce with no hooks; first handles the next dispatch. */
static const sconfig created_store = {.box = true, .release = true};
static void r_create(int s, const sconfig *cfg, int value);
static void m_create(int s, const sconfig *cfg, int value);
static void r_group_create(int g, int mask, const gbehaviour *b);

static int r_reduce(void *context, void *state, const void *payload, void **next)
{
    const sctx *c = context;
    CHECK(c->magic == ALIVE);
    int s = c->s;
    const sconfig *b = &scfg[s];
    CHECK(*next == state && payload == &r_payload);
    push(&r_trace, EV(REDUCE, s, 0));
    if (b->wait)
        r_wait(W_REDUCE, b->w);
    if (b->emit)
        r_emit(EMIT_REDUCE, b->e);
    if (b->has)
        r_has_changed(b->h);
    if (b->remove)
        r_remove(b->ks, b->kl);
    if (b->add)
        r_add(b->ks, b->kl, &plain_listener);
    CHECK(flux_dispatch(d, NULL) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_store_destroy(r_store[s]) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_store_listener_fail(d, 0) == FLUX_ERR_INVALID_ARGUMENT);
    int action = (r_payload >> (2 * s)) & 3;
    push(&r_trace, EV(REDUCE_END, s, action));
    int serial, value;
    r_decode(s, state, &serial, &value);
    switch (action) {
    case CHANGE:
        *next = r_new_state(s, value + 1);
        return 0;
    case EQUAL:
        *next = r_new_state(s, value);
        return 0;
    case FAIL:
        return 7;
    default:
        return 0;
    }
}

static void r_listener(void *context)
{
    const lctx *c = context;
    CHECK(c->magic == ALIVE);
    const lbehaviour b = c->b;
    int s = c->s, l = c->l;
    push(&r_trace, EV(LISTENER, s, l));
    if (b.wait)
        r_wait(W_LISTENER, b.w);
    if (b.has)
        r_has_changed(b.h);
    if (b.emit)
        r_emit(EMIT_LISTENER, b.h);
    if (b.remove)
        r_remove(b.rs, b.rl);
    if (b.create && !r_store[b.as])
        r_create(b.as, &created_store, 0);
    if (b.add)
        r_add(b.as, b.al, &plain_listener);
    if (b.release_group && r_group[b.g]) {
        push(&r_trace, EV(STATUS, RELEASE_GROUP, flux_store_group_release(r_group[b.g])));
        r_group[b.g] = NULL;
    }
    if (b.create_group)
        r_group_create(b.g, b.gmask, &b.gb);
    CHECK(flux_dispatch(d, NULL) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_store_destroy(r_store[s]) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_dispatcher_destroy(d) == FLUX_ERR_ALREADY_DISPATCHING);
    if (b.fail)
        push(&r_trace, EV(STATUS, FAIL_LISTENER, flux_store_listener_fail(d, 5)));
    push(&r_trace, EV(LISTENER_END, s, l));
}

static void r_group_fn(void *context)
{
    const gctx *c = context;
    CHECK(c->magic == ALIVE);
    push(&r_trace, EV(GROUP, c->g, 0));
    if (c->b.has)
        r_has_changed(c->b.h);
    if (c->b.fail)
        push(&r_trace, EV(STATUS, FAIL_GROUP, flux_store_listener_fail(d, 6)));
    push(&r_trace, EV(GROUP_END, c->g, 0));
}

static void r_group_destroy(void *context)
{
    gctx *c = context;
    CHECK(c->magic == ALIVE);
    r_gdestroyed[c->g]++;
    c->magic = DEAD;
    free(c);
}

/* A group over the live stores in mask (none: refused, destroyed at once). */
static void r_group_create(int g, int mask, const gbehaviour *b)
{
    if (r_group[g])
        return;
    flux_store *stores[STORES];
    int n = 0;
    for (int s = 0; s < STORES; s++)
        if ((mask >> s) & 1 && r_store[s])
            stores[n++] = r_store[s];
    gctx *c = malloc(sizeof *c);
    CHECK(c != NULL);
    c->magic = ALIVE;
    c->g = g;
    c->b = *b;
    flux_store_group *out = (flux_store_group *)&out;
    flux_status st = flux_store_group_create(stores, (size_t)n, r_group_fn, c, r_group_destroy, &out);
    if (n == 0) {
        CHECK(st == FLUX_ERR_INVALID_ARGUMENT && out == NULL);
    } else {
        CHECK(st == FLUX_OK && out != NULL);
        r_group[g] = out;
    }
}

static int r_plain(void *context, const void *payload)
{
    (void)payload;
    int c = (int)(intptr_t)context;
    const cbehaviour *b = &cbeh[c];
    push(&r_trace, EV(PLAIN, c, 0));
    if (b->wait)
        r_wait(W_PLAIN, b->w);
    if (b->has)
        r_has_changed(b->h);
    if (b->emit)
        r_emit(EMIT_PLAIN, b->h);
    push(&r_trace, EV(PLAIN_END, c, 0));
    return b->fail ? 1 : 0;
}

static void r_plain_destroy(void *context)
{
    r_pdestroyed[(intptr_t)context]++;
}

static sctx *r_sctx(int s)
{
    sctx *c = malloc(sizeof *c);
    CHECK(c != NULL);
    c->magic = ALIVE;
    c->s = s;
    return c;
}

/* ---- the model ----------------------------------------------------------- */

static bool m_slive[STORES];
static int m_sserial[STORES], m_svalue[STORES];
static bool m_changed[STORES], m_reducing[STORES];
static bool m_llive[STORES][LSLOTS];
static flux_listener_id m_lid[STORES][LSLOTS], m_lnext[STORES];
static flux_listener_id m_lrunning[STORES][LSLOTS]; /* id of the instance running, 0 */
static lbehaviour m_lbeh[STORES][LSLOTS];
static bool m_glive[GROUPS];
static int m_gstores[GROUPS][STORES], m_gcount[GROUPS];
static gbehaviour m_gbeh[GROUPS];
static int m_ingroups[STORES]; /* live group memberships */
static int m_gowed[GROUPS], m_powed[PLAINS];
static int m_serial, m_owed_releases[SERIALS];
static trace m_trace;

/* Registrations: token 0 when none (a stale one once ended). */
static bool m_registered[REGS];
static flux_token m_token[REGS];
static flux_token m_next;

/* One dispatch (the rest of its state is model.h's). */
static int m_gowed_at_end[GROUPS];
static bool m_listener_failed; /* the innermost running listener's fail */

static int m_new_state(int value)
{
    int serial = ++m_serial;
    (void)value;
    return serial;
}

static void m_release(int s, int serial)
{
    if (scfg[s].release) {
        push(&m_trace, EV(RELEASE, s, serial));
        m_owed_releases[serial]++;
    }
}

static void m_wait1(int which, int w)
{
    flux_token t = m_token[w];
    flux_status st = m_wait(&t, 1);
    push(&m_trace, EV(STATUS, which, st));
    if (st != FLUX_OK) {
        push(&m_trace, EV(ERR_TOKEN, 0, 0) + (int)m_err_token);
        push(&m_trace, EV(ERR_CYCLE, 0, m_cycle_n));
    }
}

static void m_add(int k, int l, const lbehaviour *b)
{
    if (!m_slive[k] || m_llive[k][l])
        return;
    m_llive[k][l] = true;
    m_lid[k][l] = ++m_lnext[k];
    m_lbeh[k][l] = *b;
    push(&m_trace, EV(ADDED, k * LSLOTS + l, (int)m_lid[k][l]));
}

static void m_remove(int k, int l)
{
    if (!m_slive[k])
        return;
    if (!m_llive[k][l]) {
        push(&m_trace, EV(STATUS, REMOVE, FLUX_ERR_UNKNOWN_TOKEN));
        return;
    }
    m_llive[k][l] = false;
    if (m_lrunning[k][l] != m_lid[k][l])
        push(&m_trace, EV(LDESTROY, k, l)); /* at once; else when it returns */
    push(&m_trace, EV(STATUS, REMOVE, FLUX_OK));
}

static void m_has_changed(int h, bool dispatching)
{
    if (!m_slive[h])
        return;
    if (dispatching)
        push(&m_trace, EV(HAS_CHANGED, h, FLUX_OK * 10 + m_changed[h]));
    else
        push(&m_trace, EV(HAS_CHANGED, h, FLUX_ERR_NOT_DISPATCHING * 10));
}

static void m_emit(int which, int h)
{
    if (!m_slive[h])
        return;
    if (m_reducing[h]) {
        m_changed[h] = true;
        push(&m_trace, EV(STATUS, which, FLUX_OK));
    } else {
        push(&m_trace, EV(STATUS, which, FLUX_ERR_NOT_DISPATCHING));
    }
}

static const lbehaviour plain_listener = {0};

/* Created during a dispatch, a group first runs in the next one. */
static void m_group_create(int g, int mask, const gbehaviour *b)
{
    if (m_glive[g])
        return;
    int n = 0;
    for (int s = 0; s < STORES; s++)
        if ((mask >> s) & 1 && m_slive[s])
            m_gstores[g][n++] = s;
    if (n == 0) {
        m_gowed[g]++; /* refused: destroyed at once */
        return;
    }
    m_gbeh[g] = *b;
    m_glive[g] = true;
    m_gcount[g] = n;
    for (int i = 0; i < n; i++)
        m_ingroups[m_gstores[g][i]]++;
    m_registered[G0 + g] = true;
    m_token[G0 + g] = m_next++;
}

/* One listener call; true when it failed (flux_store_listener_fail). */
static bool m_listener(int s, int l, const lbehaviour *b)
{
    bool outer_failed = m_listener_failed;
    m_listener_failed = false;
    push(&m_trace, EV(LISTENER, s, l));
    if (b->wait)
        m_wait1(W_LISTENER, b->w);
    if (b->has)
        m_has_changed(b->h, true);
    if (b->emit)
        m_emit(EMIT_LISTENER, b->h);
    if (b->remove)
        m_remove(b->rs, b->rl);
    if (b->create && !m_slive[b->as])
        m_create(b->as, &created_store, 0);
    if (b->add)
        m_add(b->as, b->al, &plain_listener);
    if (b->release_group && m_glive[b->g]) {
        int g = b->g;
        m_glive[g] = false;
        for (int i = 0; i < m_gcount[g]; i++)
            m_ingroups[m_gstores[g][i]]--;
        m_registered[G0 + g] = false;
        int r = m_find(m_token[G0 + g]);
        if (r >= 0)
            m_removed[r] = true; /* not called later in this dispatch */
        m_gowed_at_end[g]++;     /* destroyed when it ends */
        push(&m_trace, EV(STATUS, RELEASE_GROUP, FLUX_OK));
    }
    if (b->create_group)
        m_group_create(b->g, b->gmask, &b->gb);
    if (b->fail) {
        m_listener_failed = true;
        push(&m_trace, EV(STATUS, FAIL_LISTENER, FLUX_OK));
    }
    push(&m_trace, EV(LISTENER_END, s, l));
    bool failed = m_listener_failed;
    m_listener_failed = outer_failed;
    return failed;
}

/* The listeners present when it begins, in add (= id) order, skipping any
 * removed meanwhile; stops after one that failed or once the dispatch is
 * aborting. True when a listener failed. */
static bool m_emit_change(int s)
{
    int slots[LSLOTS], n = 0;
    flux_listener_id ids[LSLOTS];
    for (int l = 0; l < LSLOTS; l++)
        if (m_llive[s][l])
            slots[n++] = l;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && m_lid[s][slots[j]] < m_lid[s][slots[j - 1]]; j--) {
            int t = slots[j];
            slots[j] = slots[j - 1];
            slots[j - 1] = t;
        }
    for (int i = 0; i < n; i++)
        ids[i] = m_lid[s][slots[i]];
    for (int i = 0; i < n; i++) {
        int l = slots[i];
        if (!m_llive[s][l] || m_lid[s][l] != ids[i])
            continue; /* removed (maybe added again: a new listener) */
        lbehaviour b = m_lbeh[s][l];
        m_lrunning[s][l] = ids[i];
        bool failed = m_listener(s, l, &b);
        m_lrunning[s][l] = 0;
        if (!m_llive[s][l] || m_lid[s][l] != ids[i])
            push(&m_trace, EV(LDESTROY, s, l)); /* removed while it ran */
        if (failed)
            return true;
        if (m_aborted)
            return false;
    }
    return false;
}

static void m_store(int s)
{
    const sconfig *b = &scfg[s];
    push(&m_trace, EV(REDUCE, s, 0));
    m_changed[s] = false;
    m_reducing[s] = true;
    if (b->wait)
        m_wait1(W_REDUCE, b->w);
    if (b->emit)
        m_emit(EMIT_REDUCE, b->e);
    if (b->has)
        m_has_changed(b->h, true);
    if (b->remove)
        m_remove(b->ks, b->kl);
    if (b->add)
        m_add(b->ks, b->kl, &plain_listener);
    int action = (r_payload >> (2 * s)) & 3;
    push(&m_trace, EV(REDUCE_END, s, action));
    m_reducing[s] = false;
    if (action == FAIL) {
        m_changed[s] = false;
        m_abort();
        return;
    }
    bool same = action == SAME;
    int next = same ? m_sserial[s] : m_new_state(0);
    int next_value = action == CHANGE ? (m_svalue[s] + 1) & 0xff : m_svalue[s];
    if (same && !m_changed[s])
        return;
    if (m_aborted) {
        m_changed[s] = false;
        if (!same)
            m_release(s, next);
        return;
    }
    if (!same) {
        bool equal = false;
        if (b->equal) {
            push(&m_trace, EV(EQUALS, s, 0));
            equal = next_value == m_svalue[s];
        }
        if (equal) {
            m_release(s, next);
        } else {
            int old = m_sserial[s];
            m_sserial[s] = next;
            m_svalue[s] = next_value;
            m_changed[s] = true;
            m_release(s, old);
        }
    }
    if (m_changed[s] && m_emit_change(s))
        m_abort();
}

static void m_group(int g)
{
    flux_token tokens[STORES];
    for (int i = 0; i < m_gcount[g]; i++)
        tokens[i] = m_token[m_gstores[g][i]];
    if (m_wait(tokens, m_gcount[g]) != FLUX_OK) {
        m_abort(); /* it already was */
        return;
    }
    const gbehaviour *b = &m_gbeh[g];
    push(&m_trace, EV(GROUP, g, 0));
    if (b->has)
        m_has_changed(b->h, true);
    if (b->fail)
        push(&m_trace, EV(STATUS, FAIL_GROUP, FLUX_OK));
    push(&m_trace, EV(GROUP_END, g, 0));
    if (b->fail)
        m_abort();
}

static void m_plain(int c)
{
    const cbehaviour *b = &cbeh[c];
    push(&m_trace, EV(PLAIN, c, 0));
    if (b->wait)
        m_wait1(W_PLAIN, b->w);
    if (b->has)
        m_has_changed(b->h, true);
    if (b->emit)
        m_emit(EMIT_PLAIN, b->h);
    push(&m_trace, EV(PLAIN_END, c, 0));
    if (b->fail)
        m_abort();
}

static void m_call(int r)
{
    m_phase[r] = PENDING;
    if (r < G0)
        m_store(r);
    else if (r < C0)
        m_group(r - G0);
    else
        m_plain(r - C0);
    m_phase[r] = HANDLED;
}

static flux_status m_dispatch(void)
{
    for (int g = 0; g < GROUPS; g++)
        m_gowed_at_end[g] = 0;
    m_listener_failed = false;
    flux_status status = m_run_dispatch(m_registered, m_token);
    for (int g = 0; g < GROUPS; g++)
        m_gowed[g] += m_gowed_at_end[g];
    return status;
}

static void m_destroy_store(int s)
{
    for (flux_listener_id id = 1; id <= m_lnext[s]; id++)
        for (int l = 0; l < LSLOTS; l++)
            if (m_llive[s][l] && m_lid[s][l] == id) {
                push(&m_trace, EV(LDESTROY, s, l));
                m_llive[s][l] = false;
            }
    m_release(s, m_sserial[s]);
    push(&m_trace, EV(SDESTROY, s, 0));
    m_slive[s] = false;
    m_registered[s] = false;
}

/* ---- both --------------------------------------------------------------- */

static const char *step_name = "";

static void compare_traces(flux_status got, flux_status want)
{
    if (got != want || r_trace.n != m_trace.n || memcmp(r_trace.v, m_trace.v, (size_t)r_trace.n * sizeof(int))) {
        fprintf(stderr, "fuzz-stores: %s: libflux %d (%s), model %d\n  libflux:", step_name, got,
                got != FLUX_OK ? flux_last_error() : "", want);
        for (int i = 0; i < r_trace.n; i++)
            fprintf(stderr, " %d", r_trace.v[i]);
        fprintf(stderr, "\n  model:  ");
        for (int i = 0; i < m_trace.n; i++)
            fprintf(stderr, " %d", m_trace.v[i]);
        fprintf(stderr, "\n  (events: kind * 1000000 + a * 1000 + b)\n");
        abort();
    }
}

static void compare(void)
{
    CHECK(!flux_is_dispatching(d));
    for (int s = 0; s < STORES; s++) {
        CHECK((r_store[s] != NULL) == m_slive[s]);
        if (m_slive[s]) {
            CHECK(r_stoken[s] == m_token[s]);
            CHECK(flux_store_token(r_store[s]) == m_token[s]);
            int serial, value;
            r_decode(s, flux_store_state(r_store[s]), &serial, &value);
            if (serial != m_sserial[s] || value != m_svalue[s]) {
                fprintf(stderr, "fuzz-stores: %s: store %d's state: libflux serial %d value %d, model %d %d\n",
                        step_name, s, serial, value, m_sserial[s], m_svalue[s]);
                abort();
            }
        }
        for (int l = 0; l < LSLOTS; l++) {
            CHECK(r_llive[s][l] == m_llive[s][l]);
            CHECK(!m_llive[s][l] || r_lid[s][l] == m_lid[s][l]);
        }
    }
    for (int g = 0; g < GROUPS; g++) {
        CHECK((r_group[g] != NULL) == m_glive[g]);
        CHECK(r_gdestroyed[g] == m_gowed[g]);
    }
    for (int c = 0; c < PLAINS; c++) {
        CHECK(r_plain_live[c] == m_registered[C0 + c]);
        CHECK(r_pdestroyed[c] == m_powed[c]);
    }
    CHECK(r_serial == m_serial);
    for (int i = 0; i <= m_serial; i++)
        CHECK(r_released[i] == m_owed_releases[i]);
}

static void start(void)
{
    d = flux_dispatcher_create();
    CHECK(d != NULL);
    memset(r_store, 0, sizeof r_store);
    memset(r_stoken, 0, sizeof r_stoken);
    memset(r_llive, 0, sizeof r_llive);
    memset(r_lid, 0, sizeof r_lid);
    memset(r_group, 0, sizeof r_group);
    memset(r_plain_live, 0, sizeof r_plain_live);
    memset(r_ptoken, 0, sizeof r_ptoken);
    memset(r_gdestroyed, 0, sizeof r_gdestroyed);
    memset(r_pdestroyed, 0, sizeof r_pdestroyed);
    memset(r_released, 0, sizeof r_released);
    r_serial = 0;
    memset(m_slive, 0, sizeof m_slive);
    memset(m_changed, 0, sizeof m_changed);
    memset(m_reducing, 0, sizeof m_reducing);
    memset(m_llive, 0, sizeof m_llive);
    memset(m_lid, 0, sizeof m_lid);
    memset(m_lnext, 0, sizeof m_lnext);
    memset(m_lrunning, 0, sizeof m_lrunning);
    memset(m_glive, 0, sizeof m_glive);
    memset(m_ingroups, 0, sizeof m_ingroups);
    memset(m_gowed, 0, sizeof m_gowed);
    memset(m_powed, 0, sizeof m_powed);
    memset(m_owed_releases, 0, sizeof m_owed_releases);
    memset(m_registered, 0, sizeof m_registered);
    memset(m_token, 0, sizeof m_token);
    m_serial = 0;
    m_next = 1;
}

static void m_create(int s, const sconfig *cfg, int value)
{
    scfg[s] = *cfg;
    m_sserial[s] = m_new_state(value);
    m_svalue[s] = value & 0xff;
    m_slive[s] = true;
    m_changed[s] = false;
    m_lnext[s] = 0;
    memset(m_lid[s], 0, sizeof m_lid[s]); /* a new store: ids from 1 again */
    memset(r_lid[s], 0, sizeof r_lid[s]);
    m_registered[s] = true;
    m_token[s] = m_next++; /* during a dispatch: joins the next one */
}

static void r_create(int s, const sconfig *cfg, int value)
{
    scfg[s] = *cfg;
    flux_store *out = NULL;
    flux_status st = flux_store_create(d, r_new_state(s, value), r_reduce, cfg->equal ? r_equal : NULL,
                                       cfg->release ? r_release : NULL, r_sctx(s), r_store_destroy_ctx, &out);
    CHECK(st == FLUX_OK && out != NULL);
    r_store[s] = out;
    r_stoken[s] = flux_store_token(out);
    CHECK(flux_store_dispatcher(out) == d);
}

static void op_create_store(int s, const sconfig *cfg, int value)
{
    step_name = "create store";
    m_create(s, cfg, value);
    r_create(s, cfg, value);
}

static void op_destroy_store(int s)
{
    step_name = "destroy store";
    flux_status want = FLUX_OK;
    if (m_ingroups[s] > 0)
        want = FLUX_ERR_INVALID_ARGUMENT;
    else
        m_destroy_store(s);
    flux_status got = flux_store_destroy(r_store[s]);
    if (got == FLUX_OK) {
        r_store[s] = NULL;
        memset(r_llive[s], 0, sizeof r_llive[s]);
    }
    compare_traces(got, want);
}

static void finish(void)
{
    step_name = "finish";
    m_trace.n = r_trace.n = 0;
    for (int g = 0; g < GROUPS; g++)
        if (r_group[g]) {
            CHECK(flux_store_group_release(r_group[g]) == FLUX_OK);
            r_group[g] = NULL;
            m_glive[g] = false;
            for (int i = 0; i < m_gcount[g]; i++)
                m_ingroups[m_gstores[g][i]]--;
            m_registered[G0 + g] = false;
            m_gowed[g]++;
        }
    for (int s = 0; s < STORES; s++)
        if (m_slive[s])
            op_destroy_store(s);
    for (int c = 0; c < PLAINS; c++)
        if (r_plain_live[c]) {
            CHECK(flux_unregister(d, r_ptoken[c]) == FLUX_OK);
            r_plain_live[c] = false;
            m_registered[C0 + c] = false;
            m_powed[c]++;
        }
    compare();
    CHECK(flux_dispatcher_destroy(d) == FLUX_OK);
    /* Every state made was released exactly once (when the store owns its
     * states); for boxes ASan's leak check says the same. */
    for (int i = 1; i <= r_serial; i++)
        CHECK(r_released[i] <= 1);
}

/* r: bit 7 the listener itself, else bit 6 slot r & 7 of its own store,
 * else store (r >> 3) & 3, slot r & 7. */
static lbehaviour decode_listener(int s, int l, uint8_t f, uint8_t r, uint8_t a, uint8_t w, uint8_t h, uint8_t g)
{
    lbehaviour b = {
        .wait = f & 1, .has = (f >> 1) & 1, .emit = (f >> 2) & 1, .remove = (f >> 3) & 1,
        .add = (f >> 4) & 1, .release_group = (f >> 5) & 1, .fail = (f >> 6) & 1, .create = (f >> 7) & 1,
        .rs = r & 0x80 ? s : r & 0x40 ? s : (r >> 3) % STORES, .rl = r & 0x80 ? l : r % LSLOTS, .as = (a >> 3) % STORES, .al = a % LSLOTS,
        .w = w % STORES, .h = h % STORES, .g = g % GROUPS,
        .create_group = (g >> 1) & 1, .gmask = (g >> 2) & 15,
        .gb = {.has = (g >> 6) & 1, .fail = (g >> 7) & 1, .h = h % STORES},
    };
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    start();
    size_t p = 0;
#define NEXT() (p < size ? data[p++] : 0)
    for (int step = 0; p < size && step < MAX_STEPS; step++) {
        m_trace.n = r_trace.n = 0;
        switch (NEXT() % 9) {
        case 0: {
            int s = NEXT() % STORES;
            uint8_t cfg = NEXT(), rf = NEXT();
            int w = NEXT() % STORES, e = NEXT() % STORES, h = NEXT() % STORES, kl = NEXT();
            if (m_slive[s])
                break;
            sconfig c = {
                .box = cfg & 1, .equal = (cfg >> 1) & 1, .release = (cfg & 1) || ((cfg >> 2) & 1),
                .wait = rf & 1, .emit = (rf >> 1) & 1, .has = (rf >> 2) & 1, .remove = (rf >> 3) & 1,
                .add = (rf >> 4) & 1, .w = w, .e = e, .h = h, .ks = (kl >> 3) % STORES, .kl = kl % LSLOTS,
            };
            op_create_store(s, &c, cfg >> 3);
            compare_traces(FLUX_OK, FLUX_OK);
            break;
        }
        case 1: {
            int s = NEXT() % STORES;
            if (m_slive[s])
                op_destroy_store(s);
            else
                CHECK(flux_store_destroy(NULL) == FLUX_OK);
            break;
        }
        case 2: {
            step_name = "add listener";
            int s = NEXT() % STORES, l = NEXT() % LSLOTS;
            uint8_t f = NEXT(), r = NEXT(), a = NEXT(), w = NEXT(), h = NEXT(), g = NEXT();
            lbehaviour b = decode_listener(s, l, f, r, a, w, h, g);
            m_add(s, l, &b);
            r_add(s, l, &b);
            compare_traces(FLUX_OK, FLUX_OK);
            break;
        }
        case 3: {
            step_name = "remove listener";
            int s = NEXT() % STORES, l = NEXT() % LSLOTS;
            m_remove(s, l);
            r_remove(s, l);
            compare_traces(FLUX_OK, FLUX_OK);
            break;
        }
        case 4: {
            step_name = "dispatch";
            r_payload = NEXT();
            flux_status want = m_dispatch();
            flux_status got = flux_dispatch(d, &r_payload);
            compare_traces(got, want);
            break;
        }
        case 5: {
            step_name = "create group";
            int g = NEXT() % GROUPS;
            uint8_t mask = NEXT(), gf = NEXT(), h = NEXT();
            gbehaviour b = {.has = gf & 1, .fail = (gf >> 1) & 1, .h = h % STORES};
            m_group_create(g, mask, &b);
            r_group_create(g, mask, &b);
            break;
        }
        case 6: {
            int g = NEXT() % GROUPS;
            CHECK(flux_store_group_release(r_group[g]) == FLUX_OK); /* NULL: a no-op */
            if (m_glive[g]) {
                r_group[g] = NULL;
                m_glive[g] = false;
                for (int i = 0; i < m_gcount[g]; i++)
                    m_ingroups[m_gstores[g][i]]--;
                m_registered[G0 + g] = false;
                m_gowed[g]++; /* at once: no dispatch runs */
            }
            break;
        }
        case 7: {
            int c = NEXT() % PLAINS;
            uint8_t f = NEXT(), w = NEXT(), h = NEXT();
            if (m_registered[C0 + c]) {
                CHECK(flux_unregister(d, r_ptoken[c]) == FLUX_OK);
                CHECK(flux_unregister(d, r_ptoken[c]) == FLUX_ERR_UNKNOWN_TOKEN);
                r_plain_live[c] = false;
                m_registered[C0 + c] = false;
                m_powed[c]++;
                break;
            }
            cbeh[c] = (cbehaviour){.wait = f & 1, .has = (f >> 1) & 1, .emit = (f >> 2) & 1,
                                   .fail = (f >> 3) & 1, .w = w % STORES, .h = h % STORES};
            CHECK(flux_register(d, r_plain, (void *)(intptr_t)c, r_plain_destroy, &r_ptoken[c]) == FLUX_OK);
            r_plain_live[c] = true;
            m_registered[C0 + c] = true;
            m_token[C0 + c] = m_next++;
            CHECK(r_ptoken[c] == m_token[C0 + c]);
            break;
        }
        case 8: {
            step_name = "outside a dispatch";
            int s = NEXT() % STORES;
            m_has_changed(s, false);
            r_has_changed(s);
            if (m_slive[s]) {
                CHECK(flux_store_emit_change(r_store[s]) == FLUX_ERR_NOT_DISPATCHING);
                CHECK(flux_unregister(d, r_stoken[s]) == FLUX_ERR_INVALID_ARGUMENT);
            }
            CHECK(flux_store_emit_change(NULL) == FLUX_ERR_INVALID_ARGUMENT);
            CHECK(flux_store_listener_fail(d, 5) == FLUX_ERR_NOT_DISPATCHING);
            flux_token t = r_stoken[s];
            CHECK(flux_wait_for(d, &t, 1) == FLUX_ERR_NOT_DISPATCHING);
            bool owned = false;
            for (int i = 0; i < STORES; i++)
                owned |= m_slive[i];
            for (int g = 0; g < GROUPS; g++)
                owned |= m_glive[g];
            if (owned)
                CHECK(flux_dispatcher_destroy(d) == FLUX_ERR_INVALID_ARGUMENT);
            /* A create that fails releases the initial state, then destroys
             * the context (a box: ASan sees a leak or a double free). */
            scfg[STORES] = (sconfig){.box = true, .release = true};
            m_release(STORES, m_new_state(0));
            push(&m_trace, EV(SDESTROY, STORES, 0));
            flux_store *out = (flux_store *)&out;
            CHECK(flux_store_create(d, r_new_state(STORES, 0), NULL, NULL, r_release, r_sctx(STORES),
                                    r_store_destroy_ctx, &out) == FLUX_ERR_INVALID_ARGUMENT);
            CHECK(out == NULL);
            compare_traces(FLUX_OK, FLUX_OK);
            break;
        }
        }
        compare();
    }
    finish();
    return 0;
}
