/* The parameter table: one table drives loading, saving, sizing and planning.
 *
 * hyla keeps every parameter in one fp32 arena in a canonical internal layout (one row per
 * role and layer, below). Hugging Face checkpoints name and shape tensors differently per
 * family and per transformers version; each HF tensor is a list of rows of equal length
 * (row_len) and the table says where every HF row lives internally:
 *   - HYLA_HF_ROWS:  HF row r   -> internal param `param`, row `row0 + r`      (most tensors)
 *   - HYLA_HF_QKVZ:  Qwen3-Next grouped in_proj_qkvz (spec §2.3) -> GDN_QKV / GDN_Z rows
 *   - HYLA_HF_BA:    Qwen3-Next grouped in_proj_ba   (spec §2.3) -> GDN_B / GDN_A rows
 * Per-expert tensors (experts.j.gate_proj) and fused ones (experts.gate_up_proj) are both
 * HYLA_HF_ROWS with different row0, as are separate vs fused gate/up projections.
 *
 * Internal layouts (H hidden, V vocab, E experts; per layer l):
 *   EMBED [V,H]  FINAL_NORM [H]  LM_HEAD [V,H] (absent when tied: use EMBED)
 *   INPUT_NORM [H]  POST_NORM [H]                         zero-centred (1+w)
 *   GDN_QKV [2*Hk*dk + Hv*dv, H] rows q|k|v head-major (= conv channel order)
 *   GDN_Z [Hv*dv, H]  GDN_B [Hv, H]  GDN_A [Hv, H]  GDN_CONV [conv_dim, K]
 *   GDN_DT_BIAS [Hv]  GDN_A_LOG [Hv]  GDN_NORM [dv] (plain weight)  GDN_OUT [H, Hv*dv]
 *   ATTN_Q [Hq*2*hd, H] (per head: hd query rows then hd gate rows, as HF)  ATTN_K [Hkv*hd, H]
 *   ATTN_V [Hkv*hd, H]  ATTN_O [H, Hq*hd]  ATTN_Q_NORM [hd]  ATTN_K_NORM [hd]
 *   MOE_ROUTER [E,H]  MOE_GATE_UP [E, 2*Ie, H] (gate rows then up rows)  MOE_DOWN [E, H, Ie]
 *   SHARED_GATE_UP [2*Is, H]  SHARED_DOWN [H, Is]  SHARED_EXPERT_GATE [1, H]
 *   MLP_GATE_UP [2*Id, H]  MLP_DOWN [H, Id]
 * The MTP head (docs/mtp.md), when the config has MTP layers, after everything else:
 *   MTP_FC [H, 2H] (input columns: normed embedding, then normed hidden)  MTP_NORM_EMB [H]
 *   MTP_NORM_HIDDEN [H]  MTP_NORM [H] (zero-centred), and per MTP layer j the roles of a
 *   full-attention decoder layer, found as layer n_layers + j. */
#ifndef HYLA_MODEL_PARAMS_H
#define HYLA_MODEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"

typedef enum {
    HYLA_P_EMBED, HYLA_P_FINAL_NORM, HYLA_P_LM_HEAD,
    HYLA_P_INPUT_NORM, HYLA_P_POST_NORM,
    HYLA_P_GDN_QKV, HYLA_P_GDN_Z, HYLA_P_GDN_B, HYLA_P_GDN_A, HYLA_P_GDN_CONV,
    HYLA_P_GDN_DT_BIAS, HYLA_P_GDN_A_LOG, HYLA_P_GDN_NORM, HYLA_P_GDN_OUT,
    HYLA_P_ATTN_Q, HYLA_P_ATTN_K, HYLA_P_ATTN_V, HYLA_P_ATTN_O, HYLA_P_ATTN_Q_NORM, HYLA_P_ATTN_K_NORM,
    HYLA_P_MOE_ROUTER, HYLA_P_MOE_GATE_UP, HYLA_P_MOE_DOWN,
    HYLA_P_SHARED_GATE_UP, HYLA_P_SHARED_DOWN, HYLA_P_SHARED_EXPERT_GATE,
    HYLA_P_MLP_GATE_UP, HYLA_P_MLP_DOWN,
    HYLA_P_MTP_FC, HYLA_P_MTP_NORM_EMB, HYLA_P_MTP_NORM_HIDDEN, HYLA_P_MTP_NORM,
    HYLA_P__COUNT
} hyla_role;

/* The routed experts' stacked tensors ([E, rows, cols]: expert e's rows contiguous). */
static inline int hyla_role_is_routed(hyla_role r) { return r == HYLA_P_MOE_GATE_UP || r == HYLA_P_MOE_DOWN; }

typedef enum { HYLA_HF_ROWS, HYLA_HF_QKVZ, HYLA_HF_BA } hyla_hf_map;

/* Which Hugging Face layout to read or write. Detected from tensor names on load. */
typedef struct {
    int gdn_grouped;    /* Qwen3-Next in_proj_qkvz / in_proj_ba (else Qwen3.5 separate) */
    int experts_fused;  /* experts.gate_up_proj / experts.down_proj (else per-expert) */
    int language_model_prefix; /* "model.language_model." (Qwen3.5 VL) else "model." */
} hyla_layout;

typedef struct {
    hyla_role role;
    int layer;          /* trunk layer, or -1: global parameters and the MTP head's */
    int ndim;
    int64_t shape[3];
    int64_t numel;
    size_t offset;      /* in floats, into the weight arena */
    int no_decay;       /* norms, biases, gate scalars: excluded from weight decay */
    int mtp;            /* 0: trunk or global; else part of the MTP head: 1 + j for MTP layer j's
                         * parameters (found as layer n_layers + j), 1 for its fc and norms */
} hyla_param;

/* Floats n elements occupy in a table: padded to 16 (64-byte aligned offsets). */
static inline size_t hyla_span_floats(int64_t n) { return (size_t)((n + 15) & ~(int64_t)15); }
/* Floats a parameter occupies in the table. */
static inline size_t hyla_param_span(const hyla_param *p) { return hyla_span_floats(p->numel); }

typedef struct {
    char name[112];     /* HF tensor name */
    int ndim;
    int64_t shape[4];
    int64_t rows, row_len; /* the tensor viewed as [rows, row_len] */
    hyla_hf_map map;
    int param;          /* internal param index (HYLA_HF_ROWS) */
    int64_t row0;       /* first internal row (HYLA_HF_ROWS) */
    int layer;          /* trunk layer, or -1 */
} hyla_hf_tensor;

typedef struct {
    hyla_config cfg;
    hyla_layout layout;
    int n_params;
    hyla_param *params;          /* [n_params], owned */
    size_t n_hf;
    hyla_hf_tensor *hf;          /* [n_hf], owned */
    size_t total_floats;         /* size of the weight arena */
    int (*index)[HYLA_P__COUNT]; /* [n_layers + n_mtp_layers + 1][role] -> param index or -1: trunk layers,
                                  * MTP layers, last row global */
} hyla_param_table;

int hyla_params_build(hyla_param_table *t, const hyla_config *cfg, const hyla_layout *layout);
/* FSDP: floats of rank `rank`'s pieces (parallel/shard.h) of every parameter, each padded like the
 * table's; what the trainer allocates for the weights, the gradient and each moment (train/fsdp.h)
 * and what hyla plan sizes them by. */
size_t hyla_params_shard_floats(const hyla_param_table *t, int ranks, int rank);
void hyla_params_free(hyla_param_table *t);
/* Index of (role, layer) or -1; layer -1 for globals, n_layers + j for MTP layer j. */
int hyla_param_find(const hyla_param_table *t, hyla_role role, int layer);
const char *hyla_role_name(hyla_role r);
/* A parameter's name in hyla's own files (optimizer state, messages): "ROLE", "layers.L.ROLE",
 * "mtp.ROLE" or "mtp.layers.J.ROLE". */
void hyla_param_label(const hyla_param *p, char *buf, size_t cap);

/* The layer argument hyla_param_find takes for p: its trunk layer, n_layers + j for MTP layer j, or -1. */
static inline int hyla_param_find_layer(const hyla_param_table *t, const hyla_param *p)
{
    return p->layer >= 0 ? p->layer : p->mtp && p->role < HYLA_P_MTP_FC ? (int)t->cfg.n_layers + p->mtp - 1 : -1;
}

/* Destination of HF row r of tensor t: internal param index and row. */
void hyla_hf_row_dest(const hyla_param_table *t, const hyla_hf_tensor *ht, int64_t r, int *param, int64_t *row);

/* Parameter counts: total, and active per token (embedding lookup counted as total only when
 * untied lm_head; routed experts counted k of E). */
typedef struct {
    int64_t total;
    int64_t active;
    int64_t embedding;   /* embed + lm_head */
    int64_t mtp;         /* the MTP head (not in total / active: Hugging Face does not load it) */
    int64_t per_kind[4]; /* linear mixer, full mixer, MoE (all experts), dense MLP */
} hyla_param_counts;
void hyla_params_count(const hyla_param_table *t, hyla_param_counts *out);

#endif
