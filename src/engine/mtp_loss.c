/* The MTP loss inside a training step (see mtp_loss.h). */
#include "engine/mtp_loss.h"

#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "engine/loss_head.h"
#include "engine/offload.h"
#include "model/layer_ops.h"
#include "model/lora.h"
#include "ops/ops.h"

/* The row's next token inside its sequence (its own token at the sequence's end), and with
 * targets set, row i's MTP target: row i + 1's target inside the sequence, else -100. Context
 * parallelism: a row's last sequence that goes on in the next slice takes the token after the
 * slice and its target from ex->context_next. */
static void inputs_and_targets(hyla_executor *ex, const int32_t *tokens, int32_t *next, int targets)
{
    for (int64_t s = 0; s < ex->n_seq; s++) {
        int64_t r0 = ex->seq_row0[s], len = ex->seq_len[s];
        const int32_t *after = NULL; /* {token, target} after the slice, when the sequence goes on there */
        if (ex->context && ex->context_next && (r0 + len) % ex->T == 0 && ex->context_next[2 * ((r0 + len) / ex->T - 1)] >= 0)
            after = ex->context_next + 2 * ((r0 + len) / ex->T - 1);
        for (int64_t t = 0; t < len; t++) {
            int64_t i = r0 + t;
            int inside = t + 1 < len;
            next[i] = inside ? tokens[i + 1] : after ? after[0] : tokens[i];
            if (targets)
                ex->mtp_labels[i] = inside ? ex->labels[i + 1] : after ? after[1] : -100;
        }
    }
}

/* fc's context: the head's global parameters, the step's gradients (the adapter's under LoRA,
 * the base frozen; the compact head's with per-layer updates), bf16 scratch, and the adapter path's scratch (allocated here: fc may be an
 * adapted module, mtp.fc in --lora-targets). */
static hyla_op_ctx fc_ctx(hyla_executor *ex, float *grads, float *bf16_scratch)
{
    hyla_op_ctx c;
    memset(&c, 0, sizeof c);
    c.m = ex->m;
    c.layer = -1;
    c.B = ex->B, c.T = ex->T, c.n = ex->n;
    c.bf16_scratch = bf16_scratch;
    c.lora = ex->m->lora;
    if (c.lora) {
        c.lora_grads = grads;
        c.lora_scratch = hyla_executor_alloc(ex, &ex->work, hyla_lora_scratch_floats(c.lora, ex->n), 0);
    } else if (grads && ex->updates) { /* per-layer updates: the head's gradients sit in the compact head */
        c.grads = ex->updates->head;
        c.grad_base = ex->layer_hi[ex->m->cfg.n_layers - 1] - ex->layer_lo[0]; /* hyla_grad_head_index */
    } else {
        c.grads = grads;
    }
    return c;
}

void hyla_mtp_loss_forward(hyla_executor *ex, const int32_t *tokens)
{
    const hyla_config *cfg = &ex->m->cfg;
    int N = (int)cfg->n_layers;
    int64_t n = ex->n, H = cfg->hidden;
    int bf16 = hyla_executor_bf16_compute(ex);
    ex->mtp_hidden = hyla_executor_alloc(ex, &ex->ckpt, n * H, 0);
    float *x = hyla_executor_layer_input(ex, N, N & 1);
    size_t mark = hyla_arena_mark(&ex->work);
    int32_t *next = (int32_t *)hyla_executor_alloc(ex, &ex->work, n, 0);
    float *joined = hyla_executor_alloc(ex, &ex->work, n * 2 * H, 0);
    float *scratch = bf16 ? hyla_executor_alloc(ex, &ex->work, hyla_bf16_scratch_floats(cfg, n), 0) : NULL;
    hyla_op_ctx c = fc_ctx(ex, NULL, scratch);
    hyla_executor_acquire_weights(ex, HYLA_WEIGHTS_MTP_IN, HYLA_WEIGHTS_MTP_IN);
    if (!ex->dry) {
        hyla_rmsnorm1p_fwd(ex->mtp_hidden, NULL, ex->tapes[N - 1].p[HYLA_S_Y], hyla_model_param(ex->m, HYLA_P_FINAL_NORM, -1),
                           n, H, (float)cfg->rms_norm_eps);
        if (bf16) /* as the lm_head's input, and the hidden rows inference hands the head */
            hyla_bf16_round(ex->mtp_hidden, n * H);
        inputs_and_targets(ex, tokens, next, 1);
        hyla_mtp_join_inputs(ex->m, joined, next, ex->mtp_hidden, ex->n);
        hyla_op_linear(&c, HYLA_P_MTP_FC, 0, x, joined, n, 2 * H, H);
        if (bf16)
            hyla_bf16_round(x, n * H);
        if (ex->bf16_kept[N].p[HYLA_S_X])
            hyla_bf16_pack(ex->bf16_kept[N].p[HYLA_S_X], x, n * H);
    }
    hyla_executor_release_weights(ex, HYLA_WEIGHTS_MTP_IN, HYLA_WEIGHTS_MTP_IN);
    hyla_arena_reset_to(&ex->work, mark);
    ex->tapes[N].p[HYLA_S_X] = x;
    hyla_offload_write(ex, N, HYLA_S_X);
    hyla_executor_forward_units(ex, ex->n_trunk_units, ex->n_units);
}

int hyla_mtp_loss_backward(hyla_executor *ex, const int32_t *tokens, float *grads, hyla_step_loss *loss)
{
    const hyla_config *cfg = &ex->m->cfg;
    int N = (int)cfg->n_layers;
    int64_t n = ex->n, H = cfg->hidden;
    float eps = (float)cfg->rms_norm_eps;
    hyla_head_args a = {HYLA_P_MTP_NORM, ex->tapes[N].p[HYLA_S_Y], ex->mtp_labels, ex->mtp_scale, ex->dcarry[0], NULL};
    size_t head_mark = hyla_arena_mark(&ex->work);
    hyla_executor_acquire_weights(ex, HYLA_WEIGHTS_MTP_OUT, HYLA_WEIGHTS_MTP_OUT);
    hyla_head_pass(ex, &a, grads, NULL, &loss->mtp_sum, &loss->mtp_count);
    hyla_executor_release_weights(ex, HYLA_WEIGHTS_MTP_OUT, HYLA_WEIGHTS_MTP_OUT);
    hyla_arena_reset_to(&ex->work, head_mark);
    if (!grads)
        return HYLA_OK;
    int cur = 0; /* dY in dcarry[0]; each unit leaves its input's gradient in the other half */
    for (int u = ex->n_units - 1; u >= ex->n_trunk_units; u--, cur = 1 - cur) {
        int st = hyla_executor_backward_unit(ex, u, grads, cur);
        if (st == 1)
            return ex->io_status; /* its checkpoints did not come back */
        HYLA_TRY(st);
    }
    const float *dx = ex->dcarry[cur];
    /* fc and the two norms; dhidden stays for the trunk's head */
    ex->dhidden = hyla_executor_alloc(ex, &ex->work, n * H, 0);
    size_t mark = hyla_arena_mark(&ex->work);
    int32_t *next = (int32_t *)hyla_executor_alloc(ex, &ex->work, n, 0);
    float *joined = hyla_executor_alloc(ex, &ex->work, n * 2 * H, 0);
    float *djoined = hyla_executor_alloc(ex, &ex->work, n * 2 * H, 1);
    float *half = hyla_executor_alloc(ex, &ex->work, n * H, 0), *dhalf = hyla_executor_alloc(ex, &ex->work, n * H, 0);
    int bf16 = hyla_executor_bf16_compute(ex);
    float *scratch = bf16 ? hyla_executor_alloc(ex, &ex->work, hyla_bf16_scratch_floats(cfg, n), 0) : NULL;
    hyla_op_ctx c = fc_ctx(ex, grads, scratch);
    hyla_executor_acquire_weights(ex, HYLA_WEIGHTS_MTP_IN, HYLA_WEIGHTS_MTP_IN);
    if (!ex->dry) {
        inputs_and_targets(ex, tokens, next, 0); /* the same next tokens as the forward */
        hyla_mtp_join_inputs(ex->m, joined, next, ex->mtp_hidden, ex->n);
        hyla_op_linear_bwd(&c, HYLA_P_MTP_FC, 0, djoined, dx, joined, n, 2 * H, H);
        /* the hidden half: into dhidden */
        for (int64_t i = 0; i < n; i++)
            memcpy(dhalf + i * H, djoined + i * 2 * H + H, (size_t)H * sizeof(float));
        hyla_rmsnorm1p_bwd(ex->dhidden, hyla_executor_param_grad(ex, grads, HYLA_P_MTP_NORM_HIDDEN), dhalf,
                           ex->mtp_hidden, hyla_model_param(ex->m, HYLA_P_MTP_NORM_HIDDEN, -1), NULL, n, H, eps);
        /* the embedding half: into the embedding rows of the next tokens */
        for (int64_t i = 0; i < n; i++)
            memcpy(dhalf + i * H, djoined + i * 2 * H, (size_t)H * sizeof(float));
        hyla_model_embed_rows(ex->m, next, n, half);
        float *de = joined; /* its rows are no longer needed: [n, H] of it */
        hyla_rmsnorm1p_bwd(de, hyla_executor_param_grad(ex, grads, HYLA_P_MTP_NORM_EMB), dhalf, half,
                           hyla_model_param(ex->m, HYLA_P_MTP_NORM_EMB, -1), NULL, n, H, eps);
        float *dE = hyla_executor_param_grad(ex, grads, HYLA_P_EMBED);
        for (int64_t i = 0; dE && i < n; i++) { /* sequential: rows with the same token add in order */
            float *row = dE + (int64_t)next[i] * H;
            for (int64_t j = 0; j < H; j++)
                row[j] += de[i * H + j];
        }
    }
    hyla_executor_release_weights(ex, HYLA_WEIGHTS_MTP_IN, HYLA_WEIGHTS_MTP_IN);
    hyla_arena_reset_to(&ex->work, mark);
    return HYLA_OK;
}

int64_t hyla_mtp_target_count(const int32_t *labels, int64_t rows, int64_t T, const int64_t *seq_len, int64_t n_seq)
{
    int64_t count = 0, r0 = 0;
    for (int64_t s = 0; seq_len ? s < n_seq : r0 < rows; s++) {
        int64_t len = seq_len ? seq_len[s] : T;
        for (int64_t t = 0; t + 1 < len; t++) { /* row r0 + t's target: row r0 + t + 1's */
            int64_t i = r0 + t + 1;
            int32_t target = labels ? labels[i] : ((i % T) + 1 < T ? 0 : -100);
            count += target >= 0;
        }
        r0 += len;
    }
    return count;
}
