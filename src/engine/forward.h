/* The forward pass of the whole model (spec §3): embedding, N decoder layers in schedule
 * order, final norm, lm_head, cross-entropy and router auxiliary loss. fp32. */
#ifndef HYLA_ENGINE_FORWARD_H
#define HYLA_ENGINE_FORWARD_H

#include <stdint.h>

#include "engine/executor.h"
#include "model/layer_ops.h"
#include "model/model.h"

typedef struct {
    double ce_loss;      /* mean next-token cross-entropy over labelled positions; NAN if none */
    int64_t ce_count;    /* labelled positions */
    double aux_loss;     /* router load-balancing loss over all MoE layers; NAN if no MoE layer */
    double total_loss;   /* ce_loss + router_aux_loss_coef * aux_loss (ce_loss if no MoE) */
} hyla_forward_out;

/* tokens [B,T] in [0, V). labels [B,T] (-100 = ignore) or NULL for next-token labels within
 * each sequence. logits [B*T, V] or NULL (then computed in scratch and discarded).
 * Bad token ids are an HYLA_ERR_ARG error naming the position. */
int hyla_forward(const hyla_model *m, const int32_t *tokens, const int32_t *labels, int64_t B, int64_t T,
                 hyla_delta_mode mode, float *logits, hyla_forward_out *out);
/* The same, the logits handed to `sink` one chunk of hyla_head_rows rows at a time (never a [B*T, V] buffer);
 * a sink's non-zero return stops the forward and is returned. */
int hyla_forward_streamed(const hyla_model *m, const int32_t *tokens, const int32_t *labels, int64_t B, int64_t T,
                          hyla_delta_mode mode, hyla_logits_sink sink, void *ctx, hyla_forward_out *out);
/* One sequence tokens [T], the logits of its last position only: logits [V]. _from: the weights
 * come from `weights` (executor.h; e.g. FSDP's gathered layers), NULL: the model's arena. */
int hyla_forward_last_row(const hyla_model *m, const int32_t *tokens, int64_t T, float *logits, hyla_forward_out *out);
int hyla_forward_last_row_from(const hyla_model *m, const hyla_weight_source *weights, const int32_t *tokens, int64_t T,
                               float *logits, hyla_forward_out *out);

#endif
