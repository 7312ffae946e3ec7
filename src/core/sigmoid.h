/* The logistic function and SiLU, hyla's one definition (gates, SwiGLU, the conv's SiLU, gated
 * norms), branch-free so that loops over them vectorise.
 *
 * From one exp of -|x| <= 0 in double (core/exp_nonpos.h, within 1e-11): sigma(|x|) =
 * 1 / (1 + e) and 1 - sigma(|x|) = e / (1 + e), both in double and rounded once, so sigma(x) and
 * 1 - sigma(x) come without cancellation and within 0.5 ulp + 1e-4 (libm's 1 / (1 + expf(-x)) in
 * fp32 rounds three times). For |x| > 104, sigma is exactly 1 or 0 and silu(x) is x or -0.
 * NaN gives NaN. */
#ifndef HYLA_CORE_SIGMOID_H
#define HYLA_CORE_SIGMOID_H

#include <math.h>

#include "core/exp_nonpos.h"

/* *s = sigma(x), *one_minus = 1 - sigma(x) = sigma(-x). */
static inline void hyla_sigmoid_pair(float x, float *s, float *one_minus)
{
    float ax = -fabsf(x);
    double e = hyla_exp_nonpos_d(ax), d = 1.0 + e; /* below -104: e = 6.8e-46, d = 1, e / d rounds to 0 */
    float r = (float)(1.0 / d), er = (float)(e / d);
    r = hyla_f32_select(x == x, r, x), er = hyla_f32_select(x == x, er, x); /* NaN stays NaN */
    *s = hyla_f32_select(x >= 0.0f, r, er);
    *one_minus = hyla_f32_select(x >= 0.0f, er, r);
}

/* sigma(x) alone: the one of the pair's two quotients that x's sign selects, so one division in
 * double instead of two (the same bits as hyla_sigmoid_pair's first output; a vectorised
 * division of doubles is the costliest step of a SiLU). */
static inline float hyla_sigmoid(float x)
{
    double e = hyla_exp_nonpos_d(-fabsf(x)), d = 1.0 + e;
    float s = (float)(hyla_f64_select(x >= 0.0f, 1.0, e) / d);
    return hyla_f32_select(x == x, s, x); /* NaN stays NaN */
}

static inline float hyla_silu(float x) { return x * hyla_sigmoid(x); }

/* A sigmoid's weight in a parallel region's work estimate (core/parallel.h's HYLA_PAR_IF): its exp in
 * double and a division, ~32 operations (a decoded token's SwiGLU of 3,584 values, counted at 8 a
 * value, ran on one thread: 6 us there, ~3 on two). */
#define HYLA_SIGMOID_WORK 32

#endif
