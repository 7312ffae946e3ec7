/* The nested block executor (DESIGN §3): runs a training step's forward over the schedule's
 * remat units, keeping the checkpoints the policy names, then walks the units in reverse,
 * re-running only the forward ops whose outputs were not kept, then the unit's backward, then
 * freeing the unit's buffers.
 *
 * Memory: arenas sized before the step by a dry run of the very same allocation sequence
 * (hyla_executor_plan): `ckpt` holds kept checkpoints as a stack (a unit's checkpoints are popped
 * after its backward), `work` holds everything transient (non-kept activations, recomputed
 * activations, activation gradients, op scratch, logits). Nothing in a step calls malloc.
 *
 * Offload (policy value `offload`): an offloaded checkpoint is produced into a device staging
 * arena, `xfer[l & 1]` for layer l, and copied to the host store (host_store.h) by its I/O thread
 * while layer l+1 computes; layer l+2 waits for those copies before reusing the half. Host
 * offsets are a stack like `ckpt` (the dry `host` arena). Backward double-buffers the other way:
 * while unit u is differentiated, unit u-1's offloaded checkpoints are read back into
 * `xfer[(u-1) & 1]` (reverse layer order); unit u waits for its own reads before it starts. The
 * checkpoint arena therefore shrinks by exactly the offloaded bytes, and the only device cost of
 * offloading is the two staging halves, which the plan states. Staging holds fp32 forms; in bf16
 * compute a bf16-valued checkpoint travels and sits in the host store as bf16 (half the bytes),
 * exactly as a kept one sits in the checkpoint arena. */
#ifndef HYLA_ENGINE_EXECUTOR_H
#define HYLA_ENGINE_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "model/layer_ops.h"
#include "engine/policy.h"
#include "engine/host_store.h"

typedef enum { HYLA_UNIT_LAYER = 0, HYLA_UNIT_BLOCK = 1, HYLA_UNIT_PART = 2 } hyla_remat_unit;

int hyla_remat_unit_parse(const char *text, hyla_remat_unit *out);
const char *hyla_remat_unit_name(hyla_remat_unit u);

#define HYLA_MAX_UNITS (2 * HYLA_MAX_LAYERS)
/* The loss head computes logits a chunk of rows at a time, so its working set is a chunk x vocab,
 * not tokens x vocab. A chunk is a multiple of HYLA_HEAD_ROWS rows; hyla_head_rows splits a step's
 * n rows evenly into the fewest chunks whose logits fit HYLA_HEAD_BUDGET_BYTES (rounded up to the
 * multiple, at most HYLA_HEAD_MAX_ROWS rows). The budget, not a row count, bounds the head: one
 * 512-row chunk at a 151,936-token vocabulary (311 MB), 256 rows at Qwen3.5's 248,320 (254 MB, not
 * 8 GB at 8k tokens). Bigger chunks are what make the head's GEMMs fast: at 128 rows its three
 * products run at 200-245 GFLOP/s here, at 512 rows at 270-310 (bench/gemm_bench shapes). */
#define HYLA_HEAD_ROWS 128
#define HYLA_HEAD_MAX_ROWS 1024
#define HYLA_HEAD_BUDGET_BYTES ((int64_t)320 << 20)
int64_t hyla_head_rows(int64_t n, int64_t vocab);

/* forward_only values (hyla_executor_init's last argument; 0 = a training executor):
 *   HYLA_FORWARD_ALL   the head runs over every row (logits and losses: forward, eval);
 *   HYLA_FORWARD_LAST  inference: the final norm and lm_head run only over each sequence's last
 *                      row, logits [B, V], no loss; nothing of size rows x vocab exists. */
#define HYLA_FORWARD_ALL 1
#define HYLA_FORWARD_LAST 2
/*   HYLA_FORWARD_ROWS  inference like HYLA_FORWARD_LAST, but logits [B*T, V] of every row (a
 *                      speculative verify: a few rows on top of the caches) */
#define HYLA_FORWARD_ROWS 3

/* A consumer of the head's logits, one chunk of at most HYLA_HEAD_ROWS rows at a time, in row
 * order: logits [rows, V] of rows [row0, row0 + rows). Non-zero stops the forward (returned). */
typedef int (*hyla_logits_sink)(void *ctx, int64_t row0, int64_t rows, const float *logits);

typedef struct {
    int layer0, layer1;    /* layers [layer0, layer1] */
    int op0, op1;          /* ops [op0, ...) of layer0 .. ops [..., op1) of layer1 (op1 = count: to the end) */
} hyla_unit;

typedef struct {
    double ce_sum;         /* sum of -log p over labelled positions */
    int64_t ce_count;
    double aux_loss;       /* NaN without MoE layers */
    double mtp_sum;        /* sum of the MTP head's -log p over its targets (0 without an MTP loss) */
    int64_t mtp_count;
} hyla_step_loss;

typedef struct {
    const hyla_model *m;
    hyla_policy policy;
    hyla_remat_unit unit_kind;
    hyla_delta_mode delta_mode;
    int64_t B, T, n;
    /* layers the executor runs: the trunk's n_layers, and with an MTP loss (mtp_scale > 0) the MTP
     * head's layer n_layers after them (engine/mtp_loss.h), its own remat unit, the last */
    int n_layers, n_trunk_units;
    float mtp_scale;       /* dLoss/d(MTP cross-entropy sum): the MTP loss weight / its target count */
    int32_t *mtp_labels;   /* [n] the MTP targets (token t + 2 of the same sequence or document, else -100) */
    float *mtp_hidden;     /* the trunk's final-normed rows [n, H] while an MTP step runs (checkpoint arena) */
    float *dhidden;        /* their gradient from the MTP loss [n, H], added in the trunk's head (work arena) */
    int forward_only;      /* 0, HYLA_FORWARD_ALL or HYLA_FORWARD_LAST: nothing kept, no backward */
    hyla_logits_sink sink; /* the current forward's logits consumer, or NULL */
    void *sink_ctx;
    int sink_status;       /* the sink's first non-zero return of the step */
    int n_units;
    hyla_unit units[HYLA_MAX_UNITS];
    int n_ops[HYLA_MAX_LAYERS];
    const hyla_layer_op *ops[HYLA_MAX_LAYERS][HYLA_MAX_LAYER_OPS];
    hyla_arena ckpt, work;
    hyla_arena xfer[2];    /* offload staging: forward layer l uses [l & 1], backward unit u uses [u & 1] */
    hyla_arena host;       /* always dry: offsets in the host store, a stack like ckpt */
    size_t ckpt_bytes, work_bytes; /* planned capacities (dry run high-water marks) */
    size_t buffer_bytes;           /* carries, per-token bookkeeping, expert sums of a running step */
    int64_t head_rows;             /* rows of logits per head chunk (hyla_head_rows) */
    int64_t head_block;            /* lm_head's gradient is summed over blocks of this many rows (= head_rows) */
    size_t head_bytes;             /* the loss head's share of the work arena (final norm, one logits chunk, losses) */
    size_t xfer_bytes[2], host_bytes;
    size_t *host_off;      /* [n_layers][HYLA_S__COUNT] store offset of an offloaded slot this step; SIZE_MAX: none */
    unsigned char *offl_written; /* [n_layers][HYLA_S__COUNT] its write was submitted */
    hyla_tape *fetched;    /* [n_layers] device copies read back, handed to the tapes when their unit starts */
    hyla_host_store *store; /* not owned; needed when host_bytes > 0 */
    hyla_xfer_ticket write_ticket[2], read_ticket[2];
    int io_status;         /* first host store error of the step */
    const struct hyla_layer_updates_s *updates; /* per-layer updates, or NULL */
    const struct hyla_weight_source_s *weights; /* where weights come from (FSDP), or NULL: the model's arena */
    const hyla_context_link *context; /* context parallelism: the rows are slices (model/layer_ops.h), or NULL */
    const int64_t *context_past;      /* ... [B] the tokens of each row's continuing document before the slice */
    const int32_t *context_next;      /* ... [B][2] the token after each row's slice and its target when the
                                       * row's last sequence goes on (token -1: it ends here); the MTP head's */
    int weights_status;    /* first failed acquire of the step */
    size_t *layer_lo, *layer_hi;       /* [n_layers] table ranges (per-layer updates) */
    size_t window_lo;                  /* table offset of updates->window[0] in the current unit */
    hyla_tape *tapes;      /* [n_layers] forward slots */
    /* bf16 compute: a kept checkpoint that holds bf16 values (hyla_slot_is_bf16) is stored as
     * bf16 in the checkpoint arena, [n_layers] (NULL: not packed). Its fp32 form lives in the
     * work arena while its layer's forward segment runs, and again (unpacked) while its unit's
     * backward runs; the tape points there only then. */
    struct hyla_bf16_tape_s { uint16_t *p[HYLA_S__COUNT]; } *bf16_kept;
    float *carry[2];       /* [n,H] forward carries for non-kept layer inputs */
    float *dcarry[2];      /* [n,H] activation gradients crossing unit boundaries */
    int64_t *pos;          /* [n] */
    /* the independent sequences the token-mixing ops iterate: the B rows, or (packing,
     * hyla_executor_set_segments) the documents packed into them; [n] capacity each */
    int64_t n_seq, *seq_row0, *seq_len;
    int packed;
    int32_t *labels;       /* [n] */
    double *aux_counts, *aux_psum, *aux_dprob; /* [E] */
    int dry;               /* planning pass: allocate on dry arenas, compute nothing */
    int (*expert_seq)[2];    /* planning pass: the experts ops' calls of a micro-batch (forward, recompute
                              * and backward) in order, {layer, 1 gate_up | 2 down}: FSDP's expert groups
                              * gather the tensor once per call and prefetch the next call's first group */
    int n_expert_seq, cap_expert_seq, expert_seq_nomem;
    int64_t context_calls[3][3]; /* planning pass: calls per step of the ops that pass across slices under
                                  * context parallelism (conv, delta rule, attention) by phase (forward,
                                  * recompute, backward): hyla plan counts their messages */
    /* inference (HYLA_FORWARD_LAST / _ROWS): [n, H] or NULL; receives every row's final-normed
     * hidden state (the lm_head's input, rounded alike: the MTP head's trunk input) */
    float *hidden_out;
    struct hyla_infer_state_s *state; /* inference caches for the current call, or NULL */
    /* router replay / recording for the next calls: [n_moe_layers][n][k] (see engine/routing.h) */
    const int32_t *replay;
    int32_t *record;
    int moe_index[HYLA_MAX_LAYERS]; /* layer -> its index among MoE layers */
    /* filled by the planning (dry) pass */
    size_t kept_bytes_by_name[HYLA_CK__COUNT + 1]; /* checkpoint-arena bytes per name (+ internal) */
    size_t kept_bytes_by_kind[2];                 /* ... per layer kind: linear, full */
    size_t offloaded_bytes_by_name[HYLA_CK__COUNT + 1]; /* host-store bytes per name */
    /* bf16 compute: bytes of the checkpoints stored in fp32 (not hyla_slot_is_bf16), per name,
     * device and host together; and how many tensors are stored as bf16 on either tier */
    size_t fp32_only_bytes_by_name[HYLA_CK__COUNT + 1];
    size_t bf16_stored_tensors;
    size_t offloaded_bytes_by_kind[2];
    size_t *timeline;      /* device bytes live (checkpoint + work + staging) after each op, forward then backward */
    size_t *host_timeline; /* host-store bytes live at the same points */
    size_t *staging_timeline; /* offload staging in use at the same points (part of timeline) */
    int timeline_forward;  /* samples before the first backward one (forward ops + recompute-free head) */
    int n_timeline, cap_timeline;
    int plan_only;         /* hyla_executor_plan: nothing allocated beyond bookkeeping */
    /* measured run (hyla_executor_measure): after each op of a real step, the device bytes in use,
     * host bytes in use and seconds since the step began; [measure_cap] each, owned */
    size_t *measured_device, *measured_host;
    double *measured_seconds, measure_t0;
    int n_measured, measure_cap;
} hyla_executor;

/* Record the next real step's live bytes and time after every op (measured_*; one sample per op,
 * the same points as the plan's timeline). Allocates once, here, not in the step. */
int hyla_executor_measure(hyla_executor *ex);

/* Plan only (hyla plan): run the planning pass and fill ckpt_bytes, work_bytes, the per-name and
 * per-kind kept bytes and the timeline, allocating no activation memory. The model needs its
 * config and parameter table only (no weights). Free with hyla_executor_free. */
int hyla_executor_plan(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                       int64_t B, int64_t T);

/* Plan only, for inference: the HYLA_FORWARD_LAST executor over B x T new tokens that prefill
 * (T = the prompt) or decode (T = 1) builds. Free with hyla_executor_free. */
int hyla_executor_plan_infer(hyla_executor *ex, const hyla_model *m, int64_t B, int64_t T, hyla_delta_mode mode);
/* Bytes an executor holds while it runs a step: its arenas at their planned high-water marks,
 * the layer carries and the per-token bookkeeping (planned or built alike). */
size_t hyla_executor_resident_bytes(const hyla_executor *ex);

/* Build units and plan arena sizes; allocates the arenas and fixed buffers. A policy that
 * offloads needs a store attached (hyla_executor_attach_store) before the first step. */
int hyla_executor_init(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                       int64_t B, int64_t T, hyla_delta_mode mode, int forward_only);
/* A training executor whose loss head takes head_rows rows at a time and sums lm_head's gradient
 * in blocks of head_block rows (head_rows a multiple of head_block, itself a multiple of
 * HYLA_HEAD_ROWS) instead of hyla_head_rows' choice for both; tests: head_rows >= B*T is the
 * unchunked head. */
/* A training executor with the MTP loss on (the model has an MTP head): every step also runs the
 * head over the trunk's final-normed rows and adds mtp_scale x its cross-entropy sum (set
 * ex->mtp_scale before each step; hyla_executor_mtp_targets counts the targets). */
int hyla_executor_init_mtp(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                           int64_t B, int64_t T);
/* The same plan only (hyla plan --mtp-loss-weight). */
int hyla_executor_plan_mtp(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                           int64_t B, int64_t T);
int hyla_executor_init_head_rows(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                                 int64_t B, int64_t T, int64_t head_rows, int64_t head_block);
void hyla_executor_free(hyla_executor *ex);
/* Per-layer updates (optional, hyla_executor_update_per_layer): decoder-layer gradients go to
 * `window`, which holds one remat unit's layers (table offsets [lo, hi) of those layers, stored
 * from window[0]); after each unit's backward, apply(ctx, layer0, layer1, window, lo) consumes
 * them (the optimizer updates those layers) and the window is reused. The embedding, final norm
 * and lm_head gradients go to `head`, compact: table offsets [0, layers_lo) then
 * [layers_hi, total) (hyla_grad_head_floats), the MTP head's (its layer's too) included; they are
 * applied after the step. The step's `grads` argument is then ignored except
 * for being non-NULL. head_ready (optional) is told when the loss head's backward is done: every
 * non-layer gradient but the embedding's is then complete for this micro-batch. */
typedef struct hyla_layer_updates_s {
    float *head, *window;
    int (*apply)(void *ctx, int layer0, int layer1, const float *window, size_t lo);
    void *ctx;
    int (*head_ready)(void *ctx);
} hyla_layer_updates;

/* Where a training step's weights come from. NULL (the default): the model's arena holds every
 * weight. FSDP (train/fsdp.h): a layer's weights are gathered into the arena just before its
 * forward, and again before its unit's recompute + backward, and released after; the embedding
 * (HYLA_WEIGHTS_EMBED) around the embedding lookup, the final norm + lm_head (HYLA_WEIGHTS_HEAD)
 * around the loss head. With the MTP loss (engine/mtp_loss.h) the MTP head's input stage
 * (HYLA_WEIGHTS_MTP_IN: the final norm, the embedding, mtp.fc and its two norms) around its fc
 * forward and backward, its layer as layer n_layers, and its output stage (HYLA_WEIGHTS_MTP_OUT:
 * mtp.norm and the lm_head) around its loss head. A failed acquire stops the step with its
 * status (the gradients are then partial and must not be applied). */
#define HYLA_WEIGHTS_EMBED (-1)
#define HYLA_WEIGHTS_HEAD (-2)
#define HYLA_WEIGHTS_MTP_IN (-3)
#define HYLA_WEIGHTS_MTP_OUT (-4)
typedef struct hyla_weight_source_s {
    int (*acquire)(void *ctx, int layer0, int layer1);
    void (*release)(void *ctx, int layer0, int layer1);
    void (*poll)(void *ctx); /* after every op: a prefetch in flight may progress */
    void *ctx;
    /* expert groups (NULL: none): the layer parts hold no routed expert tensors; the experts ops
     * take them group by group from here (model/layer_ops.h). Their first failure of the step is
     * experts_status's (read and cleared when the step ends) */
    const hyla_expert_source *experts;
    int (*experts_status)(void *ctx);
} hyla_weight_source;

/* Table offsets of the decoder layers' parameters: layer l owns [lo[l], hi[l]) (contiguous,
 * layers in order); HYLA_ERR_MODEL if the table is not laid out that way. */
int hyla_layer_ranges(const hyla_param_table *t, size_t *lo, size_t *hi);
/* Floats of the compact head (non-layer parameters, the MTP head's included) and of the largest
 * unit's window. */
size_t hyla_grad_head_floats(const hyla_param_table *t);
/* Index in the compact head of the non-layer parameter at table offset `offset` (per-layer
 * updates set up). */
size_t hyla_grad_head_index(const hyla_executor *ex, size_t offset);
size_t hyla_executor_window_floats(const hyla_executor *ex);
/* ... as resident with FSDP's expert groups (groups > 1): the routed experts' rows of one group of
 * one tensor at a time (the largest), the rest of the unit's layers whole. */
size_t hyla_executor_window_grouped_floats(const hyla_executor *ex, int groups);
/* FSDP (train/fsdp.h): floats of rank `rank`'s pieces (parallel/shard.h) of the non-layer parameters
 * and of the largest unit's layers; and of its gradient pieces as the trainer allocates them
 * (every piece, or with per-layer updates the head's and the largest unit's; hyla plan alike). */
void hyla_fsdp_grad_sizes(const hyla_param_table *t, const hyla_executor *ex, int ranks, int rank, size_t *head,
                          size_t *unit);
size_t hyla_fsdp_grad_floats(const hyla_param_table *t, const hyla_executor *ex, int ranks, int rank, int per_layer);
/* ... and of the staging an overlapped reduce-scatter of the largest unit's gradients receives
 * into (every rank's copy of this rank's pieces: parallel/shard_comm.h). */
size_t hyla_fsdp_overlap_floats(const hyla_param_table *t, const hyla_executor *ex, int ranks, int rank, int groups);
/* The non-layer parameters whose gradient is complete when the loss head's backward is done (all
 * but the embedding; the MTP head's only with the MTP loss), and the staging their overlapped
 * reduce-scatter receives into (every rank's copy of this rank's pieces). */
int hyla_fsdp_head_early(const hyla_config *cfg, const hyla_param *p, int mtp);
size_t hyla_fsdp_head_stage_floats(const hyla_param_table *t, int ranks, int rank, int mtp);
/* ... (expert groups: the routed tensors are not in it) and of the staging of one expert group's
 * overlapped reduce-scatter (the largest group of any trunk layer's routed tensor; 0 without
 * groups). */
size_t hyla_fsdp_group_stage_floats(const hyla_param_table *t, int ranks, int rank, int groups);
/* The parts a training micro-batch acquires (hyla_weight_source), in order: the embedding, each
 * layer for its forward segment (a layer split over units once per unit); with the MTP loss its
 * input stage, its layer's forward, its output stage, its units' backward and its input stage
 * again; the head, each trunk unit's layers for its recompute + backward, last unit first. parts[k] = {layer0, layer1}; returns the
 * count (parts filled up to cap). */
int hyla_fsdp_parts(const hyla_executor *ex, int (*parts)[2], int cap);
/* Is parameter p in part {layer0, layer1} (layers, the MTP head's layer as n_layers + j, or a
 * HYLA_WEIGHTS_* stage)? */
int hyla_fsdp_in_part(const hyla_config *cfg, const hyla_param *p, int layer0, int layer1);
/* Route gradients through u (not owned; NULL: back to whole-table gradients). */
int hyla_executor_update_per_layer(hyla_executor *ex, const hyla_layer_updates *u);

/* Use `store` (not owned) as the host tier; reserves the planned host bytes in it (a store too
 * small is an error naming it and both sizes). */
int hyla_executor_attach_store(hyla_executor *ex, hyla_host_store *store);

/* One forward + backward over tokens [B,T] with labels [B,T] (-100 ignored; NULL: next token).
 * Parameter gradients ACCUMULATE into grads (table layout): dLoss/dparam where
 * Loss = ce_scale * ce_sum + aux_scale * aux_loss. Token ids must be valid (checked by callers).
 * A host store error stops the step and is returned (HYLA_ERR_IO naming the store); the
 * gradients are then partial and must not be applied. */
int hyla_executor_step(hyla_executor *ex, const int32_t *tokens, const int32_t *labels, float *grads,
                       float ce_scale, float aux_scale, hyla_step_loss *loss);

/* Forward only (ex->forward_only == HYLA_FORWARD_ALL): logits [B*T, V] (or NULL) and losses. */
int hyla_executor_forward(hyla_executor *ex, const int32_t *tokens, const int32_t *labels, float *logits,
                          hyla_step_loss *loss);
/* The same, the logits handed to `sink` a chunk at a time instead of a [B*T, V] buffer (the
 * working set stays HYLA_HEAD_ROWS x V); the sink's non-zero return stops it and is returned. */
int hyla_executor_forward_streamed(hyla_executor *ex, const int32_t *tokens, const int32_t *labels,
                                   hyla_logits_sink sink, void *ctx, hyla_step_loss *loss);

/* Inference (ex->forward_only == HYLA_FORWARD_LAST): run tokens [B,T] on top of the caches in
 * `state` (sequence b continues at position state->len[b]), update the caches, len[b] += T;
 * logits [B, V] of each sequence's last new token, or NULL (caches only).
 * A sequence that would exceed the cache is an HYLA_ERR_ARG error naming it. */
int hyla_executor_infer(hyla_executor *ex, const int32_t *tokens, struct hyla_infer_state_s *state, float *logits);

/* Packing: the next steps / forwards run each row as the documents seg_len[0..n_seg) tile it
 * (in order; every row's lengths sum to T, none crosses a row): attention, the GDN conv window
 * and the delta-rule state restart at every document, and positions (RoPE) restart at 0, so
 * each document computes exactly what it computes alone. Loss boundaries are the labels' job
 * (-100 at a document's last token). seg_len NULL: back to one sequence per row. A tiling that
 * does not fit the rows is an HYLA_ERR_ARG error. Not for hyla_executor_infer. */
int hyla_executor_set_segments(hyla_executor *ex, const int64_t *seg_len, int64_t n_seg);

/* Internal to src/engine (the loss head, offload): `floats` from arena a (zeroed if asked and
 * not the planning pass); is compute bf16; where parameter `role`'s gradient accumulates
 * (NULL: frozen under an adapter). */
float *hyla_executor_alloc(hyla_executor *ex, hyla_arena *a, int64_t floats, int zero);
int hyla_executor_bf16_compute(const hyla_executor *ex);
float *hyla_executor_param_grad(const hyla_executor *ex, float *grads, hyla_role role);

/* Internal to src/engine (engine/mtp_loss.c): the forward of units [u0, u1); unit u's recompute +
 * backward with the incoming gradient in dcarry[cur] (the outgoing one in dcarry[1 - cur]), its
 * checkpoints released; where layer l's input X goes during the forward (`half`: its offload
 * staging half). */
void hyla_executor_forward_units(hyla_executor *ex, int u0, int u1);
/* ... and the weight source's acquire / release of a part (nothing without one, or planning). */
void hyla_executor_acquire_weights(hyla_executor *ex, int l0, int l1);
void hyla_executor_release_weights(hyla_executor *ex, int l0, int l1);
int hyla_executor_backward_unit(hyla_executor *ex, int u, float *grads, int cur);
float *hyla_executor_layer_input(hyla_executor *ex, int l, int half);

/* Is slot s of layer l kept in the checkpoint arena during forward? */
int hyla_executor_keeps(const hyla_executor *ex, int layer, hyla_slot s);
/* Is checkpoint slot s stored as bf16 when kept or offloaded (bf16 compute, and s holds bf16
 * values: hyla_slot_is_bf16)? Its fp32 form is what the ops read. */
int hyla_executor_stores_bf16(const hyla_executor *ex, hyla_slot s);
/* Planning pass, bf16 compute: a checkpoint tensor of slot s taking `bytes` on either tier goes
 * into fp32_only_bytes_by_name or bf16_stored_tensors. */
void hyla_executor_count_dtype(hyla_executor *ex, hyla_slot s, size_t bytes);

#endif
