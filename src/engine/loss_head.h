/* The executor's head (internal to src/engine): final norm, lm_head, cross-entropy and their
 * backward after the last layer, over chunks of ex->head_rows rows; or, for inference
 * (HYLA_FORWARD_LAST), the final norm and lm_head of each sequence's last row only. */
#ifndef HYLA_ENGINE_LOSS_HEAD_H
#define HYLA_ENGINE_LOSS_HEAD_H

#include "engine/executor.h"

/* grads NULL: forward only. logits_out: [B*T, V] (HYLA_FORWARD_ALL; or NULL: chunks in the work
 * arena, each handed to ex->sink if set), [B, V] (HYLA_FORWARD_LAST; or NULL: nothing).
 * The planning pass (ex->dry) allocates the head's working set and sets ex->head_bytes. */
void hyla_loss_head(hyla_executor *ex, float *grads, float *logits_out, float ce_scale, hyla_step_loss *loss);

/* One all-rows head (loss_head.c): the normed rows of y [n, H] (norm parameter `norm`), lm_head,
 * cross-entropy against labels [n]; backward of scale x the cross-entropy sum into dy_out [n, H],
 * dxn_extra [n, H] (or NULL) added to the normed rows' gradient first. */
typedef struct {
    hyla_role norm;
    const float *y;
    const int32_t *labels;
    float scale;
    float *dy_out;
    const float *dxn_extra;
} hyla_head_args;
void hyla_head_pass(hyla_executor *ex, const hyla_head_args *a, float *grads, float *logits_out, double *ce_sum,
                    int64_t *ce_count);

#endif
