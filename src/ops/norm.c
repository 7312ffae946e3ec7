/* Norms (spec §3.1, §3.2, §3.4 step 6): zero-centred RMSNorm, gated RMSNorm, L2 norm.
 *
 * One row per OpenMP iteration; each row is reduced by one thread in a fixed order, so results
 * do not depend on the thread count. Sums of squares and the backward's row dots are accumulated
 * in double (more accurate than HF's fp32 mean; the difference is rounding only), vectorised in a
 * fixed (compile-time) order: a serial double sum had been one add's latency per element (the
 * 0.8B LoRA step's two norm backwards 10 ms each). rstd, when saved, is the fp32 factor
 * actually applied: 1/sqrt(mean(x^2) + eps) (rmsnorm variants) or 1/sqrt(sum(x^2) + eps). */
#include <math.h>

#include "core/error.h"
#include "core/parallel.h"
#include "core/sigmoid.h"
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


void hyla_rmsnorm1p_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/, const float *x /*[n,d]*/,
                        const float *w /*[d]*/, int64_t n, int64_t d, float eps)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * d)
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

__attribute__((noinline)) void hyla_gated_rmsnorm_row(float *y /*[d]*/, float *rstd /*[1] or NULL*/,
                                                     const float *x /*[d]*/, const float *z /*[d]*/,
                                                     const float *w /*[d]*/, int64_t d, float eps)
{
    float r = (float)(1.0 / sqrt(sum_squares(x, d) / (double)d + (double)eps));
    if (rstd)
        *rstd = r;
#pragma omp simd
    for (int64_t j = 0; j < d; j++)
        y[j] = (w[j] * (x[j] * r)) * hyla_silu(z[j]);
}

void hyla_gated_rmsnorm_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/,
                            const float *x /*[n,d]*/, const float *z /*[n,d]*/,
                            const float *w /*[d]*/, int64_t n, int64_t d, float eps)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * d * (1 + HYLA_SIGMOID_WORK))
    for (int64_t i = 0; i < n; i++)
        hyla_gated_rmsnorm_row(y + i * d, rstd ? rstd + i : NULL, x + i * d, z + i * d, w, d, eps);
}

__attribute__((noinline)) void hyla_l2norm_row(float *y /*[d]*/, float *rstd /*[1] or NULL*/,
                                              const float *x /*[d]*/, int64_t d, float eps, float scale)
{
    float r = (float)(1.0 / sqrt(sum_squares(x, d) + (double)eps)); /* (y may alias x) */
    if (rstd)
        *rstd = r;
    for (int64_t j = 0; j < d; j++)
        y[j] = (x[j] * r) * scale;
}

void hyla_l2norm_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/, const float *x /*[n,d]*/,
                     int64_t n, int64_t d, float eps, float scale)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * d)
    for (int64_t i = 0; i < n; i++)
        hyla_l2norm_row(y + i * d, rstd ? rstd + i : NULL, x + i * d, d, eps, scale);
}

/* ---- backward (spec §8.1-8.3) -------------------------------------------------------------
 * r is the forward's factor: taken from rstd, or recomputed with the forward's exact expression.
 * Row dots (x.u, x.dy) are accumulated in double like the forward's sum of squares. Activation
 * gradients are overwritten and each row reads all of dy before writing, so dx (or dz) may alias
 * dy. dw is accumulated: rows are cut into blocks of HYLA_NORM_RB (fixed), each block's partial
 * is summed in row order by one thread and the partials are added into dw in block order
 * (`omp ordered`), so dw does not depend on the thread count. */

#define HYLA_NORM_RB 32    /* rows per block of the dw reduction */
#define HYLA_NORM_MAXD 65536 /* bounds the per-thread partial (on the stack) */

static float rms_factor(const float *x /*[d]*/, int64_t d, float eps)
{
    return (float)(1.0 / sqrt(sum_squares(x, d) / (double)d + (double)eps)); /* as forward */
}


/* u = dy (1+w); dx = r u - (r^3/d) x (x.u); dw += dy (x r). */
void hyla_rmsnorm1p_bwd(float *dx /*[n,d]*/, float *dw /*[d] +=*/, const float *dy /*[n,d]*/,
                        const float *x /*[n,d]*/, const float *w /*[d]*/,
                        const float *rstd /*[n] or NULL*/, int64_t n, int64_t d, float eps)
{
    if (n <= 0 || d <= 0)
        return;
    HYLA_ASSERT(d <= HYLA_NORM_MAXD);
    int64_t nb = (n + HYLA_NORM_RB - 1) / HYLA_NORM_RB;
#pragma omp parallel HYLA_PAR_IF(n * d)
    {
        float part[d]; /* this thread's block partial of dw */
#pragma omp for schedule(dynamic, 1) ordered
        for (int64_t b = 0; b < nb; b++) {
            for (int64_t j = 0; j < d; j++)
                part[j] = 0.0f;
            int64_t i1 = (b + 1) * HYLA_NORM_RB < n ? (b + 1) * HYLA_NORM_RB : n;
            for (int64_t i = b * HYLA_NORM_RB; i < i1; i++) {
                const float *xi = x + i * d, *gi = dy + i * d;
                float *dxi = dx + i * d;
                float r = rstd ? rstd[i] : rms_factor(xi, d, eps);
                double dot = 0.0;
#pragma omp simd reduction(+ : dot)
                for (int64_t j = 0; j < d; j++)
                    dot += (double)xi[j] * (double)(gi[j] * (1.0f + w[j]));
                float c = (float)((double)r * r * r * dot / (double)d);
#pragma omp simd
                for (int64_t j = 0; j < d; j++) {
                    float g = gi[j]; /* read before dx[j] is written (alias) */
                    part[j] += g * (xi[j] * r);
                    dxi[j] = r * (g * (1.0f + w[j])) - c * xi[j];
                }
            }
#pragma omp ordered
            for (int64_t j = 0; dw && j < d; j++) /* dw NULL: a frozen weight */
                dw[j] += part[j];
        }
    }
}

/* n = x r, y = w n silu(z): u = dy w silu(z); dx = r u - (r^3/d) x (x.u);
 * dw += dy n silu(z); dz = dy w n s (1 + z (1 - s)), s = sigmoid(z). */
void hyla_gated_rmsnorm_bwd(float *dx /*[n,d]*/, float *dz /*[n,d]*/, float *dw /*[d] +=*/,
                            const float *dy /*[n,d]*/, const float *x /*[n,d]*/,
                            const float *z /*[n,d]*/, const float *w /*[d]*/,
                            const float *rstd /*[n] or NULL*/, int64_t n, int64_t d, float eps)
{
    if (n <= 0 || d <= 0)
        return;
    HYLA_ASSERT(d <= HYLA_NORM_MAXD);
    int64_t nb = (n + HYLA_NORM_RB - 1) / HYLA_NORM_RB;
#pragma omp parallel HYLA_PAR_IF(n * d)
    {
        float part[d], sg[d], sl[d]; /* the row's sigma(z) and silu(z) = z sigma(z) (hyla_silu), once each */
#pragma omp for schedule(dynamic, 1) ordered
        for (int64_t b = 0; b < nb; b++) {
            for (int64_t j = 0; j < d; j++)
                part[j] = 0.0f;
            int64_t i1 = (b + 1) * HYLA_NORM_RB < n ? (b + 1) * HYLA_NORM_RB : n;
            for (int64_t i = b * HYLA_NORM_RB; i < i1; i++) {
                const float *xi = x + i * d, *zi = z + i * d, *gi = dy + i * d;
                float *dxi = dx + i * d, *dzi = dz + i * d;
                float r = rstd ? rstd[i] : rms_factor(xi, d, eps);
#pragma omp simd
                for (int64_t j = 0; j < d; j++) {
                    sg[j] = hyla_sigmoid(zi[j]);
                    sl[j] = zi[j] * sg[j];
                }
                double dot = 0.0;
#pragma omp simd reduction(+ : dot)
                for (int64_t j = 0; j < d; j++)
                    dot += (double)xi[j] * (double)(gi[j] * w[j] * sl[j]);
                float c = (float)((double)r * r * r * dot / (double)d);
#pragma omp simd
                for (int64_t j = 0; j < d; j++) {
                    float g = gi[j], zj = zi[j], s = sg[j];
                    float nj = xi[j] * r;
                    part[j] += g * nj * sl[j];
                    dxi[j] = r * (g * w[j] * sl[j]) - c * xi[j];
                    dzi[j] = g * w[j] * nj * (s * (1.0f + zj * (1.0f - s)));
                }
            }
#pragma omp ordered
            for (int64_t j = 0; dw && j < d; j++) /* dw NULL: a frozen weight */
                dw[j] += part[j];
        }
    }
}

/* y = scale x r, r = (sum x^2 + eps)^-1/2:  dx = scale r (dy - r^2 (dy.x) x). */
void hyla_l2norm_bwd(float *dx /*[n,d]*/, const float *dy /*[n,d]*/, const float *x /*[n,d]*/,
                     const float *rstd /*[n] or NULL*/, int64_t n, int64_t d, float eps,
                     float scale)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * d)
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d, *gi = dy + i * d;
        float *dxi = dx + i * d; /* may alias gi */
        float r = rstd ? rstd[i] : (float)(1.0 / sqrt(sum_squares(xi, d) + (double)eps));
        double dot = 0.0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < d; j++)
            dot += (double)gi[j] * (double)xi[j];
        float c = (float)((double)r * r * dot), sr = scale * r;
#pragma omp simd
        for (int64_t j = 0; j < d; j++)
            dxi[j] = sr * (gi[j] - c * xi[j]);
    }
}
