/* The nested block executor (DESIGN §3): runs a training step's forward over the schedule's
 * remat units, keeping the checkpoints the policy names, then walks the units in reverse,
 * re-running only the forward ops whose outputs were not kept, then the unit's backward, then
 * freeing the unit's buffers.
 *
 * Memory: two arenas sized before the step by a dry run of the very same allocation sequence
 * (hyla_executor_plan): `ckpt` holds kept checkpoints as a stack (a unit's checkpoints are popped
 * after its backward), `work` holds everything transient (non-kept activations, recomputed
 * activations, activation gradients, op scratch, logits). Nothing in a step calls malloc. */
#ifndef HYLA_TRAIN_EXECUTOR_H
#define HYLA_TRAIN_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "model/layer_ops.h"
#include "train/checkpoint_names.h"

typedef enum { HYLA_UNIT_LAYER = 0, HYLA_UNIT_BLOCK = 1, HYLA_UNIT_PART = 2 } hyla_remat_unit;

int hyla_remat_unit_parse(const char *text, hyla_remat_unit *out);
const char *hyla_remat_unit_name(hyla_remat_unit u);

#define HYLA_MAX_UNITS (2 * HYLA_MAX_LAYERS)

typedef struct {
    int layer0, layer1;    /* layers [layer0, layer1] */
    int op0, op1;          /* ops [op0, ...) of layer0 .. ops [..., op1) of layer1 (op1 = count: to the end) */
} hyla_unit;

typedef struct {
    double ce_sum;         /* sum of -log p over labelled positions */
    int64_t ce_count;
    double aux_loss;       /* NaN without MoE layers */
} hyla_step_loss;

typedef struct {
    const hyla_model *m;
    hyla_policy policy;
    hyla_remat_unit unit_kind;
    hyla_delta_mode delta_mode;
    int64_t B, T, n;
    int forward_only;      /* inference: nothing kept, no backward */
    int n_units;
    hyla_unit units[HYLA_MAX_UNITS];
    int n_ops[HYLA_MAX_LAYERS];
    const hyla_layer_op *ops[HYLA_MAX_LAYERS][HYLA_MAX_LAYER_OPS];
    hyla_arena ckpt, work;
    size_t ckpt_bytes, work_bytes; /* planned capacities (dry run high-water marks) */
    hyla_tape *tapes;      /* [n_layers] forward slots */
    float *carry[2];       /* [n,H] forward carries for non-kept layer inputs */
    float *dcarry[2];      /* [n,H] activation gradients crossing unit boundaries */
    int64_t *pos;          /* [n] */
    int32_t *labels;       /* [n] */
    double *aux_counts, *aux_psum, *aux_dprob; /* [E] */
    int dry;               /* planning pass: allocate on dry arenas, compute nothing */
    struct hyla_infer_state_s *state; /* inference caches for the current call, or NULL */
    /* router replay / recording for the next calls: [n_moe_layers][n][k] (see infer/routing.h) */
    const int32_t *replay;
    int32_t *record;
    int moe_index[HYLA_MAX_LAYERS]; /* layer -> its index among MoE layers */
    /* filled by the planning (dry) pass */
    size_t kept_bytes_by_name[HYLA_CK__COUNT + 1]; /* checkpoint-arena bytes per name (+ internal) */
    size_t kept_bytes_by_kind[2];                 /* ... per layer kind: linear, full */
    size_t *timeline;      /* live bytes (checkpoint + work) after each op, forward then backward */
    int n_timeline, cap_timeline;
    int plan_only;         /* hyla_executor_plan: nothing allocated beyond bookkeeping */
} hyla_executor;

/* Plan only (hyla plan): run the planning pass and fill ckpt_bytes, work_bytes, the per-name and
 * per-kind kept bytes and the timeline, allocating no activation memory. The model needs its
 * config and parameter table only (no weights). Free with hyla_executor_free. */
int hyla_executor_plan(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                       int64_t B, int64_t T);

/* Build units and plan arena sizes; allocates the arenas and fixed buffers. */
int hyla_executor_init(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                       int64_t B, int64_t T, hyla_delta_mode mode, int forward_only);
void hyla_executor_free(hyla_executor *ex);

/* One forward + backward over tokens [B,T] with labels [B,T] (-100 ignored; NULL: next token).
 * Parameter gradients ACCUMULATE into grads (table layout): dLoss/dparam where
 * Loss = ce_scale * ce_sum + aux_scale * aux_loss. Token ids must be valid (checked by callers). */
int hyla_executor_step(hyla_executor *ex, const int32_t *tokens, const int32_t *labels, float *grads,
                       float ce_scale, float aux_scale, hyla_step_loss *loss);

/* Forward only (ex->forward_only): logits [B*T, V] (or NULL) and losses. */
int hyla_executor_forward(hyla_executor *ex, const int32_t *tokens, const int32_t *labels, float *logits,
                          hyla_step_loss *loss);

/* Inference (ex->forward_only): run tokens [B,T] on top of the caches in `state` (sequence b
 * continues at position state->len[b]), update the caches, len[b] += T; logits [B*T, V] or NULL.
 * A sequence that would exceed the cache is an HYLA_ERR_ARG error naming it. */
int hyla_executor_infer(hyla_executor *ex, const int32_t *tokens, struct hyla_infer_state_s *state, float *logits);

/* Is slot s of layer l kept in the checkpoint arena during forward? */
int hyla_executor_keeps(const hyla_executor *ex, int layer, hyla_slot s);

#endif
