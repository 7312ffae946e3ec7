/* Trainable LoRA adapters (PEFT's LoRA on nn.Linear modules), unmerged: every adapted projection
 * computes y = x W^T + s * (drop(x) A^T) B^T with the base W frozen.
 *
 * A module is one Hugging Face linear weight M.weight of the loaded layout [out, in] (Qwen3-Next's
 * grouped in_proj_qkvz / in_proj_ba, per-expert mlp.experts.J.*_proj, ...). Its adapter is
 *   A [r, in]    (PEFT base_model.model.M.lora_A.weight)
 *   B [out, r]   (PEFT base_model.model.M.lora_B.weight), held here in hyla's INTERNAL row order:
 * the module's rows land on one or two internal parameters through the loader's row map
 * (in_proj_qkvz -> GDN_QKV + GDN_Z), so B is stored as one contiguous segment per internal
 * parameter, [rows of that segment, r], and an op computing internal rows [row0, row0 + out) of a
 * parameter adds the segments that cover them. Files are read and written in PEFT's (HF) row
 * order: the permutation is applied only there.
 *
 * Routed experts: with the per-expert layout (mlp.experts.J.gate_proj ...) every expert's
 * projection is a module of its own (rank r each), exactly as PEFT adapts nn.Linear experts. A
 * fused expert layout (experts.gate_up_proj, a 3-D parameter) has no Linear modules: experts are
 * then not adaptable (refused when named; convert the model to the per-expert layout first).
 *
 * All adapter floats live in one arena (weights; the trainer keeps gradients and AdamW moments of
 * the same size); `table` describes it as a parameter table (one 2-D param per A and per B
 * segment) so the optimizer, norm and clipping code run on it unchanged. */
#ifndef HYLA_MODEL_LORA_H
#define HYLA_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "model/params.h"

typedef struct {
    int layer;
    int param;            /* internal parameter index */
    int64_t row0, rows;   /* internal rows [row0, row0 + rows) of that parameter */
    int module;           /* owning module */
    size_t b_offset;      /* floats into the arena: B segment [rows, r] */
} hyla_lora_segment;

typedef struct {
    char name[112];       /* HF module name, e.g. model.layers.3.linear_attn.in_proj_qkvz */
    size_t hf;            /* index of M.weight in the model's HF tensor list */
    int layer;
    int64_t in, out;
    size_t a_offset;      /* floats into the arena: A [r, in] */
    int seg0, n_seg;      /* its segments */
} hyla_lora_module;

typedef struct hyla_lora_s {
    int64_t r;
    double alpha, scaling;  /* scaling = alpha / r (alpha / sqrt(r) with use_rslora) */
    int use_rslora;
    double dropout;         /* probability in [0, 1): PEFT's lora_dropout on the A path's input */
    uint64_t dropout_seed;  /* masks are a pure function of (seed, step, layer, module, row, col) */
    int64_t dropout_step;   /* set by the trainer per step: the same mask on recompute */
    int training;           /* dropout active (training forward and its recompute) */
    int n_modules, n_segments;
    hyla_lora_module *modules;
    hyla_lora_segment *segments;
    int *seg_by_param;      /* [n_params + 1]: segments of parameter p are seg_order[seg_by_param[p] .. [p+1]) */
    int *seg_order;
    int64_t max_in;         /* widest module input (scratch sizing) */
    int64_t max_out;        /* widest module output: B^T of one segment, [r, rows], in the scratch */
    int experts;            /* adapts routed-expert modules (their rows run n*k tokens) */
    hyla_param_table table; /* the arena as parameters: A then B segments, in module order */
    float *w;               /* [table.total_floats] owned, 64-byte aligned */
    char targets[1024];     /* the target list as given ("all-linear" or names), for the record */
} hyla_lora;

/* Which modules a target list selects. "all-linear": every linear module of the decoder layers
 * (attention q/k/v/o, GDN in_proj_* and out_proj, shared-expert and dense MLP gate/up/down,
 * shared_expert_gate, per-expert projections) except the router (mlp.gate) and lm_head, as PEFT's
 * all-linear on these models. Otherwise a comma list of module-name suffixes (q_proj, in_proj_qkvz,
 * shared_expert.gate_proj, experts.3.down_proj ...), matched as PEFT matches target_modules (a
 * module whose name is the suffix or ends in "." + suffix). A name matching nothing is an error. */
typedef struct {
    int64_t r;
    double alpha;          /* <= 0: alpha = r (scaling 1) */
    double dropout;
    int use_rslora;
    const char *targets;   /* NULL: all-linear */
    uint64_t seed;         /* A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming_uniform(a=sqrt 5)), B = 0 */
} hyla_lora_options;

int hyla_lora_create(hyla_lora *L, const hyla_param_table *t, const hyla_lora_options *o);
/* The same for the HF tensors flagged in selected[n_hf] (o->targets only recorded); a flagged
 * tensor that is not a decoder-layer projection (router, lm_head) is refused, naming it. */
int hyla_lora_create_modules(hyla_lora *L, const hyla_param_table *t, const unsigned char *selected,
                             const hyla_lora_options *o);
/* An adapter directory (adapter_config.json + adapter_model.safetensors) as trainable weights:
 * its r, alpha, dropout, rslora and module set; every module checked against the model. */
int hyla_lora_load(hyla_lora *L, const hyla_param_table *t, const char *dir);
/* Write DIR/adapter_config.json + DIR/adapter_model.safetensors (F32) into an existing directory;
 * base_model: recorded as base_model_name_or_path (may be NULL). */
int hyla_lora_write(const hyla_lora *L, const hyla_param_table *t, const char *dir, const char *base_model);
void hyla_lora_free(hyla_lora *L);
/* Module `module`'s B between PEFT's HF row order hf [out, r] and its segments in `arena` (the
 * adapter's weights, or a gradient arena of the same layout). to_hf: arena -> hf, else hf -> arena. */
void hyla_lora_b_rows(const hyla_lora *L, const hyla_param_table *t, int module, float *hf, float *arena, int to_hf);


/* Scratch floats an adapted projection needs for `rows` input rows. */
int64_t hyla_lora_scratch_floats(const hyla_lora *L, int64_t rows);

/* The adapted part of a projection: internal rows [row0, row0 + out) of parameter `param`.
 * Forward: y[n, out] += s * drop(x) A^T B^T for every segment inside the range.
 * Backward: dB += s dy^T (drop(x) A^T); dA += (s dy B)^T drop(x); dx += (s dy B) A (dx may be
 * NULL). grads: the adapter gradient arena (same layout as L->w). scratch: hyla_lora_scratch_floats. */
void hyla_lora_fwd(const hyla_lora *L, int param, int64_t row0, int64_t out, float *y, const float *x, int64_t n,
                   int64_t in, float *scratch);
void hyla_lora_bwd(const hyla_lora *L, float *grads, int param, int64_t row0, int64_t out, float *dx, const float *dy,
                   const float *x, int64_t n, int64_t in, float *scratch);

#endif
