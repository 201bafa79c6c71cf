/*
 * baseline.h -- the plain C loop libflux is measured against.
 *
 * The loop lives in baseline.c, a separate translation unit, and is marked
 * noinline, so the compiler sees neither the callbacks nor their number when
 * it compiles it: every call is a real indirect call, as in the library.
 */
#ifndef FLUX_BENCH_BASELINE_H
#define FLUX_BENCH_BASELINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Same shape as flux_callback. */
typedef int (*bench_fn)(void *context, const void *payload);

typedef struct bench_pair {
    bench_fn fn;
    void *context;
} bench_pair;

/* Calls pairs[i].fn(pairs[i].context, payload) for i = 0..n-1, in order, and
 * stops at the first non-zero return, which it returns (as a dispatch stops on
 * a failing callback); 0 when every call returned 0. */
int baseline_loop(const bench_pair *pairs, size_t n, const void *payload);

/* The same loop built into a shared object of its own (build/bench/
 * libbaseline.so), so that, like libflux, it calls back across a library
 * boundary into the executable. Where the calling loop sits relative to the
 * callbacks matters on this hardware: the same loop runs ~1.5x slower from a
 * shared object mapped far from the executable than from inside it, so this
 * is the like-for-like baseline for libflux. */
int baseline_loop_shared(const bench_pair *pairs, size_t n, const void *payload);

/* The wait_for chain's baseline (baseline-chain.c, in libbaseline.so only):
 * the same contract with the least bookkeeping C can do it with -- marks,
 * a cursor, the dispatching thread, an abort flag; no locks, no
 * registration, no messages. A chain of waits nests two calls per link, so
 * its cost is bound by call and return prediction as much as by what the
 * wait does; this says what that costs on the machine at hand. Token k names
 * pairs[k - 1]. */
typedef struct baseline_chain {
    const bench_pair *pairs;
    size_t n;
    uint64_t *marks; /* n zeroed marks */
    uint64_t epoch;
    size_t cursor;
    const void *payload;
    pthread_t owner;
    int failed;
} baseline_chain;

/* 0, or 1 when a callback failed. */
int baseline_chain_dispatch(baseline_chain *d, const void *payload);
/* 0, or negative: not dispatching, aborted, unknown token, circular. */
int baseline_chain_wait_for(baseline_chain *d, const uint64_t *tokens, size_t n);

/* The recursion of a chain and nothing else: fn(depth - 1) is expected to call
 * baseline_recurse(fn, depth - 1) back, so a call of depth N nests 2N calls,
 * as a wait_for chain of depth N does. Returns 0 when every call returned 0. */
typedef int (*baseline_recurse_fn)(size_t depth);
int baseline_recurse(baseline_recurse_fn fn, size_t depth);

#endif
