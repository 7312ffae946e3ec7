/* Whole-model forward (spec §3.3, §3.8). */
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/profile.h"
#include "model/layers.h"
#include "ops/ops.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

size_t hyla_forward_work_bytes(const hyla_config *cfg, int64_t B, int64_t T)
{
    int64_t n = B * T, H = cfg->hidden, E = cfg->n_experts > 0 ? cfg->n_experts : 1;
    size_t layer = 0;
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        layer = max_sz(layer, cfg->layer_kind[l] == HYLA_LAYER_FULL ? hyla_attn_layer_work_bytes(cfg, n, T)
                                                                    : hyla_gdn_layer_work_bytes(cfg, n, T));
        layer = max_sz(layer, cfg->layer_is_moe[l] ? hyla_moe_layer_work_bytes(cfg, n) : hyla_mlp_layer_work_bytes(cfg, n));
    }
    return 3 * hyla_fbytes(n * H)               /* residual, normed, part output */
         + hyla_align_up((size_t)n * sizeof(int64_t)) /* positions */
         + hyla_fbytes(n)                       /* labels */
         + 2 * hyla_align_up((size_t)E * sizeof(double))
         + hyla_fbytes(n * cfg->vocab)          /* logits when the caller passes none */
         + layer;
}

static void embed(float *x, const float *table, const int32_t *tokens, int64_t n, int64_t H)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(x + i * H, table + (int64_t)tokens[i] * H, (size_t)H * sizeof *x);
}

static void add_inplace(float *x, const float *y, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] += y[i];
}

int hyla_forward(const hyla_model *m, const int32_t *tokens, const int32_t *labels, int64_t B, int64_t T,
                 hyla_delta_mode mode, float *logits, hyla_forward_out *out)
{
    const hyla_config *cfg = &m->cfg;
    int64_t n = B * T, H = cfg->hidden, V = cfg->vocab;
    if (B < 1 || T < 1)
        return hyla_error_set(HYLA_ERR_ARG, "forward: need at least one token (got B=%lld, T=%lld)", (long long)B, (long long)T);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return hyla_error_set(HYLA_ERR_ARG, "token id %d at position %lld is out of range [0, %lld)",
                                  tokens[i], (long long)i, (long long)V);
    hyla_arena arena;
    HYLA_TRY(hyla_arena_init(&arena, "forward", hyla_forward_work_bytes(cfg, B, T)));

    float *x = hyla_arena_floats(&arena, (size_t)(n * H));     /* [n, H] residual stream */
    float *xn = hyla_arena_floats(&arena, (size_t)(n * H));    /* [n, H] normed */
    float *part = hyla_arena_floats(&arena, (size_t)(n * H));  /* [n, H] mixer / FFN output */
    int64_t *pos = hyla_arena_alloc(&arena, (size_t)n * sizeof(int64_t));
    int32_t *lab = hyla_arena_alloc(&arena, (size_t)n * sizeof(int32_t));
    int64_t E = cfg->n_experts > 0 ? cfg->n_experts : 1;
    double *aux_counts = hyla_arena_alloc(&arena, (size_t)E * sizeof(double));
    double *aux_psum = hyla_arena_alloc(&arena, (size_t)E * sizeof(double));
    memset(aux_counts, 0, (size_t)E * sizeof(double));
    memset(aux_psum, 0, (size_t)E * sizeof(double));
    if (!logits)
        logits = hyla_arena_floats(&arena, (size_t)(n * V));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            pos[b * T + t] = t;
            lab[b * T + t] = labels ? labels[b * T + t] : (t + 1 < T ? tokens[b * T + t + 1] : -100);
        }

    hyla_fwd_ctx ctx = {m, B, T, n, pos, mode, &arena, aux_counts, aux_psum, 0};
    float eps = (float)cfg->rms_norm_eps;
    embed(x, hyla_model_param(m, HYLA_P_EMBED, -1), tokens, n, H);
    for (int b = 0; b < m->sched.n_blocks; b++) {
        const hyla_block *blk = &m->sched.blocks[b];
        for (int l = blk->first_layer; l < blk->first_layer + blk->n_layers; l++) {
            double t0 = HYLA_PROF_BEGIN();
            hyla_rmsnorm1p_fwd(xn, NULL, x, hyla_model_param(m, HYLA_P_INPUT_NORM, l), n, H, eps);
            HYLA_PROF_END(HYLA_PROF_NORM, t0);
            if (cfg->layer_kind[l] == HYLA_LAYER_FULL)
                hyla_attn_layer_fwd(&ctx, l, part, xn);
            else
                hyla_gdn_layer_fwd(&ctx, l, part, xn);
            t0 = HYLA_PROF_BEGIN();
            add_inplace(x, part, n * H);
            hyla_rmsnorm1p_fwd(xn, NULL, x, hyla_model_param(m, HYLA_P_POST_NORM, l), n, H, eps);
            HYLA_PROF_END(HYLA_PROF_NORM, t0);
            if (cfg->layer_is_moe[l])
                hyla_moe_layer_fwd(&ctx, l, part, xn);
            else
                hyla_mlp_layer_fwd(&ctx, l, part, xn);
            t0 = HYLA_PROF_BEGIN();
            add_inplace(x, part, n * H);
            HYLA_PROF_END(HYLA_PROF_NORM, t0);
        }
    }
    double t0 = HYLA_PROF_BEGIN();
    hyla_rmsnorm1p_fwd(xn, NULL, x, hyla_model_param(m, HYLA_P_FINAL_NORM, -1), n, H, eps);
    hyla_linear(logits, xn, hyla_model_param(m, HYLA_P_LM_HEAD, -1), n, H, V, 0);
    HYLA_PROF_END(HYLA_PROF_LM_HEAD, t0);
    t0 = HYLA_PROF_BEGIN();

    int64_t count = 0;
    double ce_sum = hyla_cross_entropy_fwd(logits, lab, n, V, &count);
    out->ce_count = count;
    out->ce_loss = count > 0 ? ce_sum / (double)count : NAN;
    out->aux_loss = ctx.aux_rows > 0 ? hyla_aux_loss_finish(aux_counts, aux_psum, ctx.aux_rows, cfg->n_experts) : NAN;
    out->total_loss = ctx.aux_rows > 0 ? out->ce_loss + cfg->router_aux_loss_coef * out->aux_loss : out->ce_loss;
    HYLA_PROF_END(HYLA_PROF_LOSS, t0);
    hyla_arena_free(&arena);
    return HYLA_OK;
}
