/* baseline-chain.c -- the plain C wait_for the chain is measured against; see
 * baseline.h. Built only into libbaseline.so, so that, like libflux, it sits
 * across a library boundary from the callbacks. */
#include "baseline.h"

#include <pthread.h>

/* Facebook's bookkeeping and nothing else: a mark per callback stamped with
 * the dispatch's epoch (2*epoch pending, 2*epoch+1 handled), a cursor for the
 * dispatch loop, the dispatching thread, an abort flag. No locking, no
 * registration, no error messages. */

int baseline_chain_dispatch(baseline_chain *d, const void *payload)
{
    d->owner = pthread_self();
    d->epoch++;
    d->payload = payload;
    d->failed = 0;
    uint64_t pending = 2 * d->epoch;
    for (size_t i = 0; i < d->n && !d->failed; i++) {
        if (d->marks[i] >= pending)
            continue; /* already run by a wait */
        d->cursor = i;
        if (d->pairs[i].fn(d->pairs[i].context, payload) != 0)
            d->failed = 1;
    }
    d->owner = 0;
    return d->failed;
}

int baseline_chain_wait_for(baseline_chain *d, const uint64_t *tokens, size_t n)
{
    if (!pthread_equal(d->owner, pthread_self()))
        return -1; /* not dispatching on this thread */
    if (d->failed)
        return -2;
    uint64_t pending = 2 * d->epoch;
    for (size_t k = 0; k < n; k++) { /* check every token first */
        size_t i = (size_t)(tokens[k] - 1);
        if (tokens[k] == 0 || i >= d->n)
            return -3; /* unknown */
        if (d->marks[i] == pending || (d->marks[i] != (pending | 1) && i == d->cursor))
            return -4; /* circular */
    }
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(tokens[k] - 1);
        if (d->marks[i] == (pending | 1) || i < d->cursor)
            continue; /* handled */
        d->marks[i] = pending;
        int rc = d->pairs[i].fn(d->pairs[i].context, d->payload);
        d->marks[i] = pending | 1;
        if (rc != 0)
            d->failed = 1;
        if (d->failed)
            return -2;
    }
    return 0;
}

/* The recursion alone: baseline_recurse calls fn, which calls baseline_recurse
 * again, depth times -- the two calls and two returns per link a chain of
 * waits cannot do without, and nothing else. */
int baseline_recurse(baseline_recurse_fn fn, size_t depth)
{
    if (depth == 0)
        return 0;
    int rc = fn(depth - 1);
    return rc == 0 ? 0 : rc + 1;
}
