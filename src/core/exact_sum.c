/* Order-independent exact sum of non-negative doubles (exact_sum.h). */
#include "core/exact_sum.h"

#include <math.h>
#include <string.h>

void hyla_exact_sum_init(hyla_exact_sum *s) { memset(s, 0, sizeof *s); }

void hyla_exact_sum_normalize(hyla_exact_sum *s)
{
    int64_t carry = 0;
    for (int i = 0; i < HYLA_XSUM_LIMBS; i++) {
        int64_t v = s->limb[i] + carry;
        s->limb[i] = v & 0xffffffff; /* non-negative inputs: every limb stays >= 0 */
        carry = v >> 32;
    }
    s->adds = 0;
}

void hyla_exact_sum_add(hyla_exact_sum *s, double x)
{
    if (!isfinite(x)) {
        s->nonfinite = 1;
        return;
    }
    if (x == 0.0)
        return;
    int e;
    double f = frexp(x, &e);                      /* x = f 2^e, f in [0.5, 1) */
    uint64_t m = (uint64_t)ldexp(f, 53);          /* x = m 2^(e - 53), exact */
    int p = e - 53 + HYLA_XSUM_BIAS;              /* bit position of m's lowest bit (>= 32 for every double) */
    int i = p / 32, sh = p % 32;
    unsigned __int128 v = (unsigned __int128)m << sh; /* at most 85 bits: three digits */
    s->limb[i] += (int64_t)(uint64_t)(v & 0xffffffff);
    s->limb[i + 1] += (int64_t)(uint64_t)((v >> 32) & 0xffffffff);
    s->limb[i + 2] += (int64_t)(uint64_t)(v >> 64);
    if (++s->adds == ((int64_t)1 << 30))
        hyla_exact_sum_normalize(s);
}

void hyla_exact_sum_merge(hyla_exact_sum *a, const hyla_exact_sum *b)
{
    for (int i = 0; i < HYLA_XSUM_LIMBS; i++)
        a->limb[i] += b->limb[i];
    a->nonfinite |= b->nonfinite;
    hyla_exact_sum_normalize(a);
}

double hyla_exact_sum_value(hyla_exact_sum *s)
{
    if (s->nonfinite)
        return INFINITY;
    hyla_exact_sum_normalize(s);
    double v = 0.0;
    for (int i = HYLA_XSUM_LIMBS - 1; i >= 0; i--) /* most significant first */
        if (s->limb[i])
            v += ldexp((double)s->limb[i], 32 * i - HYLA_XSUM_BIAS);
    return v;
}
