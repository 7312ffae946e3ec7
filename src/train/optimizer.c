#include "train/optimizer.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/finite.h"
#include "core/pages.h"
#include "core/parallel.h"
#include "parallel/shard.h"
#include "model/model.h"

int hyla_adamw_init(hyla_adamw *opt, const hyla_adamw_config *cfg, size_t n_floats)
{
    memset(opt, 0, sizeof *opt);
    opt->cfg = *cfg;
    opt->n_floats = n_floats;
    opt->m = hyla_pages_map(n_floats * sizeof(float)); /* streamed every step: huge pages where there are */
    opt->v = hyla_pages_map(n_floats * sizeof(float));
    if (!opt->m || !opt->v) {
        hyla_adamw_free(opt);
        return hyla_error_set(HYLA_ERR_NOMEM, "optimizer: cannot allocate %zu moment floats", 2 * n_floats);
    }
    /* zeroed by writing (not calloc's lazy zero pages): the pages fault in here, not in step 1 */
    memset(opt->m, 0, n_floats * sizeof(float));
    memset(opt->v, 0, n_floats * sizeof(float));
    return HYLA_OK;
}

void hyla_adamw_free(hyla_adamw *opt)
{
    hyla_pages_unmap(opt->m, opt->n_floats * sizeof(float));
    hyla_pages_unmap(opt->v, opt->n_floats * sizeof(float));
    memset(opt, 0, sizeof *opt);
}

enum { SUMSQ_LANES = 8, NORM_GROUP = 256 }; /* lanes of one block's sum; blocks per parallel group */

/* One block's sum of squares in double: element j goes to lane j mod 8 (in element order within
 * its lane), and the lanes add as a fixed tree. The order is a function of the block alone (not
 * of threads or of where the block sits), and the lanes vectorise. */
static double block_sumsq(const float *g, int64_t n)
{
    double lane[SUMSQ_LANES] = {0};
    int64_t j = 0;
    for (; j + SUMSQ_LANES <= n; j += SUMSQ_LANES)
        for (int q = 0; q < SUMSQ_LANES; q++)
            lane[q] += (double)g[j + q] * (double)g[j + q];
    for (int q = 0; j + q < n; q++)
        lane[q] += (double)g[j + q] * (double)g[j + q];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

void hyla_grad_block_sums(const float *g, int64_t len, double *out)
{
    int64_t blocks = (len + HYLA_SHARD_ALIGN - 1) / HYLA_SHARD_ALIGN;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(len)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t j0 = b * HYLA_SHARD_ALIGN, j1 = j0 + HYLA_SHARD_ALIGN < len ? j0 + HYLA_SHARD_ALIGN : len;
        out[b] = block_sumsq(g + j0, j1 - j0);
    }
}

/* Every block sum of g[0..len) in block order, summed in parallel a group at a time: into the
 * exact accumulator when there is one, else added in double to *plain. */
static void add_block_sums(const float *g, int64_t len, hyla_exact_sum *exact, double *plain)
{
    double sums[NORM_GROUP];
    for (int64_t lo = 0; lo < len; lo += (int64_t)NORM_GROUP * HYLA_SHARD_ALIGN) {
        int64_t n = len - lo < (int64_t)NORM_GROUP * HYLA_SHARD_ALIGN ? len - lo : (int64_t)NORM_GROUP * HYLA_SHARD_ALIGN;
        hyla_grad_block_sums(g + lo, n, sums);
        for (int64_t b = 0; b * HYLA_SHARD_ALIGN < n; b++) {
            if (exact)
                hyla_exact_sum_add(exact, sums[b]);
            else
                *plain += sums[b];
        }
    }
}

void hyla_grad_sumsq_add(hyla_exact_sum *acc, const float *g, int64_t len) { add_block_sums(g, len, acc, NULL); }

double hyla_grad_norm(const hyla_param_table *t, const float *grads)
{
    hyla_exact_sum acc;
    hyla_exact_sum_init(&acc);
    for (int i = 0; i < t->n_params; i++)
        hyla_grad_sumsq_add(&acc, grads + t->params[i].offset, t->params[i].numel);
    return sqrt(hyla_exact_sum_value(&acc));
}

void hyla_adamw_begin(hyla_adamw *opt)
{
    opt->step++;
    opt->bc1 = 1.0 - pow(opt->cfg.beta1, (double)opt->step);
    opt->bc2 = 1.0 - pow(opt->cfg.beta2, (double)opt->step);
}

static int nonfinite_gradient(int64_t step, const hyla_param *p)
{
    char name[96];
    hyla_param_label(p, name, sizeof name);
    return hyla_error_set(HYLA_ERR_NUMERIC, "step %lld: non-finite gradient (NaN or infinity) in %s; the update was not "
                          "applied", (long long)step, name);
}

/* One parameter's update with gradient g scaled by `scale`; the number of weights it left
 * non-finite (counted in the same pass: free next to the update's own traffic). */
enum { ADAMW_BLOCK = 4096 }; /* floats updated together: 4 arrays of 16 KB stay in L1/L2 */

static int64_t update_param(hyla_adamw *opt, const hyla_param *p, float *weights, const float *g, double scale)
{
    const hyla_adamw_config *c = &opt->cfg;
    if ((p->mtp && !opt->train_mtp) || (!p->mtp && opt->only_mtp))
        return 0; /* no loss reaches the MTP head: it stays as loaded; or the trunk is frozen */
    float *w = weights + p->offset, *m = opt->m + p->offset, *v = opt->v + p->offset;
    double decay = p->ndim >= 2 ? c->weight_decay : 0.0;
    float wd_factor = (float)(1.0 - c->lr * decay);
    float b1 = (float)c->beta1, b2 = (float)c->beta2, lr = (float)c->lr, eps = (float)c->eps;
    float s = (float)scale, rbc1 = (float)(1.0 / opt->bc1), rbc2 = (float)(1.0 / opt->bc2);
    uint16_t *w16 = opt->bf16_copy && hyla_role_is_matrix(p->role) ? opt->bf16_copy + p->offset : NULL;
    int64_t bad = 0, blocks = (p->numel + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
    /* one pass over the parameter, a cache-sized block at a time: the update (a branch-free loop
     * the compiler vectorises; every element's arithmetic is its own, so the results do not
     * depend on it), then the block's bf16 copy while it is in cache */
#pragma omp parallel for schedule(static) reduction(+ : bad) HYLA_PAR_IF(8 * p->numel)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t j0 = b * ADAMW_BLOCK, j1 = j0 + ADAMW_BLOCK < p->numel ? j0 + ADAMW_BLOCK : p->numel;
        int64_t block_bad = 0;
#pragma omp simd reduction(+ : block_bad)
        for (int64_t j = j0; j < j1; j++) {
            float gj = g[j] * s;
            float mj = b1 * m[j] + (1.0f - b1) * gj, vj = b2 * v[j] + (1.0f - b2) * gj * gj;
            float wj = w[j] * wd_factor - lr * (mj * rbc1) / (sqrtf(vj * rbc2) + eps);
            m[j] = mj, v[j] = vj, w[j] = wj;
            block_bad += !(fabsf(wj) <= FLT_MAX); /* inf or NaN, without a branch */
        }
        bad += block_bad;
        if (w16)
            hyla_bf16_pack_serial(w16 + j0, w + j0, j1 - j0);
    }
    return bad;
}

static int nonfinite_weights(const hyla_adamw *opt, const hyla_param *p, int64_t bad)
{
    char name[96];
    hyla_param_label(p, name, sizeof name);
    return hyla_error_set(HYLA_ERR_NUMERIC, "step %lld: the update left %lld weights of %s non-finite (learning rate "
                          "%.3g too high?)", (long long)opt->step, (long long)bad, name, opt->cfg.lr);
}

int hyla_adamw_update_param(hyla_adamw *opt, const hyla_param *p, float *weights, const float *g, double *sumsq)
{
    double ss = 0.0;
    add_block_sums(g, p->numel, NULL, &ss);
    if (!isfinite(ss))
        return nonfinite_gradient(opt->step, p); /* already this step's number (hyla_adamw_begin) */
    *sumsq += ss;
    int64_t bad = update_param(opt, p, weights, g, 1.0);
    return bad ? nonfinite_weights(opt, p, bad) : HYLA_OK;
}

int hyla_adamw_step(hyla_adamw *opt, const hyla_param_table *t, float *weights, float *grads, double *norm_out)
{
    const hyla_adamw_config *c = &opt->cfg;
    double norm = hyla_grad_norm(t, grads);
    *norm_out = norm;
    if (!isfinite(norm)) { /* nothing is updated: name the first tensor that went non-finite */
        HYLA_TRY(hyla_grad_check_finite(opt, t, grads));
        /* none is: the squares overflowed double (finite but astronomically large gradients) */
        return hyla_error_set(HYLA_ERR_NUMERIC, "step %lld: gradient norm overflows; the update was not applied",
                              (long long)opt->step + 1);
    }
    return hyla_adamw_apply(opt, t, weights, grads, hyla_clip_scale(c, norm));
}

double hyla_clip_scale(const hyla_adamw_config *c, double norm)
{
    return (c->clip > 0 && norm > c->clip) ? c->clip / (norm + 1e-6) : 1.0;
}

int hyla_adamw_apply(hyla_adamw *opt, const hyla_param_table *t, float *weights, const float *grads, double scale)
{
    hyla_adamw_begin(opt);
    for (int i = 0; i < t->n_params; i++) {
        int64_t bad = update_param(opt, &t->params[i], weights, grads + t->params[i].offset, scale);
        if (bad)
            return nonfinite_weights(opt, &t->params[i], bad);
    }
    return HYLA_OK;
}

int hyla_grad_check_finite(const hyla_adamw *opt, const hyla_param_table *t, const float *grads)
{
    for (int i = 0; i < t->n_params; i++)
        if (hyla_first_nonfinite(grads + t->params[i].offset, (size_t)t->params[i].numel) < (size_t)t->params[i].numel)
            return nonfinite_gradient(opt->step + 1, &t->params[i]);
    return HYLA_OK;
}

int hyla_lr_schedule_parse(const char *text, hyla_schedule_kind *out)
{
    if (!strcmp(text, "cosine"))
        *out = HYLA_SCHED_COSINE;
    else if (!strcmp(text, "wsd"))
        *out = HYLA_SCHED_WSD;
    else if (!strcmp(text, "constant"))
        *out = HYLA_SCHED_CONSTANT;
    else
        return hyla_error_set(HYLA_ERR_ARG, "unknown schedule '%s' (known: cosine, wsd, constant)", text);
    return HYLA_OK;
}

/* Warmup: peak * (s + 1) / warmup for s < warmup.
 * cosine: p = (s - warmup) / (total - warmup); min + (peak - min) (1 + cos(pi p)) / 2.
 * wsd: peak until the last decay_fraction of the steps, then linear to min_lr at the last step.
 * constant: peak after warmup. */
double hyla_lr_at(const hyla_lr_schedule *s, int64_t step)
{
    if (step < s->warmup)
        return s->peak * (double)(step + 1) / (double)s->warmup;
    int64_t span = s->total - s->warmup;
    if (span <= 0 || s->kind == HYLA_SCHED_CONSTANT)
        return s->peak;
    double p = (double)(step - s->warmup) / (double)span;
    if (p > 1.0)
        p = 1.0;
    if (s->kind == HYLA_SCHED_COSINE)
        return s->min_lr + 0.5 * (s->peak - s->min_lr) * (1.0 + cos(M_PI * p));
    double decay_start = 1.0 - s->decay_fraction;
    if (p <= decay_start)
        return s->peak;
    double q = s->decay_fraction > 0 ? (p - decay_start) / s->decay_fraction : 1.0;
    return s->peak + (s->min_lr - s->peak) * q;
}
