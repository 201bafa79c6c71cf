/*
 * fuzz-ops.c -- libFuzzer target: random operation sequences run against
 * libflux and against a small reference model of DESIGN.md section 2 (the
 * model runs first, then libflux), compared after every step: the order the
 * callbacks ran in, what each wait_for, unregister and register inside them
 * returned, each dispatch's status, the tokens, and every destroy; and,
 * after each failure, what flux_last_error_token() and
 * flux_last_error_cycle() read.
 *
 * The input is a program; each operation is a byte (op = byte % 6), with
 * operands in the bytes after it:
 *   0 [s] [flags] [w1] [w2] [w3] [o]  register slot s with a behaviour:
 *       flags bit 0: return non-zero; bits 1-2: wait_for on 0-3 slots'
 *       tokens (w1..w3, stale or never-issued ones included); bit 3:
 *       unregister slot o; bit 4: register slot o; bit 5: flux_enqueue a
 *       payload (from inside the callback; at most ENQUEUES per operation,
 *       so cascades end)
 *   1 [s]  unregister slot s          2  dispatch
 *   3      wait_for outside a dispatch
 *   4      destroy the dispatcher (every other time, closed first), make a
 *          new one
 *   5      dispatch, then flux_enqueue on the idle dispatcher
 * Queued payloads run FIFO after the dispatch that queued them, each a
 * dispatch of its own, each followed by its done, which must get the
 * context of its own call. An input of odd length runs with an observer on
 * every dispatcher (the observed loop and waits are code of their own): it
 * must change nothing the model sees, and its events must nest, one
 * callback_begin per callback run. Any disagreement aborts: libFuzzer
 * reports it as a crash.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flux.h>

enum { SLOTS = 10, TRACE = 8192, MAX_STEPS = 64, ENQUEUES = 4 };
#define MODEL_SLOTS SLOTS
#include "model.h"

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz-ops: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                             \
        }                                                                        \
    } while (0)

typedef struct behaviour {
    bool fail;
    int nwait;
    int waits[3];
    int unregister;  /* a slot, or -1 */
    int register_;   /* a slot, or -1 */
    bool enqueue;
} behaviour;

static behaviour behaviours[SLOTS];

/* ---- libflux ----------------------------------------------------------- */

static flux_dispatcher *d;
static bool r_registered[SLOTS];
static flux_token r_token[SLOTS];  /* the latest token (stale once unregistered) */
static int r_destroyed[SLOTS];
static trace r_trace;
/* Payload ids count up from 1 per operation; each call's done context is
 * tags[id], so done can check it got the context of its own call. */
static int r_budget, r_enqueued;
static char tags[ENQUEUES + 2];

/* done: 1000 + 10 * payload id + status in the trace. */
static void r_done(void *context, void *payload, flux_status status)
{
    int id = (int)(intptr_t)payload;
    CHECK(id >= 1 && id <= ENQUEUES + 1 && context == &tags[id]);
    push(&r_trace, 1000 + 10 * id + (int)status);
}

/* The slots destroyed, in order (flux_dispatcher_close() promises one). */
static int r_order[TRACE], r_order_n;

static void on_destroy(void *context)
{
    r_destroyed[(intptr_t)context]++;
    if (r_order_n < TRACE)
        r_order[r_order_n++] = (int)(intptr_t)context;
}

static int r_callback(void *context, const void *payload);

/* What a failed call left for flux_last_error_token() and
 * flux_last_error_cycle(), in the trace: 100000 + the token, then 200000 +
 * the cycle's length and 100000 + each of its tokens. */
static void push_error(trace *t, flux_token token, const flux_token *cycle, int n)
{
    push(t, 100000 + (int)token);
    push(t, 200000 + n);
    for (int i = 0; i < n; i++)
        push(t, 100000 + (int)cycle[i]);
}

static void r_push_error(void)
{
    flux_token cycle[SLOTS + 1];
    size_t n = flux_last_error_cycle(cycle, SLOTS + 1);
    CHECK(n <= SLOTS + 1 && flux_last_error_cycle(NULL, 0) == n);
    push_error(&r_trace, flux_last_error_token(), cycle, (int)n);
}

static flux_status r_register(int s)
{
    flux_token t = 0;
    flux_status st = flux_register(d, r_callback, (void *)(intptr_t)s, on_destroy, &t);
    if (st == FLUX_OK) {
        r_registered[s] = true;
        r_token[s] = t;
    }
    return st;
}

static int r_callback(void *context, const void *payload)
{
    (void)payload;
    int s = (int)(intptr_t)context;
    const behaviour *b = &behaviours[s];
    push(&r_trace, s);
    if (b->nwait) {
        flux_token tokens[3];
        for (int i = 0; i < b->nwait; i++)
            tokens[i] = r_token[b->waits[i]];
        flux_status st = flux_wait_for(d, tokens, (size_t)b->nwait);
        push(&r_trace, 100 + st);
        if (st != FLUX_OK)
            r_push_error();
        CHECK(flux_is_dispatching(d));
    }
    if (b->unregister >= 0) {
        flux_status st = flux_unregister(d, r_token[b->unregister]);
        if (st == FLUX_OK)
            r_registered[b->unregister] = false;
        push(&r_trace, 200 + st);
        if (st != FLUX_OK)
            r_push_error();
    }
    if (b->register_ >= 0 && !r_registered[b->register_])
        push(&r_trace, 300 + r_register(b->register_));
    if (b->enqueue && r_budget > 0) {
        r_budget--;
        int id = ++r_enqueued;
        push(&r_trace, 400 + flux_enqueue(d, (void *)(intptr_t)id, r_done, &tags[id]));
    }
    CHECK(flux_dispatch(d, NULL) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_try_dispatch(d, NULL) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_last_error_token() == 0 && flux_last_error_cycle(NULL, 0) == 0);
    CHECK(flux_dispatcher_close(d) == FLUX_ERR_ALREADY_DISPATCHING);
    CHECK(flux_dispatcher_destroy(d) == FLUX_ERR_ALREADY_DISPATCHING);
    push(&r_trace, -1 - s);
    return b->fail ? 1 : 0;
}

/* The observer of an odd-length input: checks that its events nest
 * (flux.h, "Observer"), and counts the callbacks it saw begin. */
static bool observed;
static flux_token o_stack[TRACE];
static int o_depth, o_begun;
static bool o_dispatching;

static void o_dispatch_begin(void *context, const void *payload)
{
    (void)context; (void)payload;
    CHECK(!o_dispatching && o_depth == 0);
    o_dispatching = true;
}

static void o_dispatch_end(void *context, const void *payload, flux_status status)
{
    (void)context; (void)payload; (void)status;
    CHECK(o_dispatching && o_depth == 0);
    o_dispatching = false;
}

static void o_callback_begin(void *context, flux_token token)
{
    (void)context;
    CHECK(o_dispatching && o_depth < TRACE);
    o_stack[o_depth++] = token;
    o_begun++;
}

static void o_callback_end(void *context, flux_token token, int result)
{
    (void)context; (void)result;
    CHECK(o_depth > 0 && o_stack[o_depth - 1] == token);
    o_depth--;
}

/* The waiter is the innermost callback running. */
static void o_wait_for(void *context, flux_token waiter, const flux_token *tokens, size_t count)
{
    (void)context; (void)tokens; (void)count;
    CHECK(o_depth > 0 && o_stack[o_depth - 1] == waiter);
}

/* ---- the model ----------------------------------------------------------- */

static bool m_registered[SLOTS];
static flux_token m_token[SLOTS];
static flux_token m_next;
static int m_owed[SLOTS];  /* destroys owed so far */
static trace m_trace;
static int m_budget, m_enqueued;
static int m_queue[ENQUEUES + 1], m_queued; /* FIFO; at most ENQUEUES per operation */

static int m_owed_at_end[SLOTS]; /* destroys owed when the dispatch ends */

static flux_status m_unregister_during(int o)
{
    if (!m_registered[o])
        return FLUX_ERR_UNKNOWN_TOKEN;
    m_registered[o] = false;
    int s = m_find(m_token[o]);
    if (s >= 0)
        m_removed[s] = true;  /* a participant: not called from now on */
    m_owed_at_end[o]++;       /* released when the dispatch ends */
    return FLUX_OK;
}

static void m_call(int s)
{
    const behaviour *b = &behaviours[s];
    m_phase[s] = PENDING;
    push(&m_trace, s);
    if (b->nwait) {
        flux_token tokens[3];
        for (int i = 0; i < b->nwait; i++)
            tokens[i] = m_token[b->waits[i]];
        flux_status st = m_wait(tokens, b->nwait);
        push(&m_trace, 100 + st);
        if (st != FLUX_OK)
            push_error(&m_trace, m_err_token, m_cycle, m_cycle_n);
    }
    if (b->unregister >= 0) {
        flux_token t = m_token[b->unregister];
        flux_status st = m_unregister_during(b->unregister);
        push(&m_trace, 200 + st);
        if (st != FLUX_OK)
            push_error(&m_trace, t, NULL, 0);
    }
    if (b->register_ >= 0 && !m_registered[b->register_]) {
        m_registered[b->register_] = true;
        m_token[b->register_] = m_next++;  /* joins the next dispatch */
        push(&m_trace, 300 + FLUX_OK);
    }
    if (b->enqueue && m_budget > 0) {
        m_budget--;
        m_queue[m_queued++] = ++m_enqueued;  /* a dispatch is running: queued */
        push(&m_trace, 400 + FLUX_OK);
    }
    push(&m_trace, -1 - s);
    m_phase[s] = HANDLED;
    if (b->fail)
        m_abort();
}

/* One dispatch, queue aside. */
static flux_status m_run(void)
{
    for (int s = 0; s < SLOTS; s++)
        m_owed_at_end[s] = 0;
    flux_status status = m_run_dispatch(m_registered, m_token);
    for (int s = 0; s < SLOTS; s++)
        m_owed[s] += m_owed_at_end[s];
    return status;
}

/* The queue, FIFO, each payload a dispatch of its own and then its done;
 * callbacks registered meanwhile take part. */
static void m_drain(void)
{
    for (int i = 0; i < m_queued; i++) {
        flux_status st = m_run();
        push(&m_trace, 1000 + 10 * m_queue[i] + (int)st);
    }
    m_queued = 0;
}

static flux_status m_dispatch(void)
{
    flux_status st = m_run();
    m_drain();
    return st;
}

/* flux_enqueue on an idle dispatcher: dispatched at once, its done, then
 * the queue. */
static flux_status m_enqueue(void)
{
    int id = ++m_enqueued;
    flux_status st = m_run();
    push(&m_trace, 1000 + 10 * id + (int)st);
    m_drain();
    return st;
}

/* ---- both --------------------------------------------------------------- */

static void compare(void)
{
    for (int s = 0; s < SLOTS; s++) {
        CHECK(r_registered[s] == m_registered[s]);
        CHECK(!m_registered[s] || r_token[s] == m_token[s]);
        CHECK(r_destroyed[s] == m_owed[s]);
    }
    CHECK(!flux_is_dispatching(d));
}

/* One operation's enqueue bookkeeping, the same on both sides. */
static void reset_enqueues(void)
{
    r_budget = m_budget = ENQUEUES;
    r_enqueued = m_enqueued = 0;
    m_queued = 0;
}

/* Which of two ways the next dispatch and destroy go: counted per input, so
 * that an input replays alone as it ran in a campaign. */
static unsigned tries, closes;

static void dispatch_both(bool enqueue)
{
    m_trace.n = r_trace.n = 0;
    o_begun = 0;
    flux_status want, got;
    if (enqueue) {
        want = m_enqueue();
        int id = ++r_enqueued;
        got = flux_enqueue(d, (void *)(intptr_t)id, r_done, &tags[id]);
    } else {
        /* One thread: a try is a dispatch (it never has another to wait for). */
        want = m_dispatch();
        got = tries++ % 2 ? flux_try_dispatch(d, NULL) : flux_dispatch(d, NULL);
    }
    if (got != want || r_trace.n != m_trace.n || memcmp(r_trace.v, m_trace.v, (size_t)r_trace.n * sizeof(int))) {
        fprintf(stderr, "%s: libflux %d (%s), model %d\n  libflux:", enqueue ? "enqueue" : "dispatch", got,
                flux_last_error(), want);
        for (int i = 0; i < r_trace.n; i++)
            fprintf(stderr, " %d", r_trace.v[i]);
        fprintf(stderr, "\n  model:  ");
        for (int i = 0; i < m_trace.n; i++)
            fprintf(stderr, " %d", m_trace.v[i]);
        fprintf(stderr, "\n");
        abort();
    }
    /* With nothing queued, the dispatch's own failure is the latest. */
    if (!enqueue && got == FLUX_ERR_CALLBACK_FAILED && r_enqueued == 0)
        CHECK(flux_last_error_token() == m_failed_token && flux_last_error_cycle(NULL, 0) == 0);
    if (observed) {
        /* Every callback run pushed its slot (0..SLOTS-1) as it began. */
        int ran = 0;
        for (int i = 0; i < r_trace.n; i++)
            ran += r_trace.v[i] >= 0 && r_trace.v[i] < SLOTS;
        CHECK(o_begun == ran && !o_dispatching && o_depth == 0);
    }
}

static void start(void)
{
    d = flux_dispatcher_create();
    CHECK(d != NULL);
    if (observed) {
        flux_observer hooks = {FLUX_OBSERVER_VERSION, o_dispatch_begin, o_dispatch_end, o_callback_begin,
                               o_callback_end, o_wait_for};
        CHECK(flux_dispatcher_set_observer(d, &hooks, NULL, NULL) == FLUX_OK);
    }
    for (int s = 0; s < SLOTS; s++) {
        r_registered[s] = m_registered[s] = false;
        r_token[s] = m_token[s] = 0;
    }
    m_next = 1;
}

/* flux_dispatcher_close(): every registration's destroy, in registration
 * order; after it, every call on d but these three is refused. */
static void close_both(void)
{
    int order[SLOTS], n = 0;
    for (int s = 0; s < SLOTS; s++)
        if (m_registered[s])
            order[n++] = s;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && m_token[order[j]] < m_token[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    r_order_n = 0;
    CHECK(flux_dispatcher_close(d) == FLUX_OK);
    CHECK(r_order_n == n && memcmp(r_order, order, (size_t)n * sizeof(int)) == 0);
    for (int s = 0; s < SLOTS; s++) {
        if (m_registered[s])
            m_owed[s]++;
        r_registered[s] = m_registered[s] = false;
    }
    compare();
    CHECK(flux_dispatcher_close(d) == FLUX_OK);
    CHECK(flux_dispatch(d, NULL) == FLUX_ERR_INVALID_ARGUMENT);
    CHECK(flux_try_dispatch(d, NULL) == FLUX_ERR_INVALID_ARGUMENT);
    CHECK(flux_unregister(d, r_token[0]) == FLUX_ERR_INVALID_ARGUMENT);
    flux_token t = 1;
    CHECK(flux_register(d, r_callback, (void *)(intptr_t)0, on_destroy, &t) == FLUX_ERR_INVALID_ARGUMENT && t == 0);
    m_owed[0]++; /* its destroy ran at once */
    r_trace.n = 0;
    CHECK(flux_enqueue(d, (void *)(intptr_t)1, r_done, &tags[1]) == FLUX_ERR_INVALID_ARGUMENT);
    CHECK(r_trace.n == 1 && r_trace.v[0] == 1000 + 10 + FLUX_ERR_INVALID_ARGUMENT);
    compare();
}

static void finish(void)
{
    CHECK(flux_dispatcher_destroy(d) == FLUX_OK);
    for (int s = 0; s < SLOTS; s++) {
        if (m_registered[s])
            m_owed[s]++;
        r_registered[s] = m_registered[s] = false;
    }
    for (int s = 0; s < SLOTS; s++)
        CHECK(r_destroyed[s] == m_owed[s]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memset(r_destroyed, 0, sizeof r_destroyed);
    memset(m_owed, 0, sizeof m_owed);
    observed = size % 2 == 1;
    tries = closes = 0;
    start();
    size_t p = 0;
#define NEXT() (p < size ? data[p++] : 0)
    for (int step = 0; p < size && step < MAX_STEPS; step++) {
        reset_enqueues();
        switch (NEXT() % 6) {
        case 0: {
            int s = NEXT() % SLOTS;
            uint8_t flags = NEXT();
            int w1 = NEXT() % SLOTS, w2 = NEXT() % SLOTS, w3 = NEXT() % SLOTS;
            int o = NEXT() % SLOTS;
            if (m_registered[s])
                break;
            behaviour b = {(flags & 1) != 0, (flags >> 1) & 3, {w1, w2, w3},
                           (flags & 8) ? o : -1, (flags & 16) ? o : -1, (flags & 32) != 0};
            behaviours[s] = b;
            CHECK(r_register(s) == FLUX_OK);
            m_registered[s] = true;
            m_token[s] = m_next++;
            break;
        }
        case 1: {
            int s = NEXT() % SLOTS;
            flux_status st = flux_unregister(d, r_token[s]);
            if (m_registered[s]) {
                CHECK(st == FLUX_OK);
                m_registered[s] = r_registered[s] = false;
                m_owed[s]++;
            } else {
                CHECK(st == FLUX_ERR_UNKNOWN_TOKEN && flux_last_error_token() == r_token[s]);
            }
            break;
        }
        case 5:
            dispatch_both(false);
            compare();
            reset_enqueues();
            dispatch_both(true);
            break;
        case 2:
            dispatch_both(false);
            break;
        case 3: {
            flux_token t = r_token[0];
            CHECK(flux_wait_for(d, &t, 1) == FLUX_ERR_NOT_DISPATCHING);
            CHECK(flux_wait_for(d, NULL, 0) == FLUX_ERR_NOT_DISPATCHING);
            break;
        }
        case 4: {
            if (closes++ % 2)
                close_both();
            finish();
            start();
            break;
        }
        }
        compare();
    }
    finish();
    return 0;
}
