/* Gated DeltaNet mixer ops (spec §3.4, backward §8.2-8.7), forward and backward side by side.
 * Sequences are [B, T] rows; conv and delta rule run per sequence from a zero state, or (context
 * parallelism, layer_ops.h) from the previous slice's window and state. */
#include <math.h>
#include <string.h>

#include "core/denormals.h"
#include "core/floats.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "model/infer_state.h"
#include "model/layer_ops.h"
#include "ops/ops.h"

#define CFG (&c->m->cfg)

/* ---- projections: XN -> QKV, Z, BL, AL ------------------------------------------------------ */
static void proj_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t n = c->n, H = CFG->hidden, cd = hyla_cfg_conv_dim(CFG), vd = hyla_cfg_value_dim(CFG), Hv = CFG->lin_v_heads;
    const float *x = t->p[HYLA_S_XN];
    const hyla_role roles[4] = {HYLA_P_GDN_QKV, HYLA_P_GDN_Z, HYLA_P_GDN_B, HYLA_P_GDN_A};
    float *const ys[4] = {t->p[HYLA_S_QKV], t->p[HYLA_S_Z], t->p[HYLA_S_BL], t->p[HYLA_S_AL]};
    const int64_t outs[4] = {cd, vd, Hv, Hv};
    hyla_op_linear_fanout(c, roles, ys, outs, 4, x, n, H);
}
static void proj_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t n = c->n, H = CFG->hidden, cd = hyla_cfg_conv_dim(CFG), vd = hyla_cfg_value_dim(CFG), Hv = CFG->lin_v_heads;
    const float *x = t->p[HYLA_S_XN];
    float *dx = d->p[HYLA_S_XN];
    hyla_op_linear_bwd(c, HYLA_P_GDN_QKV, 0, dx, d->p[HYLA_S_QKV], x, n, H, cd);
    hyla_op_linear_bwd(c, HYLA_P_GDN_Z, 0, dx, d->p[HYLA_S_Z], x, n, H, vd);
    hyla_op_linear_bwd(c, HYLA_P_GDN_B, 0, dx, d->p[HYLA_S_BL], x, n, H, Hv);
    hyla_op_linear_bwd(c, HYLA_P_GDN_A, 0, dx, d->p[HYLA_S_AL], x, n, H, Hv);
}

/* ---- causal conv + SiLU: QKV -> CONV ----------------------------------------------------- */
/* Inference: the conv window continues from the cached K raw inputs, which then become the
 * last K of [cache | x] (spec §5). */
static void conv_cache_update(float *hist /*[K,cd]*/, const float *x /*[T,cd]*/, int64_t T, int64_t K, int64_t cd)
{
    if (T >= K) {
        memcpy(hist, x + (T - K) * cd, (size_t)(K * cd) * sizeof(float));
    } else {
        memmove(hist, hist + T * cd, (size_t)((K - T) * cd) * sizeof(float));
        memcpy(hist + (K - T) * cd, x, (size_t)(T * cd) * sizeof(float));
    }
}

/* Context parallelism: the K raw inputs before row b's slice (the previous slice's last K rows,
 * those before the continuing document's start zeroed; none when nothing continues), into the
 * link's buffer 0. Every rank makes the exchange for every row. */
static const float *row_history(const hyla_op_ctx *c, const float *x_row /*[T,cd]*/, int64_t b)
{
    int64_t cd = hyla_cfg_conv_dim(CFG), K = CFG->conv_kernel, past = c->context_past[b];
    float *hist = c->context->buffer(c->context->ctx, 0, (size_t)(K * cd));
    c->context->shift_fwd(c->context->ctx, x_row + (c->T - K) * cd, hist, (size_t)(K * cd));
    if (past < K) /* (another document's rows, or none) */
        memset(hist, 0, (size_t)((K - past) * cd) * sizeof(float));
    return past > 0 ? hist : NULL;
}

static void conv_fwd_slices(const hyla_op_ctx *c, hyla_tape *t)
{
    int64_t cd = hyla_cfg_conv_dim(CFG), K = CFG->conv_kernel;
    for (int64_t b = 0; b < c->B; b++) {
        const float *hist = row_history(c, t->p[HYLA_S_QKV] + b * c->T * cd, b);
        int64_t i0, i1;
        hyla_row_seqs(c, b, &i0, &i1);
        for (int64_t i = i0; i < i1; i++) { /* the row's first sequence continues the window before */
            int64_t o = c->seq_row0[i];
            hyla_conv_silu_fwd(t->p[HYLA_S_CONV] + o * cd, NULL, t->p[HYLA_S_QKV] + o * cd, hyla_op_w(c, HYLA_P_GDN_CONV),
                               hyla_seq_past(c, i) ? hist : NULL, c->seq_len[i], cd, K);
        }
    }
}

static float q_scale(const hyla_config *cfg) { return (float)(1.0 / sqrt((double)cfg->lin_k_dim)); }

/* ---- a decoded token: conv .. gated norm, key head by key head ---------------------------- */
/* One token per sequence with a cache (no rollback points, no slices, fp32 compute): the conv,
 * split, l2norm, gates, delta rule and gated norm of key head hk and its value heads read that
 * head's channels alone, so one parallel region over (sequence, key head) runs them all while the
 * head's values are in the core's caches -- each value by the same operations as the ops one after
 * another (the same bits), with three parallel regions and the passes between them fewer. The last
 * of those ops, gdn_gated_norm, runs it (the executor allocates an op's output slots just before
 * the op, and they live until the layer ends); gdn_conv, gdn_prep and gdn_delta_rule do nothing. */
int hyla_gdn_decode_fusion = 1;

static int decode_fused(const hyla_op_ctx *c)
{
    return hyla_gdn_decode_fusion && c->state && !c->keep && !c->context && c->n == c->n_seq &&
           c->m->compute_dtype != HYLA_DT_BF16;
}

static void decode_head(const hyla_op_ctx *c, hyla_tape *t, int64_t b, int64_t hk)
{
    int64_t kd = hyla_cfg_key_dim(CFG), vd = hyla_cfg_value_dim(CFG), cd = hyla_cfg_conv_dim(CFG);
    int64_t Hk = CFG->lin_k_heads, Hv = CFG->lin_v_heads, dk = CFG->lin_k_dim, dv = CFG->lin_v_dim;
    int64_t K = CFG->conv_kernel, rep = Hv / Hk, h0 = hk * rep, o = c->seq_row0[b];
    float *conv = t->p[HYLA_S_CONV] + o * cd, *hist = c->state->conv + b * K * cd;
    const float *x = t->p[HYLA_S_QKV] + o * cd, *w = hyla_op_w(c, HYLA_P_GDN_CONV);
    float *q = t->p[HYLA_S_GQ] + o * kd + hk * dk, *k = t->p[HYLA_S_GK] + o * kd + hk * dk;
    float *v = t->p[HYLA_S_GV] + o * vd + h0 * dv, *g = t->p[HYLA_S_G] + o * Hv + h0;
    float *beta = t->p[HYLA_S_BETA] + o * Hv + h0, *core = t->p[HYLA_S_CORE] + o * vd + h0 * dv;
    hyla_conv_silu_step_range(conv, x, w, hist, cd, K, hk * dk, (hk + 1) * dk);               /* q */
    hyla_conv_silu_step_range(conv, x, w, hist, cd, K, kd + hk * dk, kd + (hk + 1) * dk);     /* k */
    hyla_conv_silu_step_range(conv, x, w, hist, cd, K, 2 * kd + h0 * dv, 2 * kd + (h0 + rep) * dv); /* v */
    hyla_l2norm_row(q, NULL, conv + hk * dk, dk, 1e-6f, q_scale(CFG)); /* (gdn_prep: a copy normed in place) */
    hyla_l2norm_row(k, NULL, conv + kd + hk * dk, dk, 1e-6f, 1.0f);
    memcpy(v, conv + 2 * kd + h0 * dv, (size_t)(rep * dv) * sizeof *v);
    hyla_gdn_gates_row(g, beta, t->p[HYLA_S_AL] + o * Hv + h0, t->p[HYLA_S_BL] + o * Hv + h0,
                       hyla_op_w(c, HYLA_P_GDN_A_LOG) + h0, hyla_op_w(c, HYLA_P_GDN_DT_BIAS) + h0, rep);
    unsigned mxcsr = hyla_flush_denormals_begin(); /* as the recurrent form's region */
    for (int64_t h = 0; h < rep; h++)
        hyla_delta_rule_head_step(core + h * dv, c->state->ssm + (b * Hv + h0 + h) * dk * dv, q, k, v + h * dv, g[h],
                                  beta[h], dk, dv);
    hyla_flush_denormals_end(mxcsr);
    for (int64_t h = 0; h < rep; h++)
        hyla_gated_rmsnorm_row(t->p[HYLA_S_GNORM] + o * vd + (h0 + h) * dv, NULL, core + h * dv,
                               t->p[HYLA_S_Z] + o * vd + (h0 + h) * dv, hyla_op_w(c, HYLA_P_GDN_NORM), dv,
                               (float)CFG->rms_norm_eps);
}

static void decode_fwd(const hyla_op_ctx *c, hyla_tape *t)
{
    int64_t Hk = CFG->lin_k_heads, items = c->n_seq * Hk;
    /* work: as the delta rule's region (its state dominates) */
#pragma omp parallel for schedule(static) HYLA_PAR_IF(c->n * CFG->lin_v_heads * CFG->lin_k_dim * CFG->lin_v_dim)
    for (int64_t i = 0; i < items; i++)
        decode_head(c, t, i / Hk, i % Hk);
}

static void conv_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    if (decode_fused(c)) /* (done by gdn_gated_norm) */
        return;
    int64_t cd = hyla_cfg_conv_dim(CFG), K = CFG->conv_kernel;
    if (c->context) { /* slices: windows continue across them */
        conv_fwd_slices(c, t);
        return;
    }
    for (int64_t b = 0; b < c->n_seq; b++) { /* each sequence (row or packed document) from its own window */
        int64_t T = c->seq_len[b], o = c->seq_row0[b];
        float *hist = c->state ? c->state->conv + b * K * cd : NULL;
        const float *x = t->p[HYLA_S_QKV] + o * cd;
        if (T == 1 && hist && !c->keep) { /* a decoded token: its window moved on in the same pass */
            hyla_conv_silu_step(t->p[HYLA_S_CONV] + o * cd, x, hyla_op_w(c, HYLA_P_GDN_CONV), hist, cd, K);
            continue;
        }
        hyla_conv_silu_fwd(t->p[HYLA_S_CONV] + o * cd, NULL, x, hyla_op_w(c, HYLA_P_GDN_CONV), hist, T, cd, K);
        for (int64_t r = 0; c->keep && r < T - 1; r++) { /* the window after row r: a rollback point */
            float *kept = c->keep + b * c->keep_seq + r * c->keep_row;
            memcpy(kept, hist, (size_t)(K * cd) * sizeof *kept);
            conv_cache_update(kept, x, r + 1, K, cd);
        }
        if (hist)
            conv_cache_update(hist, x, T, K, cd);
    }
}
/* Context parallelism: row b. The first taps' part of the dx of the K-1 rows before the slice
 * (from the continuing first sequence's first rows alone; zero for rows before its document, or
 * when nothing continues) goes back to the previous rank, the next rank's part of this row's last
 * rows arrives and the last sequence's sums continue it (ops.h). */
static void conv_bwd_row(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *dx_all, int64_t b)
{
    int64_t cd = hyla_cfg_conv_dim(CFG), K = CFG->conv_kernel, i0, i1;
    const float *w = hyla_op_w(c, HYLA_P_GDN_CONV), *hist = row_history(c, t->p[HYLA_S_QKV] + b * c->T * cd, b);
    const hyla_context_link *cx = c->context;
    float *d_hist = cx->buffer(cx->ctx, 1, (size_t)((K - 1) * cd)), *tail = cx->buffer(cx->ctx, 2, (size_t)((K - 1) * cd));
    float *rows = cx->buffer(cx->ctx, 3, (size_t)((K - 1) * cd));
    hyla_row_seqs(c, b, &i0, &i1);
    int64_t past = i1 > i0 ? hyla_seq_past(c, i0) : 0;
    memset(d_hist, 0, (size_t)((K - 1) * cd) * sizeof(float));
    if (past > 0) { /* the continuing sequence's first rows alone give the rows before their part */
        int64_t o = c->seq_row0[i0], n = c->seq_len[i0] < K - 1 ? c->seq_len[i0] : K - 1;
        hyla_conv_silu_bwd_hist(rows, NULL, d_hist, NULL, d->p[HYLA_S_CONV] + o * cd, t->p[HYLA_S_QKV] + o * cd, w, hist,
                                n, cd, K);
        if (past < K - 1) /* (rows of another document before it: nothing of this one) */
            memset(d_hist, 0, (size_t)((K - 1 - past) * cd) * sizeof(float));
    }
    cx->shift_bwd(cx->ctx, d_hist, tail, (size_t)((K - 1) * cd));
    for (int64_t i = i0; i < i1; i++) {
        int64_t o = c->seq_row0[i];
        hyla_conv_silu_bwd_hist(dx_all + o * cd, hyla_op_dw(c, HYLA_P_GDN_CONV), NULL,
                                hyla_seq_ends_row(c, i) && cx->rank + 1 < cx->size ? tail : NULL,
                                d->p[HYLA_S_CONV] + o * cd, t->p[HYLA_S_QKV] + o * cd, w, hyla_seq_past(c, i) ? hist : NULL,
                                c->seq_len[i], cd, K);
    }
}
static void conv_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch /*[n,cd]*/)
{
    int64_t cd = hyla_cfg_conv_dim(CFG);
    for (int64_t b = 0; c->context && b < c->B; b++)
        conv_bwd_row(c, t, d, scratch, b);
    for (int64_t b = 0; !c->context && b < c->n_seq; b++) {
        int64_t T = c->seq_len[b], o = c->seq_row0[b];
        hyla_conv_silu_bwd(scratch + o * cd, hyla_op_dw(c, HYLA_P_GDN_CONV), d->p[HYLA_S_CONV] + o * cd,
                           t->p[HYLA_S_QKV] + o * cd, hyla_op_w(c, HYLA_P_GDN_CONV), T, cd, CFG->conv_kernel);
    }
    hyla_floats_add(d->p[HYLA_S_QKV], scratch, c->n * cd);
}
static int64_t conv_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return n * hyla_cfg_conv_dim(cfg); }

/* ---- split, l2norm, gates: CONV, AL, BL -> GQ, GK, GV, G, BETA --------------------------- */
static void copy_cols(float *dst, const float *src, int64_t n, int64_t ld, int64_t col0, int64_t w)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * w)
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * w, src + i * ld + col0, (size_t)w * sizeof *dst);
}
static void add_cols(float *dst, int64_t ld, int64_t col0, const float *src, int64_t n, int64_t w)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * w)
    for (int64_t i = 0; i < n; i++) {
        float *restrict d = dst + i * ld + col0;
        const float *restrict s = src + i * w;
#pragma omp simd
        for (int64_t j = 0; j < w; j++)
            d[j] += s[j];
    }
}

static void prep_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    if (decode_fused(c)) /* (done by gdn_gated_norm) */
        return;
    int64_t n = c->n, kd = hyla_cfg_key_dim(CFG), vd = hyla_cfg_value_dim(CFG), cd = hyla_cfg_conv_dim(CFG);
    int64_t Hk = CFG->lin_k_heads, dk = CFG->lin_k_dim;
    const float *conv = t->p[HYLA_S_CONV];
    copy_cols(t->p[HYLA_S_GQ], conv, n, cd, 0, kd);
    copy_cols(t->p[HYLA_S_GK], conv, n, cd, kd, kd);
    copy_cols(t->p[HYLA_S_GV], conv, n, cd, 2 * kd, vd);
    hyla_l2norm_fwd(t->p[HYLA_S_GQ], NULL, t->p[HYLA_S_GQ], n * Hk, dk, 1e-6f, q_scale(CFG));
    hyla_l2norm_fwd(t->p[HYLA_S_GK], NULL, t->p[HYLA_S_GK], n * Hk, dk, 1e-6f, 1.0f);
    hyla_gdn_gates_fwd(t->p[HYLA_S_G], t->p[HYLA_S_BETA], t->p[HYLA_S_AL], t->p[HYLA_S_BL],
                       hyla_op_w(c, HYLA_P_GDN_A_LOG), hyla_op_w(c, HYLA_P_GDN_DT_BIAS), n, CFG->lin_v_heads);
}
/* scratch: x [n,kd], dx [n,kd], da [n,Hv], db [n,Hv] */
static void prep_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t n = c->n, kd = hyla_cfg_key_dim(CFG), vd = hyla_cfg_value_dim(CFG), cd = hyla_cfg_conv_dim(CFG);
    int64_t Hk = CFG->lin_k_heads, dk = CFG->lin_k_dim, Hv = CFG->lin_v_heads;
    float *x = scratch, *dx = x + n * kd, *da = dx + n * kd, *db = da + n * Hv;
    const float *conv = t->p[HYLA_S_CONV];
    float *dconv = d->p[HYLA_S_CONV];
    for (int part = 0; part < 2; part++) { /* q then k: l2norm backward from the raw conv output */
        copy_cols(x, conv, n, cd, part * kd, kd);
        hyla_l2norm_bwd(dx, d->p[part ? HYLA_S_GK : HYLA_S_GQ], x, NULL, n * Hk, dk, 1e-6f, part ? 1.0f : q_scale(CFG));
        add_cols(dconv, cd, part * kd, dx, n, kd);
    }
    add_cols(dconv, cd, 2 * kd, d->p[HYLA_S_GV], n, vd);
    hyla_gdn_gates_bwd(da, db, hyla_op_dw(c, HYLA_P_GDN_A_LOG), hyla_op_dw(c, HYLA_P_GDN_DT_BIAS), d->p[HYLA_S_G],
                       d->p[HYLA_S_BETA], t->p[HYLA_S_AL], t->p[HYLA_S_BL], hyla_op_w(c, HYLA_P_GDN_A_LOG),
                       hyla_op_w(c, HYLA_P_GDN_DT_BIAS), n, Hv);
    hyla_floats_add(d->p[HYLA_S_AL], da, n * Hv);
    hyla_floats_add(d->p[HYLA_S_BL], db, n * Hv);
}
static int64_t prep_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T)
{
    return 2 * n * hyla_cfg_key_dim(cfg) + 2 * n * cfg->lin_v_heads;
}

/* ---- delta rule: GQ, GK, GV, G, BETA -> CORE --------------------------------------------- */
/* Context parallelism: each row's first sequence, when it continues a document, from the state the
 * previous slice's row ends in (the forward: handed along the ranks in order, and kept for the
 * recompute and the backward); the row's last sequence hands its final state on, and in backward
 * takes the gradient of it from the next slice (handed back in reverse order); a row's other
 * sequences start from zero as without slices. The chain carries one state per row. */
typedef struct {
    const hyla_op_ctx *c;
    const hyla_tape *t;
    hyla_tape *d;
    float *states; /* [B][Hv,dk,dv] chain buffer: per row */
    float *scratch;
} delta_slices;

static void delta_slices_fwd(void *arg)
{
    delta_slices *a = arg;
    const hyla_op_ctx *c = a->c;
    int64_t Hk = CFG->lin_k_heads, Hv = CFG->lin_v_heads, dk = CFG->lin_k_dim, dv = CFG->lin_v_dim, sz = Hv * dk * dv;
    int64_t kd = Hk * dk, vd = Hv * dv;
    float *kept = c->context->layer_state(c->context->ctx, c->layer), *own = a->scratch, *work = a->scratch + sz;
    const hyla_tape *t = a->t;
    for (int64_t b = 0; b < c->B; b++) {
        float *row_state = a->states + b * sz;
        if (c->recompute) /* the forward's initial state, kept */
            memcpy(row_state, kept + b * sz, (size_t)sz * sizeof(float));
        else if (c->context_past[b] == 0) /* (nothing continues: whatever arrived is another document's) */
            memset(row_state, 0, (size_t)sz * sizeof(float));
        if (!c->recompute)
            memcpy(kept + b * sz, row_state, (size_t)sz * sizeof(float));
        int64_t i0, i1;
        hyla_row_seqs(c, b, &i0, &i1);
        for (int64_t i = i0; i < i1; i++) {
            int64_t o = c->seq_row0[i];
            float *state = i == i0 ? row_state : own; /* the first from the row's, the others from zero */
            if (i > i0)
                memset(state, 0, (size_t)sz * sizeof(float));
            hyla_delta_rule_chunked_fwd(t->p[HYLA_S_CORE] + o * vd, state, t->p[HYLA_S_GQ] + o * kd,
                                        t->p[HYLA_S_GK] + o * kd, t->p[HYLA_S_GV] + o * vd, t->p[HYLA_S_G] + o * Hv,
                                        t->p[HYLA_S_BETA] + o * Hv, c->seq_len[i], Hk, Hv, dk, dv, work);
            if (i == i1 - 1 && state != row_state) /* the row's last state goes on */
                memcpy(row_state, state, (size_t)sz * sizeof(float));
        }
    }
}

static void delta_slices_bwd(void *arg)
{
    delta_slices *a = arg;
    const hyla_op_ctx *c = a->c;
    int64_t Tmax = c->T, Hk = CFG->lin_k_heads, Hv = CFG->lin_v_heads, dk = CFG->lin_k_dim, dv = CFG->lin_v_dim;
    int64_t kd = Hk * dk, vd = Hv * dv, sz = Hv * dk * dv;
    float *sq = a->scratch, *sk = sq + Tmax * kd, *sv = sk + Tmax * kd, *sg = sv + Tmax * vd, *sb = sg + Tmax * Hv;
    float *work = sb + Tmax * Hv;
    const float *kept = c->context->layer_state(c->context->ctx, c->layer);
    float *d0 = c->context->buffer(c->context->ctx, 1, (size_t)sz);
    const hyla_tape *t = a->t;
    hyla_tape *d = a->d;
    for (int64_t b = 0; b < c->B; b++) {
        int64_t i0, i1;
        hyla_row_seqs(c, b, &i0, &i1);
        float *row_d = a->states + b * sz; /* in: the gradient of the row's last state; out: of its first's */
        int continues = c->context_past[b] > 0;
        for (int64_t i = i1 - 1; i >= i0; i--) {
            int64_t o = c->seq_row0[i], T = c->seq_len[i];
            hyla_delta_rule_chunked_bwd_state(sq, sk, sv, sg, sb, i == i0 && continues ? d0 : NULL, d->p[HYLA_S_CORE] + o * vd,
                                              t->p[HYLA_S_GQ] + o * kd, t->p[HYLA_S_GK] + o * kd, t->p[HYLA_S_GV] + o * vd,
                                              t->p[HYLA_S_G] + o * Hv, t->p[HYLA_S_BETA] + o * Hv,
                                              i == i0 && continues ? kept + b * sz : NULL, i == i1 - 1 ? row_d : NULL, T,
                                              Hk, Hv, dk, dv, work);
            hyla_floats_add(d->p[HYLA_S_GQ] + o * kd, sq, T * kd);
            hyla_floats_add(d->p[HYLA_S_GK] + o * kd, sk, T * kd);
            hyla_floats_add(d->p[HYLA_S_GV] + o * vd, sv, T * vd);
            hyla_floats_add(d->p[HYLA_S_G] + o * Hv, sg, T * Hv);
            hyla_floats_add(d->p[HYLA_S_BETA] + o * Hv, sb, T * Hv);
        }
        if (continues) /* handed to the previous slice (zero when nothing continues) */
            memcpy(row_d, d0, (size_t)sz * sizeof(float));
        else
            memset(row_d, 0, (size_t)sz * sizeof(float));
    }
}

static void delta_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch /*state + work*/)
{
    if (decode_fused(c)) /* (done by gdn_gated_norm) */
        return;
    int64_t Hk = CFG->lin_k_heads, Hv = CFG->lin_v_heads, dk = CFG->lin_k_dim, dv = CFG->lin_v_dim;
    int64_t kd = Hk * dk, vd = Hv * dv;
    float *work = scratch + Hv * dk * dv;
    if (c->context) {
        size_t floats = (size_t)(c->B * Hv * dk * dv);
        delta_slices a = {c, t, NULL, c->context->buffer(c->context->ctx, 0, floats), scratch};
        if (c->recompute) {
            delta_slices_fwd(&a);
        } else {
            memset(a.states, 0, floats * sizeof(float)); /* (rank 0's: a sequence's start) */
            c->context->chain_fwd(c->context->ctx, a.states, floats, delta_slices_fwd, &a);
        }
        return;
    }
    for (int64_t b = 0; b < c->n_seq; b++) { /* each sequence (row or packed document) from a zero state */
        int64_t T = c->seq_len[b];
        /* training: zero initial state; inference: continue from (and update) the cached state */
        float *state = c->state ? c->state->ssm + b * Hv * dk * dv : scratch;
        if (!c->state)
            memset(state, 0, (size_t)(Hv * dk * dv) * sizeof *state);
        int64_t o = c->seq_row0[b];
        const float *q = t->p[HYLA_S_GQ] + o * kd, *k = t->p[HYLA_S_GK] + o * kd, *v = t->p[HYLA_S_GV] + o * vd;
        const float *g = t->p[HYLA_S_G] + o * Hv, *beta = t->p[HYLA_S_BETA] + o * Hv;
        float *out = t->p[HYLA_S_CORE] + o * vd;
        if (c->keep) /* rollback points: the recurrent form, each row's state kept after its window */
            hyla_delta_rule_recurrent_fwd_keep(out, state, c->keep + b * c->keep_seq + CFG->conv_kernel * hyla_cfg_conv_dim(CFG),
                                               c->keep_row, q, k, v, g, beta, T, Hk, Hv, dk, dv);
        else if (c->delta_mode == HYLA_DELTA_RECURRENT || (c->state && T == 1))
            hyla_delta_rule_recurrent_fwd(out, state, q, k, v, g, beta, T, Hk, Hv, dk, dv);
        else
            hyla_delta_rule_chunked_fwd(out, state, q, k, v, g, beta, T, Hk, Hv, dk, dv, work);
    }
}
static int64_t delta_fwd_scratch(const hyla_config *cfg, int64_t n, int64_t T)
{
    int64_t Hv = cfg->lin_v_heads, dk = cfg->lin_k_dim, dv = cfg->lin_v_dim;
    return Hv * dk * dv + (int64_t)hyla_delta_rule_chunked_work_floats(Hv, dk, dv);
}
/* scratch: dq, dk [T,kd], dv [T,vd], dg, dbeta [T,Hv], work */
static void delta_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t Tmax = c->T, Hk = CFG->lin_k_heads, Hv = CFG->lin_v_heads, dk = CFG->lin_k_dim, dv = CFG->lin_v_dim;
    int64_t kd = Hk * dk, vd = Hv * dv;
    float *sq = scratch, *sk = sq + Tmax * kd, *sv = sk + Tmax * kd, *sg = sv + Tmax * vd, *sb = sg + Tmax * Hv;
    float *work = sb + Tmax * Hv;
    if (c->context) {
        size_t floats = (size_t)(c->B * Hv * dk * dv);
        delta_slices a = {c, t, d, c->context->buffer(c->context->ctx, 0, floats), scratch};
        memset(a.states, 0, floats * sizeof(float)); /* (the last rank's: nothing after the sequence) */
        c->context->chain_bwd(c->context->ctx, a.states, floats, delta_slices_bwd, &a);
        return;
    }
    for (int64_t b = 0; b < c->n_seq; b++) {
        int64_t o = c->seq_row0[b], T = c->seq_len[b];
        hyla_delta_rule_chunked_bwd(sq, sk, sv, sg, sb, d->p[HYLA_S_CORE] + o * vd, t->p[HYLA_S_GQ] + o * kd,
                                    t->p[HYLA_S_GK] + o * kd, t->p[HYLA_S_GV] + o * vd, t->p[HYLA_S_G] + o * Hv,
                                    t->p[HYLA_S_BETA] + o * Hv, T, Hk, Hv, dk, dv, work);
        hyla_floats_add(d->p[HYLA_S_GQ] + o * kd, sq, T * kd);
        hyla_floats_add(d->p[HYLA_S_GK] + o * kd, sk, T * kd);
        hyla_floats_add(d->p[HYLA_S_GV] + o * vd, sv, T * vd);
        hyla_floats_add(d->p[HYLA_S_G] + o * Hv, sg, T * Hv);
        hyla_floats_add(d->p[HYLA_S_BETA] + o * Hv, sb, T * Hv);
    }
}
static int64_t delta_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T)
{
    int64_t Hv = cfg->lin_v_heads, dk = cfg->lin_k_dim, dv = cfg->lin_v_dim;
    return T * (2 * hyla_cfg_key_dim(cfg) + hyla_cfg_value_dim(cfg) + 2 * Hv) +
           (int64_t)hyla_delta_rule_chunked_bwd_work_floats(T, Hv, dk, dv);
}

/* ---- gated norm: CORE, Z -> GNORM -------------------------------------------------------- */
static void gnorm_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    if (decode_fused(c)) {
        decode_fwd(c, t);
        return;
    }
    hyla_gated_rmsnorm_fwd(t->p[HYLA_S_GNORM], NULL, t->p[HYLA_S_CORE], t->p[HYLA_S_Z], hyla_op_w(c, HYLA_P_GDN_NORM),
                           c->n * CFG->lin_v_heads, CFG->lin_v_dim, (float)CFG->rms_norm_eps);
}
static void gnorm_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch /*[2, n, vd]*/)
{
    int64_t nvd = c->n * hyla_cfg_value_dim(CFG);
    float *dx = scratch, *dz = scratch + nvd;
    hyla_gated_rmsnorm_bwd(dx, dz, hyla_op_dw(c, HYLA_P_GDN_NORM), d->p[HYLA_S_GNORM], t->p[HYLA_S_CORE], t->p[HYLA_S_Z],
                           hyla_op_w(c, HYLA_P_GDN_NORM), NULL, c->n * CFG->lin_v_heads, CFG->lin_v_dim,
                           (float)CFG->rms_norm_eps);
    hyla_floats_add(d->p[HYLA_S_CORE], dx, nvd);
    hyla_floats_add(d->p[HYLA_S_Z], dz, nvd);
}
static int64_t gnorm_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return 2 * n * hyla_cfg_value_dim(cfg); }

/* ---- output projection: GNORM -> MIX ------------------------------------------------------ */
static void out_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_op_linear(c, HYLA_P_GDN_OUT, 0, t->p[HYLA_S_MIX], t->p[HYLA_S_GNORM], c->n, hyla_cfg_value_dim(CFG),
                   CFG->hidden);
}
static void out_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_op_linear_bwd(c, HYLA_P_GDN_OUT, 0, d->p[HYLA_S_GNORM], d->p[HYLA_S_MIX], t->p[HYLA_S_GNORM], c->n,
                       hyla_cfg_value_dim(CFG), CFG->hidden);
}

static int64_t none(const hyla_config *cfg, int64_t n, int64_t T) { return 0; }

const hyla_layer_op hyla_ops_gdn[] = {
    {"gdn_in_proj", proj_fwd, proj_bwd, none, none, HYLA_IN(HYLA_S_XN),
     HYLA_OUT(HYLA_S_QKV, HYLA_S_Z, HYLA_S_BL, HYLA_S_AL), HYLA_READS(HYLA_S_XN), .lora = 1},
    {"gdn_conv", conv_fwd, conv_bwd, none, conv_bwd_scratch, HYLA_IN(HYLA_S_QKV), HYLA_OUT(HYLA_S_CONV),
     HYLA_READS(HYLA_S_QKV), .context = 1},
    {"gdn_prep", prep_fwd, prep_bwd, none, prep_bwd_scratch, HYLA_IN(HYLA_S_CONV, HYLA_S_AL, HYLA_S_BL),
     HYLA_OUT(HYLA_S_GQ, HYLA_S_GK, HYLA_S_GV, HYLA_S_G, HYLA_S_BETA), HYLA_READS(HYLA_S_CONV, HYLA_S_AL, HYLA_S_BL)},
    {"gdn_delta_rule", delta_fwd, delta_bwd, delta_fwd_scratch, delta_bwd_scratch,
     HYLA_IN(HYLA_S_GQ, HYLA_S_GK, HYLA_S_GV, HYLA_S_G, HYLA_S_BETA), HYLA_OUT(HYLA_S_CORE),
     HYLA_READS(HYLA_S_GQ, HYLA_S_GK, HYLA_S_GV, HYLA_S_G, HYLA_S_BETA), .context = 2},
    {"gdn_gated_norm", gnorm_fwd, gnorm_bwd, none, gnorm_bwd_scratch, HYLA_IN(HYLA_S_CORE, HYLA_S_Z),
     HYLA_OUT(HYLA_S_GNORM), HYLA_READS(HYLA_S_CORE, HYLA_S_Z)},
    {"gdn_out_proj", out_fwd, out_bwd, none, none, HYLA_IN(HYLA_S_GNORM), HYLA_OUT(HYLA_S_MIX), HYLA_READS(HYLA_S_GNORM),
     .lora = 1},
};
const int hyla_n_ops_gdn = sizeof hyla_ops_gdn / sizeof *hyla_ops_gdn;
