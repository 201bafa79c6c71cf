/*
 * test-enqueue.c -- flux_enqueue(): dispatches at once when idle; queues,
 * never blocking, while a dispatch runs (from a callback or another thread);
 * the dispatching thread runs the queue FIFO, each payload a full dispatch
 * of its own, before its call returns; done(context, payload, status)
 * exactly once per call on every path, with that call's context; nothing lost and nothing run twice when other
 * threads enqueue as dispatches end.
 */
#include "helpers.h"

/* ---- a recorder: what callbacks and done saw, in order ------------------- */

typedef struct item {
    int id;
} item;

typedef struct recorder {
    flux_dispatcher *d;
    trace log;               /* callback: 100*payload id + callback number;
                                done: -(1000 + id) for OK, -(2000 + id) failed */
    int done_calls[64];      /* per payload id */
    flux_status done_status[64];
    int done_dispatching[64];
    flux_status dispatch_from_done[64];
    flux_status destroy_from_done[64];
    flux_status wait_from_done[64];
    char done_error[64][160];
    flux_token done_token[64]; /* flux_last_error_token() in a failed done */
    void *done_context[64];  /* the context the last done of that id got */
} recorder;

static recorder rec;

/* Each call enqueueing items[i] passes CTX(i): done checks it got its own. */
static char contexts[64];
#define CTX(i) ((void *)&contexts[(i)])
static int wrong_context; /* dones of done_fn whose context was not CTX(id) */

static void done_fn(void *context, void *payload, flux_status status)
{
    item *it = payload;
    int id = it ? it->id : 0;
    rec.done_calls[id]++;
    rec.done_context[id] = context;
    wrong_context += context != CTX(id);
    rec.done_status[id] = status;
    rec.done_dispatching[id] = flux_is_dispatching(rec.d);
    snprintf(rec.done_error[id], sizeof rec.done_error[id], "%s", status ? flux_last_error() : "");
    rec.done_token[id] = status ? flux_last_error_token() : 0;
    trace_push(&rec.log, status == FLUX_OK ? -(1000 + id) : -(2000 + id));
}

static item items[64];

static void recorder_init(void)
{
    memset(&rec, 0, sizeof rec);
    rec.d = flux_dispatcher_create();
    REQUIRE(rec.d != NULL);
    for (int i = 0; i < 64; i++)
        items[i].id = i;
}

/* Callback "which" logs 100*id + which; hooks below add behaviour. */
typedef struct logger {
    int which;
    flux_token token;
    int enqueue_next_until;  /* payload id n enqueues n+1 while n < this */
    flux_status enqueue_status;
    int fail_on;             /* returns 1 for this payload id (0: never) */
    bool wait;               /* wait_for(wait_token) first */
    flux_token wait_token;
    flux_status wait_status;
} logger;

static int logger_cb(void *ctx, const void *payload)
{
    logger *l = ctx;
    const item *it = payload;
    if (l->wait)
        l->wait_status = flux_wait_for(rec.d, &l->wait_token, 1);
    trace_push(&rec.log, 100 * it->id + l->which);
    if (it->id < l->enqueue_next_until)
        l->enqueue_status = flux_enqueue(rec.d, &items[it->id + 1], done_fn, CTX(it->id + 1));
    return it->id == l->fail_on ? 1 : 0;
}

static void add_logger(logger *l, int which)
{
    memset(l, 0, sizeof *l);
    l->which = which;
    l->enqueue_status = (flux_status)-1;
    REQUIRE(flux_register(rec.d, logger_cb, l, NULL, &l->token) == FLUX_OK);
}

/* ---- idle ------------------------------------------------------------ */

static void test_idle_enqueue_dispatches_at_once(void)
{
    recorder_init();
    logger a, b;
    add_logger(&a, 1);
    add_logger(&b, 2);
    EXPECT_OK(flux_enqueue(rec.d, &items[1], done_fn, CTX(1)));
    is_trace(&rec.log, INTS(101, 102, -1001), "both callbacks ran, then done, before enqueue returned");
    is_int(rec.done_calls[1], 1, "done ran exactly once");
    is_int(rec.done_dispatching[1], 1, "the dispatcher is still dispatching while done runs");
    ok(!flux_is_dispatching(rec.d), "idle again after enqueue returned");
    EXPECT_OK(flux_enqueue(rec.d, &items[2], NULL, CTX(2)));
    is_int(rec.log.n, 5, "a NULL done is fine");
    flux_dispatcher_destroy(rec.d);
}

static int null_payload_seen;
static int null_payload_cb(void *ctx, const void *payload)
{
    (void)ctx;
    null_payload_seen += payload == NULL;
    return 0;
}
static int null_done_calls;
static void null_done(void *context, void *payload, flux_status status)
{
    null_done_calls += context == &null_done_calls && payload == NULL && status == FLUX_OK;
}

static void test_null_payload(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_token t;
    REQUIRE(flux_register(d, null_payload_cb, NULL, NULL, &t) == FLUX_OK);
    null_payload_seen = null_done_calls = 0;
    EXPECT_OK(flux_enqueue(d, NULL, null_done, &null_done_calls));
    is_int(null_payload_seen, 1, "a NULL payload is dispatched like any other");
    is_int(null_done_calls, 1, "done gets its context, the NULL payload and FLUX_OK");
    flux_dispatcher_destroy(d);
}

/* ---- from callbacks --------------------------------------------------- */

static void test_enqueue_from_callback_is_fifo_after_the_dispatch(void)
{
    recorder_init();
    logger a, b;
    add_logger(&a, 1);
    add_logger(&b, 2);
    a.enqueue_next_until = 4; /* 1 -> 2 -> 3 -> 4: a cascade */
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_int(a.enqueue_status, FLUX_OK, "enqueue from a callback returns FLUX_OK at once");
    is_trace(&rec.log,
             INTS(101, 102, 201, 202, -1002, 301, 302, -1003, 401, 402, -1004),
             "each queued payload is a full dispatch, in order, done after each, "
             "all before flux_dispatch returned");
    for (int i = 2; i <= 4; i++)
        is_int(rec.done_calls[i], 1, "done of payload %d ran exactly once", i);
    ok(!flux_is_dispatching(rec.d), "idle once the queue drained");
    flux_dispatcher_destroy(rec.d);
}

static int enqueue_three_cb(void *ctx, const void *payload)
{
    (void)ctx;
    const item *it = payload;
    trace_push(&rec.log, 100 * it->id);
    if (it->id == 1) {
        /* Several from one callback: FIFO. */
        flux_enqueue(rec.d, &items[5], done_fn, CTX(5));
        flux_enqueue(rec.d, &items[3], done_fn, CTX(3));
        flux_enqueue(rec.d, &items[4], done_fn, CTX(4));
    }
    return 0;
}

static void test_fifo_order_of_several(void)
{
    recorder_init();
    flux_token t;
    REQUIRE(flux_register(rec.d, enqueue_three_cb, NULL, NULL, &t) == FLUX_OK);
    EXPECT_OK(flux_enqueue(rec.d, &items[1], done_fn, CTX(1)));
    is_trace(&rec.log, INTS(100, -1001, 500, -1005, 300, -1003, 400, -1004),
             "the outer payload's done first, then the queue in the order enqueued");
    flux_dispatcher_destroy(rec.d);
}

/* The queue wraps, then grows while wrapped: payload 1 fills it (2-5), the
 * dispatch of 2 pops one and enqueues two more (6, 7), the second of which
 * grows a ring whose head is not at 0. Nothing may be lost or reordered. */
static int wrap_then_grow_cb(void *ctx, const void *payload)
{
    (void)ctx;
    const item *it = payload;
    trace_push(&rec.log, 100 * it->id);
    if (it->id == 1)
        for (int i = 2; i <= 5; i++)
            flux_enqueue(rec.d, &items[i], done_fn, CTX(i));
    if (it->id == 2)
        for (int i = 6; i <= 7; i++)
            flux_enqueue(rec.d, &items[i], done_fn, CTX(i));
    return 0;
}

static void test_fifo_when_the_queue_grows_while_wrapped(void)
{
    recorder_init();
    flux_token t;
    REQUIRE(flux_register(rec.d, wrap_then_grow_cb, NULL, NULL, &t) == FLUX_OK);
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_trace(&rec.log,
             INTS(100, 200, -1002, 300, -1003, 400, -1004, 500, -1005, 600, -1006, 700, -1007),
             "every payload once, FIFO, across the queue's growth while wrapped");
    flux_dispatcher_destroy(rec.d);
}

static void test_wait_for_works_in_queued_dispatches(void)
{
    recorder_init();
    logger a, b;
    add_logger(&a, 1);
    add_logger(&b, 2);
    a.wait = true; /* a waits for b in every dispatch */
    a.wait_token = b.token;
    b.enqueue_next_until = 3;
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_int(a.wait_status, FLUX_OK, "wait_for succeeded in the queued dispatches");
    is_trace(&rec.log, INTS(102, 101, 202, 201, -1002, 302, 301, -1003),
             "b ran first in each dispatch, waited for by a, and once only");
    flux_dispatcher_destroy(rec.d);
}

static logger *late;
static logger late_storage;
static int register_late_cb(void *ctx, const void *payload)
{
    (void)ctx;
    const item *it = payload;
    trace_push(&rec.log, 100 * it->id + 9);
    if (it->id == 1) {
        flux_enqueue(rec.d, &items[2], done_fn, CTX(2));
        late = &late_storage;
        add_logger(late, 3); /* registered during dispatch 1 */
    }
    return 0;
}

static void test_callback_registered_meanwhile_takes_part(void)
{
    recorder_init();
    flux_token t;
    REQUIRE(flux_register(rec.d, register_late_cb, NULL, NULL, &t) == FLUX_OK);
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_trace(&rec.log, INTS(109, 209, 203, -1002),
             "a callback registered during the dispatch is called by the queued one");
    flux_dispatcher_destroy(rec.d);
}

/* ---- done's view: still dispatching ---------------------------------- */

static void done_that_reenters(void *context, void *payload, flux_status status)
{
    done_fn(context, payload, status);
    item *it = payload;
    rec.dispatch_from_done[it->id] = flux_dispatch(rec.d, &items[60]);
    rec.destroy_from_done[it->id] = flux_dispatcher_destroy(rec.d);
    flux_token first = 1; /* the logger's token: registered, and already run */
    rec.wait_from_done[it->id] = flux_wait_for(rec.d, &first, 1);
    if (it->id < 3)
        flux_enqueue(rec.d, &items[it->id + 1], done_that_reenters, CTX(it->id + 1));
}

static void test_done_sees_a_dispatching_dispatcher(void)
{
    recorder_init();
    logger a;
    add_logger(&a, 1);
    EXPECT_OK(flux_enqueue(rec.d, &items[1], done_that_reenters, CTX(1)));
    for (int i = 1; i <= 3; i++) {
        is_int(rec.done_calls[i], 1, "done %d ran once", i);
        is_int(rec.done_dispatching[i], 1, "done %d: flux_is_dispatching is 1", i);
        is_int(rec.dispatch_from_done[i], FLUX_ERR_ALREADY_DISPATCHING,
               "done %d: flux_dispatch is refused", i);
        is_int(rec.destroy_from_done[i], FLUX_ERR_ALREADY_DISPATCHING,
               "done %d: flux_dispatcher_destroy is refused", i);
        is_int(rec.wait_from_done[i], FLUX_ERR_NOT_DISPATCHING,
               "done %d: flux_wait_for is refused (only a callback waits)", i);
    }
    is_trace(&rec.log, INTS(101, -1001, 201, -1002, 301, -1003),
             "an enqueue from done is queued and run by the same outer call");
    ok(!flux_is_dispatching(rec.d), "idle after");
    EXPECT_OK(flux_dispatcher_destroy(rec.d));
}

/* flux_try_dispatch() runs what its callbacks queued, as flux_dispatch()
 * does, before it returns. */
static void test_try_dispatch_runs_the_queue(void)
{
    recorder_init();
    logger a, b;
    add_logger(&a, 1);
    add_logger(&b, 2);
    a.enqueue_next_until = 3;
    EXPECT_OK(flux_try_dispatch(rec.d, &items[1]));
    is_trace(&rec.log, INTS(101, 102, 201, 202, -1002, 301, 302, -1003),
             "each queued payload dispatched in order, done after each, before flux_try_dispatch returned");
    ok(!flux_is_dispatching(rec.d), "idle once the queue drained");
    EXPECT_OK(flux_dispatcher_destroy(rec.d));
}

/* ---- failures ---------------------------------------------------------- */

static void test_failing_queued_dispatch_does_not_stop_the_queue(void)
{
    recorder_init();
    logger a, b;
    add_logger(&a, 1);
    add_logger(&b, 2);
    a.enqueue_next_until = 4;
    a.fail_on = 2; /* payload 2's dispatch fails at a: b is skipped */
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_trace(&rec.log, INTS(101, 102, 201, -2002, 301, 302, -1003, 401, 402, -1004),
             "payload 2 failed and was aborted; 3 and 4 still ran");
    is_int(rec.done_status[2], FLUX_ERR_CALLBACK_FAILED, "done(2) got FLUX_ERR_CALLBACK_FAILED");
    has_substr(rec.done_error[2], "returned 1", "flux_last_error() in done describes the failure");
    is_uint(rec.done_token[2], a.token, "and flux_last_error_token() names the callback that failed");
    is_int(rec.done_status[3], FLUX_OK, "done(3) got FLUX_OK");
    flux_dispatcher_destroy(rec.d);
}

/* flux.h: successful calls leave flux_last_error() unchanged -- one that
 * ran a queued payload whose dispatch failed too, whether its done read the
 * failure or there was no done. (It used to be left describing the queued
 * failure.) */
static int enqueue_without_done(void *ctx, const void *payload)
{
    (void)ctx;
    const item *it = payload;
    if (it->id == 1)
        return flux_enqueue(rec.d, &items[2], NULL, NULL) == FLUX_OK ? 0 : 99;
    return 1; /* payload 2 fails */
}

static void test_success_that_ran_a_failure_leaves_last_error(void)
{
    recorder_init();
    logger a;
    add_logger(&a, 1);
    a.enqueue_next_until = 2;
    a.fail_on = 2;
    EXPECT_STATUS(flux_unregister(rec.d, 4242), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_int(rec.done_status[2], FLUX_ERR_CALLBACK_FAILED, "done: the queued payload failed");
    has_substr(rec.done_error[2], "returned 1", "done: flux_last_error() described the failure while done ran");
    has_substr(flux_last_error(), "4242", "done: after the successful call, flux_last_error() is the earlier error");
    is_uint(flux_last_error_token(), 4242, "done: and flux_last_error_token() its token");
    flux_dispatcher_destroy(rec.d);

    recorder_init();
    flux_token t;
    REQUIRE(flux_register(rec.d, enqueue_without_done, NULL, NULL, &t) == FLUX_OK);
    EXPECT_STATUS(flux_unregister(rec.d, 4343), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    has_substr(flux_last_error(), "4343", "no done: after the successful call, flux_last_error() is the earlier error");
    is_uint(flux_last_error_token(), 4343, "no done: and flux_last_error_token() its token");
    flux_dispatcher_destroy(rec.d);
}

static void test_outer_failure_is_returned_and_the_queue_still_runs(void)
{
    recorder_init();
    logger a;
    add_logger(&a, 1);
    a.enqueue_next_until = 2;
    a.fail_on = 1;
    EXPECT_STATUS(flux_enqueue(rec.d, &items[1], done_fn, CTX(1)), FLUX_ERR_CALLBACK_FAILED);
    has_substr(flux_last_error(), "returned 1", "the message is the outer payload's");
    is_trace(&rec.log, INTS(101, -2001, 201, -1002), "done(1) failed, then the queued payload ran");
    is_int(rec.done_calls[1], 1, "done(1) once");
    is_int(rec.done_calls[2], 1, "done(2) once");

    /* The outer call returns its own status, not the queue's. */
    memset(&rec.log, 0, sizeof rec.log);
    a.fail_on = 4;
    a.enqueue_next_until = 4;
    EXPECT_OK(flux_dispatch(rec.d, &items[3]));
    is_trace(&rec.log, INTS(301, 401, -2004), "the queued failure goes to its done only");
    flux_dispatcher_destroy(rec.d);
}

/* ---- errors of the call itself -------------------------------------------- */

static void test_null_dispatcher(void)
{
    memset(&rec, 0, sizeof rec);
    EXPECT_STATUS(flux_enqueue(NULL, &items[7], done_fn, CTX(7)), FLUX_ERR_INVALID_ARGUMENT);
    is_int(rec.done_calls[7], 1, "done ran at once");
    is_int(rec.done_status[7], FLUX_ERR_INVALID_ARGUMENT, "with the error");
    EXPECT_STATUS(flux_enqueue(NULL, &items[7], NULL, CTX(7)), FLUX_ERR_INVALID_ARGUMENT);
}

static flux_status enqueue_during_destroy;
static void destroy_that_enqueues(void *ctx)
{
    (void)ctx;
    enqueue_during_destroy = flux_enqueue(rec.d, &items[9], done_fn, CTX(9));
}

static void test_dispatcher_being_destroyed(void)
{
    recorder_init();
    flux_token t;
    REQUIRE(flux_register(rec.d, logger_cb, &(logger){.which = 1}, destroy_that_enqueues, &t) == FLUX_OK);
    EXPECT_OK(flux_dispatcher_destroy(rec.d));
    is_int(enqueue_during_destroy, FLUX_ERR_INVALID_ARGUMENT, "enqueue on a dying dispatcher is refused");
    is_int(rec.done_calls[9], 1, "done ran at once");
    is_int(rec.done_status[9], FLUX_ERR_INVALID_ARGUMENT, "with FLUX_ERR_INVALID_ARGUMENT");
    is_trace(&rec.log, INTS(-2009), "nothing was dispatched: only done ran");
}

/* A destroy run at the end of a dispatch is outside it: enqueue dispatches. */
static flux_status enqueue_from_destroy_status;
static void destroy_enqueues_after_dispatch(void *ctx)
{
    (void)ctx;
    enqueue_from_destroy_status = flux_enqueue(rec.d, &items[8], done_fn, CTX(8));
}
static int unregister_self_cb(void *ctx, const void *payload)
{
    (void)payload;
    flux_unregister(rec.d, *(flux_token *)ctx);
    return 0;
}

static void test_destroy_at_the_end_runs_outside_the_dispatch(void)
{
    recorder_init();
    logger a;
    add_logger(&a, 1);
    flux_token self;
    REQUIRE(flux_register(rec.d, unregister_self_cb, &self, destroy_enqueues_after_dispatch, &self) == FLUX_OK);
    a.enqueue_next_until = 2;
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    is_int(enqueue_from_destroy_status, FLUX_OK, "the destroy's enqueue found the dispatcher idle");
    is_trace(&rec.log, INTS(101, 201, -1002, 801, -1008),
             "destroy runs after the queue drained, outside the dispatch");
    flux_dispatcher_destroy(rec.d);
}

/* ---- done's context: each call's own, on every path ---------------------- */

/* One payload, many calls, each with a context of its own: done must get
 * the context of the call it reports, not one found by the payload. */
typedef struct ctx_log {
    void *context[16];
    flux_status status[16];
    int n;
} ctx_log;
static ctx_log clog;
static char tags[16];

static void ctx_done(void *context, void *payload, flux_status status)
{
    (void)payload;
    if (clog.n < 16) {
        clog.context[clog.n] = context;
        clog.status[clog.n] = status;
    }
    clog.n++;
}

/* Payload 1 enqueues the shared payload 3 twice, tags 1 and 2; the
 * shared payload fails when its call had tag 2 (fail_next says which). */
static int fail_next;
static int ctx_cb(void *ctx, const void *payload)
{
    flux_dispatcher *d = ctx;
    const item *it = payload;
    if (it->id == 1) {
        flux_enqueue(d, &items[3], ctx_done, &tags[1]);
        flux_enqueue(d, &items[3], ctx_done, &tags[2]);
    }
    if (it->id == 3)
        return fail_next++ == 1; /* the second dispatch of payload 3 fails */
    return it->id == 5;
}

static flux_dispatcher *dying;
static void enqueue_on_dying(void *ctx)
{
    (void)ctx;
    flux_enqueue(dying, &items[3], ctx_done, &tags[6]);
}

static void test_done_gets_the_context_of_its_call(void)
{
    memset(&clog, 0, sizeof clog);
    fail_next = 0;
    flux_dispatcher *d = flux_dispatcher_create();
    flux_token t;
    REQUIRE(flux_register(d, ctx_cb, d, NULL, &t) == FLUX_OK);

    EXPECT_OK(flux_enqueue(d, &items[1], ctx_done, &tags[0]));
    is_int(clog.n, 3, "three calls, three dones");
    ok(clog.context[0] == &tags[0] && clog.status[0] == FLUX_OK, "idle, dispatched at once: its own context");
    ok(clog.context[1] == &tags[1] && clog.status[1] == FLUX_OK, "queued, dispatched with success: its own context");
    ok(clog.context[2] == &tags[2] && clog.status[2] == FLUX_ERR_CALLBACK_FAILED,
       "queued, the same payload, its dispatch failed: its own context");

    EXPECT_STATUS(flux_enqueue(d, &items[5], ctx_done, &tags[3]), FLUX_ERR_CALLBACK_FAILED);
    ok(clog.n == 4 && clog.context[3] == &tags[3] && clog.status[3] == FLUX_ERR_CALLBACK_FAILED,
       "idle, its own dispatch failed: its own context");

    EXPECT_STATUS(flux_enqueue(NULL, &items[3], ctx_done, &tags[4]), FLUX_ERR_INVALID_ARGUMENT);
    ok(clog.n == 5 && clog.context[4] == &tags[4] && clog.status[4] == FLUX_ERR_INVALID_ARGUMENT,
       "refused, NULL dispatcher: its own context, at once");

    EXPECT_STATUS(flux_enqueue(NULL, &items[3], NULL, &tags[5]), FLUX_ERR_INVALID_ARGUMENT);
    is_int(clog.n, 5, "a NULL done with a context: nothing to run");

    dying = d;
    flux_token t2;
    REQUIRE(flux_register(d, ctx_cb, d, enqueue_on_dying, &t2) == FLUX_OK);
    EXPECT_OK(flux_dispatcher_destroy(d));
    ok(clog.n == 6 && clog.context[5] == &tags[6] && clog.status[5] == FLUX_ERR_INVALID_ARGUMENT,
       "refused, the dispatcher is being destroyed: its own context, at once");
}

/* ---- threads ---------------------------------------------------------- */

/* Other threads enqueue while a callback holds the dispatch open: each call
 * returns at once (the callback waits for all of them to have returned). */
typedef struct enqueuer {
    int first, count;
    flag go, returned;
    flux_status status;
    pthread_t thread;
} enqueuer;

static void *enqueuer_main(void *arg)
{
    enqueuer *e = arg;
    REQUIRE(flag_wait(&e->go, 60));
    e->status = FLUX_OK;
    for (int i = e->first; i < e->first + e->count; i++) {
        flux_status s = flux_enqueue(rec.d, &items[i], done_fn, CTX(i));
        if (s != FLUX_OK)
            e->status = s;
    }
    flag_set(&e->returned);
    return NULL;
}

static enqueuer workers[3];
static int holder_cb(void *ctx, const void *payload)
{
    (void)ctx;
    const item *it = payload;
    trace_push(&rec.log, 100 * it->id);
    if (it->id == 1) {
        for (int w = 0; w < 3; w++)
            flag_set(&workers[w].go);
        for (int w = 0; w < 3; w++)
            if (!flag_wait(&workers[w].returned, prompt_seconds()))
                return 7; /* an enqueue blocked: fail the dispatch */
    }
    return 0;
}

static void test_enqueue_from_other_threads_never_blocks(void)
{
    recorder_init();
    flux_token t;
    REQUIRE(flux_register(rec.d, holder_cb, NULL, NULL, &t) == FLUX_OK);
    for (int w = 0; w < 3; w++) {
        workers[w].first = 10 + 5 * w;
        workers[w].count = 5;
        flag_init(&workers[w].go);
        flag_init(&workers[w].returned);
        REQUIRE(pthread_create(&workers[w].thread, NULL, enqueuer_main, &workers[w]) == 0);
    }
    EXPECT_OK(flux_dispatch(rec.d, &items[1]));
    for (int w = 0; w < 3; w++) {
        pthread_join(workers[w].thread, NULL);
        is_int(workers[w].status, FLUX_OK, "worker %d: every enqueue returned FLUX_OK at once", w);
        flag_fini(&workers[w].go);
        flag_fini(&workers[w].returned);
    }
    int all_once = 1;
    for (int i = 10; i < 25; i++)
        all_once &= rec.done_calls[i] == 1;
    ok(all_once, "the dispatching thread ran every queued payload, done once each, before returning");
    /* Per worker, FIFO: its payloads in the order it enqueued them. */
    for (int w = 0; w < 3; w++) {
        int last = -1, in_order = 1;
        for (size_t k = 0; k < rec.log.n; k++) {
            int v = rec.log.ev[k];
            if (v >= 100 * workers[w].first && v < 100 * (workers[w].first + workers[w].count)) {
                in_order &= v / 100 > last;
                last = v / 100;
            }
        }
        ok(in_order, "worker %d's payloads were dispatched in the order it enqueued them", w);
    }
    flux_dispatcher_destroy(rec.d);
}

/* The race: threads enqueue as fast as they can while the main thread keeps
 * dispatching, so many enqueues land just as a dispatch ends. Every payload
 * must be dispatched exactly once and see done exactly once. */
#define RACE_THREADS 3
static atomic_int race_seen[RACE_THREADS][4096];
static atomic_int race_done[RACE_THREADS][4096];
static atomic_int race_bad_status;
typedef struct race_payload {
    int thread, index;
} race_payload;
static race_payload race_payloads[RACE_THREADS][4096];
static atomic_int race_running;

static int race_cb(void *ctx, const void *payload)
{
    (void)ctx;
    const race_payload *p = payload;
    if (p != NULL)
        atomic_fetch_add(&race_seen[p->thread][p->index], 1);
    return 0;
}

static void race_done_fn(void *context, void *payload, flux_status status)
{
    race_payload *p = payload;
    if (status != FLUX_OK || context != p)
        atomic_fetch_add(&race_bad_status, 1);
    atomic_fetch_add(&race_done[p->thread][p->index], 1);
}

typedef struct race_worker {
    flux_dispatcher *d;
    int thread, count;
    pthread_t handle;
} race_worker;

static void *race_main(void *arg)
{
    race_worker *w = arg;
    for (int i = 0; i < w->count; i++) {
        race_payloads[w->thread][i] = (race_payload){w->thread, i};
        race_payload *p = &race_payloads[w->thread][i];
        if (flux_enqueue(w->d, p, race_done_fn, p) != FLUX_OK)
            atomic_fetch_add(&race_bad_status, 1);
    }
    atomic_fetch_sub(&race_running, 1);
    return NULL;
}

static void test_enqueue_racing_the_end_of_dispatches(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_token t;
    REQUIRE(flux_register(d, race_cb, NULL, NULL, &t) == FLUX_OK);
    int count = (int)tap_scale(4000);
    race_worker w[RACE_THREADS];
    atomic_store(&race_running, RACE_THREADS);
    atomic_store(&race_bad_status, 0);
    for (int i = 0; i < RACE_THREADS; i++) {
        w[i] = (race_worker){d, i, count, 0};
        REQUIRE(pthread_create(&w[i].handle, NULL, race_main, &w[i]) == 0);
    }
    long dispatches = 0;
    while (atomic_load(&race_running) > 0) {
        if (flux_dispatch(d, NULL) != FLUX_OK)
            atomic_fetch_add(&race_bad_status, 1);
        dispatches++;
    }
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(w[i].handle, NULL);
    int lost = 0, twice = 0, done_wrong = 0;
    for (int i = 0; i < RACE_THREADS; i++)
        for (int k = 0; k < count; k++) {
            int seen = atomic_load(&race_seen[i][k]);
            lost += seen == 0;
            twice += seen > 1;
            done_wrong += atomic_load(&race_done[i][k]) != 1;
        }
    diag("%d payloads from %d threads, %ld dispatches on the main thread", RACE_THREADS * count,
         RACE_THREADS, dispatches);
    is_int(lost, 0, "no payload was lost");
    is_int(twice, 0, "no payload was dispatched twice");
    is_int(done_wrong, 0, "done ran exactly once for every payload");
    is_int(atomic_load(&race_bad_status), 0, "every call returned FLUX_OK; every done got FLUX_OK and its context");
    ok(!flux_is_dispatching(d), "idle at the end");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

int main(void)
{
    tap_init();
    RUN(test_idle_enqueue_dispatches_at_once);
    RUN(test_null_payload);
    RUN(test_enqueue_from_callback_is_fifo_after_the_dispatch);
    RUN(test_fifo_order_of_several);
    RUN(test_fifo_when_the_queue_grows_while_wrapped);
    RUN(test_wait_for_works_in_queued_dispatches);
    RUN(test_callback_registered_meanwhile_takes_part);
    RUN(test_done_sees_a_dispatching_dispatcher);
    RUN(test_try_dispatch_runs_the_queue);
    RUN(test_failing_queued_dispatch_does_not_stop_the_queue);
    RUN(test_success_that_ran_a_failure_leaves_last_error);
    RUN(test_outer_failure_is_returned_and_the_queue_still_runs);
    RUN(test_null_dispatcher);
    RUN(test_dispatcher_being_destroyed);
    RUN(test_destroy_at_the_end_runs_outside_the_dispatch);
    RUN(test_done_gets_the_context_of_its_call);
    RUN(test_enqueue_from_other_threads_never_blocks);
    RUN(test_enqueue_racing_the_end_of_dispatches);
    is_int(wrong_context, 0, "every done of every test above got the context of its own call");
    return tap_done();
}
