/* MoE router (spec §3.7 steps 2-4): softmax over all experts, top-k, optional renorm.
 * One row per OpenMP iteration, reduced by one thread in a fixed order: thread-count invariant. */
#include <math.h>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/ops.h"

/* Does (pa, a) come before (pb, b) in the order "probability descending, index ascending"? */
static int route_before(float pa, int64_t a, float pb, int64_t b)
{
    /* NaN (from non-finite activations) orders below every number, so a row always yields k
     * distinct experts; its NaN weights then make the loss NaN, which the trainer reports. */
    pa = isnan(pa) ? -1.0f : pa;
    pb = isnan(pb) ? -1.0f : pb;
    return pa > pb || (pa == pb && a < b);
}

/* probs[e] = softmax(l)[e]: max subtraction, exp in fp32, sum in double. */
static void softmax_row(float *p, const float *l, int64_t E)
{
    float mx = l[0];
    for (int64_t e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    double sum = 0.0;
    for (int64_t e = 0; e < E; e++) {
        p[e] = expf(l[e] - mx);
        sum += p[e];
    }
    double inv = 1.0 / sum;
    for (int64_t e = 0; e < E; e++)
        p[e] = (float)(p[e] * inv);
}

void hyla_moe_route_forced_fwd(float *top_w, float *probs, const float *logits, const int32_t *top_idx, int64_t n,
                               int64_t E, int64_t k, int renorm)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * E)
    for (int64_t i = 0; i < n; i++) {
        float *p = probs + i * E, *w = top_w + i * k;
        const int32_t *idx = top_idx + i * k;
        softmax_row(p, logits + i * E, E);
        double wsum = 0.0;
        for (int64_t s = 0; s < k; s++) {
            w[s] = idx[s] >= 0 ? p[idx[s]] : 0.0f;
            wsum += w[s];
        }
        if (renorm && wsum > 0)
            for (int64_t s = 0; s < k; s++)
                w[s] = (float)(w[s] / wsum);
    }
}

void hyla_moe_route_fwd(int32_t *top_idx /*[n,k]*/, float *top_w /*[n,k]*/,
                        float *probs /*[n,E]*/, const float *logits /*[n,E]*/, int64_t n,
                        int64_t E, int64_t k, int renorm)
{
    HYLA_ASSERT(E > 0 && k > 0 && k <= E && E <= INT32_MAX);
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * E * k)
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * E;
        float *p = probs + i * E;
        int32_t *idx = top_idx + i * k;
        float *w = top_w + i * k;

        softmax_row(p, l, E); /* exp in fp32 (arguments <= 0), sum in double */

        /* top-k by repeated selection: slot s takes the first expert (in the order above) that
         * comes after slot s-1's; no scratch needed, ties go to the lower index. O(k E). */
        float prev_p = INFINITY;
        int64_t prev_e = -1;
        double wsum = 0.0;
        for (int64_t s = 0; s < k; s++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                if (!route_before(prev_p, prev_e, p[e], e))
                    continue; /* already taken (or ahead of the previous slot) */
                if (best < 0 || route_before(p[e], e, p[best], best))
                    best = e;
            }
            HYLA_ASSERT(best >= 0); /* k <= E distinct experts exist; NaN is ordered (route_before) */
            idx[s] = (int32_t)best;
            w[s] = p[best];
            wsum += p[best];
            prev_p = p[best];
            prev_e = best;
        }
        if (renorm)
            for (int64_t s = 0; s < k; s++)
                w[s] = (float)(w[s] / wsum);
    }
}

/* Backward (spec §8.8), one row per OpenMP iteration. top-k indices are constants; with renorm
 * w_s = v_s / V, v_s = probs[idx_s], V = sum_u v_u (summed in slot order in double, as the
 * forward): dv_s = (dw_s - sum_u w_u dw_u) / V; without, dv_s = dw_s. dp_e = aux_dprob[e] +
 * (dv_s if e = idx_s); dlogits = p (dp - <p, dp>). Everything per row in double, rounded once. */
void hyla_moe_route_bwd(float *dlogits /*[n,E]*/, const float *dtop_w /*[n,k]*/,
                        const int32_t *top_idx /*[n,k]*/, const float *probs /*[n,E]*/,
                        const double *aux_dprob /*[E] or NULL*/, int64_t n, int64_t E, int64_t k,
                        int renorm)
{
    HYLA_ASSERT(E > 0 && k > 0 && k <= E);
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * E * k)
    for (int64_t i = 0; i < n; i++) {
        const float *p = probs + i * E, *dw = dtop_w + i * k;
        const int32_t *idx = top_idx + i * k;
        float *dl = dlogits + i * E;
        double vsum = 0.0, wdw = 0.0, pdp = 0.0;
        for (int64_t s = 0; s < k; s++) {
            HYLA_ASSERT(idx[s] < E);
            if (idx[s] >= 0) /* -1: padding slot of a replayed routing (zero weight) */
                vsum += p[idx[s]];
        }
        if (renorm && vsum > 0)
            for (int64_t s = 0; s < k; s++)
                if (idx[s] >= 0)
                    wdw += (double)p[idx[s]] / vsum * (double)dw[s];
#define ROUTE_DV(s) (renorm ? ((double)dw[s] - wdw) / vsum : (double)dw[s])
        if (aux_dprob)
            for (int64_t e = 0; e < E; e++)
                pdp += (double)p[e] * aux_dprob[e];
        for (int64_t s = 0; s < k; s++)
            if (idx[s] >= 0 && vsum > 0)
                pdp += (double)p[idx[s]] * ROUTE_DV(s);
        for (int64_t e = 0; e < E; e++)
            dl[e] = (float)((double)p[e] * ((aux_dprob ? aux_dprob[e] : 0.0) - pdp));
        for (int64_t s = 0; s < k; s++) {
            int32_t e = idx[s];
            if (e < 0 || vsum <= 0)
                continue;
            dl[e] = (float)((double)p[e] * ((aux_dprob ? aux_dprob[e] : 0.0) + ROUTE_DV(s) - pdp));
        }
#undef ROUTE_DV
    }
}
