/* exp(x) for x <= 0, branch-free so that loops over it vectorise (softmax and cross-entropy
 * terms, whose arguments have the row's maximum subtracted; the logistic function of -|x|).
 *
 * Evaluated in double and rounded once: x = k ln2 + r with k = round(x / ln2) (the 1.5 * 2^52
 * rounding trick) and ln2 split in two (fdlibm's ln2_hi has 32 significant bits, so k * ln2_hi is
 * exact for |k| < 2^21), |r| <= ln2 / 2; exp(r) by its Taylor series to r^10 (truncation below
 * 1e-11 relative); then times 2^k from its exponent bits. The double result is within 1e-11 of
 * exp(x), so the fp32 one is the correctly rounded value but within 1e-11 of a tie: measured
 * (tests/test_core_ops.c) <= 0.5 ulp + 1e-4, subnormal results included. Below -104 (where fp32
 * rounds exp to 0 anyway) the result is 0; a NaN argument gives NaN. No FMA contraction is
 * assumed (-std=c11: off). */
#ifndef HYLA_CORE_EXP_NONPOS_H
#define HYLA_CORE_EXP_NONPOS_H

#include <stdint.h>
#include <string.h>

#define HYLA_EXP_NONPOS_MIN (-104.0f)

/* The double value (not rounded to fp32) of exp(max(x, HYLA_EXP_NONPOS_MIN)), x <= 0 (a NaN: of
 * 0 or of the minimum; callers that must keep NaN select it back). exp(-104) = 6.8e-46 rounds to
 * 0 in fp32. */
static inline double hyla_exp_nonpos_d(float x)
{
    const double log2e = 1.4426950408889634, ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10,
                 round = 6755399441055744.0;
    /* clamp on the bit pattern (unsigned min/max, which vectorise; gcc 12 does not if-convert a
     * float select feeding a conversion): a sign-clear value (+0, a positive x outside the domain,
     * a +NaN) becomes +0, one below the minimum (or a -NaN) becomes the minimum */
    uint32_t u, lo;
    float lo_f = HYLA_EXP_NONPOS_MIN, xc;
    memcpy(&u, &x, sizeof u);
    memcpy(&lo, &lo_f, sizeof lo);
    u = u < 0x80000000u ? 0u : u;
    u = u > lo ? lo : u;
    memcpy(&xc, &u, sizeof xc);
    double xd = (double)xc;
    double k = (xd * log2e + round) - round; /* nearest integer, in [-150, 0] */
    double r = (xd - k * ln2_hi) - k * ln2_lo;
    double p = 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t bits = (uint64_t)((int64_t)k + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* cond ? a : b on the bit patterns: gcc 12 does not if-convert a float select that follows a
 * conversion, so loops with one would not vectorise; a mask select does. */
static inline float hyla_f32_select(int cond, float a, float b)
{
    uint32_t ua, ub, m = (uint32_t)0 - (uint32_t)(cond != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    ua = (ua & m) | (ub & ~m);
    memcpy(&a, &ua, sizeof a);
    return a;
}

/* The same for doubles. */
static inline double hyla_f64_select(int cond, double a, double b)
{
    uint64_t ua, ub, m = (uint64_t)0 - (uint64_t)(cond != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    ua = (ua & m) | (ub & ~m);
    memcpy(&a, &ua, sizeof a);
    return a;
}

static inline float hyla_exp_nonpos(float x)
{
    float e = (float)hyla_exp_nonpos_d(x); /* 0 below the minimum */
    return hyla_f32_select(x == x, e, x);  /* NaN stays NaN */
}

#endif
