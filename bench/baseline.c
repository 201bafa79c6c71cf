/* baseline.c -- the plain C loop over (fn, context) pairs; see baseline.h. */
#include "baseline.h"

/* Built twice: into the executable as baseline_loop, and into
 * libbaseline.so as baseline_loop_shared (see baseline.h). */
#ifndef BASELINE_LOOP
#define BASELINE_LOOP baseline_loop
#endif

__attribute__((noinline)) int BASELINE_LOOP(const bench_pair *pairs, size_t n,
                                            const void *payload)
{
    for (size_t i = 0; i < n; i++) {
        int rc = pairs[i].fn(pairs[i].context, payload);
        if (rc != 0)
            return rc;
    }
    return 0;
}
