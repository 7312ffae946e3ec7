/* An exact sum of non-negative doubles (a fixed-point superaccumulator): the result does not
 * depend on the order of the additions, so partial sums made on different ranks combine into
 * exactly what one process gets. Used for the gradient norm's block sums (train/optimizer.h).
 *
 * A double's value m 2^e (m a 53-bit integer) is added as 32-bit digits into int64 limbs (carry
 * save: 2^31 additions before hyla_exact_sum_normalize is needed; the accumulator normalizes
 * itself every 2^30). Limb i holds the digit of weight 2^(32 i - HYLA_XSUM_BIAS). A non-finite
 * input makes the sum non-finite. */
#ifndef HYLA_CORE_EXACT_SUM_H
#define HYLA_CORE_EXACT_SUM_H

#include <stdint.h>

#define HYLA_XSUM_LIMBS 72  /* 2304 bits: every double's bits and 2^120 of headroom above DBL_MAX */
#define HYLA_XSUM_BIAS 1158 /* the lowest bit of a subnormal's 53-bit m (2^-1126) lands at bit 32 */

typedef struct {
    int64_t limb[HYLA_XSUM_LIMBS];
    int64_t adds;      /* since the last normalization */
    int nonfinite;     /* 0, or 1 when an input was inf or NaN */
} hyla_exact_sum;

void hyla_exact_sum_init(hyla_exact_sum *s);
void hyla_exact_sum_add(hyla_exact_sum *s, double x); /* x >= 0 or non-finite */
/* Carry every limb into a 32-bit digit (the value is unchanged). */
void hyla_exact_sum_normalize(hyla_exact_sum *s);
/* a += b, limb by limb (both normalized; exact). */
void hyla_exact_sum_merge(hyla_exact_sum *a, const hyla_exact_sum *b);
/* The sum as a double: a deterministic function of the exact value (within one ulp). */
double hyla_exact_sum_value(hyla_exact_sum *s);

#endif
