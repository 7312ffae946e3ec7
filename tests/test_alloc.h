/* Allocation and random-number helpers shared by the kernel tests (a failed allocation ends the
 * test with exit status 2). */
#ifndef HYLA_TESTS_TEST_ALLOC_H
#define HYLA_TESTS_TEST_ALLOC_H

#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
static inline float *falloc(size_t n) { return xcalloc(n, sizeof(float)); }
static inline double *dalloc(size_t n) { return xcalloc(n, sizeof(double)); }
static inline double unif(hyla_rng *r, double lo, double hi) { return lo + (hi - lo) * hyla_rng_uniform(r); }

#include <math.h>
#include <stdint.h>

/* rows x d random unit vectors (normal draws, normalised in double), times scale. */
static inline void unit_rows(float *x, int64_t rows, int64_t d, double scale, hyla_rng *r)
{
    double *t = dalloc((size_t)d);
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < d; j++) {
            t[j] = hyla_rng_normal(r);
            ss += t[j] * t[j];
        }
        for (int64_t j = 0; j < d; j++)
            x[i * d + j] = (float)(t[j] / sqrt(ss) * scale);
    }
    free(t);
}

#endif
