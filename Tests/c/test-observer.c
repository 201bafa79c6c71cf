/*
 * test-observer.c -- flux_dispatcher_set_observer(): events in their exact
 * order (dispatch_begin; callback_begin/end around each callback, a
 * wait_for's callbacks nested inside the waiter's pair; wait_for reported on
 * entry with the list as given, whatever it returns; dispatch_end with the
 * final status), for chains, failures and aborts; set or cleared during a
 * dispatch; the context handed over and destroyed exactly once on every
 * path; circular errors naming the whole cycle.
 *
 * Events are written as one string: "D" dispatch_begin (payload id), "b3"
 * callback_begin of token 3, "e3=0" its end with the result, "w1[3,2]" a
 * wait_for by token 1 of tokens 3 and 2, "E=6" dispatch_end with its status.
 */
#include "helpers.h"

typedef struct events {
    char text[2048];
    int destroyed;
} events;

static void put(events *ev, const char *fmt, ...) TAP_PRINTF(2, 3);
static void put(events *ev, const char *fmt, ...)
{
    size_t used = strlen(ev->text);
    if (used && used + 1 < sizeof ev->text)
        ev->text[used++] = ' ', ev->text[used] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->text + used, sizeof ev->text - used, fmt, ap);
    va_end(ap);
}

static void on_dispatch_begin(void *c, const void *payload)
{
    put(c, "D%d", payload ? *(const int *)payload : 0);
}
static void on_dispatch_end(void *c, const void *payload, flux_status status)
{
    (void)payload;
    put(c, "E=%d", (int)status);
}
static void on_callback_begin(void *c, flux_token t) { put(c, "b%llu", (unsigned long long)t); }
static void on_callback_end(void *c, flux_token t, int result)
{
    put(c, "e%llu=%d", (unsigned long long)t, result);
}
static void on_wait_for(void *c, flux_token waiter, const flux_token *tokens, size_t count)
{
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < count && used + 24 < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%llu", i ? "," : "",
                                 (unsigned long long)tokens[i]);
    put(c, "w%llu[%s]", (unsigned long long)waiter, list);
}
static void on_destroy(void *c) { ((events *)c)->destroyed++; }

static const flux_observer hooks = {
    FLUX_OBSERVER_VERSION, on_dispatch_begin, on_dispatch_end,
    on_callback_begin, on_callback_end, on_wait_for,
};

static const int one = 1, two = 2;

/* Three nodes with tokens 1, 2, 3 on a fresh dispatcher. */
static flux_dispatcher *three(node n[3])
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    for (int i = 0; i < 3; i++) {
        node_init(&n[i], i + 1, d, NULL);
        REQUIRE(node_register(&n[i]) == FLUX_OK);
        REQUIRE(n[i].token == (flux_token)(i + 1));
    }
    return d;
}

static void test_events_of_a_chain_with_wait_for(void)
{
    node n[3];
    flux_dispatcher *d = three(n);
    events ev = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &ev, on_destroy));
    node_wait_on(&n[0], 1, (flux_token[]){3});  /* 1 waits for 3 */
    node_wait_on(&n[2], 1, (flux_token[]){2});  /* 3 waits for 2 */
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(ev.text, "D1 b1 w1[3] b3 w3[2] b2 e2=0 e3=0 e1=0 E=0",
           "begin; each callback's pair; waits reported on entry, their callbacks nested; end");
    is_int(ev.destroyed, 0, "the context is not destroyed while set");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(ev.destroyed, 1, "destroying the dispatcher destroys the observer's context once");
}

static void test_failures_and_aborts(void)
{
    node n[3];
    flux_dispatcher *d = three(n);
    events ev = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &ev, on_destroy));
    node_wait_on(&n[0], 1, (flux_token[]){2});
    n[1].fail_times = 1;
    n[1].fail_value = 5;
    EXPECT_STATUS(flux_dispatch(d, &two), FLUX_ERR_CALLBACK_FAILED);
    is_str(ev.text, "D2 b1 w1[2] b2 e2=5 e1=0 E=6",
           "the failing callback's result; its waiter ends; nothing more runs; end with the status");

    /* A wait reported whatever it returns: unknown token, circular, several. */
    ev.text[0] = '\0';
    node_wait_on(&n[0], 2, (flux_token[]){3, 99});
    node_wait_on(&n[2], 1, (flux_token[]){3});
    EXPECT_OK(flux_dispatch(d, &one));
    is_int(n[0].wait_status, FLUX_ERR_UNKNOWN_TOKEN, "token 99 is unknown");
    is_int(n[2].wait_status, FLUX_ERR_CIRCULAR, "3 waiting on itself is circular");
    is_str(ev.text, "D1 b1 w1[3,99] e1=0 b2 e2=0 b3 w3[3] e3=0 E=0",
           "failing waits are reported on entry with the list as given");
    flux_dispatcher_destroy(d);
}

/* A callback that dispatches (refused: reports nothing) and sets things. */
typedef struct setter {
    flux_dispatcher *d;
    events *next;            /* set this observer from the callback */
    bool clear;
    flux_status dispatch_status;
    int destroyed_seen;      /* the current observer's destroy count, inside */
    events *current;
} setter;

static int setter_cb(void *ctx, const void *payload)
{
    (void)payload;
    setter *s = ctx;
    s->dispatch_status = flux_dispatch(s->d, &two);
    if (s->next)
        flux_dispatcher_set_observer(s->d, &hooks, s->next, on_destroy);
    if (s->clear)
        flux_dispatcher_set_observer(s->d, NULL, NULL, NULL);
    if (s->current)
        s->destroyed_seen = s->current->destroyed;
    return 0;
}

static void test_set_during_a_dispatch_takes_effect_from_the_next(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    events first = {0}, second = {0};
    setter s = {d, &second, false, FLUX_OK, -1, &first};
    flux_token t, t2;
    REQUIRE(flux_register(d, setter_cb, &s, NULL, &t) == FLUX_OK);
    node n;
    node_init(&n, 2, d, NULL);
    REQUIRE(node_register(&n) == FLUX_OK);
    t2 = n.token;
    (void)t2;
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &first, on_destroy));
    EXPECT_OK(flux_dispatch(d, &one));
    is_int(s.dispatch_status, FLUX_ERR_ALREADY_DISPATCHING, "the nested dispatch was refused");
    is_str(first.text, "D1 b1 e1=0 b2 e2=0 E=0",
           "the running dispatch keeps its observer to the end; the refused dispatch reports nothing");
    is_str(second.text, "", "the new observer saw nothing of it");
    is_int(s.destroyed_seen, 0, "the replaced context is not destroyed inside the dispatch");
    is_int(first.destroyed, 1, "it is destroyed once the outermost call returned");

    s.next = NULL;
    s.current = &second;
    s.clear = true;
    EXPECT_OK(flux_dispatch(d, &two));
    is_str(second.text, "D2 b1 e1=0 b2 e2=0 E=0", "the next dispatch reports to the new observer");
    is_int(s.destroyed_seen, 0, "cleared during a dispatch: not destroyed inside it");
    is_int(second.destroyed, 1, "destroyed when the call returned");
    s.clear = false;
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(second.text, "D2 b1 e1=0 b2 e2=0 E=0", "cleared: nothing more is reported");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(first.destroyed + second.destroyed, 2, "each context destroyed exactly once");
}

/* Queued dispatches report their own begin/end, each seeing the observer as
 * it is when it begins. */
static events *queued_observer;
static int enqueue_and_set_cb(void *ctx, const void *payload)
{
    flux_dispatcher *d = ctx;
    if (*(const int *)payload == 1) {
        flux_enqueue(d, (void *)&two, NULL, NULL);
        flux_dispatcher_set_observer(d, &hooks, queued_observer, on_destroy);
    }
    return 0;
}

static void test_queued_dispatches_see_the_observer_as_they_begin(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    events first = {0}, second = {0};
    queued_observer = &second;
    flux_token t;
    REQUIRE(flux_register(d, enqueue_and_set_cb, d, NULL, &t) == FLUX_OK);
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &first, on_destroy));
    EXPECT_OK(flux_enqueue(d, (void *)&one, NULL, NULL));
    is_str(first.text, "D1 b1 e1=0 E=0", "the first observer saw the outer dispatch");
    is_str(second.text, "D2 b1 e1=0 E=0", "the queued dispatch reported to the observer set meanwhile");
    is_int(first.destroyed, 1, "the replaced one was destroyed after the call");
    flux_dispatcher_destroy(d);
    is_int(second.destroyed, 1, "the last one with the dispatcher");
}

static void test_context_ownership_on_every_path(void)
{
    events ev = {0};
    EXPECT_STATUS(flux_dispatcher_set_observer(NULL, &hooks, &ev, on_destroy), FLUX_ERR_INVALID_ARGUMENT);
    is_int(ev.destroyed, 1, "NULL dispatcher: destroyed at once");

    flux_dispatcher *d = flux_dispatcher_create();
    flux_observer bad = hooks;
    bad.version = 2;
    EXPECT_STATUS(flux_dispatcher_set_observer(d, &bad, &ev, on_destroy), FLUX_ERR_INVALID_ARGUMENT);
    is_int(ev.destroyed, 2, "bad version: destroyed at once");
    has_number(flux_last_error(), 2, "the message names the version given");

    EXPECT_OK(flux_dispatcher_set_observer(d, NULL, &ev, on_destroy));
    is_int(ev.destroyed, 3, "NULL hooks with a context: destroyed at once");

    events a = {0}, b = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &a, on_destroy));
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &b, on_destroy));
    is_int(a.destroyed, 1, "replaced while idle: destroyed before the call returns");
    EXPECT_OK(flux_dispatcher_set_observer(d, NULL, NULL, NULL));
    is_int(b.destroyed, 1, "cleared while idle: destroyed before the call returns");
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &b, NULL));
    EXPECT_OK(flux_dispatcher_set_observer(d, NULL, NULL, NULL));
    is_int(b.destroyed, 1, "a NULL destroy is fine");

    /* Partial hooks: any may be NULL. */
    flux_observer only_ends = {FLUX_OBSERVER_VERSION, NULL, on_dispatch_end, NULL, NULL, NULL};
    events c = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &only_ends, &c, on_destroy));
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(c.text, "E=0", "only the hooks given are called");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(c.destroyed, 1, "destroyed with the dispatcher");
}

static flux_status set_during_destroy;
static events dying_ev;
static void destroy_that_sets_observer(void *ctx)
{
    set_during_destroy = flux_dispatcher_set_observer(((node *)ctx)->d, &hooks, &dying_ev, on_destroy);
}

static void test_dying_dispatcher(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    flux_token t;
    node n;
    node_init(&n, 1, d, NULL);
    REQUIRE(flux_register(d, node_cb, &n, NULL, &t) == FLUX_OK);
    flux_token t2;
    REQUIRE(flux_register(d, node_cb, &n, destroy_that_sets_observer, &t2) == FLUX_OK);
    /* destroy_that_sets_observer gets &n as ctx: use d through n. */
    (void)t2;
    memset(&dying_ev, 0, sizeof dying_ev);
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(set_during_destroy, FLUX_ERR_INVALID_ARGUMENT, "a dying dispatcher refuses an observer");
    is_int(dying_ev.destroyed, 1, "and destroys its context at once");
}

/* Set from another thread while a dispatch is held open: never waits, and
 * takes effect from the next dispatch. */
typedef struct holder {
    flag entered, release;
    int calls;
} holder;

static int holder_cb(void *ctx, const void *payload)
{
    (void)payload;
    holder *h = ctx;
    if (h->calls++ == 0) {
        flag_set(&h->entered);
        REQUIRE(flag_wait(&h->release, 60));
    }
    return 0;
}

typedef struct dispatch_thread {
    flux_dispatcher *d;
    flux_status status;
} dispatch_thread;

static void *dispatch_main(void *arg)
{
    dispatch_thread *t = arg;
    t->status = flux_dispatch(t->d, &one);
    return NULL;
}

static void test_set_from_another_thread_during_a_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    holder h = {0};
    flag_init(&h.entered);
    flag_init(&h.release);
    flux_token t;
    REQUIRE(flux_register(d, holder_cb, &h, NULL, &t) == FLUX_OK);
    events first = {0}, second = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &first, on_destroy));
    dispatch_thread dt = {d, (flux_status)-1};
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, dispatch_main, &dt) == 0);
    REQUIRE(flag_wait(&h.entered, 60));
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &second, on_destroy));
    is_int(first.destroyed, 0, "the running dispatch's observer is not destroyed under it");
    flag_set(&h.release);
    pthread_join(thread, NULL);
    is_int(dt.status, FLUX_OK, "the held dispatch finished");
    is_str(first.text, "D1 b1 e1=0 E=0", "it reported to the observer it began with");
    is_int(first.destroyed, 1, "the replaced context was destroyed when it returned");
    EXPECT_OK(flux_dispatch(d, &two));
    is_str(second.text, "D2 b1 e1=0 E=0", "the next dispatch reports to the new one");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(second.destroyed, 1, "destroyed with the dispatcher");
    flag_fini(&h.entered);
    flag_fini(&h.release);
}

/* ---- cycles named in full ---------------------------------------------- */

static void test_circular_names_the_whole_cycle(void)
{
    node n[3];
    flux_dispatcher *d = three(n);
    node_wait_on(&n[0], 1, (flux_token[]){2});  /* 1 waits for 2 */
    node_wait_on(&n[1], 1, (flux_token[]){3});  /* 2 waits for 3 */
    node_wait_on(&n[2], 1, (flux_token[]){1});  /* 3 waits for 1: the cycle */
    EXPECT_OK(flux_dispatch(d, &one));
    is_int(n[2].wait_status, FLUX_ERR_CIRCULAR, "the closing wait is circular");
    is_str(n[2].wait_error,
           "flux_wait_for: circular dependency: token 3 waits for 1, which is waiting for 2, "
           "which is waiting for 3",
           "the message names every token of the cycle");

    /* A shorter cycle inside a longer chain: only the cycle is named. */
    node_wait_on(&n[2], 2, (flux_token[]){1, 2});  /* several tokens: the first bad one */
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(n[2].wait_error,
           "flux_wait_for: circular dependency: token 3 waits for 1, which is waiting for 2, "
           "which is waiting for 3",
           "the many-token path names it too");
    node_wait_on(&n[2], 1, (flux_token[]){2});
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(n[2].wait_error, "flux_wait_for: circular dependency: token 3 waits for 2, which is waiting for 3",
           "a cycle of two inside a chain of three");
    node_wait_on(&n[2], 1, (flux_token[]){3});
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(n[2].wait_error, "flux_wait_for: circular dependency: token 3 waits for itself",
           "waiting on yourself");
    flux_dispatcher_destroy(d);
}

static void test_circular_names_the_cycle_under_an_observer(void)
{
    node n[3];
    flux_dispatcher *d = three(n);
    events ev = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &ev, NULL));
    node_wait_on(&n[0], 1, (flux_token[]){2});
    node_wait_on(&n[1], 1, (flux_token[]){1});
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(n[1].wait_error, "flux_wait_for: circular dependency: token 2 waits for 1, which is waiting for 2",
           "the observed path names the cycle too");
    is_str(ev.text, "D1 b1 w1[2] b2 w2[1] e2=0 e1=0 b3 e3=0 E=0", "and reports the failed wait");
    flux_dispatcher_destroy(d);
}

/* ---- flux_wait_for from a hook: refused, reporting nothing (issue 15) ---- */

enum { H_DISPATCH_BEGIN, H_CALLBACK_BEGIN, H_CALLBACK_END, H_WAIT_FOR, H_DISPATCH_END, H_COUNT };

typedef struct waiting_hooks {
    events ev;
    flux_dispatcher *d;
    flux_token target;
    int inside;                     /* a hook is running: no nested tries */
    int tries[H_COUNT];
    int refused[H_COUNT];           /* tries that got FLUX_ERR_NOT_DISPATCHING */
    int misworded[H_COUNT];         /* ... whose message blamed another thread */
} waiting_hooks;

static void try_wait(waiting_hooks *w, int hook)
{
    if (w->inside)
        return;
    w->inside++;
    w->tries[hook]++;
    w->refused[hook] += flux_wait_for(w->d, &w->target, 1) == FLUX_ERR_NOT_DISPATCHING;
    /* This thread runs the dispatch: the message must not say another does. */
    w->misworded[hook] += strstr(flux_last_error(), "another thread") != NULL
                          || strstr(flux_last_error(), "this thread runs it") == NULL;
    w->inside--;
}

static void wh_dispatch_begin(void *c, const void *payload)
{
    on_dispatch_begin(&((waiting_hooks *)c)->ev, payload);
    try_wait(c, H_DISPATCH_BEGIN);
}
static void wh_dispatch_end(void *c, const void *payload, flux_status status)
{
    on_dispatch_end(&((waiting_hooks *)c)->ev, payload, status);
    try_wait(c, H_DISPATCH_END);
}
static void wh_callback_begin(void *c, flux_token t)
{
    on_callback_begin(&((waiting_hooks *)c)->ev, t);
    try_wait(c, H_CALLBACK_BEGIN);
}
static void wh_callback_end(void *c, flux_token t, int result)
{
    on_callback_end(&((waiting_hooks *)c)->ev, t, result);
    try_wait(c, H_CALLBACK_END);
}
static void wh_wait_for(void *c, flux_token waiter, const flux_token *tokens, size_t count)
{
    on_wait_for(&((waiting_hooks *)c)->ev, waiter, tokens, count);
    try_wait(c, H_WAIT_FOR);
}

static void test_wait_for_from_a_hook_is_refused(void)
{
    static const flux_observer waiting = {
        FLUX_OBSERVER_VERSION, wh_dispatch_begin, wh_dispatch_end,
        wh_callback_begin, wh_callback_end, wh_wait_for,
    };
    static const char *names[H_COUNT] = {"dispatch_begin", "callback_begin", "callback_end", "wait_for", "dispatch_end"};
    node n[3];
    flux_dispatcher *d = three(n);
    waiting_hooks w;
    memset(&w, 0, sizeof w);
    w.d = d;
    w.target = 3;
    EXPECT_OK(flux_dispatcher_set_observer(d, &waiting, &w, NULL));
    node_wait_on(&n[0], 1, (flux_token[]){2}); /* 1 waits for 2: a wait_for event, a nested pair */
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(w.ev.text, "D1 b1 w1[2] b2 e2=0 e1=0 b3 e3=0 E=0",
           "the hooks' waits are not reported, and run nothing");
    is_int(n[2].calls, 1, "the waited-for callback ran once, in its turn");
    for (int h = 0; h < H_COUNT; h++) {
        ok(w.tries[h] > 0, "%s tried to wait", names[h]);
        is_int(w.refused[h], w.tries[h], "flux_wait_for from %s: FLUX_ERR_NOT_DISPATCHING every time", names[h]);
        is_int(w.misworded[h], 0, "from %s, the message says this thread runs the dispatch, outside its callbacks",
               names[h]);
    }
    EXPECT_OK(n[0].wait_status);
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- a callback_begin hook that unregisters the callback it announces ---- */

/* flux_unregister promises no call once it returned on the dispatching
 * thread; the callback used to run anyway when the begin hook unregistered
 * it (the loop and the wait had looked at its mark before the hook). */
typedef struct unregistering {
    events ev;
    flux_dispatcher *d;
    flux_token victims[2];
    int statuses[2];
} unregistering;

static void ur_callback_begin(void *c, flux_token t)
{
    unregistering *u = c;
    on_callback_begin(&u->ev, t);
    for (int i = 0; i < 2; i++)
        if (t == u->victims[i])
            u->statuses[i] = flux_unregister(u->d, t);
}
static void ur_callback_end(void *c, flux_token t, int result) { on_callback_end(&((unregistering *)c)->ev, t, result); }
static void ur_wait_for(void *c, flux_token waiter, const flux_token *tokens, size_t count)
{
    on_wait_for(&((unregistering *)c)->ev, waiter, tokens, count);
}
static void ur_dispatch_begin(void *c, const void *payload) { on_dispatch_begin(&((unregistering *)c)->ev, payload); }
static void ur_dispatch_end(void *c, const void *payload, flux_status status)
{
    on_dispatch_end(&((unregistering *)c)->ev, payload, status);
}

static void test_a_callback_unregistered_by_its_begin_hook_does_not_run(void)
{
    static const flux_observer unregistering_hooks = {
        FLUX_OBSERVER_VERSION, ur_dispatch_begin, ur_dispatch_end,
        ur_callback_begin, ur_callback_end, ur_wait_for,
    };
    node n[3];
    flux_dispatcher *d = three(n);
    unregistering u;
    memset(&u, 0, sizeof u);
    u.d = d;
    u.victims[0] = 2; /* reached by the dispatch loop */
    u.victims[1] = 3; /* reached by callback 1's wait */
    u.statuses[0] = u.statuses[1] = -1;
    node_wait_on(&n[0], 1, (flux_token[]){3});
    EXPECT_OK(flux_dispatcher_set_observer(d, &unregistering_hooks, &u, NULL));
    EXPECT_OK(flux_dispatch(d, &one));
    EXPECT_OK(u.statuses[0]);
    EXPECT_OK(u.statuses[1]);
    is_int(n[1].calls, 0, "callback 2, unregistered by its begin hook in the loop, did not run");
    is_int(n[2].calls, 0, "callback 3, unregistered by its begin hook in a wait, did not run");
    EXPECT_OK(n[0].wait_status);
    is_str(u.ev.text, "D1 b1 w1[3] b3 e3=0 e1=0 b2 e2=0 E=0", "each begin still has its end");
    EXPECT_OK(flux_dispatch(d, &two));
    is_int(n[0].calls, 2, "callback 1 goes on");
    is_int(n[1].calls + n[2].calls, 0, "the others are gone");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- hooks == NULL hands the context over: destroy(NULL) too (issue 15) -- */

static int null_destroyed;
static void count_null_destroy(void *c)
{
    if (c == NULL)
        null_destroyed++;
}

static void test_clearing_with_a_null_context_runs_destroy(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    null_destroyed = 0;
    EXPECT_OK(flux_dispatcher_set_observer(d, NULL, NULL, count_null_destroy));
    is_int(null_destroyed, 1, "NULL hooks, NULL context: destroy(NULL) ran once, at once");
    /* A NULL context that is set is destroyed like any other. */
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, NULL, count_null_destroy));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(null_destroyed, 2, "a set NULL context is destroyed once, with the dispatcher");
    EXPECT_STATUS(flux_dispatcher_set_observer(NULL, NULL, NULL, count_null_destroy), FLUX_ERR_INVALID_ARGUMENT);
    is_int(null_destroyed, 3, "NULL dispatcher: destroy(NULL) ran once, at once");
}

/* A clearing's context is destroyed at once, outside any dispatch, so its
 * destroy may close or destroy d, as any observer destroy run there may
 * ("Ownership"). It ran before the library was done with d: a close from it
 * made the clearing fail with FLUX_ERR_INVALID_ARGUMENT (closed), and a
 * destroy from it freed d under the call (ASan: heap-use-after-free). */
static flux_dispatcher *ending_d;
static flux_status ending_status;
static int ending_runs, replaced_runs;

static void destroy_that_closes_d(void *c)
{
    (void)c;
    ending_runs++;
    ending_status = flux_dispatcher_close(ending_d);
}

static void destroy_that_destroys_d(void *c)
{
    (void)c;
    ending_runs++;
    ending_status = flux_dispatcher_destroy(ending_d);
}

static void count_replaced(void *c)
{
    (void)c;
    replaced_runs++;
}

static void test_a_clearing_context_may_end_the_dispatcher(void)
{
    ending_d = flux_dispatcher_create();
    REQUIRE(ending_d != NULL);
    ending_runs = replaced_runs = 0;
    ending_status = (flux_status)-1;
    EXPECT_OK(flux_dispatcher_set_observer(ending_d, &hooks, NULL, count_replaced));
    EXPECT_OK(flux_dispatcher_set_observer(ending_d, NULL, NULL, destroy_that_closes_d));
    is_int(ending_runs, 1, "the clearing's destroy ran once");
    is_int(ending_status, FLUX_OK, "flux_dispatcher_close() from it closed d");
    is_int(replaced_runs, 1, "the cleared observer's context was destroyed once");
    flux_token token = 1;
    EXPECT_STATUS(flux_register(ending_d, node_cb, NULL, NULL, &token), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_OK(flux_dispatcher_destroy(ending_d));

    ending_d = flux_dispatcher_create();
    REQUIRE(ending_d != NULL);
    ending_runs = 0;
    ending_status = (flux_status)-1;
    EXPECT_OK(flux_dispatcher_set_observer(ending_d, NULL, NULL, destroy_that_destroys_d));
    is_int(ending_runs, 1, "the clearing's destroy ran once");
    is_int(ending_status, FLUX_OK, "flux_dispatcher_destroy() from it freed d, which the call no longer used");
}

/* ---- hooks that change the registrations -------------------------------- */

/* Hooks run on the dispatching thread, so flux_unregister() from one acts as
 * from a callback: the callback is not called later in that dispatch. A
 * wait_for hook that unregisters the token waited for makes the wait see an
 * unregistered token (FLUX_ERR_UNKNOWN_TOKEN) and run nothing; a callback
 * registered from a hook first runs in the next dispatch. */
typedef struct changing_hooks {
    events ev;
    flux_dispatcher *d;
    flux_token begin_victim, end_victim, wait_victim, end_after;
    flux_status statuses[3];
    node late;
    flux_status late_status;
} changing_hooks;

static void ch_dispatch_begin(void *c, const void *payload)
{
    changing_hooks *h = c;
    on_dispatch_begin(&h->ev, payload);
    if (*(const int *)payload != 1)
        return;
    h->statuses[0] = flux_unregister(h->d, h->begin_victim);
    h->late_status = node_register(&h->late);
}
static void ch_callback_end(void *c, flux_token t, int result)
{
    changing_hooks *h = c;
    on_callback_end(&h->ev, t, result);
    if (t == h->end_after)
        h->statuses[1] = flux_unregister(h->d, h->end_victim);
}
static void ch_wait_for(void *c, flux_token waiter, const flux_token *tokens, size_t count)
{
    changing_hooks *h = c;
    on_wait_for(&h->ev, waiter, tokens, count);
    h->statuses[2] = flux_unregister(h->d, h->wait_victim);
}
static void ch_callback_begin(void *c, flux_token t) { on_callback_begin(&((changing_hooks *)c)->ev, t); }
static void ch_dispatch_end(void *c, const void *payload, flux_status status)
{
    on_dispatch_end(&((changing_hooks *)c)->ev, payload, status);
}

static void test_hooks_that_change_the_registrations(void)
{
    static const flux_observer changing = {
        FLUX_OBSERVER_VERSION, ch_dispatch_begin, ch_dispatch_end,
        ch_callback_begin, ch_callback_end, ch_wait_for,
    };
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    node n[5];
    for (int i = 0; i < 5; i++) {
        node_init(&n[i], i + 1, d, NULL);
        REQUIRE(node_register(&n[i]) == FLUX_OK);
    }
    changing_hooks h;
    memset(&h, 0, sizeof h);
    h.d = d;
    h.begin_victim = n[0].token; /* gone before the loop starts */
    h.end_after = n[1].token;    /* 2's end unregisters 3 */
    h.end_victim = n[2].token;
    h.wait_victim = n[4].token;  /* 4 waits for 5, whose wait_for hook unregisters 5 */
    node_wait_on(&n[3], 1, &n[4].token);
    node_init(&h.late, 6, d, NULL);
    EXPECT_OK(flux_dispatcher_set_observer(d, &changing, &h, NULL));
    EXPECT_OK(flux_dispatch(d, &one));
    EXPECT_OK(h.statuses[0]);
    EXPECT_OK(h.statuses[1]);
    EXPECT_OK(h.statuses[2]);
    EXPECT_OK(h.late_status);
    is_int(n[0].calls, 0, "unregistered by dispatch_begin: not called");
    is_int(n[1].calls, 1, "2 ran");
    is_int(n[2].calls, 0, "unregistered by 2's callback_end: not called");
    is_int(n[3].wait_status, FLUX_ERR_UNKNOWN_TOKEN, "4's wait sees 5 unregistered by the wait_for hook");
    is_int(n[4].calls, 0, "so 5 never ran");
    is_int(h.late.calls, 0, "registered by dispatch_begin: not in this dispatch");
    is_str(h.ev.text, "D1 b2 e2=0 b4 w4[5] e4=0 E=0", "the events of what ran");
    EXPECT_OK(flux_dispatch(d, &two));
    is_int(h.late.calls, 1, "it runs in the next");
    is_int(n[3].calls, 2, "4 goes on");
    EXPECT_OK(flux_dispatcher_destroy(d));
    for (int i = 0; i < 5; i++)
        is_int(n[i].destroyed, 1, "context %d destroyed once", i + 1);
    is_int(h.late.destroyed, 1, "the late one too");
}

/* ---- the hooks are copied ------------------------------------------------ */

static void test_hooks_are_copied(void)
{
    node n[3];
    flux_dispatcher *d = three(n);
    events ev = {0};
    flux_observer mine = {FLUX_OBSERVER_VERSION, on_dispatch_begin, on_dispatch_end, NULL, NULL, NULL};
    EXPECT_OK(flux_dispatcher_set_observer(d, &mine, &ev, on_destroy));
    /* The caller's struct changes, or goes: the set observer does not. */
    memset(&mine, 0, sizeof mine);
    mine.version = 99;
    EXPECT_OK(flux_dispatch(d, &one));
    is_str(ev.text, "D1 E=0", "the hooks as they were when set are called");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(ev.destroyed, 1, "destroyed once, with the dispatcher");
}

/* ---- several changes in one dispatch ------------------------------------- */

/* Set A, then B, then clear, then C, all from one callback: the running
 * dispatch keeps its observer; A and B, never installed, are destroyed
 * exactly once, after the call, like the running one; C reports next. */
static events *changes[3];
static int destroyed_inside;

static int changing_cb(void *ctx, const void *payload)
{
    flux_dispatcher *d = ctx;
    if (*(const int *)payload != 1)
        return 0;
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, changes[0], on_destroy));
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, changes[1], on_destroy));
    EXPECT_OK(flux_dispatcher_set_observer(d, NULL, NULL, NULL));
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, changes[2], on_destroy));
    destroyed_inside = changes[0]->destroyed + changes[1]->destroyed + changes[2]->destroyed;
    return 0;
}

static void test_several_changes_in_one_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    events running = {0}, a = {0}, b = {0}, c = {0};
    changes[0] = &a;
    changes[1] = &b;
    changes[2] = &c;
    destroyed_inside = -1;
    flux_token t;
    EXPECT_OK(flux_register(d, changing_cb, d, NULL, &t));
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &running, on_destroy));
    EXPECT_OK(flux_dispatch(d, &one));
    is_int(destroyed_inside, 0, "no replaced context is destroyed inside the dispatch");
    is_str(running.text, "D1 b1 e1=0 E=0", "the running dispatch kept its observer");
    is_int(running.destroyed, 1, "the running one was destroyed once the call returned");
    is_int(a.destroyed, 1, "A, replaced before it was ever installed, was destroyed once");
    is_int(b.destroyed, 1, "B, cleared before it was ever installed, was destroyed once");
    is_int(c.destroyed, 0, "C, the last set, is live");
    is_str(a.text, "", "A saw nothing");
    is_str(b.text, "", "B saw nothing");
    EXPECT_OK(flux_dispatch(d, &two));
    is_str(c.text, "D2 b1 e1=0 E=0", "the next dispatch reports to C");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(a.destroyed + b.destroyed + c.destroyed + running.destroyed, 4, "each exactly once");
}

/* ---- a wait refused for its arguments reports nothing --------------------- */

static flux_status bad_wait[3];

static int bad_waits_cb(void *ctx, const void *payload)
{
    (void)payload;
    flux_dispatcher *d = ctx;
    flux_token t = 2;
    bad_wait[0] = flux_wait_for(d, NULL, 2);
    bad_wait[1] = flux_wait_for(d, &t, (size_t)-1);
    bad_wait[2] = flux_wait_for(d, &t, SIZE_MAX / 2 + 1); /* the first count refused */
    return 0;
}

static void test_a_wait_refused_for_its_arguments_reports_nothing(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    flux_token t;
    EXPECT_OK(flux_register(d, bad_waits_cb, d, NULL, &t));
    node n;
    node_init(&n, 2, d, NULL);
    EXPECT_OK(node_register(&n));
    events ev = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &ev, NULL));
    EXPECT_OK(flux_dispatch(d, &one));
    is_int(bad_wait[0], FLUX_ERR_INVALID_ARGUMENT, "NULL tokens with a count: refused");
    is_int(bad_wait[1], FLUX_ERR_INVALID_ARGUMENT, "a count of SIZE_MAX: refused");
    is_int(bad_wait[2], FLUX_ERR_INVALID_ARGUMENT, "a count of SIZE_MAX / 2 + 1: refused");
    is_str(ev.text, "D1 b1 e1=0 b2 e2=0 E=0", "none is reported, and token 2 ran in its turn");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

/* ---- flux_dispatcher_close() clears the observer -------------------------- */

static void test_close_clears_the_observer_once(void)
{
    node n[3];
    flux_dispatcher *d = three(n);
    events ev = {0}, late = {0};
    EXPECT_OK(flux_dispatcher_set_observer(d, &hooks, &ev, on_destroy));
    EXPECT_OK(flux_dispatcher_close(d));
    is_int(ev.destroyed, 1, "close destroyed the observer's context once");
    EXPECT_STATUS(flux_dispatch(d, &one), FLUX_ERR_INVALID_ARGUMENT);
    is_str(ev.text, "", "the refused dispatch reported nothing");
    EXPECT_STATUS(flux_dispatcher_set_observer(d, &hooks, &late, on_destroy), FLUX_ERR_INVALID_ARGUMENT);
    is_int(late.destroyed, 1, "a closed dispatcher refuses an observer and destroys its context at once");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(ev.destroyed + late.destroyed, 2, "freeing it destroys neither again");
}

int main(void)
{
    tap_init();
    RUN(test_events_of_a_chain_with_wait_for);
    RUN(test_failures_and_aborts);
    RUN(test_set_during_a_dispatch_takes_effect_from_the_next);
    RUN(test_queued_dispatches_see_the_observer_as_they_begin);
    RUN(test_context_ownership_on_every_path);
    RUN(test_dying_dispatcher);
    RUN(test_set_from_another_thread_during_a_dispatch);
    RUN(test_circular_names_the_whole_cycle);
    RUN(test_circular_names_the_cycle_under_an_observer);
    RUN(test_wait_for_from_a_hook_is_refused);
    RUN(test_a_callback_unregistered_by_its_begin_hook_does_not_run);
    RUN(test_clearing_with_a_null_context_runs_destroy);
    RUN(test_a_clearing_context_may_end_the_dispatcher);
    RUN(test_hooks_that_change_the_registrations);
    RUN(test_hooks_are_copied);
    RUN(test_several_changes_in_one_dispatch);
    RUN(test_a_wait_refused_for_its_arguments_reports_nothing);
    RUN(test_close_clears_the_observer_once);
    return tap_done();
}
