/* Losses (spec §3.8): summed cross-entropy with ignored labels, router load-balancing loss.
 *
 * Cross-entropy rows are split into HYLA_CE_CHUNKS contiguous chunks fixed by n alone; each
 * chunk is summed in row order by one thread and the chunk sums are added in chunk order, so
 * the result is the same for any thread count. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/exp_nonpos.h"
#include "core/parallel.h"
#include "ops/ops.h"

#define HYLA_CE_CHUNKS 64
enum { CE_LANES = 16 }; /* a row's exp sum: element j in double lane j mod 16 */

static float row_max(const float *l, int64_t V)
{
    float mx = l[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 1; j < V; j++)
        mx = l[j] > mx ? l[j] : mx;
    return mx;
}

/* sum_j exp(l[j] - mx) in double: exp in fp32 (core/exp_nonpos.h), element j added to lane
 * j mod CE_LANES in element order, the lanes added as a fixed tree, so the sum's order depends
 * on V alone and the loop vectorises. e (may be l itself, or NULL): receives the fp32 exps. */
static double row_exp_sum(const float *l, int64_t V, float mx, float *e)
{
    double lane[CE_LANES] = {0};
    int64_t j = 0;
    for (; j + CE_LANES <= V; j += CE_LANES) {
        float x[CE_LANES];
#pragma omp simd
        for (int q = 0; q < CE_LANES; q++)
            x[q] = hyla_exp_nonpos(l[j + q] - mx);
        if (e)
            memcpy(e + j, x, sizeof x);
#pragma omp simd
        for (int q = 0; q < CE_LANES; q++)
            lane[q] += (double)x[q];
    }
    for (int q = 0; j + q < V; q++) {
        float x = hyla_exp_nonpos(l[j + q] - mx);
        if (e)
            e[j + q] = x;
        lane[q] += (double)x;
    }
    for (int w = CE_LANES / 2; w >= 1; w /= 2)
        for (int q = 0; q < w; q++)
            lane[q] += lane[q + w];
    return lane[0];
}

/* -log softmax(l)[label] = logsumexp(l) - l[label]; exp in fp32 of arguments <= 0, sum and
 * log in double. */
static double ce_row(const float *l /*[V]*/, int64_t V, int32_t label)
{
    float mx = row_max(l, V);
    return (double)mx + log(row_exp_sum(l, V, mx, NULL)) - (double)l[label];
}

/* The chunked sum of both entry points: rows' losses from row_ce (precomputed) or computed here
 * from logits, in the HYLA_CE_CHUNKS grouping fixed by n. */
static double ce_grouped_sum(const double *row_ce, const float *logits, const int32_t *labels, int64_t n, int64_t V,
                             int64_t *count)
{
    double part[HYLA_CE_CHUNKS] = {0};
    int64_t cnt[HYLA_CE_CHUNKS] = {0};
#pragma omp parallel for schedule(dynamic, 1) HYLA_PAR_IF(row_ce ? n : n * V)
    for (int c = 0; c < HYLA_CE_CHUNKS; c++) {
        int64_t r0 = n * c / HYLA_CE_CHUNKS, r1 = n * (c + 1) / HYLA_CE_CHUNKS;
        for (int64_t i = r0; i < r1; i++) {
            if (labels[i] < 0)
                continue;
            HYLA_ASSERT(row_ce || labels[i] < V);
            part[c] += row_ce ? row_ce[i] : ce_row(logits + i * V, V, labels[i]);
            cnt[c]++;
        }
    }
    double sum = 0.0;
    int64_t total = 0;
    for (int c = 0; c < HYLA_CE_CHUNKS; c++) {
        sum += part[c];
        total += cnt[c];
    }
    if (count)
        *count = total;
    return sum;
}

double hyla_cross_entropy_fwd(const float *logits /*[n,V]*/, const int32_t *labels /*[n]*/,
                              int64_t n, int64_t V, int64_t *count)
{
    return ce_grouped_sum(NULL, logits, labels, n, V, count);
}

void hyla_cross_entropy_rows(double *row_ce /*[n]*/, const float *logits /*[n,V]*/, const int32_t *labels /*[n]*/,
                             int64_t n, int64_t V)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * V)
    for (int64_t i = 0; i < n; i++) {
        HYLA_ASSERT(labels[i] < V);
        row_ce[i] = labels[i] < 0 ? 0.0 : ce_row(logits + i * V, V, labels[i]);
    }
}

double hyla_cross_entropy_sum(const double *row_ce /*[n]*/, const int32_t *labels /*[n]*/, int64_t n, int64_t *count)
{
    return ce_grouped_sum(row_ce, NULL, labels, n, 1, count);
}

void hyla_aux_loss_accumulate(double *counts /*[E]*/, double *psum /*[E]*/,
                              const int32_t *top_idx /*[n,k]*/, const float *probs /*[n,E]*/,
                              int64_t n, int64_t E, int64_t k)
{
    for (int64_t i = 0; i < n * k; i++) {
        HYLA_ASSERT(top_idx[i] < E);
        if (top_idx[i] >= 0) /* -1: padding slot of a replayed routing */
            counts[top_idx[i]] += 1.0;
    }
    for (int64_t i = 0; i < n; i++) /* row order: deterministic */
        for (int64_t e = 0; e < E; e++)
            psum[e] += probs[i * E + e];
}

double hyla_aux_loss_finish(const double *counts /*[E]*/, const double *psum /*[E]*/, int64_t rows,
                            int64_t E)
{
    HYLA_ASSERT(rows > 0);
    double s = 0.0;
    for (int64_t e = 0; e < E; e++)
        s += (counts[e] / (double)rows) * (psum[e] / (double)rows);
    return (double)E * s;
}

/* One row's loss and gradient from the same max and exp sum: row_ce as ce_row gives it,
 * dlogits as hyla_cross_entropy_bwd gives it (dl may alias l). */
static double ce_row_bwd(float *dl, const float *l, int64_t V, int32_t lab, float scale)
{
    float mx = row_max(l, V), l_lab = l[lab];
    double sum = row_exp_sum(l, V, mx, dl), inv = (double)scale / sum;
    float e_lab = dl[lab];
#pragma omp simd
    for (int64_t j = 0; j < V; j++)
        dl[j] = (float)((double)dl[j] * inv);
    dl[lab] = (float)((double)e_lab * inv - (double)scale); /* the onehot, subtracted in double */
    return (double)mx + log(sum) - (double)l_lab;
}

void hyla_cross_entropy_rows_bwd(double *row_ce /*[n]*/, float *dlogits /*[n,V]*/, const float *logits /*[n,V]*/,
                                 const int32_t *labels /*[n]*/, int64_t n, int64_t V, float scale)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * V)
    for (int64_t i = 0; i < n; i++) {
        HYLA_ASSERT(labels[i] < V);
        if (labels[i] < 0) {
            row_ce[i] = 0.0;
            memset(dlogits + i * V, 0, (size_t)V * sizeof(float));
        } else
            row_ce[i] = ce_row_bwd(dlogits + i * V, logits + i * V, V, labels[i], scale);
    }
}

/* dlogits = scale (softmax(l) - onehot(label)), softmax as in the forward (max subtracted, exp in
 * fp32, sum in double); 0 on ignored rows. The max pass reads the row whole, then the sum pass
 * writes each exp over element j after reading it (once: the scaling pass reads the exps back),
 * so dlogits may alias logits. */
void hyla_cross_entropy_bwd(float *dlogits /*[n,V]*/, const float *logits /*[n,V]*/,
                            const int32_t *labels /*[n]*/, int64_t n, int64_t V, float scale)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * V)
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * V;
        float *dl = dlogits + i * V;
        int32_t lab = labels[i];
        if (lab < 0) {
            for (int64_t j = 0; j < V; j++)
                dl[j] = 0.0f;
            continue;
        }
        HYLA_ASSERT(lab < V);
        ce_row_bwd(dl, l, V, lab, scale);
    }
}
