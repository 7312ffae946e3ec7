/* Rotary position embedding, rotate-half, partial (spec §3.6).
 *
 * The table follows HF fp32 semantics exactly where the order of operations is visible:
 * inv_freq[i] = 1 / theta^(float(2i) / R) with the exponent, the power and the reciprocal each
 * rounded to fp32; angle = float(pos) * inv_freq[i] rounded to fp32; cos/sin of that fp32
 * angle evaluated in double and rounded to fp32 (HF's fp32 cos/sin differ by at most an ulp). */
#include <math.h>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/ops.h"

void hyla_rope_table(float *cos_t /*[n,R/2]*/, float *sin_t /*[n,R/2]*/, const int64_t *pos /*[n]*/,
                     int64_t n, int64_t R, double theta)
{
    HYLA_ASSERT(R > 0 && R % 2 == 0);
    int64_t half = R / 2;
    float base = (float)theta;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(16 * n * half)
    for (int64_t t = 0; t < n; t++) {
        float p = (float)pos[t];
        for (int64_t i = 0; i < half; i++) {
            float e = (float)(2 * i) / (float)R;
            float pw = (float)pow((double)base, (double)e);
            float inv_freq = 1.0f / pw;
            float ang = p * inv_freq;
            cos_t[t * half + i] = (float)cos((double)ang);
            sin_t[t * half + i] = (float)sin((double)ang);
        }
    }
}

/* Rotate the first R dims of every head by +angle (sign = 1) or -angle (sign = -1, the transpose):
 * x1' = a cos - sign b sin ; x2' = b cos + sign a sin for (a, b) = (x1, x2). Flipping the sign of a
 * product is exact, so the two directions share one loop. */
static void rope_rotate(float *x /*[n,heads,hd]*/, const float *cos_t /*[n,R/2]*/, const float *sin_t /*[n,R/2]*/,
                        int64_t n, int64_t heads, int64_t hd, int64_t R, float sign)
{
    HYLA_ASSERT(R > 0 && R % 2 == 0 && R <= hd);
    int64_t half = R / 2;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * heads * R)
    for (int64_t t = 0; t < n; t++) {
        const float *c = cos_t + t * half, *s = sin_t + t * half;
        for (int64_t h = 0; h < heads; h++) {
            float *x1 = x + (t * heads + h) * hd, *x2 = x1 + half;
            for (int64_t i = 0; i < half; i++) {
                float a = x1[i], b = x2[i];
                x1[i] = a * c[i] - (sign * b) * s[i];
                x2[i] = b * c[i] + (sign * a) * s[i];
            }
        }
    }
}

void hyla_rope_fwd(float *x /*[n,heads,hd]*/, const float *cos_t /*[n,R/2]*/,
                   const float *sin_t /*[n,R/2]*/, int64_t n, int64_t heads, int64_t hd, int64_t R)
{
    rope_rotate(x, cos_t, sin_t, n, heads, hd, R, 1.0f);
}

/* Backward = the transpose of the rotation (rotation by -angle) on the first R dims, identity on
 * the rest (spec §8.9). */
void hyla_rope_bwd(float *dx /*[n,heads,hd]*/, const float *cos_t /*[n,R/2]*/,
                   const float *sin_t /*[n,R/2]*/, int64_t n, int64_t heads, int64_t hd, int64_t R)
{
    rope_rotate(dx, cos_t, sin_t, n, heads, hd, R, -1.0f);
}
