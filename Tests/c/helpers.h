/*
 * helpers.h -- fixtures shared by the libflux C tests: an event trace, a
 * scriptable callback ("node"), and a one-shot flag for thread hand-offs.
 * Include after tap.h.
 */
#ifndef FLUX_TEST_HELPERS_H
#define FLUX_TEST_HELPERS_H

#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

/* Whether a test may define malloc() itself (to make allocations fail): not
 * under AddressSanitizer or ThreadSanitizer, which bring their own. (Valgrind
 * replaces it at run time: see tap_under_valgrind().) */
#ifndef __has_feature
#  define __has_feature(x) 0
#endif
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#  define TEST_CAN_INTERPOSE_MALLOC 0
#else
#  define TEST_CAN_INTERPOSE_MALLOC 1
#endif

/* ---- trace: an ordered log of small integers ---------------------------- */

#define TRACE_MAX 4096

typedef struct trace {
    int ev[TRACE_MAX];
    size_t n;
} trace;

static inline void trace_push(trace *t, int v)
{
    if (t != NULL && t->n < TRACE_MAX)
        t->ev[t->n++] = v;
}

static inline void trace_format(char *buf, size_t size, const int *v, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used + 16 < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? ", " : "", v[i]);
    if (used + 16 >= size)
        snprintf(buf + used, size - used, " ...");
}

static inline bool tap_is_trace(const trace *t, const int *want, size_t nwant,
                                const char *ts, const char *file, int line,
                                const char *fmt, ...) TAP_PRINTF(7, 8);
static inline bool tap_is_trace(const trace *t, const int *want, size_t nwant,
                                const char *ts, const char *file, int line,
                                const char *fmt, ...)
{
    bool pass = t->n == nwant && memcmp(t->ev, want, nwant * sizeof *want) == 0;
    char got[400], exp[400], detail[1000];
    trace_format(got, sizeof got, t->ev, t->n);
    trace_format(exp, sizeof exp, want, nwant);
    snprintf(detail, sizeof detail, "     got: [%s]  (%s)\nexpected: [%s]", got, ts, exp);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(pass, file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}

/* is_trace(&t, INTS(1, 2, 3), "name") -- INTS needs at least one value. */
#define INTS(...) (const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int)
#define is_trace(t, want, ...) tap_is_trace((t), want, #t, __FILE__, __LINE__, __VA_ARGS__)

/* ---- node: a scriptable registered callback ----------------------------- */

typedef struct node node;
/* Runs inside the callback after the optional wait; its result is returned
 * unless the node is set to fail. */
typedef int (*node_hook)(node *self, const void *payload);

struct node {
    int id;                  /* > 0; pushed to log on entry (and -id on exit) */
    flux_dispatcher *d;
    flux_token token;        /* set by node_register() */
    trace *log;              /* may be NULL */
    bool trace_exit;         /* also push -id when the callback returns */
    int calls;
    const void *payload;     /* the last payload seen */
    int dispatching;         /* flux_is_dispatching(d) seen on the last call */

    /* flux_wait_for(d, waits, nwait) on entry, when wait is set */
    bool wait;
    bool wait_null;          /* pass NULL instead of waits */
    flux_token waits[16];
    size_t nwait;
    flux_status wait_status;
    char wait_error[256];    /* flux_last_error() after a failed wait */

    int fail_times;          /* the next fail_times calls return fail_value */
    int fail_value;
    node_hook hook;
    void *user;

    int destroyed;           /* node_destroy() calls */
    trace *destroy_log;      /* node_destroy() pushes id here; may be NULL */
};

static inline void node_init(node *n, int id, flux_dispatcher *d, trace *log)
{
    memset(n, 0, sizeof *n);
    n->id = id;
    n->d = d;
    n->log = log;
    n->fail_value = 1;
    n->wait_status = (flux_status)-1;
}

static inline void node_wait_on(node *n, size_t count, const flux_token *tokens)
{
    REQUIRE(count <= sizeof n->waits / sizeof n->waits[0]);
    n->wait = true;
    n->nwait = count;
    for (size_t i = 0; i < count; i++)
        n->waits[i] = tokens[i];
}

static inline int node_cb(void *ctx, const void *payload)
{
    node *n = (node *)ctx;
    n->calls++;
    n->payload = payload;
    n->dispatching = flux_is_dispatching(n->d);
    trace_push(n->log, n->id);
    int result = 0;
    if (n->wait) {
        n->wait_status = flux_wait_for(n->d, n->wait_null ? NULL : n->waits, n->nwait);
        if (n->wait_status != FLUX_OK)
            snprintf(n->wait_error, sizeof n->wait_error, "%s", flux_last_error());
    }
    if (n->hook)
        result = n->hook(n, payload);
    if (n->fail_times > 0) {
        n->fail_times--;
        result = n->fail_value;
    }
    if (n->trace_exit)
        trace_push(n->log, -n->id);
    return result;
}

static inline void node_destroy(void *ctx)
{
    node *n = (node *)ctx;
    n->destroyed++;
    trace_push(n->destroy_log, n->id);
}

/* Registers n on d (n->d) with node_cb/node_destroy; stores the token. */
static inline flux_status node_register(node *n)
{
    return flux_register(n->d, node_cb, n, node_destroy, &n->token);
}

/* ---- flag: a one-shot event between threads ----------------------------- */

/* Runs fn(arg) on a new thread with a stack of `size` bytes (0: the
 * default) and waits for it to end; false when no such thread could be made. */
static inline bool run_on_stack(size_t size, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attributes;
    if (pthread_attr_init(&attributes) != 0)
        return false;
    pthread_t thread;
    bool made = (size == 0 || pthread_attr_setstacksize(&attributes, size) == 0)
                && pthread_create(&thread, &attributes, fn, arg) == 0;
    pthread_attr_destroy(&attributes);
    if (made)
        pthread_join(thread, NULL);
    return made;
}

typedef struct flag {
    pthread_mutex_t m;
    pthread_cond_t c;
    int set;
} flag;

static inline void flag_init(flag *f)
{
    REQUIRE(pthread_mutex_init(&f->m, NULL) == 0);
    REQUIRE(pthread_cond_init(&f->c, NULL) == 0);
    f->set = 0;
}

static inline void flag_fini(flag *f)
{
    pthread_cond_destroy(&f->c);
    pthread_mutex_destroy(&f->m);
}

static inline void flag_set(flag *f)
{
    pthread_mutex_lock(&f->m);
    f->set = 1;
    pthread_cond_broadcast(&f->c);
    pthread_mutex_unlock(&f->m);
}

static inline bool flag_is_set(flag *f)
{
    pthread_mutex_lock(&f->m);
    int s = f->set;
    pthread_mutex_unlock(&f->m);
    return s != 0;
}

/* Waits until the flag is set or seconds pass; true when it was set. */
static inline bool flag_wait(flag *f, double seconds)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    long long ns = (long long)(seconds * 1e9) + deadline.tv_nsec;
    deadline.tv_sec += (time_t)(ns / 1000000000LL);
    deadline.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&f->m);
    int rc = 0;
    while (!f->set && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&f->c, &f->m, &deadline);
    int s = f->set;
    pthread_mutex_unlock(&f->m);
    return s != 0;
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The calling thread's kernel id, for wait_until_blocked(). */
static inline pid_t thread_id(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* Waits, up to `seconds`, until the thread whose thread_id() is `*tid` (0
 * until that thread stores it) is blocked in a futex wait -- where a thread
 * waiting in libflux for another thread's dispatch sleeps -- seen twice 1 ms
 * apart; true when it was. For where a fixed sleep said "it is waiting by
 * now", which under load may end before the thread got there, so that the
 * test checked less than it says. Where /proc cannot tell, it sleeps 200 ms
 * and says true. */
static inline bool wait_until_blocked(_Atomic pid_t *tid, double seconds)
{
    long waited = 0;
    for (; atomic_load(tid) == 0; waited++) {
        if (waited >= (long)(seconds * 1000))
            return false;
        sleep_ms(1);
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)atomic_load(tid));
    int seen = 0;
    for (; waited < (long)(seconds * 1000); waited++) {
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            sleep_ms(200);
            return true;
        }
        long number = -1;
        unsigned long address = 0, op = 0;
        int fields = fscanf(f, "%ld %lx %lx", &number, &address, &op);
        fclose(f);
        /* FUTEX_WAIT (0) or FUTEX_WAIT_BITSET (9), with or without the
         * private (128) and clock (256) flags: not a wake. */
        bool blocked = fields == 3 && number == SYS_futex && ((op & ~384UL) == 0 || (op & ~384UL) == 9);
        seen = blocked ? seen + 1 : 0;
        if (seen == 2) {
            /* Valgrind's own lock (--fair-sched=yes) is a futex too: a
             * thread waiting for it looks the same, so there the fixed
             * sleep stays as well. */
            if (tap_under_valgrind())
                sleep_ms(200);
            return true;
        }
        sleep_ms(1);
    }
    return false;
}

/* Seconds a call that must "return promptly" is given (generous, and more
 * under valgrind; a call that waits for a blocked dispatch never returns). */
static inline double prompt_seconds(void)
{
    return tap_under_valgrind() ? 60.0 : 10.0;
}

#endif /* FLUX_TEST_HELPERS_H */
