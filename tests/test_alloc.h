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

#endif
