/* A decoder layer as a fixed sequence of ops over named tensor slots.
 *
 * Every layer's forward is a list of ops; each op reads some slots and writes others, and its
 * backward (next to it, same file) reads the forward slots and accumulates into gradient slots.
 * The executor (src/engine/executor.c) decides per slot whether it is kept (checkpoint arena),
 * offloaded or recomputed, allocates every buffer, and in backward re-runs exactly the ops whose
 * outputs were not kept. Inference (engine/forward.c) runs the same ops with nothing kept.
 *
 * Gradient slots (d->p[s]) are zero-filled when first allocated and ops ACCUMULATE into them
 * (+=), so a tensor read by several ops gets the sum. Parameter gradients accumulate into
 * ctx->grads at the parameter table's offsets. */
#ifndef HYLA_MODEL_LAYER_OPS_H
#define HYLA_MODEL_LAYER_OPS_H

#include <stdint.h>

#include "core/quant.h"
#include "model/checkpoint_names.h"
#include "model/model.h"

/* Which delta-rule kernel the GDN ops run: chunked (prefill, training) or recurrent (decode). */
typedef enum { HYLA_DELTA_CHUNKED = 0, HYLA_DELTA_RECURRENT = 1 } hyla_delta_mode;

typedef enum {
    /* shared by every layer */
    HYLA_S_X,          /* [n,H]   decoder_layer_input */
    HYLA_S_XN,         /* [n,H]   input-norm output */
    HYLA_S_MIX,        /* [n,H]   mixer output (out_proj) */
    HYLA_S_H,          /* [n,H]   ffn_input = X + MIX */
    HYLA_S_HN,         /* [n,H]   post-norm output */
    HYLA_S_FFN,        /* [n,H]   FFN output */
    HYLA_S_Y,          /* [n,H]   layer output = next layer's X (never recomputed) */
    /* Gated DeltaNet */
    HYLA_S_QKV,        /* [n,cd]  gdn_in_proj: q|k|v head-major */
    HYLA_S_Z,          /* [n,vd]  gdn_in_proj */
    HYLA_S_BL,         /* [n,Hv]  gdn_in_proj: beta logits */
    HYLA_S_AL,         /* [n,Hv]  gdn_in_proj: decay logits */
    HYLA_S_CONV,       /* [n,cd]  gdn_conv */
    HYLA_S_GQ,         /* [n,Hk,dk] l2-normalised, scaled q */
    HYLA_S_GK,         /* [n,Hk,dk] l2-normalised k */
    HYLA_S_GV,         /* [n,Hv,dv] v */
    HYLA_S_G,          /* [n,Hv]  log decay */
    HYLA_S_BETA,       /* [n,Hv]  write strength */
    HYLA_S_CORE,       /* [n,vd]  gdn_core */
    HYLA_S_GNORM,      /* [n,vd]  gdn_norm */
    /* gated attention */
    HYLA_S_QRAW,       /* [n,Hq,hd] query_proj: query part of q_proj */
    HYLA_S_GATE,       /* [n,Hq,hd] query_proj: output-gate part of q_proj */
    HYLA_S_KRAW,       /* [n,Hkv,hd] key_proj */
    HYLA_S_VRAW,       /* [n,Hkv,hd] value_proj */
    HYLA_S_QR,         /* [n,Hq,hd] q after q_norm + RoPE */
    HYLA_S_KR,         /* [n,Hkv,hd] k after k_norm + RoPE */
    HYLA_S_COS,        /* [n,R/2] */
    HYLA_S_SIN,        /* [n,R/2] */
    HYLA_S_CTX,        /* [n,Hq,hd] context */
    HYLA_S_LSE,        /* [n,Hq]   context (log-sum-exp) */
    HYLA_S_ATT,        /* [n,Hq*hd] attention_out = CTX * sigmoid(GATE) */
    /* MoE */
    HYLA_S_RLOGITS,    /* [n,E]   router_logits */
    HYLA_S_PROBS,      /* [n,E]   softmax */
    HYLA_S_TOPIDX,     /* [n,k]   int32 */
    HYLA_S_TOPW,       /* [n,k]   routing weights */
    HYLA_S_OFFS,       /* [E+1]   int32: slots of expert e are [offs[e], offs[e+1]) */
    HYLA_S_SLOT_TOK,   /* [n*k]   int32 token of each slot (slots grouped by expert) */
    HYLA_S_SLOT_J,     /* [n*k]   int32 which of the token's k choices */
    HYLA_S_XE,         /* [n*k,H] HN rows gathered per slot */
    HYLA_S_EGATE,      /* [n*k,Ie] moe_mlpwi_0 */
    HYLA_S_EUP,        /* [n*k,Ie] moe_mlpwi_1 */
    HYLA_S_EH,         /* [n*k,Ie] silu(gate)*up */
    HYLA_S_EOUT,       /* [n*k,H] moe_mlpwo */
    HYLA_S_SGATE,      /* [n,Is] / [n,I] mlpwi_0 (shared expert or dense MLP) */
    HYLA_S_SUP,        /* [n,Is] / [n,I] mlpwi_1 */
    HYLA_S_SH,         /* [n,Is] / [n,I] silu(gate)*up */
    HYLA_S_SOUT,       /* [n,H]  mlpwo */
    HYLA_S_SG,         /* [n]    shared-expert gate logit */
    HYLA_S__COUNT
} hyla_slot;

typedef struct {
    float *p[HYLA_S__COUNT];
} hyla_tape;

/* Everything an op needs besides the tape. */
/* Where an MoE layer's routed experts come from when they are not all in the model's arena
 * (FSDP's expert groups, train/fsdp.h): the experts ops take tensor `role` (MOE_GATE_UP or
 * MOE_DOWN) of `layer` group by group, experts [e0, e1) at a time: acquire puts their rows in the
 * arena, release gives them back; with grads, release is told the group's weight gradient rows
 * are complete (the source reduces them and zeroes them again). Failures are the source's to
 * report after the step. */
typedef struct hyla_expert_source_s {
    int groups;
    void (*acquire)(void *ctx, int layer, hyla_role role, int64_t e0, int64_t e1);
    void (*release)(void *ctx, int layer, hyla_role role, int64_t e0, int64_t e1, int grads);
    void (*poll)(void *ctx); /* between experts (one thread): transfers in flight may progress */
    void *ctx;
} hyla_expert_source;

/* Context parallelism (train --context-parallel C): every sequence of the call is slice `rank` of
 * `size` equal slices of a sequence size times as long (rows [rank T, (rank + 1) T) of it). The
 * token-mixing ops pass across the slice boundaries (every rank makes every call, in the same
 * order; failures are the link's to report after the step):
 *   shift_fwd   each rank's `floats` to the next; the previous rank's arrive (rank 0: zeros)
 *   shift_bwd   each rank's to the previous; the next rank's arrive (the last rank: zeros)
 *   chain_fwd   run(arg) on each rank in rank order, `state` handed on from each to the next
 *               (rank 0 starts from the caller's); chain_bwd the same in reverse order
 *   allgather   every rank's `floats` into all [size][floats], in rank order
 *   reduce      parts [size][floats] on every rank: this rank's block summed over the ranks in
 *               rank order into mine [floats]
 *   layer_state a layer's kept [n_seq][Hv, dk, dv] initial delta-rule states (the forward's, for
 *               the recompute and the backward)
 *   buffer      link-owned scratch i (0..3) of at least `floats` (planned with the link)
 * Positions (RoPE) are the whole sequence's: the executor offsets them by rank T. */
typedef struct hyla_context_link_s {
    int rank, size;
    void (*shift_fwd)(void *ctx, const float *mine, float *prev, size_t floats);
    void (*shift_bwd)(void *ctx, const float *to_prev, float *from_next, size_t floats);
    void (*chain_fwd)(void *ctx, float *state, size_t floats, void (*run)(void *arg), void *arg);
    void (*chain_bwd)(void *ctx, float *state, size_t floats, void (*run)(void *arg), void *arg);
    void (*allgather)(void *ctx, const float *mine, float *all, size_t floats);
    void (*reduce)(void *ctx, const float *parts, float *mine, size_t floats);
    float *(*layer_state)(void *ctx, int layer);
    float *(*buffer)(void *ctx, int i, size_t floats);
    /* the router statistics of the whole sequences: every rank's counts, psum [E] and rows added
     * in rank order, the same on every rank (the aux loss is not a sum over rows) */
    void (*reduce_aux)(void *ctx, double *counts, double *psum, int64_t E, int64_t *rows);
    void *ctx;
} hyla_context_link;

/* The floats the ops ask of a link (n_seq slices of T rows, `size` ranks): buffers 0..3, its sends
 * in flight (the chain's state forward / backward, the conv window, its partial dx), the staging
 * of its reduce (every rank's block), and one linear layer's kept states. */
void hyla_context_sizes(const hyla_config *cfg, int64_t n_seq, int64_t T, int size, size_t buf[4], size_t out[4],
                        size_t *stage, size_t *kept_per_layer);
/* Bytes a link holds with those (train/context.h allocates so; hyla plan counts so): the buffers,
 * the sends in flight, the staging, every linear layer's kept states, the router statistics'
 * exchange [size][2 E + 1]. */
size_t hyla_context_link_bytes(const hyla_config *cfg, int64_t n_seq, int64_t T, int size);

typedef struct {
    const hyla_model *m;
    float *grads;            /* parameter gradients (table layout from offset grad_base), NULL in inference */
    size_t grad_base;        /* table offset of grads[0]: 0, or a window's first offset (per-layer updates) */
    int layer;
    int64_t B, T, n;         /* n = B*T rows */
    const int64_t *pos;      /* [n] */
    /* the independent sequences token-mixing ops (attention, conv, delta rule) iterate: sequence
     * i is rows [seq_row0[i], seq_row0[i] + seq_len[i]); the B rows of T, or packed documents
     * (no cache then); with a cache (inference) sequence i is row i */
    int64_t n_seq;
    const int64_t *seq_row0, *seq_len;
    hyla_delta_mode delta_mode;
    /* router aux loss: forward accumulates; backward adds aux_dprob[e] to dLoss/dprobs */
    double *aux_counts, *aux_psum;
    int64_t *aux_rows;
    const double *aux_dprob; /* [E] or NULL */
    int recompute;           /* forward re-run during backward: do not count router statistics again */
    /* inference: per-layer caches of this layer (NULL in training: zero history, no cache);
     * sequence b of the call starts at position past[b] */
    struct hyla_layer_state_s *state;
    const int64_t *past;     /* [B] */
    int64_t max_len;         /* cache capacity per sequence */
    /* linear layers, when the caller keeps rollback points (hyla_infer_state.row_keep): this
     * layer's conv window after row t of sequence b goes to keep + b * keep_seq + t * keep_row,
     * its delta-rule state right after the window; NULL: none */
    float *keep;
    int64_t keep_row, keep_seq;
    /* router replay / recording for this layer (MoE layers): [n, k] expert ids, -1 = padding */
    const int32_t *replay;   /* force these experts, or NULL */
    int32_t *record;         /* write the chosen experts here, or NULL */
    /* LoRA (model/lora.h): the adapter of c->m (NULL: none); its gradients (training), and the
     * op's scratch for the adapter path (hyla_lora_scratch_floats, ops with .lora set). With an
     * adapter, training leaves the base frozen: grads is NULL and hyla_op_dw returns NULL. */
    const struct hyla_lora_s *lora;
    float *lora_grads;
    float *lora_scratch;
    /* bf16 compute (m->compute_dtype == HYLA_DT_BF16): ops with .lora set get this scratch for
     * their projections (rounded dy, widened weight rows), hyla_bf16_scratch_floats(cfg, n) floats */
    float *bf16_scratch;
    /* the routed experts' weights group by group (FSDP's expert groups), or NULL: all in the arena */
    const hyla_expert_source *experts;
    /* context parallelism: this call's B rows are slices of longer ones, or NULL; context_past [B]:
     * the tokens of the document that a row's first sequence continues, before this slice (0: it
     * starts here; unpacked rows: rank T). The link's messages are per row (every rank has B rows,
     * whatever its documents); a row's first sequence continues from the slice before when its
     * past > 0, its last one into the slice after. */
    const hyla_context_link *context;
    const int64_t *context_past;
} hyla_op_ctx;

/* Context parallelism: the tokens before this slice of sequence i's document (0 unless it is the
 * first of its row and continues from the slice before), and whether it ends its row. */
int64_t hyla_seq_past(const hyla_op_ctx *c, int64_t i);
int hyla_seq_ends_row(const hyla_op_ctx *c, int64_t i);
/* The sequences of row b: [*i0, *i1) of the call's (each inside one row, in order). */
void hyla_row_seqs(const hyla_op_ctx *c, int64_t b, int64_t *i0, int64_t *i1);

typedef void (*hyla_op_fwd_fn)(const hyla_op_ctx *c, hyla_tape *t, float *scratch);
typedef void (*hyla_op_bwd_fn)(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch);

#define HYLA_OP_MAX_IO 8
typedef struct {
    const char *name;
    hyla_op_fwd_fn fwd;
    hyla_op_bwd_fn bwd;
    /* scratch floats for fwd / bwd (released after the call) */
    int64_t (*fwd_scratch)(const hyla_config *cfg, int64_t n, int64_t T);
    int64_t (*bwd_scratch)(const hyla_config *cfg, int64_t n, int64_t T);
    int n_in, n_out, n_reads;
    hyla_slot in[HYLA_OP_MAX_IO], out[HYLA_OP_MAX_IO];
    hyla_slot reads[HYLA_OP_MAX_IO]; /* slots the backward reads (a subset of in and out) */
    int lora;                /* runs adaptable projections (hyla_op_linear): gets LoRA scratch */
    int context;             /* passes across slices under context parallelism: 1 conv, 2 delta rule, 3 attention */
    int experts;             /* reads routed experts' rows of one tensor (1: MOE_GATE_UP, 2: MOE_DOWN),
                              * group by group under an expert source */
} hyla_layer_op;

#define HYLA_MAX_LAYER_OPS 32
/* The op list of layer l: input norm, mixer ops, residual, post norm, FFN ops, residual (Y).
 * Returns the count; ops[] receives pointers to static op descriptions. */
int hyla_layer_ops(const hyla_config *cfg, int layer, const hyla_layer_op **ops /*[HYLA_MAX_LAYER_OPS]*/);

/* Slot metadata. Floats of slot s of layer `layer` for n rows (the shared expert / dense MLP
 * slots depend on the layer: shared expert width in MoE layers, dense width otherwise). */
int64_t hyla_slot_floats(const hyla_config *cfg, int layer, hyla_slot s, int64_t n);
hyla_ckpt_name hyla_slot_ckpt(hyla_slot s);
int hyla_slot_has_grad(hyla_slot s); /* 0 for index tables, probabilities, RoPE tables, lse */
const char *hyla_slot_name(hyla_slot s);

/* bf16 compute: does slot s hold bf16 values (rounded in place after the op that writes it)?
 * The fp32-only slots are gate logits and gates (BL, AL, G, BETA, SG), RoPE tables, the
 * log-sum-exp, router logits, probabilities and weights, and the int32 index tables. */
int hyla_slot_is_bf16(hyla_slot s);
/* Scratch floats a projection op needs in bf16 compute (its largest projection's rounded dy and
 * the product's widened weight rows). */
int64_t hyla_bf16_scratch_floats(const hyla_config *cfg, int64_t n);
/* The same for a GGUF model's stored-type products (core/quant.h), forward only. */
int64_t hyla_quant_scratch_floats(const hyla_config *cfg, int64_t n);
/* lm_head: logits[n, V] = xn[n, H] W^T with the model's weights as they are held (fp32, the bf16
 * copy, or a GGUF file's type); scratch: hyla_head_scratch_floats(m, n) floats. */
int64_t hyla_head_scratch_floats(const hyla_model *m, int64_t n);
void hyla_head_linear(const hyla_model *m, float *logits, const float *xn, int64_t n, float *scratch);

/* The MTP head's joined input rows (docs/mtp.md): joined [n, 2H] = RMSNorm1p(embed(tokens[i]);
 * pre_fc_norm_embedding) | RMSNorm1p(hidden[i]; pre_fc_norm_hidden), rounded to bf16 values in
 * bf16 compute (fc's input). Used by inference (infer/mtp.c) and the MTP loss (engine/mtp_loss.c). */
void hyla_mtp_join_inputs(const hyla_model *m, float *joined, const int32_t *tokens, const float *hidden, int64_t n);

/* Parameter views for ops. */
const float *hyla_op_w(const hyla_op_ctx *c, hyla_role role);      /* weight of this layer */
float *hyla_op_dw(const hyla_op_ctx *c, hyla_role role);           /* its gradient; NULL when frozen */

/* A projection of this layer through internal rows [row0, row0 + out) of parameter `role`:
 * y[n, out] = x[n, in] W[row0:row0+out]^T, plus the LoRA path of the adapter (if any) over those
 * rows. Backward: dx += dy W (+ the adapter's), dW += dy^T x unless frozen, adapter grads.
 * In bf16 compute all three products take bf16 operands (x holds bf16 values, dy is rounded, W
 * is the bf16 copy) and accumulate in fp32 (hyla_linear_bf16w); the adapter path stays fp32. */
void hyla_op_linear(const hyla_op_ctx *c, hyla_role role, int64_t row0, float *y, const float *x, int64_t n,
                    int64_t in, int64_t out);
void hyla_op_linear_bwd(const hyla_op_ctx *c, hyla_role role, int64_t row0, float *dx, const float *dy,
                        const float *x, int64_t n, int64_t in, int64_t out);
/* The products of a set of decode-sized items on one parameter (a GGUF model's routed experts:
 * core/quant.h's hyla_linear_q_items), in one parallel loop; each item's y as hyla_op_linear gives
 * it. Returns 0 (nothing done) where that path does not apply: weights not stored quantized, an
 * adapter, too many items or an item of more than HYLA_QUANT_SKINNY_M rows. */
int hyla_op_linear_items(const hyla_op_ctx *c, hyla_role role, const hyla_qitem *items, int64_t count, int64_t in,
                         int64_t out);

/* ys[j][n, outs[j]] = x[n, in] W_j^T for the parameters roles[j], j < count, each as hyla_op_linear
 * gives it: a GGUF model's decode step (x hidden wide) in one parallel loop with x rounded once
 * (core/quant.h's hyla_linear_q_fanout); otherwise one product after another. */
void hyla_op_linear_fanout(const hyla_op_ctx *c, const hyla_role *roles, float *const *ys, const int64_t *outs,
                           int count, const float *x, int64_t n, int64_t in);

/* Linear-layer backward: dx[n,in] += dy[n,out] W[out,in]; dW[out,in] += dy^T x. */
void hyla_linear_bwd(float *dx, float *dW, const float *dy, const float *x, const float *W, int64_t n, int64_t in,
                     int64_t out);

/* Op lists, one per file: common (norms, residuals), GDN mixer, attention mixer, MoE, dense MLP. */
extern const hyla_layer_op hyla_op_in_norm, hyla_op_residual_mix, hyla_op_post_norm, hyla_op_residual_ffn,
    hyla_op_residual_mlp;
/* 1 (the default): a decoded token's GDN ops from the conv to the gated norm run as one parallel
 * region over key heads (model/op_gdn.c; the same bits); 0: op by op (tests/test_decode.c's
 * reference for it). */
extern int hyla_gdn_decode_fusion;
extern const hyla_layer_op hyla_ops_gdn[], hyla_ops_attn[], hyla_ops_moe[], hyla_ops_moe_routed_only[], hyla_ops_mlp[];
extern const int hyla_n_ops_gdn, hyla_n_ops_attn, hyla_n_ops_moe, hyla_n_ops_moe_routed_only, hyla_n_ops_mlp;

/* Designated initialisers for the op tables: HYLA_IN(a, b) sets .n_in = 2, .in = {a, b}. */
#define HYLA_NSLOTS(...) ((int)(sizeof((hyla_slot[]){__VA_ARGS__}) / sizeof(hyla_slot)))
#define HYLA_IN(...) .n_in = HYLA_NSLOTS(__VA_ARGS__), .in = {__VA_ARGS__}
#define HYLA_OUT(...) .n_out = HYLA_NSLOTS(__VA_ARGS__), .out = {__VA_ARGS__}
#define HYLA_READS(...) .n_reads = HYLA_NSLOTS(__VA_ARGS__), .reads = {__VA_ARGS__}

#endif
