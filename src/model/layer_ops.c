/* Layer op lists, slot metadata, and the ops every layer shares: input norm, the two residual
 * adds and the post-attention norm (forward and backward side by side). */
#include "model/layer_ops.h"

#include <string.h>

#include "core/arena.h"
#include "core/floats.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/quant.h"
#include "model/lora.h"
#include "ops/ops.h"

static const struct {
    const char *name;
    hyla_ckpt_name ckpt;
} slot_info[HYLA_S__COUNT] = {
    [HYLA_S_X] = {"x", HYLA_CK_DECODER_LAYER_INPUT}, [HYLA_S_XN] = {"xn", HYLA_CK_INTERNAL},
    [HYLA_S_MIX] = {"mix", HYLA_CK_OUT_PROJ}, [HYLA_S_H] = {"h", HYLA_CK_FFN_INPUT},
    [HYLA_S_HN] = {"hn", HYLA_CK_INTERNAL}, [HYLA_S_FFN] = {"ffn", HYLA_CK_INTERNAL},
    [HYLA_S_Y] = {"y", HYLA_CK_INTERNAL},
    [HYLA_S_QKV] = {"qkv", HYLA_CK_GDN_IN_PROJ}, [HYLA_S_Z] = {"z", HYLA_CK_GDN_IN_PROJ},
    [HYLA_S_BL] = {"b", HYLA_CK_GDN_IN_PROJ}, [HYLA_S_AL] = {"a", HYLA_CK_GDN_IN_PROJ},
    [HYLA_S_CONV] = {"conv", HYLA_CK_GDN_CONV}, [HYLA_S_GQ] = {"gq", HYLA_CK_INTERNAL},
    [HYLA_S_GK] = {"gk", HYLA_CK_INTERNAL}, [HYLA_S_GV] = {"gv", HYLA_CK_INTERNAL},
    [HYLA_S_G] = {"g", HYLA_CK_INTERNAL}, [HYLA_S_BETA] = {"beta", HYLA_CK_INTERNAL},
    [HYLA_S_CORE] = {"core", HYLA_CK_GDN_CORE}, [HYLA_S_GNORM] = {"gnorm", HYLA_CK_GDN_NORM},
    [HYLA_S_QRAW] = {"q", HYLA_CK_QUERY_PROJ}, [HYLA_S_GATE] = {"gate", HYLA_CK_QUERY_PROJ},
    [HYLA_S_KRAW] = {"k", HYLA_CK_KEY_PROJ}, [HYLA_S_VRAW] = {"v", HYLA_CK_VALUE_PROJ},
    [HYLA_S_QR] = {"q_rope", HYLA_CK_INTERNAL}, [HYLA_S_KR] = {"k_rope", HYLA_CK_INTERNAL},
    [HYLA_S_COS] = {"cos", HYLA_CK_INTERNAL}, [HYLA_S_SIN] = {"sin", HYLA_CK_INTERNAL},
    [HYLA_S_CTX] = {"ctx", HYLA_CK_CONTEXT}, [HYLA_S_LSE] = {"lse", HYLA_CK_CONTEXT},
    [HYLA_S_ATT] = {"att", HYLA_CK_ATTENTION_OUT},
    [HYLA_S_RLOGITS] = {"router_logits", HYLA_CK_ROUTER_LOGITS}, [HYLA_S_PROBS] = {"probs", HYLA_CK_INTERNAL},
    [HYLA_S_TOPIDX] = {"top_idx", HYLA_CK_INTERNAL}, [HYLA_S_TOPW] = {"top_w", HYLA_CK_INTERNAL},
    [HYLA_S_OFFS] = {"expert_offsets", HYLA_CK_INTERNAL}, [HYLA_S_SLOT_TOK] = {"slot_token", HYLA_CK_INTERNAL},
    [HYLA_S_SLOT_J] = {"slot_choice", HYLA_CK_INTERNAL}, [HYLA_S_XE] = {"expert_in", HYLA_CK_INTERNAL},
    [HYLA_S_EGATE] = {"expert_gate", HYLA_CK_MOE_MLPWI_0}, [HYLA_S_EUP] = {"expert_up", HYLA_CK_MOE_MLPWI_1},
    [HYLA_S_EH] = {"expert_act", HYLA_CK_INTERNAL}, [HYLA_S_EOUT] = {"expert_out", HYLA_CK_MOE_MLPWO},
    [HYLA_S_SGATE] = {"mlp_gate", HYLA_CK_MLPWI_0}, [HYLA_S_SUP] = {"mlp_up", HYLA_CK_MLPWI_1},
    [HYLA_S_SH] = {"mlp_act", HYLA_CK_INTERNAL}, [HYLA_S_SOUT] = {"mlp_out", HYLA_CK_MLPWO},
    [HYLA_S_SG] = {"shared_gate", HYLA_CK_INTERNAL},
};

hyla_ckpt_name hyla_slot_ckpt(hyla_slot s) { return slot_info[s].ckpt; }
const char *hyla_slot_name(hyla_slot s) { return slot_info[s].name; }

int hyla_slot_has_grad(hyla_slot s)
{
    switch (s) {
    case HYLA_S_PROBS: case HYLA_S_TOPIDX: case HYLA_S_OFFS: case HYLA_S_SLOT_TOK: case HYLA_S_SLOT_J:
    case HYLA_S_COS: case HYLA_S_SIN: case HYLA_S_LSE:
        return 0;
    default:
        return 1;
    }
}

int64_t hyla_slot_floats(const hyla_config *c, int layer, hyla_slot s, int64_t n)
{
    int64_t H = c->hidden, kd = hyla_cfg_key_dim(c), vd = hyla_cfg_value_dim(c), cd = hyla_cfg_conv_dim(c);
    int64_t Hv = c->lin_v_heads, hd = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    int64_t E = c->n_experts, k = c->top_k, nk = n * c->top_k;
    switch (s) {
    case HYLA_S_X: case HYLA_S_XN: case HYLA_S_MIX: case HYLA_S_H: case HYLA_S_HN: case HYLA_S_FFN:
    case HYLA_S_Y: case HYLA_S_SOUT:
        return n * H;
    case HYLA_S_QKV: case HYLA_S_CONV: return n * cd;
    case HYLA_S_Z: case HYLA_S_GV: case HYLA_S_CORE: case HYLA_S_GNORM: return n * vd;
    case HYLA_S_BL: case HYLA_S_AL: case HYLA_S_G: case HYLA_S_BETA: return n * Hv;
    case HYLA_S_GQ: case HYLA_S_GK: return n * kd;
    case HYLA_S_QRAW: case HYLA_S_GATE: case HYLA_S_QR: case HYLA_S_CTX: case HYLA_S_ATT: return n * Hq * hd;
    case HYLA_S_KRAW: case HYLA_S_VRAW: case HYLA_S_KR: return n * Hkv * hd;
    case HYLA_S_COS: case HYLA_S_SIN: return n * (c->rotary_dim / 2);
    case HYLA_S_LSE: return n * Hq;
    case HYLA_S_RLOGITS: case HYLA_S_PROBS: return n * E;
    case HYLA_S_TOPIDX: case HYLA_S_TOPW: return n * k;
    case HYLA_S_OFFS: return E + 1;
    case HYLA_S_SLOT_TOK: case HYLA_S_SLOT_J: return nk;
    case HYLA_S_XE: case HYLA_S_EOUT: return nk * H;
    case HYLA_S_EGATE: case HYLA_S_EUP: case HYLA_S_EH: return nk * c->moe_inter;
    case HYLA_S_SGATE: case HYLA_S_SUP: case HYLA_S_SH: return n * (c->layer_is_moe[layer] ? c->shared_inter : c->inter);
    case HYLA_S_SG: return n;
    case HYLA_S__COUNT: break;
    }
    return 0;
}

const float *hyla_op_w(const hyla_op_ctx *c, hyla_role role) { return hyla_model_param(c->m, role, c->layer); }

float *hyla_op_dw(const hyla_op_ctx *c, hyla_role role)
{
    if (!c->grads)
        return NULL;
    int i = hyla_param_find(&c->m->table, role, c->layer);
    return c->grads + (c->m->table.params[i].offset - c->grad_base);
}

int hyla_slot_is_bf16(hyla_slot s)
{
    switch (s) {
    case HYLA_S_BL: case HYLA_S_AL: case HYLA_S_G: case HYLA_S_BETA: case HYLA_S_SG:
    case HYLA_S_COS: case HYLA_S_SIN: case HYLA_S_LSE:
    case HYLA_S_RLOGITS: case HYLA_S_PROBS: case HYLA_S_TOPW:
    case HYLA_S_TOPIDX: case HYLA_S_OFFS: case HYLA_S_SLOT_TOK: case HYLA_S_SLOT_J:
    case HYLA_S__COUNT:
        return 0;
    default:
        return 1;
    }
}

/* The widest side of any projection: hidden on one side, at most this on the other. */
static int64_t widest_side(const hyla_config *cfg)
{
    int64_t wide = hyla_cfg_conv_dim(cfg);
    int64_t sides[] = {cfg->hidden, hyla_cfg_value_dim(cfg), 2 * cfg->n_heads * cfg->head_dim,
                       cfg->n_kv_heads * cfg->head_dim, 2 * cfg->moe_inter, 2 * cfg->shared_inter, 2 * cfg->inter,
                       cfg->lin_v_heads, cfg->n_mtp_layers > 0 ? 2 * cfg->hidden : 0 /* the MTP head's fc */};
    for (size_t i = 0; i < sizeof sides / sizeof *sides; i++)
        wide = sides[i] > wide ? sides[i] : wide;
    return wide;
}

int64_t hyla_bf16_scratch_floats(const hyla_config *cfg, int64_t n)
{
    /* backward: dy rounded to bf16 values, [rows <= n (a routed expert gets each token at most
     * once), out]; then the product's own scratch (widened weight rows) */
    int64_t D = widest_side(cfg);
    return n * D + hyla_bf16w_scratch_floats(n, D);
}

int64_t hyla_quant_scratch_floats(const hyla_config *cfg, int64_t n)
{
    int64_t D = widest_side(cfg), floats = hyla_linear_q_scratch_floats(n, D);
    if (cfg->n_experts > 0 && n <= HYLA_QUANT_SKINNY_M) { /* a decode step's routed experts as one set */
        int64_t slots = n * cfg->top_k, items = hyla_linear_q_items_scratch_floats(slots, slots, D);
        floats = items > floats ? items : floats;
    }
    if (n <= HYLA_QUANT_SKINNY_M) { /* a decode step's input projections as one set (their input is hidden wide) */
        int64_t fan = hyla_linear_q_fanout_scratch_floats(n, HYLA_FANOUT_MAX, cfg->hidden);
        floats = fan > floats ? fan : floats;
    }
    return floats;
}

int64_t hyla_head_scratch_floats(const hyla_model *m, int64_t n)
{
    return m->qw ? hyla_linear_q_scratch_floats(n, m->cfg.hidden)
         : m->w16 ? hyla_bf16w_scratch_floats(n, m->cfg.hidden) : 0;
}

void hyla_head_linear(const hyla_model *m, float *logits, const float *xn, int64_t n, float *scratch)
{
    int64_t H = m->cfg.hidden, V = m->cfg.vocab;
    const hyla_qmat *Q = hyla_model_param_q(m, HYLA_P_LM_HEAD, -1);
    const uint16_t *W16 = hyla_model_param_bf16(m, HYLA_P_LM_HEAD, -1);
    if (Q)
        hyla_linear_q(logits, xn, Q, 0, n, H, V, scratch);
    else if (W16)
        hyla_linear_bf16w(logits, xn, W16, n, H, V, 0, scratch);
    else
        hyla_linear(logits, xn, hyla_model_param(m, HYLA_P_LM_HEAD, -1), n, H, V, 0);
}

void hyla_op_linear(const hyla_op_ctx *c, hyla_role role, int64_t row0, float *y, const float *x, int64_t n,
                    int64_t in, int64_t out)
{
    const uint16_t *W16 = hyla_model_param_bf16(c->m, role, c->layer);
    const hyla_qmat *Q = hyla_model_param_q(c->m, role, c->layer);
    if (Q) /* a GGUF model: the weights in their stored type (inference only) */
        hyla_linear_q(y, x, Q, row0, n, in, out, c->bf16_scratch);
    else if (W16) /* x holds bf16 values: every projection's input is a bf16 slot, rounded by its producer */
        hyla_linear_bf16w(y, x, W16 + row0 * in, n, in, out, 0, c->bf16_scratch);
    else
        hyla_linear(y, x, hyla_op_w(c, role) + row0 * in, n, in, out, 0);
    if (c->lora)
        hyla_lora_fwd(c->lora, hyla_param_find(&c->m->table, role, c->layer), row0, out, y, x, n, in, c->lora_scratch);
}

int hyla_op_linear_items(const hyla_op_ctx *c, hyla_role role, const hyla_qitem *items, int64_t count, int64_t in,
                         int64_t out)
{
    const hyla_qmat *Q = hyla_model_param_q(c->m, role, c->layer);
    if (!Q || c->lora || count > HYLA_QITEMS_MAX)
        return 0;
    for (int64_t j = 0; j < count; j++)
        if (items[j].n > HYLA_QUANT_SKINNY_M)
            return 0;
    hyla_linear_q_items(Q, items, count, in, out, c->bf16_scratch);
    return 1;
}

void hyla_op_linear_fanout(const hyla_op_ctx *c, const hyla_role *roles, float *const *ys, const int64_t *outs,
                           int count, const float *x, int64_t n, int64_t in)
{
    hyla_qtarget targets[HYLA_FANOUT_MAX];
    int fused = !c->lora && n <= HYLA_QUANT_SKINNY_M && count <= HYLA_FANOUT_MAX && in == c->m->cfg.hidden;
    for (int j = 0; fused && j < count; j++) {
        targets[j] = (hyla_qtarget){hyla_model_param_q(c->m, roles[j], c->layer), ys[j], 0, outs[j]};
        fused = targets[j].W != NULL;
    }
    if (fused) {
        hyla_linear_q_fanout(targets, count, x, n, in, c->bf16_scratch);
        return;
    }
    for (int j = 0; j < count; j++)
        hyla_op_linear(c, roles[j], 0, ys[j], x, n, in, outs[j]);
}

void hyla_op_linear_bwd(const hyla_op_ctx *c, hyla_role role, int64_t row0, float *dx, const float *dy,
                        const float *x, int64_t n, int64_t in, int64_t out)
{
    float *dW = hyla_op_dw(c, role);
    const uint16_t *W16 = hyla_model_param_bf16(c->m, role, c->layer);
    HYLA_ASSERT(!c->m->qw); /* GGUF models are for inference: hyla_trainer_init refuses them */
    if (W16) { /* dy as a bf16 matmul input (the adapter path reads dy itself) */
        float *dyr = c->bf16_scratch, *work = dyr + n * out; /* within hyla_bf16_scratch_floats: out, in <= D */
        const float *dyb = dy;
        if (dW || !hyla_bf16w_native()) { /* a rounded copy for the fp32 products; the native dx product
                                           * packs dy to bf16 itself, the same rounding (frozen bases skip both passes) */
            memcpy(dyr, dy, (size_t)(n * out) * sizeof *dyr);
            hyla_bf16_round(dyr, n * out);
            dyb = dyr;
        }
        if (dx)
            hyla_linear_bf16w_dx(dx, dyb, W16 + row0 * in, n, in, out, work);
        if (dW) /* dy^T x: both bf16 values in fp32 buffers */
            hyla_gemm(1, 0, out, in, n, 1.0f, dyr, out, x, in, 1.0f, dW + row0 * in, in);
    } else
        hyla_linear_bwd(dx, dW ? dW + row0 * in : NULL, dy, x, hyla_op_w(c, role) + row0 * in, n, in, out);
    if (c->lora && c->lora_grads)
        hyla_lora_bwd(c->lora, c->lora_grads, hyla_param_find(&c->m->table, role, c->layer), row0, out, dx, dy, x, n,
                      in, c->lora_scratch);
}

void hyla_linear_bwd(float *dx, float *dW, const float *dy, const float *x, const float *W, int64_t n, int64_t in,
                     int64_t out)
{
    if (dx)
        hyla_gemm(0, 0, n, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    if (dW)
        hyla_gemm(1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, dW, in);
}

/* ---- input norm: XN = RMSNorm1p(X; input_layernorm) -------------------------------------- */
static void in_norm_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_rmsnorm1p_fwd(t->p[HYLA_S_XN], NULL, t->p[HYLA_S_X], hyla_op_w(c, HYLA_P_INPUT_NORM), c->n, c->m->cfg.hidden,
                       (float)c->m->cfg.rms_norm_eps);
}
/* scratch [n,H]: dX contribution, added to the accumulated dX */
static void norm_bwd_into(const hyla_op_ctx *c, float *dx_acc, const float *dy, const float *x, hyla_role role, float *scratch)
{
    int64_t nH = c->n * c->m->cfg.hidden;
    hyla_rmsnorm1p_bwd(scratch, hyla_op_dw(c, role), dy, x, hyla_op_w(c, role), NULL, c->n, c->m->cfg.hidden,
                       (float)c->m->cfg.rms_norm_eps);
    hyla_floats_add(dx_acc, scratch, nH);
}
static void in_norm_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    norm_bwd_into(c, d->p[HYLA_S_X], d->p[HYLA_S_XN], t->p[HYLA_S_X], HYLA_P_INPUT_NORM, scratch);
}
static int64_t nH_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return n * cfg->hidden; }
static int64_t no_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return 0; }

const hyla_layer_op hyla_op_in_norm = {"input_norm", in_norm_fwd, in_norm_bwd, no_scratch, nH_scratch,
                                       HYLA_IN(HYLA_S_X), HYLA_OUT(HYLA_S_XN), HYLA_READS(HYLA_S_X)};

/* ---- post norm: HN = RMSNorm1p(H; post_attention_layernorm) ------------------------------ */
static void post_norm_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_rmsnorm1p_fwd(t->p[HYLA_S_HN], NULL, t->p[HYLA_S_H], hyla_op_w(c, HYLA_P_POST_NORM), c->n, c->m->cfg.hidden,
                       (float)c->m->cfg.rms_norm_eps);
}
static void post_norm_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    norm_bwd_into(c, d->p[HYLA_S_H], d->p[HYLA_S_HN], t->p[HYLA_S_H], HYLA_P_POST_NORM, scratch);
}
const hyla_layer_op hyla_op_post_norm = {"post_norm", post_norm_fwd, post_norm_bwd, no_scratch, nH_scratch,
                                         HYLA_IN(HYLA_S_H), HYLA_OUT(HYLA_S_HN), HYLA_READS(HYLA_S_H)};

/* ---- residual adds ------------------------------------------------------------------------ */
static void residual_mix_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_floats_sum(t->p[HYLA_S_H], t->p[HYLA_S_X], t->p[HYLA_S_MIX], c->n * c->m->cfg.hidden);
}
static void residual_mix_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_floats_add(d->p[HYLA_S_X], d->p[HYLA_S_H], c->n * c->m->cfg.hidden);
    hyla_floats_add(d->p[HYLA_S_MIX], d->p[HYLA_S_H], c->n * c->m->cfg.hidden);
}
const hyla_layer_op hyla_op_residual_mix = {"residual_mix", residual_mix_fwd, residual_mix_bwd, no_scratch, no_scratch,
                                            HYLA_IN(HYLA_S_X, HYLA_S_MIX), HYLA_OUT(HYLA_S_H), .n_reads = 0};

static void residual_ffn_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_floats_sum(t->p[HYLA_S_Y], t->p[HYLA_S_H], t->p[HYLA_S_FFN], c->n * c->m->cfg.hidden);
}
static void residual_ffn_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_floats_add(d->p[HYLA_S_H], d->p[HYLA_S_Y], c->n * c->m->cfg.hidden);
    hyla_floats_add(d->p[HYLA_S_FFN], d->p[HYLA_S_Y], c->n * c->m->cfg.hidden);
}
const hyla_layer_op hyla_op_residual_ffn = {"residual_ffn", residual_ffn_fwd, residual_ffn_bwd, no_scratch, no_scratch,
                                            HYLA_IN(HYLA_S_H, HYLA_S_FFN), HYLA_OUT(HYLA_S_Y), .n_reads = 0};

static void residual_mlp_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_floats_sum(t->p[HYLA_S_Y], t->p[HYLA_S_H], t->p[HYLA_S_SOUT], c->n * c->m->cfg.hidden);
}
static void residual_mlp_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_floats_add(d->p[HYLA_S_H], d->p[HYLA_S_Y], c->n * c->m->cfg.hidden);
    hyla_floats_add(d->p[HYLA_S_SOUT], d->p[HYLA_S_Y], c->n * c->m->cfg.hidden);
}
const hyla_layer_op hyla_op_residual_mlp = {"residual_mlp", residual_mlp_fwd, residual_mlp_bwd, no_scratch, no_scratch,
                                            HYLA_IN(HYLA_S_H, HYLA_S_SOUT), HYLA_OUT(HYLA_S_Y), .n_reads = 0};

int64_t hyla_seq_past(const hyla_op_ctx *c, int64_t i)
{
    return c->seq_row0[i] % c->T ? 0 : c->context_past[c->seq_row0[i] / c->T];
}

int hyla_seq_ends_row(const hyla_op_ctx *c, int64_t i) { return (c->seq_row0[i] + c->seq_len[i]) % c->T == 0; }

void hyla_row_seqs(const hyla_op_ctx *c, int64_t b, int64_t *i0, int64_t *i1)
{
    int64_t i = 0;
    while (i < c->n_seq && c->seq_row0[i] / c->T < b)
        i++;
    *i0 = i;
    while (i < c->n_seq && c->seq_row0[i] / c->T == b)
        i++;
    *i1 = i;
}

void hyla_context_sizes(const hyla_config *cfg, int64_t n_seq, int64_t T, int size, size_t buf[4], size_t out[4],
                        size_t *stage, size_t *kept_per_layer)
{
    size_t cd = (size_t)hyla_cfg_conv_dim(cfg), K = (size_t)cfg->conv_kernel;
    size_t sz = (size_t)(cfg->lin_v_heads * cfg->lin_k_dim * cfg->lin_v_dim);
    size_t keys = (size_t)size * (size_t)(T * cfg->n_kv_heads * cfg->head_dim); /* one sequence's, every slice */
    size_t conv[4] = {K * cd, (K - 1) * cd, (K - 1) * cd, (K - 1) * cd}; /* op_gdn.c: window, d_hist, tail, rows */
    size_t delta[4] = {(size_t)n_seq * sz, sz, 0, 0};                  /* chain states, a state gradient */
    for (int i = 0; i < 4; i++) {
        buf[i] = keys; /* op_attn.c: keys, values; their gradients' parts */
        buf[i] = conv[i] > buf[i] ? conv[i] : buf[i];
        buf[i] = delta[i] > buf[i] ? delta[i] : buf[i];
    }
    /* the sends in flight (train/context.c): the chain's states both ways, the conv window, its partial dx */
    out[0] = out[1] = (size_t)n_seq * sz, out[2] = K * cd, out[3] = (K - 1) * cd;
    *stage = keys; /* a reduce: every rank's block of one sequence's keys */
    *kept_per_layer = (size_t)n_seq * sz;
}

size_t hyla_context_link_bytes(const hyla_config *cfg, int64_t n_seq, int64_t T, int size)
{
    size_t buf[4], out[4], stage, kept, bytes = 0;
    int64_t linear = 0;
    hyla_context_sizes(cfg, n_seq, T, size, buf, out, &stage, &kept);
    for (int l = 0; l < cfg->n_layers; l++)
        linear += cfg->layer_kind[l] == HYLA_LAYER_LINEAR;
    for (int i = 0; i < 4; i++)
        bytes += hyla_align_up((buf[i] ? buf[i] : 1) * sizeof(float)) + hyla_align_up((out[i] ? out[i] : 1) * sizeof(float));
    bytes += hyla_align_up((stage ? stage : 1) * sizeof(float));
    bytes += hyla_align_up((size_t)(linear ? linear : 1) * kept * sizeof(float));
    bytes += hyla_align_up((size_t)size * (size_t)(2 * cfg->n_experts + 1) * sizeof(double));
    return bytes;
}

int hyla_layer_ops(const hyla_config *cfg, int layer, const hyla_layer_op **ops)
{
    int n = 0;
    ops[n++] = &hyla_op_in_norm;
    int full = cfg->layer_kind[layer] == HYLA_LAYER_FULL;
    const hyla_layer_op *mix = full ? hyla_ops_attn : hyla_ops_gdn;
    int n_mix = full ? hyla_n_ops_attn : hyla_n_ops_gdn;
    for (int i = 0; i < n_mix; i++)
        ops[n++] = &mix[i];
    ops[n++] = &hyla_op_residual_mix;
    ops[n++] = &hyla_op_post_norm;
    int moe = cfg->layer_is_moe[layer];
    const hyla_layer_op *ffn = !moe ? hyla_ops_mlp : cfg->shared_inter > 0 ? hyla_ops_moe : hyla_ops_moe_routed_only;
    int n_ffn = !moe ? hyla_n_ops_mlp : cfg->shared_inter > 0 ? hyla_n_ops_moe : hyla_n_ops_moe_routed_only;
    for (int i = 0; i < n_ffn; i++)
        ops[n++] = &ffn[i];
    ops[n++] = moe ? &hyla_op_residual_ffn : &hyla_op_residual_mlp;
    return n;
}

void hyla_mtp_join_inputs(const hyla_model *m, float *joined, const int32_t *tokens, const float *hidden, int64_t n)
{
    int64_t H = m->cfg.hidden;
    float eps = (float)m->cfg.rms_norm_eps;
    const float *we = hyla_model_param(m, HYLA_P_MTP_NORM_EMB, -1), *wh = hyla_model_param(m, HYLA_P_MTP_NORM_HIDDEN, -1);
    for (int64_t i = 0; i < n; i++) { /* the embedding row into the hidden half, normed into the first */
        float *row = joined + i * 2 * H;
        hyla_model_embed_rows(m, tokens + i, 1, row + H);
        hyla_rmsnorm1p_fwd(row, NULL, row + H, we, 1, H, eps);
        hyla_rmsnorm1p_fwd(row + H, NULL, hidden + i * H, wh, 1, H, eps);
    }
    if (m->compute_dtype == HYLA_DT_BF16)
        hyla_bf16_round(joined, n * 2 * H);
}
