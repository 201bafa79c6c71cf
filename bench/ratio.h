/*
 * ratio.h -- how the C benches report a ratio: the median of the ratios
 * within each round (the two sides measured back to back, so a slow spell of
 * a shared host hits both alike), with its spread, the lowest and the
 * highest round. Header-only; bench.c and stores.c include it.
 */
#ifndef FLUX_BENCH_RATIO_H
#define FLUX_BENCH_RATIO_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_ROUNDS = 100 };

typedef struct ratio {
    double median, low, high; /* NAN when either side failed */
} ratio;

static int ratio_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* a[i] / b[i] over `rounds` rounds (ns of each side in round i). */
static ratio ratio_of_rounds(const double *a, const double *b, int rounds)
{
    ratio r = {NAN, NAN, NAN};
    double each[MAX_ROUNDS];
    if (rounds < 1 || rounds > MAX_ROUNDS)
        return r;
    for (int i = 0; i < rounds; i++) {
        each[i] = a[i] / b[i];
        if (!isfinite(each[i]))
            return r;
    }
    qsort(each, (size_t)rounds, sizeof each[0], ratio_compare);
    int mid = rounds / 2;
    r.median = rounds % 2 ? each[mid] : (each[mid - 1] + each[mid]) / 2;
    r.low = each[0];
    r.high = each[rounds - 1];
    return r;
}

/* "1.06 (1.02-1.11)", right-aligned in 18 columns; "n/a" when unmeasured. */
static const char *ratio_text(ratio r, char *buf, size_t size)
{
    if (isnan(r.median))
        snprintf(buf, size, "%18s", "n/a");
    else
        snprintf(buf, size, "%5.2f (%4.2f-%4.2f)", r.median, r.low, r.high);
    return buf;
}

#endif
