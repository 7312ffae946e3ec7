/* What the GDN backward tests (test_gdn_grads.c: the delta rule; test_gdn_conv_grads.c: conv + SiLU
 * and gates) share: fp32's unit roundoff and expf's error, the finite-difference step, and checks
 * of fp32 results against a float64 reference with a bound per element.
 *
 * ---- Finite differences ----------------------------------------------------------------------
 * Central differences with step h = 1e-5 on the float64 forward: truncation h^2 |f'''| / 6 and
 * rounding ~2^-53 Lmag / h, Lmag = sum of |terms| of the loss (the conv and gate losses are summed
 * only over the outputs the perturbed input reaches). With |f'''| of the order of the gradient
 * scale Y (the tensor's max magnitude Y_i below for the delta rule, 1 + |reference| for conv and
 * gates), both are <= 1e-9 Y here; the allowance FD = 2^-50 Lmag / h + 1e-8 Y is added to every
 * fp32 bound, and the float64 recurrent backward is checked against the differences with FD
 * alone (which shows the FD error really is that small: the test prints err/FD-allowance).
 * FD is two or more orders of magnitude below the fp32 bounds. */
#ifndef HYLA_TESTS_GRAD_BOUNDS_H
#define HYLA_TESTS_GRAD_BOUNDS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const double U = 0x1p-24; /* fp32 unit roundoff */
static const double CE = 1.01;   /* glibc expf: <= 0.502 ulp */
static const double FDH = 1e-5;  /* finite-difference step */
static int failures;

/* fill with NaN: any element a kernel fails to write then fails its check */
static void fill_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

static void check(const char *what, double ratio)
{
    if (!(ratio <= 1.0)) {
        printf("  FAIL %s: err/bound %.3e\n", what, ratio);
        failures++;
    }
}

/* max_i |a_i - b_i| / bound_i (NaN -> inf) and max |a - b| / max |b| */
typedef struct {
    double ratio, rel;
} cmp_res;

static cmp_res compare(const float *a, const double *b, const double *bound, int64_t n)
{
    double worst = 0.0, me = 0.0, mb = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e == e))
            e = INFINITY;
        me = fmax(me, e);
        mb = fmax(mb, fabs(b[i]));
        worst = fmax(worst, e / bound[i]);
    }
    cmp_res r = {worst, mb > 0.0 ? me / mb : me};
    return r;
}

static int same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

#endif
