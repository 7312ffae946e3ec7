/* exp(x) for x <= 0 in fp32, branch-free so that loops over it vectorise (softmax and
 * cross-entropy terms, whose arguments have the row's maximum subtracted).
 *
 * x = k ln2 + r with k = round(x / ln2) (the 1.5 * 2^23 rounding trick, exact for |x / ln2| <
 * 2^22) and ln2 split in two (Cody and Waite: 0.693359375 has 9 significant bits, so k * C1 is
 * exact), |r| <= ln2 / 2; exp(r) = 1 + r + r^2 P(r) with Cephes' degree-5 minimax P; then
 * times 2^k by building its exponent bits. Below -87.33 (where 2^k would leave the normal range)
 * the result is 0 instead of a subnormal: such a term is below 1.2e-38 and the sums it joins
 * hold at least exp(0) = 1. A NaN argument gives NaN. Measured error (tests/test_core_ops.c): <= 2 ulp of the double exp
 * over [-87.33, 0]; exp(0) = 1 exactly. No FMA contraction is assumed (-std=c11: off). */
#ifndef HYLA_CORE_EXP_NONPOS_H
#define HYLA_CORE_EXP_NONPOS_H

#include <stdint.h>
#include <string.h>

#define HYLA_EXP_NONPOS_MIN (-87.33f)

static inline float hyla_exp_nonpos(float x)
{
    const float log2e = 1.44269504088896341f, c1 = 0.693359375f, c2 = -2.12194440e-4f, round = 12582912.0f;
    float xc = x >= HYLA_EXP_NONPOS_MIN ? x : HYLA_EXP_NONPOS_MIN; /* (a NaN too: no NaN reaches the int) */
    float k = (xc * log2e + round) - round; /* nearest integer, in [-126, 0] */
    float r = (xc - k * c1) - k * c2;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = (p * (r * r) + r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x >= HYLA_EXP_NONPOS_MIN ? e * scale : (x < HYLA_EXP_NONPOS_MIN ? 0.0f : x); /* NaN stays NaN */
}

#endif
