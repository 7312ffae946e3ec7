/* Norms (spec §3.1, §3.2, §3.4 step 6): zero-centred RMSNorm, gated RMSNorm, L2 norm.
 *
 * One row per OpenMP iteration; each row is reduced by one thread in a fixed order, so results
 * do not depend on the thread count. Sums of squares are accumulated in double (more accurate
 * than HF's fp32 mean; the difference is rounding only). rstd, when saved, is the fp32 factor
 * actually applied: 1/sqrt(mean(x^2) + eps) (rmsnorm variants) or 1/sqrt(sum(x^2) + eps). */
#include <math.h>

#include "ops/ops.h"

/* sum_j x[j]^2 in double; vectorised in a fixed (compile-time) order */
static double sum_squares(const float *x /*[d]*/, int64_t d)
{
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; j++)
        ss += (double)x[j] * (double)x[j];
    return ss;
}

static float silu(float z) { return z / (1.0f + expf(-z)); }

void hyla_rmsnorm1p_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/, const float *x /*[n,d]*/,
                        const float *w /*[d]*/, int64_t n, int64_t d, float eps)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d;
        float *yi = y + i * d; /* may alias xi: element j is read before it is written */
        float r = (float)(1.0 / sqrt(sum_squares(xi, d) / (double)d + (double)eps));
        if (rstd)
            rstd[i] = r;
        for (int64_t j = 0; j < d; j++)
            yi[j] = (xi[j] * r) * (1.0f + w[j]);
    }
}

void hyla_gated_rmsnorm_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/,
                            const float *x /*[n,d]*/, const float *z /*[n,d]*/,
                            const float *w /*[d]*/, int64_t n, int64_t d, float eps)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d, *zi = z + i * d;
        float *yi = y + i * d;
        float r = (float)(1.0 / sqrt(sum_squares(xi, d) / (double)d + (double)eps));
        if (rstd)
            rstd[i] = r;
        for (int64_t j = 0; j < d; j++)
            yi[j] = (w[j] * (xi[j] * r)) * silu(zi[j]);
    }
}

void hyla_l2norm_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/, const float *x /*[n,d]*/,
                     int64_t n, int64_t d, float eps, float scale)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d;
        float *yi = y + i * d; /* may alias xi */
        float r = (float)(1.0 / sqrt(sum_squares(xi, d) + (double)eps));
        if (rstd)
            rstd[i] = r;
        for (int64_t j = 0; j < d; j++)
            yi[j] = (xi[j] * r) * scale;
    }
}
