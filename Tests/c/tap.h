/*
 * tap.h -- a small TAP producer for the libflux C test programs.
 *
 * Every check prints one TAP line, "ok N - name" or "not ok N - name"; a
 * failure adds "#"-prefixed diagnostics with file:line and both operands. The
 * plan ("1..N") is printed at the end by tap_done(), so a program that crashes
 * or is killed part-way leaves no plan and Tests/c/run.py counts it as failed.
 *
 *     int main(void) {
 *         tap_init();
 *         RUN(test_something);          // "# test_something", arms the watchdog
 *         return tap_done();            // prints the plan; 0 only if all passed
 *     }
 *
 * Checks (each returns true when it passed; the name is a printf format):
 *     ok(cond, name...)
 *     is_int(got, want, name...)      is_uint(got, want, name...)
 *     is_ptr(got, want, name...)      is_str(got, want, name...)
 *     has_prefix(str, prefix, name...) has_substr(str, needle, name...)
 *     has_number(str, n, name...)     -- the decimal n appears as a whole number
 *     EXPECT_STATUS(call, FLUX_ERR_X) -- name is the call; prints both statuses'
 *                                        flux_status_name() and flux_last_error()
 *     EXPECT_OK(call)                 -- EXPECT_STATUS(call, FLUX_OK)
 *     diag(fmt...)                    -- a "# ..." line
 *
 * Checks may run on any thread: output is serialized and numbered under a lock.
 *
 * Watchdog: RUN() arms alarm() for every test case (FLUX_TEST_WATCHDOG seconds,
 * default 30, or 600 under valgrind). When it fires, the program prints
 * "Bail out!" naming the case and exits 3, so a deadlock fails instead of
 * hanging.
 *
 * tap_init() also resets the signal mask and every ignored signal to its
 * default (tap_reset_signals), so no test inherits its parent's.
 *
 * Under valgrind (env FLUX_TEST_UNDER_VALGRIND set and not "0"), tap_scale(n)
 * divides iteration counts by 25 (at least 1).
 */
#ifndef FLUX_TEST_TAP_H
#define FLUX_TEST_TAP_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flux.h>

#if defined(__GNUC__) || defined(__clang__)
#  define TAP_PRINTF(fmt_index, first_arg) \
       __attribute__((format(printf, fmt_index, first_arg)))
#else
#  define TAP_PRINTF(fmt_index, first_arg)
#endif

static pthread_mutex_t tap_lock = PTHREAD_MUTEX_INITIALIZER;
static int tap_count;          /* TAP lines printed so far */
static int tap_failures;       /* of which "not ok" */
static unsigned tap_watchdog_seconds = 30;
static char tap_case_name[128] = "(setup)";

/* ---- environment ------------------------------------------------------ */

static inline bool tap_under_valgrind(void)
{
    const char *v = getenv("FLUX_TEST_UNDER_VALGRIND");
    return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

/* An iteration count, scaled down under valgrind. */
static inline long tap_scale(long n)
{
    if (!tap_under_valgrind())
        return n;
    long scaled = n / 25;
    return scaled < 1 ? 1 : scaled;
}

/* ---- output ----------------------------------------------------------- */

/* Prints text as "#   "-prefixed lines. Caller holds tap_lock. */
static inline void tap_print_detail(const char *text)
{
    const char *p = text;
    while (p != NULL && *p != '\0') {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        printf("#   %.*s\n", len, p);
        p = nl ? nl + 1 : NULL;
    }
}

static inline void diag(const char *fmt, ...) TAP_PRINTF(1, 2);
static inline void diag(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&tap_lock);
    const char *p = buf;
    while (p != NULL) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        printf("# %.*s\n", len, p);
        p = nl ? nl + 1 : NULL;
    }
    fflush(stdout);
    pthread_mutex_unlock(&tap_lock);
}

/* The one place a TAP line is printed. detail is printed only on failure. */
static inline bool tap_vreport(bool pass, const char *file, int line,
                               const char *detail, const char *fmt, va_list ap)
{
    char name[512];
    vsnprintf(name, sizeof name, fmt, ap);
    /* A '#' would start a TAP directive, a newline a new line. */
    for (char *c = name; *c; c++) {
        if (*c == '#')
            *c = '_';
        else if (*c == '\n' || *c == '\r')
            *c = ' ';
    }
    pthread_mutex_lock(&tap_lock);
    int n = ++tap_count;
    if (!pass)
        tap_failures++;
    printf("%sok %d - %s\n", pass ? "" : "not ", n, name);
    if (!pass) {
        printf("#   Failed test %d in %s at %s:%d\n", n, tap_case_name, file, line);
        tap_print_detail(detail);
    }
    fflush(stdout);
    pthread_mutex_unlock(&tap_lock);
    return pass;
}

static inline bool tap_report(bool pass, const char *file, int line,
                              const char *detail, const char *fmt, ...)
    TAP_PRINTF(5, 6);
static inline bool tap_report(bool pass, const char *file, int line,
                              const char *detail, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(pass, file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}

/* ---- checks ----------------------------------------------------------- */

#define ok(cond, ...) \
    tap_report(!!(cond), __FILE__, __LINE__, "expression is false: " #cond, __VA_ARGS__)

static inline bool tap_is_int(long long got, long long want, const char *gs,
                              const char *ws, const char *file, int line,
                              const char *fmt, ...) TAP_PRINTF(7, 8);
static inline bool tap_is_int(long long got, long long want, const char *gs,
                              const char *ws, const char *file, int line,
                              const char *fmt, ...)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "     got: %lld  (%s)\nexpected: %lld  (%s)",
             got, gs, want, ws);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(got == want, file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}
#define is_int(got, want, ...) \
    tap_is_int((long long)(got), (long long)(want), #got, #want, __FILE__, __LINE__, __VA_ARGS__)

static inline bool tap_is_uint(unsigned long long got, unsigned long long want,
                               const char *gs, const char *ws, const char *file,
                               int line, const char *fmt, ...) TAP_PRINTF(7, 8);
static inline bool tap_is_uint(unsigned long long got, unsigned long long want,
                               const char *gs, const char *ws, const char *file,
                               int line, const char *fmt, ...)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "     got: %llu  (%s)\nexpected: %llu  (%s)",
             got, gs, want, ws);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(got == want, file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}
#define is_uint(got, want, ...)                                                 \
    tap_is_uint((unsigned long long)(got), (unsigned long long)(want), #got, #want, \
                __FILE__, __LINE__, __VA_ARGS__)

static inline bool tap_is_ptr(const void *got, const void *want, const char *gs,
                              const char *ws, const char *file, int line,
                              const char *fmt, ...) TAP_PRINTF(7, 8);
static inline bool tap_is_ptr(const void *got, const void *want, const char *gs,
                              const char *ws, const char *file, int line,
                              const char *fmt, ...)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "     got: %p  (%s)\nexpected: %p  (%s)",
             got, gs, want, ws);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(got == want, file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}
#define is_ptr(got, want, ...) \
    tap_is_ptr((const void *)(got), (const void *)(want), #got, #want, __FILE__, __LINE__, __VA_ARGS__)

enum tap_str_op { TAP_STR_EQ, TAP_STR_PREFIX, TAP_STR_SUBSTR };

static inline bool tap_str(enum tap_str_op op, const char *got, const char *want,
                           const char *gs, const char *ws, const char *file,
                           int line, const char *fmt, ...) TAP_PRINTF(8, 9);
static inline bool tap_str(enum tap_str_op op, const char *got, const char *want,
                           const char *gs, const char *ws, const char *file,
                           int line, const char *fmt, ...)
{
    bool pass = false;
    if (got != NULL && want != NULL) {
        switch (op) {
        case TAP_STR_EQ: pass = strcmp(got, want) == 0; break;
        case TAP_STR_PREFIX: pass = strncmp(got, want, strlen(want)) == 0; break;
        case TAP_STR_SUBSTR: pass = strstr(got, want) != NULL; break;
        }
    } else {
        pass = op == TAP_STR_EQ && got == want;
    }
    static const char *const what[] = {"expected", "expected prefix", "expected substring"};
    char detail[1400];
    snprintf(detail, sizeof detail, "     got: %s%.600s%s  (%s)\n%s: \"%.600s\"  (%s)",
             got ? "\"" : "", got ? got : "NULL", got ? "\"" : "", gs, what[op],
             want ? want : "NULL", ws);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(pass, file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}
#define is_str(got, want, ...) \
    tap_str(TAP_STR_EQ, (got), (want), #got, #want, __FILE__, __LINE__, __VA_ARGS__)
#define has_prefix(got, prefix, ...) \
    tap_str(TAP_STR_PREFIX, (got), (prefix), #got, #prefix, __FILE__, __LINE__, __VA_ARGS__)
#define has_substr(got, needle, ...) \
    tap_str(TAP_STR_SUBSTR, (got), (needle), #got, #needle, __FILE__, __LINE__, __VA_ARGS__)

/* True when the decimal n occurs in s as a whole number (no digit either side). */
static inline bool tap_contains_number(const char *s, unsigned long long n)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%llu", n);
    size_t len = strlen(digits);
    for (const char *p = s ? strstr(s, digits) : NULL; p != NULL; p = strstr(p + 1, digits)) {
        bool before = p > s && p[-1] >= '0' && p[-1] <= '9';
        bool after = p[len] >= '0' && p[len] <= '9';
        if (!before && !after)
            return true;
    }
    return false;
}

static inline bool tap_has_number(const char *got, unsigned long long n,
                                  const char *gs, const char *ns, const char *file,
                                  int line, const char *fmt, ...) TAP_PRINTF(7, 8);
static inline bool tap_has_number(const char *got, unsigned long long n,
                                  const char *gs, const char *ns, const char *file,
                                  int line, const char *fmt, ...)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "     got: \"%.600s\"  (%s)\nexpected the number %llu in it  (%s)",
             got ? got : "(NULL)", gs, n, ns);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap_vreport(tap_contains_number(got, n), file, line, detail, fmt, ap);
    va_end(ap);
    return r;
}
#define has_number(got, n, ...) \
    tap_has_number((got), (unsigned long long)(n), #got, #n, __FILE__, __LINE__, __VA_ARGS__)

/* flux_last_error() is read in the function body, i.e. right after call. */
static inline bool tap_expect_status(flux_status got, flux_status want,
                                     const char *call, const char *ws,
                                     const char *file, int line)
{
    char message[600];
    const char *e = flux_last_error();
    snprintf(message, sizeof message, "%s", e ? e : "(NULL)");
    char detail[1400];
    snprintf(detail, sizeof detail,
             "     got: %s (%d)\nexpected: %s (%d)\nflux_last_error(): \"%s\"",
             flux_status_name(got), (int)got, flux_status_name(want), (int)want, message);
    return tap_report(got == want, file, line, detail, "%s -> %s", call, ws);
}
#define EXPECT_STATUS(call, want) \
    tap_expect_status((call), (want), #call, #want, __FILE__, __LINE__)
#define EXPECT_OK(call) \
    tap_expect_status((call), FLUX_OK, #call, "FLUX_OK", __FILE__, __LINE__)

/* ---- program structure ------------------------------------------------ */

static inline void tap_on_alarm(int sig)
{
    (void)sig;
    /* Only async-signal-safe calls from here on. */
    static const char head[] = "Bail out! watchdog: test case ";
    static const char tail[] = " did not finish in time (deadlock?)\n";
    ssize_t r = write(STDOUT_FILENO, head, sizeof head - 1);
    r = write(STDOUT_FILENO, tap_case_name, strlen(tap_case_name));
    r = write(STDOUT_FILENO, tail, sizeof tail - 1);
    (void)r;
    _exit(3);
}

/* Undoes what a parent may have left that the tests rely on not being
 * there: an ignored disposition and the signal mask survive exec, and with
 * SIGCHLD ignored waitpid() finds no child, with SIGALRM blocked the
 * watchdog never fires, with SIGUSR1 blocked a signal test sees nothing.
 * Handlers already installed (a sanitizer's, valgrind's) stay. */
static inline void tap_reset_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction old;
        if (sigaction(sig, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)
            signal(sig, SIG_DFL);
    }
}

static inline void tap_init(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    tap_reset_signals();
    const char *w = getenv("FLUX_TEST_WATCHDOG");
    if (w != NULL && atoi(w) > 0)
        tap_watchdog_seconds = (unsigned)atoi(w);
    else if (tap_under_valgrind())
        tap_watchdog_seconds = 600;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tap_on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
}

/* Runs one test case with the watchdog armed. */
#define RUN(fn) tap_run_case(#fn, fn)
static inline void tap_run_case(const char *name, void (*fn)(void))
{
    pthread_mutex_lock(&tap_lock);
    snprintf(tap_case_name, sizeof tap_case_name, "%s", name);
    printf("# %s\n", name);
    fflush(stdout);
    pthread_mutex_unlock(&tap_lock);
    alarm(tap_watchdog_seconds);
    fn();
    alarm(0);
}

/* Prints the plan; returns the exit status for main(). */
static inline int tap_done(void)
{
    pthread_mutex_lock(&tap_lock);
    printf("1..%d\n", tap_count);
    if (tap_failures)
        printf("# %d of %d tests failed\n", tap_failures, tap_count);
    fflush(stdout);
    int failures = tap_failures;
    pthread_mutex_unlock(&tap_lock);
    return failures ? 1 : 0;
}

/* For a setup step that must not fail (pthread_create, malloc ...). */
#define REQUIRE(cond)                                                            \
    do {                                                                         \
        if (!(cond)) {                                                           \
            printf("Bail out! %s:%d: required condition failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                             \
            fflush(stdout);                                                      \
            exit(2);                                                             \
        }                                                                        \
    } while (0)

#endif /* FLUX_TEST_TAP_H */
