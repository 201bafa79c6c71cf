/*
 * test-errors.c -- every bad input gets its status, changes nothing, and
 * leaves a per-thread flux_last_error() message naming the function.
 */
#include "helpers.h"

static const char payload[] = "payload";

typedef struct counted {
    int destroyed;
    int calls;
} counted;

static void counted_destroy(void *context)
{
    ((counted *)context)->destroyed++;
}

static int counted_cb(void *context, const void *p)
{
    (void)p;
    if (context != NULL)
        ((counted *)context)->calls++;
    return 0;
}

/* ---- NULL dispatcher ------------------------------------------------------ */

static void test_null_dispatcher(void)
{
    counted c = {0, 0};
    flux_token t = 12345;
    EXPECT_STATUS(flux_register(NULL, counted_cb, &c, counted_destroy, &t),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_int(c.destroyed, 1, "register(NULL, ...) still runs destroy(context) exactly once");
    is_uint(t, 0, "register(NULL, ...) sets *out_token to 0");
    has_prefix(flux_last_error(), "flux_register", "the message names flux_register");

    t = 777;
    EXPECT_STATUS(flux_register(NULL, counted_cb, &c, NULL, &t), FLUX_ERR_INVALID_ARGUMENT);
    is_uint(t, 0, "register(NULL, ...) without destroy sets *out_token to 0");
    EXPECT_STATUS(flux_register(NULL, counted_cb, &c, counted_destroy, NULL),
                  FLUX_ERR_INVALID_ARGUMENT);
    is_int(c.destroyed, 2, "register(NULL, ..., NULL out_token) runs destroy once more");
    EXPECT_STATUS(flux_register(NULL, NULL, &c, counted_destroy, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_int(c.destroyed, 3, "everything NULL but destroy: destroy still runs once");
    EXPECT_STATUS(flux_register(NULL, NULL, NULL, NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);

    EXPECT_STATUS(flux_unregister(NULL, 1), FLUX_ERR_INVALID_ARGUMENT);
    has_prefix(flux_last_error(), "flux_unregister", "the message names flux_unregister");
    EXPECT_STATUS(flux_unregister(NULL, 0), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_dispatch(NULL, payload), FLUX_ERR_INVALID_ARGUMENT);
    has_prefix(flux_last_error(), "flux_dispatch", "the message names flux_dispatch");
    EXPECT_STATUS(flux_dispatch(NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    flux_token one = 1;
    EXPECT_STATUS(flux_wait_for(NULL, &one, 1), FLUX_ERR_INVALID_ARGUMENT);
    has_prefix(flux_last_error(), "flux_wait_for", "the message names flux_wait_for");
    EXPECT_STATUS(flux_wait_for(NULL, NULL, 0), FLUX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(flux_wait_for(NULL, NULL, 3), FLUX_ERR_INVALID_ARGUMENT);
    is_int(flux_is_dispatching(NULL), 0, "flux_is_dispatching(NULL) is 0");
    EXPECT_OK(flux_dispatcher_destroy(NULL));
    is_int(c.calls, 0, "no callback was ever called");
}

/* ---- bad arguments on a real dispatcher ----------------------------------- */

static void test_null_callback_and_out_token(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    counted keep = {0, 0};
    flux_token tk;
    EXPECT_OK(flux_register(d, counted_cb, &keep, counted_destroy, &tk));

    counted c = {0, 0};
    flux_token t = 99;
    EXPECT_STATUS(flux_register(d, NULL, &c, counted_destroy, &t), FLUX_ERR_INVALID_ARGUMENT);
    is_int(c.destroyed, 1, "NULL callback: destroy(context) ran once, at once");
    is_uint(t, 0, "NULL callback: *out_token is 0");
    has_prefix(flux_last_error(), "flux_register", "the message names flux_register");

    counted e = {0, 0};
    EXPECT_STATUS(flux_register(d, counted_cb, &e, counted_destroy, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_int(e.destroyed, 1, "NULL out_token: destroy(context) ran once, at once");

    EXPECT_STATUS(flux_register(d, NULL, NULL, NULL, &t), FLUX_ERR_INVALID_ARGUMENT);
    is_uint(t, 0, "NULL callback, NULL destroy: *out_token is 0");

    EXPECT_OK(flux_dispatch(d, payload));
    is_int(e.calls, 0, "the rejected registration (NULL out_token) is not called");
    is_int(keep.calls, 1, "the good registration is untouched");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(keep.destroyed, 1, "the good registration is destroyed with the dispatcher");
    is_int(c.destroyed + e.destroyed, 2, "rejected contexts are not destroyed a second time");
}

static void test_bad_tokens(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    counted a = {0, 0}, b = {0, 0};
    flux_token ta, tb;
    EXPECT_OK(flux_register(d, counted_cb, &a, counted_destroy, &ta));
    EXPECT_OK(flux_register(d, counted_cb, &b, counted_destroy, &tb));

    EXPECT_STATUS(flux_unregister(d, 0), FLUX_ERR_UNKNOWN_TOKEN);
    has_prefix(flux_last_error(), "flux_unregister", "token 0: the message names flux_unregister");
    EXPECT_STATUS(flux_unregister(d, 4242), FLUX_ERR_UNKNOWN_TOKEN);
    has_prefix(flux_last_error(), "flux_unregister", "unknown token: message starts with flux_unregister");
    has_number(flux_last_error(), 4242, "unknown token: message contains the token number");
    EXPECT_STATUS(flux_unregister(d, UINT64_MAX), FLUX_ERR_UNKNOWN_TOKEN);
    EXPECT_STATUS(flux_unregister(d, tb + 1), FLUX_ERR_UNKNOWN_TOKEN);

    /* Stale token: unregister twice. */
    EXPECT_OK(flux_unregister(d, ta));
    is_int(a.destroyed, 1, "destroy ran on the first unregister");
    EXPECT_STATUS(flux_unregister(d, ta), FLUX_ERR_UNKNOWN_TOKEN);
    has_number(flux_last_error(), ta, "the stale token is in the message");
    is_int(a.destroyed, 1, "unregistering twice does not run destroy again");

    /* A token of another dispatcher. */
    flux_dispatcher *d2 = flux_dispatcher_create();
    REQUIRE(d2 != NULL);
    flux_token t2[5];
    for (int i = 0; i < 5; i++)
        EXPECT_OK(flux_register(d2, counted_cb, NULL, NULL, &t2[i]));
    ok(t2[4] > tb, "(setup: the other dispatcher issued a larger token)");
    EXPECT_STATUS(flux_unregister(d, t2[4]), FLUX_ERR_UNKNOWN_TOKEN);

    /* Bad input changed nothing. */
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(b.calls, 1, "the remaining callback is still registered and called");
    is_int(a.calls, 0, "the unregistered one is not");
    is_int(b.destroyed, 0, "and nothing was destroyed by the failed calls");
    EXPECT_OK(flux_dispatcher_destroy(d2));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(b.destroyed, 1, "destroyed once with the dispatcher");
    is_int(a.destroyed, 1, "the unregistered one not again");
}

/* Inside a dispatch: bad tokens for wait_for and unregister. */
struct bad_inside {
    flux_dispatcher *d;
    flux_token later;
    flux_status wait_zero, wait_null, unregister_zero, unregister_unknown;
    char msg_zero[256];
};

static int bad_inside_cb(void *context, const void *p)
{
    struct bad_inside *b = context;
    (void)p;
    flux_token list[] = {b->later, 0};
    b->wait_zero = flux_wait_for(b->d, list, 2);
    snprintf(b->msg_zero, sizeof b->msg_zero, "%s", flux_last_error());
    b->wait_null = flux_wait_for(b->d, NULL, 2);
    b->unregister_zero = flux_unregister(b->d, 0);
    b->unregister_unknown = flux_unregister(b->d, 5555);
    return 0;
}

static void test_bad_input_inside_dispatch(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    struct bad_inside b = {d, 0, (flux_status)-1, (flux_status)-1, (flux_status)-1,
                           (flux_status)-1, ""};
    counted later = {0, 0};
    flux_token t;
    EXPECT_OK(flux_register(d, bad_inside_cb, &b, NULL, &t));
    EXPECT_OK(flux_register(d, counted_cb, &later, counted_destroy, &b.later));
    EXPECT_OK(flux_dispatch(d, payload));
    is_int(b.wait_zero, FLUX_ERR_UNKNOWN_TOKEN, "wait_for with token 0 -> UNKNOWN_TOKEN");
    has_prefix(b.msg_zero, "flux_wait_for", "its message names flux_wait_for");
    is_int(b.wait_null, FLUX_ERR_INVALID_ARGUMENT, "wait_for(d, NULL, 2) -> INVALID_ARGUMENT");
    is_int(b.unregister_zero, FLUX_ERR_UNKNOWN_TOKEN, "unregister(d, 0) inside -> UNKNOWN_TOKEN");
    is_int(b.unregister_unknown, FLUX_ERR_UNKNOWN_TOKEN, "unregister(d, 5555) inside -> UNKNOWN_TOKEN");
    is_int(later.calls, 1, "the later callback ran once: the failed wait ran nothing");
    is_int(later.destroyed, 0, "and was not destroyed");
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(later.destroyed, 1, "destroyed with the dispatcher");
}

/* ---- flux_last_error ------------------------------------------------------ */

struct thread_check {
    const char *seen;        /* copy of flux_last_error() */
    char buf[256];
    int was_null;
};

static void *read_last_error(void *arg)
{
    struct thread_check *c = arg;
    const char *e = flux_last_error();
    c->was_null = e == NULL;
    snprintf(c->buf, sizeof c->buf, "%s", e ? e : "");
    c->seen = c->buf;
    return NULL;
}

static void test_last_error_fresh_thread(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    is_str(flux_last_error(), "", "flux_last_error() is \"\" before any call failed");
    /* Make this thread's message non-empty first. */
    EXPECT_STATUS(flux_unregister(d, 31337), FLUX_ERR_UNKNOWN_TOKEN);
    struct thread_check c = {NULL, "x", 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, read_last_error, &c) == 0);
    pthread_join(th, NULL);
    is_int(c.was_null, 0, "flux_last_error() is never NULL");
    is_str(c.seen, "", "flux_last_error() is \"\" in a fresh thread");
    has_number(flux_last_error(), 31337, "the main thread's message is still its own");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_last_error_unchanged_by_success(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    EXPECT_STATUS(flux_unregister(d, 8080), FLUX_ERR_UNKNOWN_TOKEN);
    char before[256];
    snprintf(before, sizeof before, "%s", flux_last_error());
    has_prefix(before, "flux_unregister", "message starts with flux_unregister");
    has_number(before, 8080, "and contains the token number");
    flux_token t;
    EXPECT_OK(flux_register(d, counted_cb, NULL, NULL, &t));
    EXPECT_OK(flux_dispatch(d, payload));
    EXPECT_OK(flux_unregister(d, t));
    is_str(flux_last_error(), before, "successful calls leave flux_last_error() unchanged");
    EXPECT_OK(flux_dispatcher_destroy(d));
}

struct per_thread {
    flux_dispatcher *d;
    flux_token token;        /* an unknown token to fail with */
    flag *mine_done, *other_done;
    char after_own[256], after_other[256];
};

static void *fail_and_check(void *arg)
{
    struct per_thread *p = arg;
    flux_unregister(p->d, p->token);
    snprintf(p->after_own, sizeof p->after_own, "%s", flux_last_error());
    flag_set(p->mine_done);
    flag_wait(p->other_done, prompt_seconds());
    snprintf(p->after_other, sizeof p->after_other, "%s", flux_last_error());
    return NULL;
}

static void test_last_error_per_thread(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    EXPECT_STATUS(flux_wait_for(d, NULL, 0), FLUX_ERR_NOT_DISPATCHING);
    char main_msg[256];
    snprintf(main_msg, sizeof main_msg, "%s", flux_last_error());

    flag done1, done2;
    flag_init(&done1);
    flag_init(&done2);
    struct per_thread p1 = {d, 1111, &done1, &done2, "", ""};
    struct per_thread p2 = {d, 2222, &done2, &done1, "", ""};
    pthread_t t1, t2;
    REQUIRE(pthread_create(&t1, NULL, fail_and_check, &p1) == 0);
    REQUIRE(pthread_create(&t2, NULL, fail_and_check, &p2) == 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    has_number(p1.after_own, 1111, "thread 1 sees its own failure");
    has_number(p2.after_own, 2222, "thread 2 sees its own failure");
    is_str(p1.after_other, p1.after_own, "thread 1's message unchanged by thread 2's failure");
    is_str(p2.after_other, p2.after_own, "thread 2's message unchanged by thread 1's failure");
    is_str(flux_last_error(), main_msg, "the main thread's message unchanged by both");
    flag_fini(&done1);
    flag_fini(&done2);
    EXPECT_OK(flux_dispatcher_destroy(d));
}

static void test_status_names_never_null(void)
{
    int bad = 0;
    for (int s = -5; s < 64; s++)
        bad += flux_status_name((flux_status)s) == NULL;
    is_int(bad, 0, "flux_status_name() is never NULL");
}

int main(void)
{
    tap_init();
    RUN(test_last_error_fresh_thread);   /* first, while nothing has failed */
    RUN(test_null_dispatcher);
    RUN(test_null_callback_and_out_token);
    RUN(test_bad_tokens);
    RUN(test_bad_input_inside_dispatch);
    RUN(test_last_error_unchanged_by_success);
    RUN(test_last_error_per_thread);
    RUN(test_status_names_never_null);
    return tap_done();
}
