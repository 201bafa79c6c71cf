/*
 * test-three.c -- three threads on one dispatcher, and two (or three)
 * dispatchers used together.
 *
 * Part 1, a seeded randomized stress: three threads share one dispatcher
 * and each, at random, dispatches, try-dispatches, enqueues, registers and
 * unregisters callbacks, creates and destroys stores, adds and removes
 * listeners, creates and releases groups, and sets the observer; callbacks
 * unregister later callbacks from inside the dispatch, and enqueue. Our own
 * bookkeeping checks what flux.h promises:
 *   - every destroy (registration, listener, store, group, observer context)
 *     and every done runs exactly once, and every state is released once;
 *   - a callback, reduce, listener or group function present for a whole
 *     dispatch runs exactly once in it (never twice, never skipped);
 *   - a callback unregistered from inside a callback is not called later
 *     in that dispatch;
 *   - every status is one its doc block lists, with a message on failure;
 *   - a payload enqueued from inside a callback has its done run before the
 *     dispatching call returns on that thread;
 *   - an observer's begin/end hooks are balanced when its context goes.
 * Leaks are left to ASan (make check-address) and valgrind (check-memory).
 * Iterations: FLUX_TEST_THREE_ITERS (default 20000 per thread), scaled down
 * under valgrind; the seed: FLUX_TEST_SEED.
 *
 * Part 2: several dispatchers -- a payload shared by two dispatches at once,
 * a callback dispatching another dispatcher and that one's callback waiting
 * for the first's tokens, listeners across dispatchers, a group mixing
 * dispatchers, destroying a dispatcher from another's callback, tokens of
 * one dispatcher passed to another, a ring of three dispatchers on three
 * threads.
 */
#include <sched.h>
#include <stdint.h>

#include "helpers.h"

/* ======================================================================== */
/* Part 1: the stress                                                       */
/* ======================================================================== */

enum { NTHREADS = 3, MAX_REGS = 4, MAX_STORES = 2, MAX_LISTENERS = 3, EPOCHS_KEPT = 512 };

static flux_dispatcher *D;
static atomic_long epoch;            /* dispatches started (the tracker's count) */
static atomic_int stop_now;

/* Violations, each counted; all must stay 0. */
static atomic_long v_twice_in_one_dispatch, v_skipped, v_double_destroy, v_bad_status,
    v_no_message, v_called_after_removal, v_inner_done_late, v_observer_unbalanced,
    v_bad_done, v_after_destroy;
static atomic_long states_made, states_released, destroys_expected, destroys_seen,
    dones_expected, dones_seen, checked_intervals, inner_enqueues;
static char first_problem[512];
static atomic_int have_problem;

static void problem(atomic_long *counter, const char *fmt, ...) TAP_PRINTF(2, 3);
static void problem(atomic_long *counter, const char *fmt, ...)
{
    atomic_fetch_add(counter, 1);
    if (atomic_exchange(&have_problem, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_problem, sizeof first_problem, fmt, ap);
        va_end(ap);
    }
}

/* A status check: st must be one of the allowed ones; a failure leaves a
 * message naming the function. Guards "every status is one its doc block
 * lists" and "leaves a message naming the function". */
static void check_status(const char *fn, flux_status st, unsigned allowed_mask)
{
    if (!(allowed_mask & (1u << st)))
        problem(&v_bad_status, "%s returned %s: %s", fn, flux_status_name(st), flux_last_error());
    if (st != FLUX_OK) {
        const char *e = flux_last_error();
        if (e == NULL || strncmp(e, fn, strlen(fn)) != 0)
            problem(&v_no_message, "%s failed with %s but flux_last_error() is \"%s\"", fn,
                    flux_status_name(st), e ? e : "(NULL)");
    }
}
#define BIT(s) (1u << (s))

/* One piece of user code whose calls are counted per dispatch: a callback,
 * a store (its reduce), a listener or a group function. It took part from
 * `from` (the epoch read once its create/add returned) and left at `until`
 * (read before its removal was asked; 0 while present): every dispatch
 * strictly between the two must have called it exactly once. */
enum kind { K_CALLBACK, K_STORE, K_LISTENER, K_GROUP, K_VICTIM };
static const char *const kind_names[] = {"callback", "store", "listener", "group", "victim"};

typedef struct rec {
    unsigned magic;
    enum kind kind;
    atomic_long from, until;
    atomic_int destroyed;
    atomic_int removed;       /* victims: set once their unregister returned */
    long last;                /* last epoch it ran in (the dispatcher serializes) */
    long n;
    long epochs[EPOCHS_KEPT];
} rec;
#define REC_MAGIC 0x7e3ee3u

static rec *rec_new(enum kind kind)
{
    rec *r = calloc(1, sizeof *r);
    REQUIRE(r != NULL);
    r->magic = REC_MAGIC;
    r->kind = kind;
    atomic_fetch_add(&destroys_expected, 1);
    return r;
}

static void rec_ran(rec *r)
{
    if (r->magic != REC_MAGIC || atomic_load(&r->destroyed)) {
        problem(&v_after_destroy, "a %s ran after its destroy", kind_names[r->kind]);
        return;
    }
    long e = atomic_load(&epoch);
    if (e == r->last)   /* guards "once per dispatch" */
        problem(&v_twice_in_one_dispatch, "a %s ran twice in dispatch %ld", kind_names[r->kind], e);
    r->last = e;
    if (r->n < EPOCHS_KEPT)
        r->epochs[r->n] = e;
    r->n++;
}

/* Runs at the record's destroy, after its last call: checks the interval. */
static void rec_destroy(void *context)
{
    rec *r = context;
    if (r->magic != REC_MAGIC || atomic_exchange(&r->destroyed, 1) != 0) {
        problem(&v_double_destroy, "a %s was destroyed twice", kind_names[r->kind]);
        return;
    }
    atomic_fetch_add(&destroys_seen, 1);
    long from = atomic_load(&r->from), until = atomic_load(&r->until);
    /* `from` was read once the create/add returned, but the dispatch that
     * counts as from + 1 may have fixed its participants before that (its
     * tracker runs after its start, and after the observer's begin): only
     * dispatches from + 2 on surely started afterwards. Dispatch until - 1
     * ended before `until` was read. */
    if (until > from + 1 && r->n <= EPOCHS_KEPT) {
        long got = 0;
        for (long i = 0; i < r->n; i++)
            got += r->epochs[i] > from + 1 && r->epochs[i] < until;
        if (got != until - from - 2)
            problem(&v_skipped, "a %s present from dispatch %ld to %ld ran in %ld of the %ld between",
                    kind_names[r->kind], from + 1, until, got, until - from - 2);
        atomic_fetch_add(&checked_intervals, 1);
    }
    r->magic = 0;
    free(r);
}

/* ---- user code ---------------------------------------------------------- */

static const int payload_plain = 0, payload_inner = 1, payload_queued = 2;

static _Thread_local int inner_pending;   /* inner enqueues whose done has not run */

static void inner_done(void *context, void *p, flux_status status)
{
    (void)p;
    if (status != FLUX_OK)
        problem(&v_bad_done, "an inner enqueue's done got %s", flux_status_name(status));
    int *pending = context;
    if (pending != &inner_pending)   /* guards: done runs on the thread that enqueued it here */
        problem(&v_inner_done_late, "an inner enqueue's done ran on another thread");
    else
        inner_pending--;
    atomic_fetch_add(&dones_seen, 1);
}

/* Registered first: counts dispatches; on payload_inner, enqueues. */
static int tracker_cb(void *context, const void *p)
{
    (void)context;
    atomic_fetch_add(&epoch, 1);
    if (p == &payload_inner) {
        inner_pending++;
        atomic_fetch_add(&dones_expected, 1);
        atomic_fetch_add(&inner_enqueues, 1);
        flux_status st = flux_enqueue(D, (void *)&payload_queued, inner_done, &inner_pending);
        check_status("flux_enqueue", st, BIT(FLUX_OK));
    }
    return 0;
}

static int rec_cb(void *context, const void *p)
{
    (void)p;
    rec *r = context;
    if (r->kind == K_VICTIM && atomic_load(&r->removed))
        problem(&v_called_after_removal, "a callback unregistered from inside this dispatch, on this thread, ran");
    rec_ran(r);
    return 0;
}

static int reduce(void *context, void *state, const void *p, void **next)
{
    (void)p;
    rec_ran(context);
    int *n = malloc(sizeof *n);
    if (n == NULL)
        return 1;
    *n = *(int *)state + 1;
    atomic_fetch_add(&states_made, 1);
    *next = n;
    return 0;
}

static void release_state(void *context, void *state)
{
    (void)context;
    atomic_fetch_add(&states_released, 1);
    free(state);
}

static void rec_listener(void *context) { rec_ran(context); }

/* Observer: counts its own hooks; at its destroy they must balance. */
typedef struct obs {
    unsigned magic;
    atomic_long begins, ends, cb_begins, cb_ends;
} obs;

static void obs_begin(void *c, const void *p) { (void)p; atomic_fetch_add(&((obs *)c)->begins, 1); }
static void obs_end(void *c, const void *p, flux_status st)
{
    (void)p;
    if (st != FLUX_OK)
        problem(&v_bad_status, "dispatch_end with %s", flux_status_name(st));
    atomic_fetch_add(&((obs *)c)->ends, 1);
}
static void obs_cb_begin(void *c, flux_token t) { (void)t; atomic_fetch_add(&((obs *)c)->cb_begins, 1); }
static void obs_cb_end(void *c, flux_token t, int r) { (void)t; (void)r; atomic_fetch_add(&((obs *)c)->cb_ends, 1); }
static const flux_observer obs_hooks = {FLUX_OBSERVER_VERSION, obs_begin, obs_end, obs_cb_begin, obs_cb_end, NULL};

static void obs_destroy(void *context)
{
    obs *o = context;
    if (o->magic != REC_MAGIC) {
        problem(&v_double_destroy, "an observer context was destroyed twice");
        return;
    }
    o->magic = 0;
    atomic_fetch_add(&destroys_seen, 1);
    /* Guards "a context replaced during a dispatch is destroyed when the
     * outermost call returns, outside the dispatch": no hook pending. */
    if (atomic_load(&o->begins) != atomic_load(&o->ends) || atomic_load(&o->cb_begins) != atomic_load(&o->cb_ends))
        problem(&v_observer_unbalanced, "an observer destroyed with %ld/%ld dispatch and %ld/%ld callback hooks",
                atomic_load(&o->begins), atomic_load(&o->ends), atomic_load(&o->cb_begins),
                atomic_load(&o->cb_ends));
    free(o);
}

static void enqueue_done(void *context, void *p, flux_status status)
{
    (void)p;
    atomic_int *once = context;
    if (atomic_fetch_add(once, 1) != 0)   /* guards "done runs exactly once" */
        problem(&v_bad_done, "a done ran twice");
    if (status != FLUX_OK)
        problem(&v_bad_done, "an enqueue's done got %s", flux_status_name(status));
    atomic_fetch_add(&dones_seen, 1);
}

/* ---- a thread's own objects ------------------------------------------------ */

typedef struct listener_slot {
    flux_listener_id id;
    rec *r;
} listener_slot;

typedef struct store_slot {
    flux_store *s;
    rec *r;
    listener_slot listeners[MAX_LISTENERS];
} store_slot;

typedef struct worker {
    int index;
    unsigned seed;
    long iters;
    flux_token regs[MAX_REGS];
    rec *reg_recs[MAX_REGS];
    store_slot stores[MAX_STORES];
    flux_store_group *group;
    rec *group_rec;
    /* The killer callback (registered at start) and its victim, which the
     * killer unregisters from inside a dispatch on this thread. */
    flux_token killer, victim;
    rec *victim_rec;
    atomic_int *dones;         /* one cell per enqueue this thread may make */
    long ndones;
    pthread_t self;
    long ops[16];
} worker;

static worker workers[NTHREADS];
static pthread_barrier_t start_line, finish_line;

static unsigned rnd(worker *w) { return (unsigned)rand_r(&w->seed); }

static void set_until(rec *r) { atomic_store(&r->until, atomic_load(&epoch)); }

/* The killer: on its owner's thread, unregisters the victim (registered
 * after it, so later in this dispatch) half the time. */
static int killer_cb(void *context, const void *p)
{
    (void)p;
    worker *w = context;
    if (!pthread_equal(pthread_self(), w->self) || w->victim == 0 || (rnd(w) & 1))
        return 0;
    rec *r = w->victim_rec;
    set_until(r);
    flux_status st = flux_unregister(D, w->victim);
    check_status("flux_unregister", st, BIT(FLUX_OK));
    atomic_store(&r->removed, 1);
    w->victim = 0;
    w->victim_rec = NULL;
    return 0;
}

static void after_dispatching_call(void)
{
    if (inner_pending != 0)   /* guards: queued payloads run before the call returns */
        problem(&v_inner_done_late, "%d inner enqueue(s) not done when the dispatching call returned", inner_pending);
    inner_pending = 0;
}

static void op_register(worker *w)
{
    int k = (int)(rnd(w) % MAX_REGS);
    if (w->regs[k] != 0) {
        set_until(w->reg_recs[k]);
        check_status("flux_unregister", flux_unregister(D, w->regs[k]), BIT(FLUX_OK));
        w->regs[k] = 0;
        return;
    }
    rec *r = rec_new(K_CALLBACK);
    flux_status st = flux_register(D, rec_cb, r, rec_destroy, &w->regs[k]);
    check_status("flux_register", st, BIT(FLUX_OK));
    if (st == FLUX_OK) {
        atomic_store(&r->from, atomic_load(&epoch));
        w->reg_recs[k] = r;
    }
}

static void op_victim(worker *w)
{
    if (w->victim != 0)
        return;
    rec *r = rec_new(K_VICTIM);
    flux_status st = flux_register(D, rec_cb, r, rec_destroy, &w->victim);
    check_status("flux_register", st, BIT(FLUX_OK));
    if (st == FLUX_OK) {
        atomic_store(&r->from, atomic_load(&epoch));
        w->victim_rec = r;
    }
}

static bool group_has(worker *w, int k)
{
    (void)k;
    return w->group != NULL;   /* a group covers every store of its thread */
}

static void op_group(worker *w)
{
    if (w->group != NULL) {
        set_until(w->group_rec);
        check_status("flux_store_group_release", flux_store_group_release(w->group), BIT(FLUX_OK));
        w->group = NULL;
        w->group_rec = NULL;
        return;
    }
    flux_store *list[MAX_STORES];
    size_t n = 0;
    for (int k = 0; k < MAX_STORES; k++)
        if (w->stores[k].s != NULL)
            list[n++] = w->stores[k].s;
    if (n == 0)
        return;
    rec *r = rec_new(K_GROUP);
    flux_status st = flux_store_group_create(list, n, rec_listener, r, rec_destroy, &w->group);
    check_status("flux_store_group_create", st, BIT(FLUX_OK));
    if (st == FLUX_OK) {
        atomic_store(&r->from, atomic_load(&epoch));
        w->group_rec = r;
    }
}

static void store_destroy_slot(worker *w, store_slot *ss, bool must)
{
    /* The listeners and the store leave with the destroy: read the epoch
     * before asking. */
    for (;;) {
        long e = atomic_load(&epoch);
        atomic_store(&ss->r->until, e);
        for (int l = 0; l < MAX_LISTENERS; l++)
            if (ss->listeners[l].r != NULL)
                atomic_store(&ss->listeners[l].r->until, e);
        flux_status st = flux_store_destroy(ss->s);
        /* A group released before: its stores no longer count it
         * ("its stores stop counting it when this returns"), so
         * INVALID_ARGUMENT is not allowed here. Another thread's dispatch:
         * ALREADY_DISPATCHING. */
        check_status("flux_store_destroy", st, BIT(FLUX_OK) | BIT(FLUX_ERR_ALREADY_DISPATCHING));
        if (st == FLUX_OK)
            break;
        /* Still present: the interval goes on. */
        atomic_store(&ss->r->until, 0);
        for (int l = 0; l < MAX_LISTENERS; l++)
            if (ss->listeners[l].r != NULL)
                atomic_store(&ss->listeners[l].r->until, 0);
        if (!must)
            return;
        sched_yield();
    }
    memset(ss, 0, sizeof *ss);
    (void)w;
}

static void op_store(worker *w)
{
    int k = (int)(rnd(w) % MAX_STORES);
    store_slot *ss = &w->stores[k];
    if (ss->s != NULL) {
        if (group_has(w, k))
            op_group(w);   /* release it first */
        store_destroy_slot(w, ss, false);
        return;
    }
    int *state = malloc(sizeof *state);
    REQUIRE(state != NULL);
    *state = 0;
    atomic_fetch_add(&states_made, 1);
    rec *r = rec_new(K_STORE);
    flux_status st = flux_store_create(D, state, reduce, NULL, release_state, r, rec_destroy, &ss->s);
    check_status("flux_store_create", st, BIT(FLUX_OK));
    if (st == FLUX_OK) {
        atomic_store(&r->from, atomic_load(&epoch));
        ss->r = r;
    }
}

static void op_listener(worker *w)
{
    store_slot *ss = &w->stores[rnd(w) % MAX_STORES];
    if (ss->s == NULL)
        return;
    listener_slot *ls = &ss->listeners[rnd(w) % MAX_LISTENERS];
    if (ls->r != NULL) {
        set_until(ls->r);
        check_status("flux_store_remove_listener", flux_store_remove_listener(ss->s, ls->id), BIT(FLUX_OK));
        ls->r = NULL;
        ls->id = 0;
        return;
    }
    rec *r = rec_new(K_LISTENER);
    flux_status st = flux_store_add_listener(ss->s, rec_listener, r, rec_destroy, &ls->id);
    check_status("flux_store_add_listener", st, BIT(FLUX_OK));
    if (st == FLUX_OK) {
        atomic_store(&r->from, atomic_load(&epoch));
        ls->r = r;
    }
}

static void op_observer(worker *w)
{
    if (rnd(w) % 4 == 0) {
        check_status("flux_dispatcher_set_observer", flux_dispatcher_set_observer(D, NULL, NULL, NULL),
                     BIT(FLUX_OK));
        return;
    }
    obs *o = calloc(1, sizeof *o);
    REQUIRE(o != NULL);
    o->magic = REC_MAGIC;
    atomic_fetch_add(&destroys_expected, 1);
    check_status("flux_dispatcher_set_observer", flux_dispatcher_set_observer(D, &obs_hooks, o, obs_destroy),
                 BIT(FLUX_OK));
}

static void op_enqueue(worker *w)
{
    if (w->ndones <= 0)
        return;
    atomic_int *cell = &w->dones[--w->ndones];
    atomic_fetch_add(&dones_expected, 1);
    flux_status st = flux_enqueue(D, (void *)&payload_plain, enqueue_done, cell);
    check_status("flux_enqueue", st, BIT(FLUX_OK));
    after_dispatching_call();
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    w->self = pthread_self();
    pthread_barrier_wait(&start_line);
    for (long i = 0; i < w->iters && !atomic_load(&stop_now); i++) {
        unsigned op = rnd(w) % 12;
        w->ops[op]++;
        switch (op) {
        case 0: case 1:
            check_status("flux_dispatch",
                         flux_dispatch(D, rnd(w) % 4 == 0 ? &payload_inner : &payload_plain), BIT(FLUX_OK));
            after_dispatching_call();
            break;
        case 2:
            check_status("flux_try_dispatch", flux_try_dispatch(D, &payload_inner),
                         BIT(FLUX_OK) | BIT(FLUX_ERR_ALREADY_DISPATCHING));
            after_dispatching_call();
            break;
        case 3: op_enqueue(w); break;
        case 4: case 5: op_register(w); break;
        case 6: op_victim(w); break;
        case 7: op_store(w); break;
        case 8: case 9: op_listener(w); break;
        case 10: op_group(w); break;
        case 11: op_observer(w); break;
        }
    }
    pthread_barrier_wait(&finish_line);
    return NULL;
}

/* Tears a worker's objects down; no dispatch runs any more. */
static void worker_cleanup(worker *w)
{
    if (w->group != NULL)
        op_group(w);
    for (int k = 0; k < MAX_STORES; k++)
        if (w->stores[k].s != NULL)
            store_destroy_slot(w, &w->stores[k], true);
    for (int k = 0; k < MAX_REGS; k++)
        if (w->regs[k] != 0) {
            set_until(w->reg_recs[k]);
            check_status("flux_unregister", flux_unregister(D, w->regs[k]), BIT(FLUX_OK));
        }
    if (w->victim != 0) {
        set_until(w->victim_rec);
        check_status("flux_unregister", flux_unregister(D, w->victim), BIT(FLUX_OK));
    }
    check_status("flux_unregister", flux_unregister(D, w->killer), BIT(FLUX_OK));
}

static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    return v != NULL && atol(v) > 0 ? atol(v) : fallback;
}

static void test_three_threads_stress(void)
{
    unsigned seed = (unsigned)env_long("FLUX_TEST_SEED", 20261127);
    long iters = tap_scale(env_long("FLUX_TEST_THREE_ITERS", 20000));
    diag("seed %u, %ld operations per thread (FLUX_TEST_SEED, FLUX_TEST_THREE_ITERS)", seed, iters);
    D = flux_dispatcher_create();
    REQUIRE(D != NULL);
    flux_token tracker;
    REQUIRE(flux_register(D, tracker_cb, NULL, NULL, &tracker) == FLUX_OK);
    REQUIRE(pthread_barrier_init(&start_line, NULL, NTHREADS) == 0);
    REQUIRE(pthread_barrier_init(&finish_line, NULL, NTHREADS) == 0);
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        worker *w = &workers[t];
        memset(w, 0, sizeof *w);
        w->index = t;
        w->seed = seed * 31u + (unsigned)t;
        w->iters = iters;
        w->ndones = iters;
        w->dones = calloc((size_t)iters, sizeof *w->dones);
        REQUIRE(w->dones != NULL);
        REQUIRE(flux_register(D, killer_cb, w, NULL, &w->killer) == FLUX_OK);
    }
    for (int t = 0; t < NTHREADS; t++)
        REQUIRE(pthread_create(&th[t], NULL, worker_main, &workers[t]) == 0);
    for (int t = 0; t < NTHREADS; t++)
        REQUIRE(pthread_join(th[t], NULL) == 0);
    for (int t = 0; t < NTHREADS; t++)
        worker_cleanup(&workers[t]);
    check_status("flux_dispatcher_set_observer", flux_dispatcher_set_observer(D, NULL, NULL, NULL), BIT(FLUX_OK));
    EXPECT_OK(flux_dispatcher_destroy(D));
    D = NULL;

    long enq = 0;
    for (int t = 0; t < NTHREADS; t++) {
        for (long i = workers[t].ndones; i < iters; i++) {
            enq++;
            if (atomic_load(&workers[t].dones[i]) != 1)
                problem(&v_bad_done, "an enqueue's done ran %d times", atomic_load(&workers[t].dones[i]));
        }
        free(workers[t].dones);
    }
    diag("%ld dispatches, %ld enqueues from the threads, %ld from inside callbacks, %ld intervals checked",
         atomic_load(&epoch), enq, atomic_load(&inner_enqueues), atomic_load(&checked_intervals));
    if (atomic_load(&have_problem))
        diag("first problem: %s", first_problem);
    is_int(atomic_load(&v_bad_status), 0, "every status is one the function's doc block lists");
    is_int(atomic_load(&v_no_message), 0, "every failure leaves a message naming the function");
    is_int(atomic_load(&v_double_destroy), 0, "no destroy ran twice");
    is_int(atomic_load(&destroys_seen), atomic_load(&destroys_expected),
           "every context handed over was destroyed exactly once (%ld)", atomic_load(&destroys_expected));
    is_int(atomic_load(&v_after_destroy), 0, "nothing ran after its destroy");
    is_int(atomic_load(&v_twice_in_one_dispatch), 0, "nothing ran twice in one dispatch");
    is_int(atomic_load(&v_skipped), 0, "everything present for a whole dispatch ran in it");
    ok(atomic_load(&checked_intervals) > 0, "and some intervals were checked");
    is_int(atomic_load(&v_called_after_removal), 0,
           "a callback unregistered from inside the dispatch on its thread did not run later in it");
    is_int(atomic_load(&v_inner_done_late), 0, "payloads enqueued inside a dispatch were done before it returned");
    is_int(atomic_load(&v_bad_done), 0, "every done ran once, with FLUX_OK");
    is_int(atomic_load(&dones_seen), atomic_load(&dones_expected), "as many dones as enqueues");
    is_int(atomic_load(&v_observer_unbalanced), 0, "every observer's hooks were balanced when it went");
    is_int(atomic_load(&states_released), atomic_load(&states_made), "every state was released once");
}

/* ======================================================================== */
/* Part 2: several dispatchers                                              */
/* ======================================================================== */

static const int shared_payload = 42;

static int quiet_cb(void *context, const void *p) { (void)context; (void)p; return 0; }

typedef struct cross {
    flux_dispatcher *self, *other;
    flux_token tokens[4];
    atomic_int calls;
    const void *seen;
    pthread_barrier_t *meet;
    flux_status inner;
    flux_status inner2;
    char message[256];
    int dispatching_both;
    flux_token error_token;
} cross;

static int meet_cb(void *context, const void *p)
{
    cross *c = context;
    c->seen = p;
    atomic_fetch_add(&c->calls, 1);
    pthread_barrier_wait(c->meet);   /* both dispatches run at once */
    return 0;
}

static void *dispatch_main(void *arg)
{
    cross *c = arg;
    c->inner = flux_dispatch(c->self, &shared_payload);
    return NULL;
}

/* One payload dispatched by two dispatchers at once, from two threads:
 * guards "the payload stays the caller's; callbacks borrow it" and that
 * dispatchers are independent (the barrier inside the callbacks would hang
 * if one dispatch waited for the other). */
static void test_shared_payload_two_dispatchers(void)
{
    pthread_barrier_t meet;
    REQUIRE(pthread_barrier_init(&meet, NULL, 2) == 0);
    cross a = {.self = flux_dispatcher_create(), .meet = &meet, .inner = -1};
    cross b = {.self = flux_dispatcher_create(), .meet = &meet, .inner = -1};
    REQUIRE(a.self && b.self);
    EXPECT_OK(flux_register(a.self, meet_cb, &a, NULL, &a.tokens[0]));
    EXPECT_OK(flux_register(b.self, meet_cb, &b, NULL, &b.tokens[0]));
    pthread_t ta, tb;
    REQUIRE(pthread_create(&ta, NULL, dispatch_main, &a) == 0);
    REQUIRE(pthread_create(&tb, NULL, dispatch_main, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    is_int(a.inner, FLUX_OK, "A's dispatch of the shared payload");
    is_int(b.inner, FLUX_OK, "B's dispatch of the shared payload, at the same time");
    ok(a.seen == &shared_payload && b.seen == &shared_payload, "both callbacks saw the very payload");
    is_int(atomic_load(&a.calls) + atomic_load(&b.calls), 2, "each callback ran once");
    EXPECT_OK(flux_dispatcher_destroy(a.self));
    EXPECT_OK(flux_dispatcher_destroy(b.self));
    pthread_barrier_destroy(&meet);
}

/* A's first callback dispatches B; B's callback waits for A's tokens. */
static cross *ca, *cb_;
static atomic_int a_later_calls, b_calls;

static int a_first_cb(void *context, const void *p)
{
    cross *c = context;
    (void)p;
    atomic_fetch_add(&c->calls, 1);
    c->inner = flux_dispatch(c->other, &shared_payload);
    snprintf(c->message, sizeof c->message, "%s", c->inner ? flux_last_error() : "");
    return 0;
}

static int a_later_cb(void *context, const void *p)
{
    (void)context; (void)p;
    atomic_fetch_add(&a_later_calls, 1);
    return 0;
}

static int b_cb(void *context, const void *p)
{
    cross *c = context;
    (void)p;
    atomic_fetch_add(&b_calls, 1);
    c->dispatching_both = flux_is_dispatching(ca->self) && flux_is_dispatching(c->self);
    /* A's running callback (the one that dispatched B) is further up this
     * thread's stack: FLUX_ERR_CIRCULAR, never a deadlock. */
    c->inner = flux_wait_for(ca->self, &ca->tokens[0], 1);
    c->error_token = flux_last_error_token();
    /* A's later callback has not run yet in A's dispatch: it runs now, and
     * A's loop must not run it again ("each at most once"). */
    c->inner2 = flux_wait_for(ca->self, &ca->tokens[1], 1);
    /* flux_dispatch(A) from here: A is dispatching on this thread. */
    flux_status again = flux_dispatch(ca->self, NULL);
    if (again != FLUX_ERR_ALREADY_DISPATCHING)
        c->inner2 = 100 + again;
    return 0;
}

static void test_callback_dispatches_other_dispatcher(void)
{
    cross a = {.self = flux_dispatcher_create(), .inner = -1, .inner2 = -1};
    cross b = {.self = flux_dispatcher_create(), .inner = -1, .inner2 = -1};
    REQUIRE(a.self && b.self);
    a.other = b.self;
    b.other = a.self;
    ca = &a;
    cb_ = &b;
    atomic_store(&a_later_calls, 0);
    atomic_store(&b_calls, 0);
    EXPECT_OK(flux_register(a.self, a_first_cb, &a, NULL, &a.tokens[0]));
    EXPECT_OK(flux_register(a.self, a_later_cb, NULL, NULL, &a.tokens[1]));
    EXPECT_OK(flux_register(b.self, b_cb, &b, NULL, &b.tokens[0]));
    EXPECT_OK(flux_dispatch(a.self, &shared_payload));
    is_int(a.inner, FLUX_OK, "A's callback dispatches B: allowed (\"a different dispatcher ... is fine\")");
    is_int(atomic_load(&b_calls), 1, "B's callback ran once, nested");
    ok(b.dispatching_both, "inside B's callback both A and B are dispatching");
    is_int(b.inner, FLUX_ERR_CIRCULAR, "B's callback waiting for A's running callback: circular");
    is_uint(b.error_token, a.tokens[0], "naming A's running callback's token");
    is_int(b.inner2, FLUX_OK, "B's callback waiting for A's later callback: runs it");
    is_int(atomic_load(&a_later_calls), 1, "and A's own loop does not run it again");
    EXPECT_OK(flux_dispatcher_destroy(a.self));
    EXPECT_OK(flux_dispatcher_destroy(b.self));
}

/* A store of A whose listener dispatches B and adds a listener to a store of
 * B; the added one first runs in B's next emit. */
static flux_store *sa, *sb;
static atomic_int b_listener_calls, added_listener_calls, added_destroys;
static flux_status listener_dispatch_status, listener_add_status;

static int bump_reduce(void *context, void *state, const void *p, void **next)
{
    (void)context; (void)p;
    *next = (void *)((uintptr_t)state + 1);
    return 0;
}

static void added_listener(void *context) { (void)context; atomic_fetch_add(&added_listener_calls, 1); }
static void added_destroy(void *context) { (void)context; atomic_fetch_add(&added_destroys, 1); }
static void b_listener(void *context) { (void)context; atomic_fetch_add(&b_listener_calls, 1); }

static void a_listener(void *context)
{
    flux_dispatcher *b = context;
    listener_dispatch_status = flux_dispatch(b, NULL);
    flux_listener_id id = 0;
    listener_add_status = flux_store_add_listener(sb, added_listener, NULL, added_destroy, &id);
}

static void test_listener_across_dispatchers(void)
{
    flux_dispatcher *a = flux_dispatcher_create(), *b = flux_dispatcher_create();
    REQUIRE(a && b);
    EXPECT_OK(flux_store_create(a, (void *)1, bump_reduce, NULL, NULL, NULL, NULL, &sa));
    EXPECT_OK(flux_store_create(b, (void *)1, bump_reduce, NULL, NULL, NULL, NULL, &sb));
    flux_listener_id id;
    EXPECT_OK(flux_store_add_listener(sa, a_listener, b, NULL, &id));
    EXPECT_OK(flux_store_add_listener(sb, b_listener, NULL, NULL, &id));
    atomic_store(&b_listener_calls, 0);
    atomic_store(&added_listener_calls, 0);
    atomic_store(&added_destroys, 0);
    EXPECT_OK(flux_dispatch(a, NULL));
    is_int(listener_dispatch_status, FLUX_OK, "A's listener dispatches B");
    is_int(atomic_load(&b_listener_calls), 1, "B's store emitted once, inside A's listener");
    is_int(listener_add_status, FLUX_OK, "A's listener adds a listener to B's store");
    is_int(atomic_load(&added_listener_calls), 0, "B's dispatch had ended: the added listener has not run");
    ok(flux_store_state(sb) == (void *)2, "B's store changed once");
    EXPECT_OK(flux_dispatch(b, NULL));
    is_int(atomic_load(&added_listener_calls), 1, "the listener A's listener added runs in B's next emit");
    EXPECT_OK(flux_store_destroy(sa));
    EXPECT_OK(flux_store_destroy(sb));
    is_int(atomic_load(&added_destroys), 1, "the added listener is destroyed once, with B's store");
    EXPECT_OK(flux_dispatcher_destroy(a));
    EXPECT_OK(flux_dispatcher_destroy(b));
}

/* A group over stores of two dispatchers: refused (flux.h: "the stores are
 * not all on one dispatcher"), its context destroyed once, *out NULL. */
static atomic_int group_destroys;
static void count_group_destroy(void *context) { (void)context; atomic_fetch_add(&group_destroys, 1); }
static void nop_listener(void *context) { (void)context; }

static void test_group_mixing_dispatchers(void)
{
    flux_dispatcher *a = flux_dispatcher_create(), *b = flux_dispatcher_create();
    REQUIRE(a && b);
    flux_store *s[2];
    EXPECT_OK(flux_store_create(a, NULL, bump_reduce, NULL, NULL, NULL, NULL, &s[0]));
    EXPECT_OK(flux_store_create(b, NULL, bump_reduce, NULL, NULL, NULL, NULL, &s[1]));
    flux_store_group *g = (flux_store_group *)&g;
    atomic_store(&group_destroys, 0);
    EXPECT_STATUS(flux_store_group_create(s, 2, nop_listener, NULL, count_group_destroy, &g),
                  FLUX_ERR_INVALID_ARGUMENT);
    has_prefix(flux_last_error(), "flux_store_group_create", "the message names the function");
    ok(g == NULL, "*out is NULL");
    is_int(atomic_load(&group_destroys), 1, "the context was destroyed once");
    /* Nothing changed: both stores can go, both dispatchers dispatch. */
    EXPECT_OK(flux_dispatch(a, NULL));
    EXPECT_OK(flux_dispatch(b, NULL));
    EXPECT_OK(flux_store_destroy(s[0]));
    EXPECT_OK(flux_store_destroy(s[1]));
    EXPECT_OK(flux_dispatcher_destroy(a));
    EXPECT_OK(flux_dispatcher_destroy(b));
}

/* Destroying B from inside A's callback: B is idle and not A, so it goes
 * (its destroys run there); with a store, refused; while B dispatches on
 * this thread (A dispatched from B's callback), ALREADY_DISPATCHING. */
static flux_dispatcher *victim_d;
static flux_status destroy_from_a;
static atomic_int b_context_destroys;

static int destroy_other_cb(void *context, const void *p)
{
    (void)context; (void)p;
    destroy_from_a = flux_dispatcher_destroy(victim_d);
    if (destroy_from_a == FLUX_OK)
        victim_d = NULL;
    return 0;
}

static void count_b_destroy(void *context) { (void)context; atomic_fetch_add(&b_context_destroys, 1); }

static flux_dispatcher *outer_a;
static flux_status nested_a_status;
static int dispatch_a_cb(void *context, const void *p)
{
    (void)context; (void)p;
    nested_a_status = flux_dispatch(outer_a, NULL);
    return 0;
}

static void test_destroy_other_dispatcher_from_callback(void)
{
    flux_dispatcher *a = flux_dispatcher_create();
    victim_d = flux_dispatcher_create();
    REQUIRE(a && victim_d);
    flux_token t;
    atomic_store(&b_context_destroys, 0);
    EXPECT_OK(flux_register(victim_d, quiet_cb, NULL, count_b_destroy, &t));
    EXPECT_OK(flux_register(a, destroy_other_cb, NULL, NULL, &t));

    /* B has a store: refused, nothing changed. */
    flux_store *s;
    EXPECT_OK(flux_store_create(victim_d, NULL, bump_reduce, NULL, NULL, NULL, NULL, &s));
    destroy_from_a = -1;
    EXPECT_OK(flux_dispatch(a, NULL));
    is_int(destroy_from_a, FLUX_ERR_INVALID_ARGUMENT, "destroying B (which has a store) from A's callback: refused");
    ok(victim_d != NULL, "B is still there");
    EXPECT_OK(flux_dispatch(victim_d, NULL));
    EXPECT_OK(flux_store_destroy(s));

    /* B dispatching on this thread, A dispatched from B's callback. */
    outer_a = a;
    flux_token tb;
    EXPECT_OK(flux_register(victim_d, dispatch_a_cb, NULL, NULL, &tb));
    destroy_from_a = -1;
    nested_a_status = -1;
    EXPECT_OK(flux_dispatch(victim_d, NULL));
    is_int(nested_a_status, FLUX_OK, "B's callback dispatches A");
    is_int(destroy_from_a, FLUX_ERR_ALREADY_DISPATCHING,
           "A's callback destroying B, which is dispatching further up: refused");
    ok(victim_d != NULL, "B is still there");
    is_int(atomic_load(&b_context_destroys), 0, "and none of its destroys ran");
    EXPECT_OK(flux_unregister(victim_d, tb));

    /* B idle, no stores: destroyed from inside A's callback. */
    destroy_from_a = -1;
    EXPECT_OK(flux_dispatch(a, NULL));
    is_int(destroy_from_a, FLUX_OK, "destroying idle B from A's callback");
    is_int(atomic_load(&b_context_destroys), 1, "B's registration destroyed once");
    ok(victim_d == NULL, "B is gone");
    EXPECT_OK(flux_dispatcher_destroy(a));
}

/* Tokens carry no dispatcher: A's token passed to B's functions is read as
 * B's token of that number. Never a crash; the status is one the doc block
 * lists for that token in B. */
static flux_dispatcher *tb_d;
static flux_token foreign;
static flux_status foreign_wait;
static flux_token foreign_wait_token;
static int foreign_wait_cb(void *context, const void *p)
{
    (void)context; (void)p;
    foreign_wait = flux_wait_for(tb_d, &foreign, 1);
    foreign_wait_token = flux_last_error_token();
    return 0;
}

static void test_foreign_tokens(void)
{
    flux_dispatcher *a = flux_dispatcher_create();
    tb_d = flux_dispatcher_create();
    REQUIRE(a && tb_d);
    flux_token ta[6], tb[2];
    for (int i = 0; i < 6; i++)
        EXPECT_OK(flux_register(a, quiet_cb, NULL, NULL, &ta[i]));
    EXPECT_OK(flux_register(tb_d, foreign_wait_cb, NULL, NULL, &tb[0]));
    EXPECT_OK(flux_register(tb_d, quiet_cb, NULL, NULL, &tb[1]));
    /* A's 6th token: B never issued it. */
    EXPECT_STATUS(flux_unregister(tb_d, ta[5]), FLUX_ERR_UNKNOWN_TOKEN);
    is_uint(flux_last_error_token(), ta[5], "the rejected token is named");
    foreign = ta[5];
    foreign_wait = -1;
    EXPECT_OK(flux_dispatch(tb_d, NULL));
    is_int(foreign_wait, FLUX_ERR_UNKNOWN_TOKEN, "B's callback waiting for A's token B never issued");
    is_uint(foreign_wait_token, ta[5], "naming it");
    /* A's token whose number B issued too: it is B's (the documented limit). */
    foreign = ta[0];   /* == tb[0]: the waiter itself */
    REQUIRE(ta[0] == tb[0]);
    EXPECT_OK(flux_dispatch(tb_d, NULL));
    is_int(foreign_wait, FLUX_ERR_CIRCULAR, "A's token 1 in B's wait is B's token 1, the waiter: circular");
    /* A's store token in flux_unregister(B): B never issued that number. */
    flux_store *s;
    EXPECT_OK(flux_store_create(a, NULL, bump_reduce, NULL, NULL, NULL, NULL, &s));
    EXPECT_STATUS(flux_unregister(a, flux_store_token(s)), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_unregister(tb_d, flux_store_token(s)), FLUX_ERR_UNKNOWN_TOKEN);
    /* flux_store_has_changed / emit_change with A's store while only B
     * dispatches on this thread: not A's dispatch. */
    EXPECT_STATUS(flux_store_emit_change(s), FLUX_ERR_NOT_DISPATCHING);
    EXPECT_OK(flux_store_destroy(s));
    EXPECT_OK(flux_dispatcher_destroy(a));
    EXPECT_OK(flux_dispatcher_destroy(tb_d));
}

/* A listener of A dispatching B, whose listener calls
 * flux_store_listener_fail(A): it is inside a listener of A (further up),
 * so A's listener fails -- B's dispatch is not touched. */
static flux_dispatcher *lf_a, *lf_b;
static flux_status lf_inner, lf_fail;
static void lf_b_listener(void *context) { (void)context; lf_fail = flux_store_listener_fail(lf_a, 5); }
static void lf_a_listener(void *context) { (void)context; lf_inner = flux_dispatch(lf_b, NULL); }

static void test_listener_fail_across_dispatchers(void)
{
    lf_a = flux_dispatcher_create();
    lf_b = flux_dispatcher_create();
    REQUIRE(lf_a && lf_b);
    flux_store *s1, *s2;
    flux_listener_id id;
    EXPECT_OK(flux_store_create(lf_a, NULL, bump_reduce, NULL, NULL, NULL, NULL, &s1));
    EXPECT_OK(flux_store_create(lf_b, NULL, bump_reduce, NULL, NULL, NULL, NULL, &s2));
    EXPECT_OK(flux_store_add_listener(s1, lf_a_listener, NULL, NULL, &id));
    EXPECT_OK(flux_store_add_listener(s2, lf_b_listener, NULL, NULL, &id));
    lf_inner = lf_fail = -1;
    EXPECT_STATUS(flux_dispatch(lf_a, NULL), FLUX_ERR_CALLBACK_FAILED);
    is_uint(flux_last_error_token(), flux_store_token(s1), "A's failure names A's store");
    is_int(lf_fail, FLUX_OK, "flux_store_listener_fail(A) from B's listener inside A's listener");
    is_int(lf_inner, FLUX_OK, "B's dispatch is not failed by it");
    /* Directly from B's listener, A not dispatching: refused. */
    lf_fail = -1;
    EXPECT_OK(flux_dispatch(lf_b, NULL));
    is_int(lf_fail, FLUX_ERR_NOT_DISPATCHING, "flux_store_listener_fail(A) from B's listener alone");
    EXPECT_OK(flux_store_destroy(s1));
    EXPECT_OK(flux_store_destroy(s2));
    EXPECT_OK(flux_dispatcher_destroy(lf_a));
    EXPECT_OK(flux_dispatcher_destroy(lf_b));
}

/* Three dispatchers, three threads, each thread's callback dispatching the
 * next dispatcher: a ring. flux.h ("Threading": "or more, in a ring"): the
 * dispatch whose wait would close the cycle fails with
 * FLUX_ERR_ALREADY_DISPATCHING; the others go on. Without the check this
 * hangs (the watchdog fails it). */
typedef struct ring {
    flux_dispatcher *self, *next;
    pthread_barrier_t *all_in;
    flux_status outer, inner;
    char message[256];
} ring;

static const int ring_outer = 1;

static int ring_cb(void *context, const void *p)
{
    ring *r = context;
    if (p != &ring_outer)
        return 0;   /* the previous thread's inner dispatch */
    pthread_barrier_wait(r->all_in);
    r->inner = flux_dispatch(r->next, NULL);
    snprintf(r->message, sizeof r->message, "%s", r->inner ? flux_last_error() : "");
    return 0;
}

static void *ring_main(void *arg)
{
    ring *r = arg;
    r->outer = flux_dispatch(r->self, &ring_outer);
    return NULL;
}

static void test_ring_of_three(void)
{
    pthread_barrier_t all_in;
    REQUIRE(pthread_barrier_init(&all_in, NULL, 3) == 0);
    ring r[3];
    flux_dispatcher *d[3];
    for (int i = 0; i < 3; i++)
        REQUIRE((d[i] = flux_dispatcher_create()) != NULL);
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (ring){.self = d[i], .next = d[(i + 1) % 3], .all_in = &all_in, .outer = -1, .inner = -1};
        flux_token t;
        EXPECT_OK(flux_register(d[i], ring_cb, &r[i], NULL, &t));
    }
    for (int i = 0; i < 3; i++)
        REQUIRE(pthread_create(&th[i], NULL, ring_main, &r[i]) == 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    int refused = 0, went_on = 0;
    for (int i = 0; i < 3; i++) {
        is_int(r[i].outer, FLUX_OK, "thread %d's own dispatch", i);
        refused += r[i].inner == FLUX_ERR_ALREADY_DISPATCHING;
        went_on += r[i].inner == FLUX_OK;
        if (r[i].inner == FLUX_ERR_ALREADY_DISPATCHING)
            has_substr(r[i].message, "deadlock", "the refusal says waiting would deadlock");
    }
    ok(refused == 1 && went_on == 2, "one inner dispatch of the ring is refused, two run (%d, %d, %d)",
       r[0].inner, r[1].inner, r[2].inner);
    for (int i = 0; i < 3; i++)
        EXPECT_OK(flux_dispatcher_destroy(d[i]));
    pthread_barrier_destroy(&all_in);
}

/* A's callback enqueues on idle B: B's payload runs at once, on this thread,
 * its done before flux_enqueue returns; on busy A (itself) it is queued
 * and done before flux_dispatch(A) returns. */
static int cross_done_calls;
static flux_status cross_done_status;
static flux_dispatcher *eq_a, *eq_b;
static int cross_done_before_return;

static void cross_done(void *context, void *p, flux_status status)
{
    (void)context; (void)p;
    cross_done_calls++;
    cross_done_status = status;
}

static int enqueue_other_cb(void *context, const void *p)
{
    (void)context;
    if (p != &shared_payload)
        return 0;
    flux_status st = flux_enqueue(eq_b, (void *)&shared_payload, cross_done, NULL);
    cross_done_before_return = st == FLUX_OK && cross_done_calls == 1;
    flux_enqueue(eq_a, (void *)&payload_plain, cross_done, NULL);
    return 0;
}

static void test_enqueue_across_dispatchers(void)
{
    eq_a = flux_dispatcher_create();
    eq_b = flux_dispatcher_create();
    REQUIRE(eq_a && eq_b);
    flux_token t;
    EXPECT_OK(flux_register(eq_a, enqueue_other_cb, NULL, NULL, &t));
    EXPECT_OK(flux_register(eq_b, quiet_cb, NULL, NULL, &t));
    cross_done_calls = 0;
    EXPECT_OK(flux_dispatch(eq_a, &shared_payload));
    ok(cross_done_before_return, "enqueue on idle B from A's callback: dispatched and done at once");
    is_int(cross_done_calls, 2, "and A's own queued payload done before flux_dispatch(A) returned");
    is_int(cross_done_status, FLUX_OK, "with FLUX_OK");
    EXPECT_OK(flux_dispatcher_destroy(eq_a));
    EXPECT_OK(flux_dispatcher_destroy(eq_b));
}

int main(void)
{
    tap_init();
    RUN(test_shared_payload_two_dispatchers);
    RUN(test_callback_dispatches_other_dispatcher);
    RUN(test_listener_across_dispatchers);
    RUN(test_group_mixing_dispatchers);
    RUN(test_destroy_other_dispatcher_from_callback);
    RUN(test_foreign_tokens);
    RUN(test_listener_fail_across_dispatchers);
    RUN(test_enqueue_across_dispatchers);
    RUN(test_ring_of_three);
    RUN(test_three_threads_stress);
    return tap_done();
}
