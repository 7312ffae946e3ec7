/* Gated DeltaNet pieces around the delta rule (spec §3.4 steps 3-4, §5): the causal depthwise
 * conv + SiLU over [q|k|v] and the decay / write-strength gates.
 *
 * Both are elementwise over rows (tokens); each output element is computed by one thread in a
 * fixed order, so results do not depend on the thread count. All arithmetic is fp32 (libm
 * expf / log1pf), as in HF's torch path. */
#include <math.h>

#include "ops/ops.h"

/* ---- conv + silu ---------------------------------------------------------------------------- */

/* Input row at time s (may be negative) for the conv window:
 * s >= 0: x[s]; s < 0: hist row K + s (hist holds the K newest raw inputs, oldest first, so
 * s = -1 is hist[K-1]); NULL when there is no history (zero padding). */
static const float *conv_row(const float *x /*[T,C]*/, const float *hist /*[K,C] or NULL*/,
                             int64_t s, int64_t C, int64_t K)
{
    if (s >= 0)
        return x + s * C;
    return hist ? hist + (K + s) * C : NULL;
}

void hyla_conv_silu_fwd(float *y /*[T,C]*/, float *pre /*[T,C] or NULL*/, const float *x /*[T,C]*/,
                        const float *w /*[C,K]*/, const float *hist /*[K,C] or NULL*/, int64_t T,
                        int64_t C, int64_t K)
{
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        float *yt = y + t * C;
        /* yt is the accumulator for pre[t, :]: taps j = 0..K-1 in order (oldest input first) */
        for (int64_t c = 0; c < C; c++)
            yt[c] = 0.0f;
        for (int64_t j = 0; j < K; j++) {
            const float *xs = conv_row(x, hist, t - (K - 1) + j, C, K);
            if (!xs)
                continue; /* zero padding contributes exactly 0 */
            for (int64_t c = 0; c < C; c++)
                yt[c] += w[c * K + j] * xs[c];
        }
        if (pre)
            for (int64_t c = 0; c < C; c++)
                pre[t * C + c] = yt[c];
        for (int64_t c = 0; c < C; c++)
            yt[c] = yt[c] / (1.0f + expf(-yt[c])); /* silu; -0 for very negative inputs */
    }
}

/* ---- gates ---------------------------------------------------------------------------------- */

/* torch.nn.functional.softplus with beta = 1, threshold = 20 (fp32) */
static float softplus20(float s) { return s > 20.0f ? s : log1pf(expf(s)); }

void hyla_gdn_gates_fwd(float *g /*[n,Hv]*/, float *beta /*[n,Hv]*/, const float *a /*[n,Hv]*/,
                        const float *b /*[n,Hv]*/, const float *A_log /*[Hv]*/,
                        const float *dt_bias /*[Hv]*/, int64_t n, int64_t Hv)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t h = 0; h < Hv; h++) {
            int64_t ih = i * Hv + h;
            g[ih] = -expf(A_log[h]) * softplus20(a[ih] + dt_bias[h]);
            beta[ih] = 1.0f / (1.0f + expf(-b[ih]));
        }
    }
}
