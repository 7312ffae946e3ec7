/* Shared by the kernel tests that compare against a double-precision evaluation written in the
 * test (test_core_ops.c, test_gemm.c): a named check that records the worst error and the worst
 * error / tolerance over many values and fails on any value outside its tolerance (or NaN), a
 * plain expectation, the tests' random data. u = 2^-24 is the fp32 unit roundoff. */
#ifndef HYLA_TESTS_OP_CHECK_H
#define HYLA_TESTS_OP_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"

#define OP_CHECK_UNUSED __attribute__((unused))

OP_CHECK_UNUSED static const double U = 0x1p-24; /* fp32 unit roundoff */
OP_CHECK_UNUSED static int failures = 0;

/* ---- checking ------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    double max_err;   /* max |got - ref| */
    double max_ratio; /* max |got - ref| / tol */
    long n, bad;
} chk;

OP_CHECK_UNUSED static chk chk_begin(const char *name) { return (chk){name, 0.0, 0.0, 0, 0}; }

OP_CHECK_UNUSED static void chk_val(chk *c, double got, double ref, double tol)
{
    double err = fabs(got - ref);
    c->n++;
    if (!(err <= tol)) { /* also catches NaN */
        if (c->bad < 5)
            fprintf(stderr, "  %s: #%ld got %.9g ref %.9g err %.3g > tol %.3g\n", c->name,
                    c->n - 1, got, ref, err, tol);
        c->bad++;
    }
    if (err > c->max_err || isnan(err))
        c->max_err = err;
    if (tol > 0 && err / tol > c->max_ratio)
        c->max_ratio = err / tol;
}

OP_CHECK_UNUSED static void chk_end(chk *c)
{
    printf("%-44s max err %-10.3g worst err/tol %-8.3g %ld values %s\n", c->name, c->max_err,
           c->max_ratio, c->n, c->bad ? "FAIL" : "ok");
    if (c->bad)
        failures++;
}

OP_CHECK_UNUSED static void expect(int cond, const char *what)
{
    printf("%-44s %s\n", what, cond ? "ok" : "FAIL");
    if (!cond)
        failures++;
}

/* ---- data ----------------------------------------------------------------------------- */

OP_CHECK_UNUSED static hyla_rng rng;
OP_CHECK_UNUSED static float *falloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
OP_CHECK_UNUSED static void fill_normal(float *x, size_t n, double sd)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sd * hyla_rng_normal(&rng));
}
OP_CHECK_UNUSED static void fill_uniform(float *x, size_t n, double a) /* U(-a, a) */
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(a * (2.0 * hyla_rng_uniform(&rng) - 1.0));
}
#endif
