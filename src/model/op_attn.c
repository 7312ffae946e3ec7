/* Gated full-attention mixer ops (spec §3.5-3.6, backward §8.9), forward and backward side by side.
 * query_proj / key_proj / value_proj checkpoints are the projection outputs; q/k norm and RoPE
 * (elementwise, O(n hd)) are recomputed from them, because their backward needs the pre-norm
 * values anyway. */
#include <math.h>
#include <string.h>

#include "core/floats.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "core/sigmoid.h"
#include "model/infer_state.h"
#include "model/layer_ops.h"
#include "ops/ops.h"

#define CFG (&c->m->cfg)

static int64_t none(const hyla_config *cfg, int64_t n, int64_t T) { return 0; }

/* ---- projections: XN -> QRAW, GATE (q_proj, per-head interleaved), KRAW, VRAW --------------- */
static void proj_fwd(const hyla_op_ctx *c, hyla_tape *t, float *qg /*[n, Hq, 2, hd]*/)
{
    int64_t n = c->n, H = CFG->hidden, hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads;
    const float *x = t->p[HYLA_S_XN];
    const hyla_role roles[3] = {HYLA_P_ATTN_Q, HYLA_P_ATTN_K, HYLA_P_ATTN_V};
    float *const ys[3] = {qg, t->p[HYLA_S_KRAW], t->p[HYLA_S_VRAW]};
    const int64_t outs[3] = {Hq * 2 * hd, Hkv * hd, Hkv * hd};
    hyla_op_linear_fanout(c, roles, ys, outs, 3, x, n, H);
    for (int64_t i = 0; i < n * Hq; i++) {
        memcpy(t->p[HYLA_S_QRAW] + i * hd, qg + i * 2 * hd, (size_t)hd * sizeof(float));
        memcpy(t->p[HYLA_S_GATE] + i * hd, qg + i * 2 * hd + hd, (size_t)hd * sizeof(float));
    }
}
static int64_t proj_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return n * cfg->n_heads * 2 * cfg->head_dim; }
static void proj_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *dqg /*[n, Hq, 2, hd]*/)
{
    int64_t n = c->n, H = CFG->hidden, hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads;
    for (int64_t i = 0; i < n * Hq; i++) {
        memcpy(dqg + i * 2 * hd, d->p[HYLA_S_QRAW] + i * hd, (size_t)hd * sizeof(float));
        memcpy(dqg + i * 2 * hd + hd, d->p[HYLA_S_GATE] + i * hd, (size_t)hd * sizeof(float));
    }
    const float *x = t->p[HYLA_S_XN];
    float *dx = d->p[HYLA_S_XN];
    hyla_op_linear_bwd(c, HYLA_P_ATTN_Q, 0, dx, dqg, x, n, H, Hq * 2 * hd);
    hyla_op_linear_bwd(c, HYLA_P_ATTN_K, 0, dx, d->p[HYLA_S_KRAW], x, n, H, Hkv * hd);
    hyla_op_linear_bwd(c, HYLA_P_ATTN_V, 0, dx, d->p[HYLA_S_VRAW], x, n, H, Hkv * hd);
}

/* ---- q/k norm + partial RoPE: QRAW, KRAW -> QR, KR (COS, SIN tables) ---------------------- */
static void prep_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t n = c->n, hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads, R = CFG->rotary_dim;
    float eps = (float)CFG->rms_norm_eps;
    hyla_rmsnorm1p_fwd(t->p[HYLA_S_QR], NULL, t->p[HYLA_S_QRAW], hyla_op_w(c, HYLA_P_ATTN_Q_NORM), n * Hq, hd, eps);
    hyla_rmsnorm1p_fwd(t->p[HYLA_S_KR], NULL, t->p[HYLA_S_KRAW], hyla_op_w(c, HYLA_P_ATTN_K_NORM), n * Hkv, hd, eps);
    hyla_rope_table(t->p[HYLA_S_COS], t->p[HYLA_S_SIN], c->pos, n, R, CFG->rope_theta);
    hyla_rope_fwd(t->p[HYLA_S_QR], t->p[HYLA_S_COS], t->p[HYLA_S_SIN], n, Hq, hd, R);
    hyla_rope_fwd(t->p[HYLA_S_KR], t->p[HYLA_S_COS], t->p[HYLA_S_SIN], n, Hkv, hd, R);
}
/* scratch: dy [n,Hq,hd], dx [n,Hq,hd] */
static void prep_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t n = c->n, hd = CFG->head_dim, R = CFG->rotary_dim;
    float eps = (float)CFG->rms_norm_eps;
    float *dy = scratch, *dx = scratch + n * CFG->n_heads * hd;
    struct { hyla_slot rot, raw; hyla_role norm; int64_t heads; } parts[2] = {
        {HYLA_S_QR, HYLA_S_QRAW, HYLA_P_ATTN_Q_NORM, CFG->n_heads},
        {HYLA_S_KR, HYLA_S_KRAW, HYLA_P_ATTN_K_NORM, CFG->n_kv_heads},
    };
    for (int i = 0; i < 2; i++) {
        int64_t count = n * parts[i].heads * hd;
        memcpy(dy, d->p[parts[i].rot], (size_t)count * sizeof(float));
        hyla_rope_bwd(dy, t->p[HYLA_S_COS], t->p[HYLA_S_SIN], n, parts[i].heads, hd, R);
        hyla_rmsnorm1p_bwd(dx, hyla_op_dw(c, parts[i].norm), dy, t->p[parts[i].raw], hyla_op_w(c, parts[i].norm), NULL,
                           n * parts[i].heads, hd, eps);
        hyla_floats_add(d->p[parts[i].raw], dx, count);
    }
}
static int64_t prep_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return 2 * n * cfg->n_heads * cfg->head_dim; }

/* ---- causal softmax attention: QR, KR, VRAW -> CTX, LSE ---------------------------------- */
static float attn_scale(const hyla_config *cfg) { return (float)(1.0 / sqrt((double)cfg->head_dim)); }
/* Context parallelism: row b's keys and values of every slice, in order, into the link's buffers
 * 0 and 1 ([size T, kv]; every rank gathers every row). A row's first sequence, when it continues
 * a document, reads its keys from `past` before the slice on; the others only their own. */
static void row_keys(const hyla_op_ctx *c, const hyla_tape *t, int64_t b, const float **k, const float **v)
{
    const hyla_context_link *cx = c->context;
    size_t kvT = (size_t)(c->T * CFG->n_kv_heads * CFG->head_dim), kvo = (size_t)b * kvT;
    float *K = cx->buffer(cx->ctx, 0, (size_t)cx->size * kvT), *V = cx->buffer(cx->ctx, 1, (size_t)cx->size * kvT);
    cx->allgather(cx->ctx, t->p[HYLA_S_KR] + kvo, K, kvT);
    cx->allgather(cx->ctx, t->p[HYLA_S_VRAW] + kvo, V, kvT);
    *k = K, *v = V;
}

/* Where sequence i's keys start (the row's gathered keys, its document's first) and its past. */
static int64_t seq_keys(const hyla_op_ctx *c, const hyla_tape *t, int64_t i, const float *K, const float *V,
                        const float **k, const float **v)
{
    int64_t kv = CFG->n_kv_heads * CFG->head_dim, past = hyla_seq_past(c, i), o = c->seq_row0[i];
    if (past > 0) { /* from the document's start, slices before included */
        int64_t at = c->context->rank * c->T + o % c->T - past;
        *k = K + at * kv, *v = V + at * kv;
    } else {
        *k = t->p[HYLA_S_KR] + o * kv, *v = t->p[HYLA_S_VRAW] + o * kv;
    }
    return past;
}

static void core_fwd_slices(const hyla_op_ctx *c, hyla_tape *t, float *work)
{
    int64_t hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads;
    for (int64_t b = 0; b < c->B; b++) {
        const float *K, *V, *k, *v;
        row_keys(c, t, b, &K, &V);
        int64_t i0, i1;
        hyla_row_seqs(c, b, &i0, &i1);
        for (int64_t i = i0; i < i1; i++) {
            int64_t o = c->seq_row0[i], past = seq_keys(c, t, i, K, V, &k, &v);
            hyla_attention_fwd(t->p[HYLA_S_CTX] + o * Hq * hd, t->p[HYLA_S_LSE] + o * Hq, t->p[HYLA_S_QR] + o * Hq * hd, k,
                               v, c->seq_len[i], past, Hq, Hkv, hd, attn_scale(CFG), work);
        }
    }
}

/* Backward of row b: each sequence's dk, dv of the keys it reads into the row's parts [size T, kv]
 * (zero elsewhere), every key slice's summed over the ranks in rank order. */
static void core_bwd_row(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, int64_t b, float *dq, float *dk,
                         float *dv, float *work)
{
    const hyla_context_link *cx = c->context;
    int64_t hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads, kv = Hkv * hd, T = c->T;
    const float *K, *V, *k, *v;
    row_keys(c, t, b, &K, &V);
    size_t all = (size_t)(cx->size * T * kv);
    float *pk = cx->buffer(cx->ctx, 2, all), *pv = cx->buffer(cx->ctx, 3, all);
    memset(pk, 0, all * sizeof(float)), memset(pv, 0, all * sizeof(float));
    int64_t i0, i1;
    hyla_row_seqs(c, b, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        int64_t o = c->seq_row0[i], len = c->seq_len[i], qo = o * Hq * hd, past = seq_keys(c, t, i, K, V, &k, &v);
        int64_t at = cx->rank * T + o % T - past; /* its first key in the row */
        hyla_attention_bwd_past(dq, pk + at * kv, pv + at * kv, d->p[HYLA_S_CTX] + qo, t->p[HYLA_S_CTX] + qo,
                                t->p[HYLA_S_LSE] + o * Hq, t->p[HYLA_S_QR] + qo, k, v, len, past, Hq, Hkv, hd,
                                attn_scale(CFG), work);
        hyla_floats_add(d->p[HYLA_S_QR] + qo, dq, len * Hq * hd);
    }
    cx->reduce(cx->ctx, pk, dk, (size_t)(T * kv));
    cx->reduce(cx->ctx, pv, dv, (size_t)(T * kv));
    hyla_floats_add(d->p[HYLA_S_KR] + b * T * kv, dk, T * kv);
    hyla_floats_add(d->p[HYLA_S_VRAW] + b * T * kv, dv, T * kv);
}

static void core_fwd(const hyla_op_ctx *c, hyla_tape *t, float *work)
{
    int64_t hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads, kv = Hkv * hd;
    if (c->context) { /* slices: a continuing document's queries over its keys in the slices before too */
        core_fwd_slices(c, t, work);
        return;
    }
    for (int64_t b = 0; b < c->n_seq; b++) { /* each sequence (row or packed document) attends to itself */
        int64_t T = c->seq_len[b], o = c->seq_row0[b];
        const float *k = t->p[HYLA_S_KR] + o * kv, *v = t->p[HYLA_S_VRAW] + o * kv;
        int64_t past = 0;
        if (c->state) { /* inference: append to the cache (post-norm, post-RoPE keys), attend over it */
            past = c->past[b];
            float *kc = c->state->keys + b * c->max_len * kv, *vc = c->state->values + b * c->max_len * kv;
            memcpy(kc + past * kv, k, (size_t)(T * kv) * sizeof(float));
            memcpy(vc + past * kv, v, (size_t)(T * kv) * sizeof(float));
            k = kc, v = vc;
        }
        hyla_attention_fwd(t->p[HYLA_S_CTX] + o * Hq * hd, t->p[HYLA_S_LSE] + o * Hq, t->p[HYLA_S_QR] + o * Hq * hd, k, v,
                           T, past, Hq, Hkv, hd, attn_scale(CFG), work);
    }
}
static int64_t core_fwd_scratch(const hyla_config *cfg, int64_t n, int64_t T)
{
    return (int64_t)hyla_attention_work_floats(cfg->max_position_embeddings > T ? cfg->max_position_embeddings : T);
}
/* scratch: dq [T,Hq,hd], dk, dv [T,Hkv,hd], work */
static void core_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t hd = CFG->head_dim, Hq = CFG->n_heads, Hkv = CFG->n_kv_heads;
    float *dq = scratch, *dk = dq + c->T * Hq * hd, *dv = dk + c->T * Hkv * hd, *work = dv + c->T * Hkv * hd;
    for (int64_t b = 0; c->context && b < c->B; b++) /* slices: per row, the key slices' gradients summed over ranks */
        core_bwd_row(c, t, d, b, dq, dk, dv, work);
    for (int64_t b = 0; !c->context && b < c->n_seq; b++) {
        int64_t T = c->seq_len[b], o = c->seq_row0[b], qs = T * Hq * hd, ks = T * Hkv * hd, qo = o * Hq * hd, ko = o * Hkv * hd;
        hyla_attention_bwd(dq, dk, dv, d->p[HYLA_S_CTX] + qo, t->p[HYLA_S_CTX] + qo, t->p[HYLA_S_LSE] + o * Hq,
                           t->p[HYLA_S_QR] + qo, t->p[HYLA_S_KR] + ko, t->p[HYLA_S_VRAW] + ko, T, Hq, Hkv, hd,
                           attn_scale(CFG), work);
        hyla_floats_add(d->p[HYLA_S_QR] + qo, dq, qs);
        hyla_floats_add(d->p[HYLA_S_KR] + ko, dk, ks);
        hyla_floats_add(d->p[HYLA_S_VRAW] + ko, dv, ks);
    }
}
static int64_t core_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T)
{
    return T * (cfg->n_heads + 2 * cfg->n_kv_heads) * cfg->head_dim +
           (int64_t)hyla_attention_bwd_work_floats(T, cfg->n_heads, cfg->head_dim);
}

/* ---- sigmoid output gate: CTX, GATE -> ATT ------------------------------------------------ */
static void gate_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t count = c->n * CFG->n_heads * CFG->head_dim;
    const float *ctx = t->p[HYLA_S_CTX], *g = t->p[HYLA_S_GATE];
    float *att = t->p[HYLA_S_ATT];
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(HYLA_SIGMOID_WORK * count)
    for (int64_t i = 0; i < count; i++) /* elementwise: any split gives the same bits */
        att[i] = ctx[i] * hyla_sigmoid(g[i]);
}
static void gate_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t count = c->n * CFG->n_heads * CFG->head_dim;
    const float *ctx = t->p[HYLA_S_CTX], *g = t->p[HYLA_S_GATE], *datt = d->p[HYLA_S_ATT];
    float *dctx = d->p[HYLA_S_CTX], *dg = d->p[HYLA_S_GATE];
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(HYLA_SIGMOID_WORK * count)
    for (int64_t i = 0; i < count; i++) {
        float s, om;
        hyla_sigmoid_pair(g[i], &s, &om);
        dctx[i] += datt[i] * s;
        dg[i] += datt[i] * ctx[i] * s * om;
    }
}

/* ---- o_proj: ATT -> MIX ------------------------------------------------------------------- */
static void out_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_op_linear(c, HYLA_P_ATTN_O, 0, t->p[HYLA_S_MIX], t->p[HYLA_S_ATT], c->n, CFG->n_heads * CFG->head_dim,
                   CFG->hidden);
}
static void out_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_op_linear_bwd(c, HYLA_P_ATTN_O, 0, d->p[HYLA_S_ATT], d->p[HYLA_S_MIX], t->p[HYLA_S_ATT], c->n,
                       CFG->n_heads * CFG->head_dim, CFG->hidden);
}

const hyla_layer_op hyla_ops_attn[] = {
    {"attn_proj", proj_fwd, proj_bwd, proj_scratch, proj_scratch, HYLA_IN(HYLA_S_XN),
     HYLA_OUT(HYLA_S_QRAW, HYLA_S_GATE, HYLA_S_KRAW, HYLA_S_VRAW), HYLA_READS(HYLA_S_XN), .lora = 1},
    {"attn_norm_rope", prep_fwd, prep_bwd, none, prep_bwd_scratch, HYLA_IN(HYLA_S_QRAW, HYLA_S_KRAW),
     HYLA_OUT(HYLA_S_QR, HYLA_S_KR, HYLA_S_COS, HYLA_S_SIN), HYLA_READS(HYLA_S_QRAW, HYLA_S_KRAW, HYLA_S_COS, HYLA_S_SIN)},
    {"attn_softmax", core_fwd, core_bwd, core_fwd_scratch, core_bwd_scratch, HYLA_IN(HYLA_S_QR, HYLA_S_KR, HYLA_S_VRAW),
     HYLA_OUT(HYLA_S_CTX, HYLA_S_LSE), HYLA_READS(HYLA_S_QR, HYLA_S_KR, HYLA_S_VRAW, HYLA_S_CTX, HYLA_S_LSE), .context = 3},
    {"attn_gate", gate_fwd, gate_bwd, none, none, HYLA_IN(HYLA_S_CTX, HYLA_S_GATE), HYLA_OUT(HYLA_S_ATT),
     HYLA_READS(HYLA_S_CTX, HYLA_S_GATE)},
    {"attn_out_proj", out_fwd, out_bwd, none, none, HYLA_IN(HYLA_S_ATT), HYLA_OUT(HYLA_S_MIX), HYLA_READS(HYLA_S_ATT),
     .lora = 1},
};
const int hyla_n_ops_attn = sizeof hyla_ops_attn / sizeof *hyla_ops_attn;
