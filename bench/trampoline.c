/*
 * trampoline.c -- what a libffi trampoline and flux_call() cost, against a
 * direct C call, measured in one process.
 *
 *     cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -o build/bench/trampoline \
 *        bench/trampoline.c -Lbuild/lib -lflux -Wl,-rpath,$PWD/build/lib
 *     build/bench/trampoline [iterations]
 *
 * Three ways to run the same small piece of work, a flux_callback-shaped
 * function (signature "i(pp)") that adds the payload to a counter:
 *
 *   direct      a C call through a function pointer the compiler cannot see
 *               through (as the dispatcher calls callbacks)
 *   trampoline  a call of flux_closure_code(): libffi's closure, then the
 *               handler, which does the same work reading args[]
 *   flux_call   flux_call(work, "i(pp)", &ret, args): parse the signature,
 *               prepare a call description, call through libffi
 *
 * plus, for a host that makes many trampolines, one flux_closure_create()
 * and flux_closure_destroy() pair. Each figure is the best of several runs;
 * ratios are against the direct call of the same run.
 */
#include <flux.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct counter {
    intptr_t total;
} counter;

__attribute__((noinline)) static int work(void *context, const void *payload)
{
    ((counter *)context)->total += (intptr_t)payload;
    return 0;
}

static void work_handler(void *userdata, void *ret, void **args)
{
    (void)userdata;
    counter *c = *(counter **)args[0];
    c->total += (intptr_t) * (const void **)args[1];
    *(int32_t *)ret = 0;
}

/* Hidden from the optimizer: read once per run, so every call is indirect. */
static flux_callback volatile direct_fn = work;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ns per call of fn(&c, (void *)1), n times. */
static double time_calls(flux_callback fn, long n, counter *c)
{
    double start = now();
    int failed = 0;
    for (long k = 0; k < n; k++)
        failed |= fn(c, (const void *)1);
    double elapsed = now() - start;
    if (failed)
        abort();
    return elapsed * 1e9 / (double)n;
}

static double time_flux_call(long n, counter *c)
{
    void *function = (void *)(uintptr_t)direct_fn;
    counter *context = c;
    const void *payload = (const void *)1;
    void *args[] = {&context, &payload};
    int32_t ret = 0;
    int failed = 0;
    double start = now();
    for (long k = 0; k < n; k++) {
        failed |= flux_call(function, "i(pp)", &ret, args) != FLUX_OK;
        failed |= ret;
    }
    double elapsed = now() - start;
    if (failed)
        abort();
    return elapsed * 1e9 / (double)n;
}

static double time_create_destroy(long n)
{
    double start = now();
    for (long k = 0; k < n; k++) {
        flux_closure *closure = NULL;
        if (flux_closure_create("i(pp)", work_handler, NULL, NULL, &closure) != FLUX_OK)
            abort();
        flux_closure_destroy(closure);
    }
    return (now() - start) * 1e9 / (double)n;
}

static double min(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    if (n <= 0)
        n = 20000000;
    enum { RUNS = 5 };

    flux_closure *closure = NULL;
    if (flux_closure_create("i(pp)", work_handler, NULL, NULL, &closure) != FLUX_OK) {
        fprintf(stderr, "flux_closure_create: %s\n", flux_last_error());
        return 1;
    }
    flux_callback trampoline = (flux_callback)(uintptr_t)flux_closure_code(closure);
    flux_callback direct = direct_fn;

    counter c = {0};
    double t_direct = 1e30, t_tramp = 1e30, t_call = 1e30, t_create = 1e30;
    time_calls(direct, n / 10, &c); /* warm up */
    time_calls(trampoline, n / 10, &c);
    for (int run = 0; run < RUNS; run++) {
        t_direct = min(t_direct, time_calls(direct, n, &c));
        t_tramp = min(t_tramp, time_calls(trampoline, n, &c));
        t_call = min(t_call, time_flux_call(n / 4, &c));
        t_create = min(t_create, time_create_destroy(n / 200));
    }
    flux_closure_destroy(closure);

    long expected_min = (long)(n / 10) * 2 + (long)RUNS * (n * 2 + n / 4);
    if (c.total != expected_min) {
        fprintf(stderr, "work miscounted: %ld != %ld\n", (long)c.total, expected_min);
        return 1;
    }

    printf("trampoline bench: \"i(pp)\" callback-shaped call, best of %d runs (%ld calls each)\n", RUNS, n);
    printf("  %-30s %8.2f ns/call   1.00x\n", "direct C call (fn pointer)", t_direct);
    printf("  %-30s %8.2f ns/call  %5.2fx direct\n", "trampoline -> handler", t_tramp, t_tramp / t_direct);
    printf("  %-30s %8.2f ns/call  %5.2fx direct\n", "flux_call(fn, \"i(pp)\")", t_call, t_call / t_direct);
    printf("  %-30s %8.2f ns/pair\n", "flux_closure_create+destroy", t_create);
    return 0;
}
