/* The executor's head: see loss_head.h. */
#include "engine/loss_head.h"

#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/profile.h"
#include "core/quant.h"
#include "model/layer_ops.h"
#include "ops/ops.h"

float *hyla_executor_param_grad(const hyla_executor *ex, float *grads, hyla_role role)
{
    if (ex->m->lora)
        return NULL; /* frozen under an adapter */
    if (role == HYLA_P_LM_HEAD && ex->m->cfg.tie_word_embeddings)
        role = HYLA_P_EMBED;
    size_t off = ex->m->table.params[hyla_param_find(&ex->m->table, role, -1)].offset;
    if (!ex->updates)
        return grads + off;
    return ex->updates->head + hyla_grad_head_index(ex, off);
}

int64_t hyla_head_rows(int64_t n, int64_t vocab)
{
    int64_t fit = HYLA_HEAD_BUDGET_BYTES / ((vocab > 0 ? vocab : 1) * (int64_t)sizeof(float));
    fit = fit / HYLA_HEAD_ROWS * HYLA_HEAD_ROWS;
    fit = fit < HYLA_HEAD_ROWS ? HYLA_HEAD_ROWS : fit > HYLA_HEAD_MAX_ROWS ? HYLA_HEAD_MAX_ROWS : fit;
    if (n <= fit)
        return n <= 0 ? HYLA_HEAD_ROWS : (n + HYLA_HEAD_ROWS - 1) / HYLA_HEAD_ROWS * HYLA_HEAD_ROWS;
    int64_t chunks = (n + fit - 1) / fit, rows = (n + chunks - 1) / chunks; /* rows <= fit */
    return (rows + HYLA_HEAD_ROWS - 1) / HYLA_HEAD_ROWS * HYLA_HEAD_ROWS;
}

/* The head over chunks of ex->head_rows rows: logits [rows, V] exist one chunk at a time (with a
 * caller's logits_out, straight in it), so the working set is O(chunk x vocab), not
 * O(tokens x vocab). A GEMM row comes out the same for any number of rows, and the loss sums
 * per-row values in hyla_cross_entropy_fwd's grouping, so losses, logits and the gradient
 * flowing back are independent of the chunking; lm_head's gradient (a sum over rows) is
 * accumulated in blocks of ex->head_block rows in row order whatever the chunk, so it is too.
 * Every chunk size that is a multiple of the block, or the whole step, gives bit-identical
 * results (tests/test_train.c). By default the block is the chunk: one dW product per chunk, its
 * K as long as the budget allows (at K = 128 the product streams the [V, H] gradient through
 * memory four times per 512 rows and runs at 220 GFLOP/s here; at K = 512 once, at 310). */
/* One head over every row: RMSNorm1p(y; norm role) [n, H], lm_head, cross-entropy against
 * labels; with grads, the gradient of scale x the cross-entropy sum goes back to dy_out [n, H]
 * (dxn_extra [n, H] or NULL: a gradient reaching the normed rows another way, added first) and to
 * the norm's and lm_head's parameters. The trunk's head, and the MTP head's (engine/mtp_loss.c). */
void hyla_head_pass(hyla_executor *ex, const hyla_head_args *a, float *grads, float *logits_out, double *ce_sum,
                    int64_t *ce_count)
{
    const hyla_config *cfg = &ex->m->cfg;
    int64_t n = ex->n, H = cfg->hidden, V = cfg->vocab, rows = n < ex->head_rows ? n : ex->head_rows;
    float eps = (float)cfg->rms_norm_eps, ce_scale = a->scale;
    const float *y = a->y;
    size_t mark = hyla_arena_mark(&ex->work);
    float *xn = hyla_executor_alloc(ex, &ex->work, n * H, 0);
    float *chunk = logits_out ? NULL : hyla_executor_alloc(ex, &ex->work, rows * V, 0);
    double *row_ce = (double *)hyla_executor_alloc(ex, &ex->work, 2 * n, 0); /* [n] doubles */
    float *dxn = grads ? hyla_executor_alloc(ex, &ex->work, n * H, 1) : NULL;
    /* bf16 compute: the normed rows and dlogits are rounded in place; the products widen lm_head
     * rows into this scratch */
    int bf16 = hyla_executor_bf16_compute(ex);
    int64_t wide_floats = hyla_head_scratch_floats(ex->m, rows);
    float *wide = wide_floats ? hyla_executor_alloc(ex, &ex->work, wide_floats, 0) : NULL;
    size_t bytes = hyla_arena_mark(&ex->work) - mark;
    ex->head_bytes = bytes > ex->head_bytes ? bytes : ex->head_bytes;
    if (ex->dry)
        return;
    double t0 = HYLA_PROF_BEGIN();
    const float *wn = hyla_model_param(ex->m, a->norm, -1), *head = hyla_model_param(ex->m, HYLA_P_LM_HEAD, -1);
    const uint16_t *head16 = hyla_model_param_bf16(ex->m, HYLA_P_LM_HEAD, -1);
    float *dhead = grads ? hyla_executor_param_grad(ex, grads, HYLA_P_LM_HEAD) : NULL;
    hyla_rmsnorm1p_fwd(xn, NULL, y, wn, n, H, eps);
    if (bf16) /* lm_head's input: bf16 values (the final norm's backward reads y, not xn) */
        hyla_bf16_round(xn, n * H);
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
        int64_t m = n - r0 < rows ? n - r0 : rows;
        float *logits = logits_out ? logits_out + r0 * V : chunk;
        hyla_head_linear(ex->m, logits, xn + r0 * H, m, wide);
        if (ex->sink && ex->sink_status == HYLA_OK)
            ex->sink_status = ex->sink(ex->sink_ctx, r0, m, logits);
        if (!grads)
            hyla_cross_entropy_rows(row_ce + r0, logits, a->labels + r0, m, V);
        else {
            hyla_cross_entropy_rows_bwd(row_ce + r0, logits, logits, a->labels + r0, m, V, ce_scale); /* in place: dlogits */
            if (bf16) { /* dlogits as a bf16 matmul input (the native dx product packs them to bf16
                         * itself, the same rounding; lm_head's gradient and the widened one need them rounded) */
                if (dhead || !hyla_bf16w_native())
                    hyla_bf16_round(logits, m * V);
                hyla_linear_bf16w_dx(dxn + r0 * H, logits, head16, m, H, V, wide);
            } else
                hyla_linear_bwd(dxn + r0 * H, NULL, logits, xn + r0 * H, head, m, H, V);
            for (int64_t b0 = 0; dhead && b0 < m; b0 += ex->head_block) { /* lm_head's gradient: fixed blocks of rows */
                int64_t bm = m - b0 < ex->head_block ? m - b0 : ex->head_block;
                hyla_linear_bwd(NULL, dhead, logits + b0 * V, xn + (r0 + b0) * H, head, bm, H, V); /* W unused */
            }
        }
    }
    *ce_sum = hyla_cross_entropy_sum(row_ce, a->labels, n, ce_count);
    HYLA_PROF_END("lm_head", t0);
    if (grads && a->dxn_extra)
        for (int64_t i = 0; i < n * H; i++)
            dxn[i] += a->dxn_extra[i];
    if (grads)
        hyla_rmsnorm1p_bwd(a->dy_out, hyla_executor_param_grad(ex, grads, a->norm), dxn, y, wn, NULL, n, H, eps);
}

static void all_rows_head(hyla_executor *ex, float *grads, float *logits_out, float ce_scale, hyla_step_loss *loss)
{
    hyla_head_args a = {HYLA_P_FINAL_NORM, ex->tapes[ex->m->cfg.n_layers - 1].p[HYLA_S_Y], ex->labels, ce_scale,
                        ex->dcarry[0], ex->dhidden};
    hyla_head_pass(ex, &a, grads, logits_out, &loss->ce_sum, &loss->ce_count);
}

/* Inference: each sequence's last row through the final norm and lm_head, logits [B, V]. The
 * norm is per row and a GEMM row does not depend on the other rows' values, so a row's logits
 * are those the all-rows head computes for it up to the product's kernel choice (the GEMM picks
 * its kernel by the row count: the same products, summed in another order; tests/test_decode.c
 * bounds the difference). The working set is B x (H + V) floats, independent of T. */
static void last_rows_head(hyla_executor *ex, float *logits_out, hyla_step_loss *loss)
{
    const hyla_config *cfg = &ex->m->cfg;
    int all_rows = ex->forward_only == HYLA_FORWARD_ROWS;
    int64_t B = ex->B, T = ex->T, H = cfg->hidden, rows = all_rows ? B * T : B;
    int bf16 = hyla_executor_bf16_compute(ex);
    size_t mark = hyla_arena_mark(&ex->work);
    float *xn = hyla_executor_alloc(ex, &ex->work, rows * H, 0);
    int64_t wide_floats = hyla_head_scratch_floats(ex->m, rows);
    float *wide = wide_floats ? hyla_executor_alloc(ex, &ex->work, wide_floats, 0) : NULL;
    ex->head_bytes = hyla_arena_mark(&ex->work) - mark;
    loss->ce_sum = 0;
    loss->ce_count = 0;
    if (ex->dry || (!logits_out && !ex->hidden_out))
        return;
    double t0 = HYLA_PROF_BEGIN();
    const float *y = ex->tapes[cfg->n_layers - 1].p[HYLA_S_Y];
    const float *wn = hyla_model_param(ex->m, HYLA_P_FINAL_NORM, -1);
    float eps = (float)cfg->rms_norm_eps;
    if (all_rows) /* a speculative verify: every row */
        hyla_rmsnorm1p_fwd(xn, NULL, y, wn, rows, H, eps);
    else
        for (int64_t b = 0; b < B; b++)
            hyla_rmsnorm1p_fwd(xn + b * H, NULL, y + (b * T + T - 1) * H, wn, 1, H, eps);
    if (bf16)
        hyla_bf16_round(xn, rows * H);
    if (ex->hidden_out) { /* every row's, rounded as the head's input is */
        if (all_rows)
            memcpy(ex->hidden_out, xn, (size_t)(rows * H) * sizeof *xn);
        else {
            hyla_rmsnorm1p_fwd(ex->hidden_out, NULL, y, wn, B * T, H, eps);
            if (bf16)
                hyla_bf16_round(ex->hidden_out, B * T * H);
        }
    }
    if (logits_out)
        hyla_head_linear(ex->m, logits_out, xn, rows, wide);
    HYLA_PROF_END("lm_head", t0);
}

void hyla_loss_head(hyla_executor *ex, float *grads, float *logits_out, float ce_scale, hyla_step_loss *loss)
{
    if (ex->forward_only == HYLA_FORWARD_LAST || ex->forward_only == HYLA_FORWARD_ROWS)
        last_rows_head(ex, logits_out, loss);
    else
        all_rows_head(ex, grads, logits_out, ce_scale, loss);
}
