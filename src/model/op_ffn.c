/* Feed-forward ops: routed + shared MoE (spec §3.7, backward §8.8) and dense SwiGLU, forward and
 * backward side by side. Routed tokens are processed grouped by expert (slots sorted by expert,
 * tokens in order within an expert), which fixes every summation order. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/floats.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "core/sigmoid.h"
#include "model/layer_ops.h"
#include "ops/ops.h"

#define CFG (&c->m->cfg)

static int64_t none(const hyla_config *cfg, int64_t n, int64_t T) { return 0; }
static int64_t nk_of(const hyla_op_ctx *c) { return c->n * CFG->top_k; }
#define I32(slot) ((int32_t *)t->p[slot])
#define CI32(slot) ((const int32_t *)t->p[slot])

/* ---- router: HN -> RLOGITS ------------------------------------------------------------------ */
static void router_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_linear(t->p[HYLA_S_RLOGITS], t->p[HYLA_S_HN], hyla_op_w(c, HYLA_P_MOE_ROUTER), c->n, CFG->hidden, CFG->n_experts, 0);
}
static void router_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_linear_bwd(d->p[HYLA_S_HN], hyla_op_dw(c, HYLA_P_MOE_ROUTER), d->p[HYLA_S_RLOGITS], t->p[HYLA_S_HN],
                    hyla_op_w(c, HYLA_P_MOE_ROUTER), c->n, CFG->hidden, CFG->n_experts);
}

/* ---- routing: RLOGITS -> PROBS, TOPIDX, TOPW, and the expert grouping ---------------------- */
static void route_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t n = c->n, E = CFG->n_experts, k = CFG->top_k;
    int32_t *idx = I32(HYLA_S_TOPIDX), *offs = I32(HYLA_S_OFFS), *slot_tok = I32(HYLA_S_SLOT_TOK), *slot_j = I32(HYLA_S_SLOT_J);
    if (c->replay) { /* router replay: forced experts, live softmax weights */
        memcpy(idx, c->replay, (size_t)(n * k) * sizeof *idx);
        hyla_moe_route_forced_fwd(t->p[HYLA_S_TOPW], t->p[HYLA_S_PROBS], t->p[HYLA_S_RLOGITS], idx, n, E, k,
                                  CFG->norm_topk_prob);
    } else {
        hyla_moe_route_fwd(idx, t->p[HYLA_S_TOPW], t->p[HYLA_S_PROBS], t->p[HYLA_S_RLOGITS], n, E, k, CFG->norm_topk_prob);
    }
    if (c->record)
        memcpy(c->record, idx, (size_t)(n * k) * sizeof *idx);
    if (!c->recompute && c->aux_counts) {
        hyla_aux_loss_accumulate(c->aux_counts, c->aux_psum, idx, t->p[HYLA_S_PROBS], n, E, k);
        *c->aux_rows += n;
    }
    /* group slots by expert; padding slots (-1) go after the last expert, unprocessed */
    memset(offs, 0, (size_t)(E + 1) * sizeof *offs);
    for (int64_t i = 0; i < n * k; i++)
        if (idx[i] >= 0)
            offs[idx[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        offs[e + 1] += offs[e];
    int32_t pad = offs[E];
    for (int64_t tok = 0; tok < n; tok++) /* offs[e] used as a cursor, restored below */
        for (int64_t j = 0; j < k; j++) {
            int32_t e = idx[tok * k + j];
            int32_t at = e >= 0 ? offs[e]++ : pad++;
            slot_tok[at] = (int32_t)tok;
            slot_j[at] = (int32_t)j;
        }
    for (int64_t e = E; e > 0; e--)
        offs[e] = offs[e - 1];
    offs[0] = 0;
}
static void route_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch /*[n,E]*/)
{
    int64_t n = c->n, E = CFG->n_experts;
    hyla_moe_route_bwd(scratch, d->p[HYLA_S_TOPW], CI32(HYLA_S_TOPIDX), t->p[HYLA_S_PROBS], c->aux_dprob, n, E, CFG->top_k,
                       CFG->norm_topk_prob);
    hyla_floats_add(d->p[HYLA_S_RLOGITS], scratch, n * E);
}
static int64_t route_bwd_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return n * cfg->n_experts; }

/* ---- gather: HN rows per slot -> XE ------------------------------------------------------- */
static void gather_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t H = CFG->hidden, nk = nk_of(c);
    const int32_t *slot_tok = CI32(HYLA_S_SLOT_TOK);
    for (int64_t s = 0; s < nk; s++)
        memcpy(t->p[HYLA_S_XE] + s * H, t->p[HYLA_S_HN] + (int64_t)slot_tok[s] * H, (size_t)H * sizeof(float));
}
static void gather_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t H = CFG->hidden, nk = nk_of(c);
    const int32_t *slot_tok = CI32(HYLA_S_SLOT_TOK);
    for (int64_t s = 0; s < nk; s++)
        hyla_floats_add(d->p[HYLA_S_HN] + (int64_t)slot_tok[s] * H, d->p[HYLA_S_XE] + s * H, H);
}

/* ---- experts' gate/up: XE -> EGATE, EUP (per expert, weights [E, 2Ie, H]) ------------------- */
/* gate [rows, I] and up [rows, I] from one GEMM against the fused [2I, H] weight (a wider GEMM
 * runs closer to peak than two halves); gu [rows, 2I] is scratch. */
/* gate [rows, I] and up [rows, I] from the fused product gu [rows, 2I] (gate | up per row). */
static void split_gate_up(float *gate, float *up, const float *gu, int64_t rows, int64_t I)
{
    for (int64_t r = 0; r < rows; r++) {
        memcpy(gate + r * I, gu + r * 2 * I, (size_t)I * sizeof(float));
        memcpy(up + r * I, gu + r * 2 * I + I, (size_t)I * sizeof(float));
    }
}

/* gate|up rows [row0, row0 + 2I) of `role` in one GEMM, split into gate and up. */
static void fused_gate_up(const hyla_op_ctx *c, hyla_role role, int64_t row0, float *gate, float *up, const float *x,
                          int64_t rows, int64_t H, int64_t I, float *gu)
{
    hyla_op_linear(c, role, row0, gu, x, rows, H, 2 * I);
    split_gate_up(gate, up, gu, rows, I);
}

/* The routed experts' products, expert by expert (each expert's rows are one contiguous block,
 * offs[e] .. offs[e + 1]): with fp32 weights and no adapter, the experts are spread over the
 * threads, each expert's GEMMs on one thread (at 64 rows an expert's product is too small to
 * split well: 32 experts of [64, 1024] x [1024, 512] run at 163 GFLOP/s on 2 threads one after
 * another and at 215 side by side). Every expert writes only its own rows and its own weight
 * gradient, and a GEMM's result does not depend on its thread count, so this is the serial
 * loop's result bit for bit. The bf16, adapter and GGUF paths share per-op scratch: serial. */
typedef void (*expert_fn)(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, int64_t e,
                          int64_t s0, int64_t cnt);
static void expert_range(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, expert_fn fn,
                         double flops_per_row, int64_t e0, int64_t e1)
{
    const int32_t *offs = CI32(HYLA_S_OFFS);
    const hyla_expert_source *src = c->experts; /* one thread: poll its transfers between experts */
    int polled = src && src->groups > 1 && omp_get_max_threads() == 1;
    if (hyla_model_param_bf16(c->m, HYLA_P_MOE_GATE_UP, c->layer) || c->lora || c->m->qw || polled) {
        for (int64_t e = e0; e < e1; e++) {
            fn(c, t, d, scratch, e, offs[e], offs[e + 1] - offs[e]);
            if (polled)
                src->poll(src->ctx);
        }
        return;
    }
    double t0 = HYLA_PROF_BEGIN();
#pragma omp parallel for schedule(dynamic, 1) HYLA_PAR_IF(flops_per_row * (offs[e1] - offs[e0]))
    for (int64_t e = e0; e < e1; e++)
        fn(c, t, d, scratch, e, offs[e], offs[e + 1] - offs[e]);
    if (hyla_prof.enabled) /* hyla_gemm counts only calls made outside parallel regions */
        hyla_prof_gemm_add(flops_per_row * (double)(offs[e1] - offs[e0]), hyla_now() - t0);
}
/* All experts; with an expert source (FSDP's expert groups) one group of `role`'s rows at a time,
 * acquired before its experts run and released after (backward: their gradient rows complete).
 * Each expert's result is the same whichever group it is in. */
static void each_expert(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, expert_fn fn,
                        double flops_per_row, hyla_role role, int backward)
{
    int64_t E = CFG->n_experts;
    const hyla_expert_source *src = c->experts;
    if (!src || src->groups <= 1) {
        expert_range(c, t, d, scratch, fn, flops_per_row, 0, E);
        return;
    }
    int64_t per = E / src->groups;
    for (int64_t e0 = 0; e0 < E; e0 += per) {
        src->acquire(src->ctx, c->layer, role, e0, e0 + per);
        expert_range(c, t, d, scratch, fn, flops_per_row, e0, e0 + per);
        src->release(src->ctx, c->layer, role, e0, e0 + per, backward && c->grads != NULL);
    }
}

static void expert_up_one(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, int64_t e, int64_t s0,
                          int64_t cnt)
{
    int64_t H = CFG->hidden, Ie = CFG->moe_inter;
    hyla_tape *o = d; /* forward: d is the tape written */
    fused_gate_up(c, HYLA_P_MOE_GATE_UP, e * 2 * Ie, o->p[HYLA_S_EGATE] + s0 * Ie, o->p[HYLA_S_EUP] + s0 * Ie,
                  t->p[HYLA_S_XE] + s0 * H, cnt, H, Ie, scratch + s0 * 2 * Ie);
}
/* A decode step of a GGUF model: the routed experts' products as one set of items (one parallel
 * loop over all their rows, layer_ops.h); 0 where that path does not apply. y(e) and x(e): expert
 * e's first output and input row, its rows offs[e] .. offs[e + 1]. */
static int experts_as_items(const hyla_op_ctx *c, const hyla_tape *t, hyla_role role, float *y, int64_t ldy,
                            const float *x, int64_t ldx, int64_t rows_per_expert, int64_t in, int64_t out)
{
    const int32_t *offs = CI32(HYLA_S_OFFS);
    hyla_qitem items[HYLA_QITEMS_MAX];
    int64_t count = 0;
    if (!c->m->qw)
        return 0;
    for (int64_t e = 0; e < CFG->n_experts; e++) {
        int64_t cnt = offs[e + 1] - offs[e];
        if (!cnt)
            continue;
        if (count == HYLA_QITEMS_MAX)
            return 0;
        items[count++] = (hyla_qitem){y + offs[e] * ldy, x + offs[e] * ldx, cnt, e * rows_per_expert};
    }
    return hyla_op_linear_items(c, role, items, count, in, out);
}

static void expert_up_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch /*[n*k, 2Ie]*/)
{
    int64_t H = CFG->hidden, Ie = CFG->moe_inter, slots = CI32(HYLA_S_OFFS)[CFG->n_experts];
    if (experts_as_items(c, t, HYLA_P_MOE_GATE_UP, scratch, 2 * Ie, t->p[HYLA_S_XE], H, 2 * Ie, H, 2 * Ie)) {
        split_gate_up(t->p[HYLA_S_EGATE], t->p[HYLA_S_EUP], scratch, slots, Ie);
        return;
    }
    each_expert(c, t, t, scratch, expert_up_one, 2.0 * CFG->hidden * 2 * CFG->moe_inter, HYLA_P_MOE_GATE_UP, 0);
}
static int64_t expert_up_scratch(const hyla_config *cfg, int64_t n, int64_t T) { return n * cfg->top_k * 2 * cfg->moe_inter; }
static void expert_up_bwd_one(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, int64_t e,
                              int64_t s0, int64_t cnt)
{
    int64_t H = CFG->hidden, Ie = CFG->moe_inter;
    if (cnt == 0)
        return;
    /* the gate and up gradients side by side, [cnt, 2 Ie] like the forward's fused product: one
     * dx product over K = 2 Ie and one [2 Ie, H] weight gradient instead of two of each */
    float *dgu = scratch + s0 * 2 * Ie;
    const float *dg = d->p[HYLA_S_EGATE] + s0 * Ie, *du = d->p[HYLA_S_EUP] + s0 * Ie;
    for (int64_t r = 0; r < cnt; r++) {
        memcpy(dgu + r * 2 * Ie, dg + r * Ie, (size_t)Ie * sizeof(float));
        memcpy(dgu + r * 2 * Ie + Ie, du + r * Ie, (size_t)Ie * sizeof(float));
    }
    hyla_op_linear_bwd(c, HYLA_P_MOE_GATE_UP, e * 2 * Ie, d->p[HYLA_S_XE] + s0 * H, dgu, t->p[HYLA_S_XE] + s0 * H, cnt, H,
                       2 * Ie);
}
static void expert_up_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    each_expert(c, t, d, scratch, expert_up_bwd_one, 2 * 2.0 * CFG->hidden * 2 * CFG->moe_inter, HYLA_P_MOE_GATE_UP, 1);
}

/* ---- SwiGLU product (routed: EGATE, EUP -> EH; shared / dense: SGATE, SUP -> SH) ---------- */
static int64_t mlp_width(const hyla_op_ctx *c) { return CFG->layer_is_moe[c->layer] ? CFG->shared_inter : CFG->inter; }
static void swiglu_slots_fwd(hyla_tape *t, hyla_slot h, hyla_slot g, hyla_slot u, int64_t rows, int64_t I)
{
    hyla_swiglu_fwd(t->p[h], t->p[g], t->p[u], rows, I);
}
static void swiglu_slots_bwd(const hyla_tape *t, hyla_tape *d, hyla_slot h, hyla_slot g, hyla_slot u, int64_t rows,
                             int64_t I)
{
    hyla_swiglu_bwd_acc(d->p[g], d->p[u], d->p[h], t->p[g], t->p[u], rows, I);
}
static void expert_act_fwd(const hyla_op_ctx *c, hyla_tape *t, float *s)
{
    swiglu_slots_fwd(t, HYLA_S_EH, HYLA_S_EGATE, HYLA_S_EUP, nk_of(c), CFG->moe_inter);
}
static void expert_act_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *s)
{
    swiglu_slots_bwd(t, d, HYLA_S_EH, HYLA_S_EGATE, HYLA_S_EUP, nk_of(c), CFG->moe_inter);
}
static void mlp_act_fwd(const hyla_op_ctx *c, hyla_tape *t, float *s)
{
    swiglu_slots_fwd(t, HYLA_S_SH, HYLA_S_SGATE, HYLA_S_SUP, c->n, mlp_width(c));
}
static void mlp_act_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *s)
{
    swiglu_slots_bwd(t, d, HYLA_S_SH, HYLA_S_SGATE, HYLA_S_SUP, c->n, mlp_width(c));
}
/* Scratch of the shared expert / dense MLP up op: [n, 2 I] at the widest I (the scratch functions
 * do not know the layer). */
static int64_t mlp_pair_scratch(const hyla_config *cfg, int64_t n, int64_t T)
{
    (void)T;
    return 2 * n * (cfg->shared_inter > cfg->inter ? cfg->shared_inter : cfg->inter);
}

/* ---- experts' down: EH -> EOUT ---------------------------------------------------------- */
static void expert_down_one(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, int64_t e,
                            int64_t s0, int64_t cnt)
{
    int64_t H = CFG->hidden, Ie = CFG->moe_inter;
    hyla_op_linear(c, HYLA_P_MOE_DOWN, e * H, d->p[HYLA_S_EOUT] + s0 * H, t->p[HYLA_S_EH] + s0 * Ie, cnt, Ie, H);
}
static void expert_down_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t H = CFG->hidden, Ie = CFG->moe_inter;
    if (experts_as_items(c, t, HYLA_P_MOE_DOWN, t->p[HYLA_S_EOUT], H, t->p[HYLA_S_EH], Ie, H, Ie, H))
        return;
    each_expert(c, t, t, scratch, expert_down_one, 2.0 * CFG->hidden * CFG->moe_inter, HYLA_P_MOE_DOWN, 0);
}
static void expert_down_bwd_one(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch, int64_t e,
                                int64_t s0, int64_t cnt)
{
    int64_t H = CFG->hidden, Ie = CFG->moe_inter;
    if (cnt > 0)
        hyla_op_linear_bwd(c, HYLA_P_MOE_DOWN, e * H, d->p[HYLA_S_EH] + s0 * Ie, d->p[HYLA_S_EOUT] + s0 * H,
                           t->p[HYLA_S_EH] + s0 * Ie, cnt, Ie, H);
}
static void expert_down_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    each_expert(c, t, d, scratch, expert_down_bwd_one, 2 * 2.0 * CFG->hidden * CFG->moe_inter, HYLA_P_MOE_DOWN, 1);
}

/* ---- shared expert / dense MLP projections ------------------------------------------------ */
static hyla_role up_role(const hyla_op_ctx *c) { return CFG->layer_is_moe[c->layer] ? HYLA_P_SHARED_GATE_UP : HYLA_P_MLP_GATE_UP; }
static hyla_role down_role(const hyla_op_ctx *c) { return CFG->layer_is_moe[c->layer] ? HYLA_P_SHARED_DOWN : HYLA_P_MLP_DOWN; }

static void mlp_up_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch /*[n, 2I]*/)
{
    int64_t n = c->n, H = CFG->hidden, I = mlp_width(c);
    fused_gate_up(c, up_role(c), 0, t->p[HYLA_S_SGATE], t->p[HYLA_S_SUP], t->p[HYLA_S_HN], n, H, I, scratch);
}
static void mlp_up_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t n = c->n, H = CFG->hidden, I = mlp_width(c);
    const float *x = t->p[HYLA_S_HN];
    float *dx = d->p[HYLA_S_HN];
    hyla_op_linear_bwd(c, up_role(c), 0, dx, d->p[HYLA_S_SGATE], x, n, H, I);
    hyla_op_linear_bwd(c, up_role(c), I, dx, d->p[HYLA_S_SUP], x, n, H, I);
}

/* ---- shared expert gate: SG = HN w_gate [n, 1] -------------------------------------------
 * Its own op, so that keeping the shared expert's projections (mlpwi_0/1) spares their GEMM in
 * backward: the gate logit is recomputed alone. */
static void shared_gate_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_op_linear(c, HYLA_P_SHARED_EXPERT_GATE, 0, t->p[HYLA_S_SG], t->p[HYLA_S_HN], c->n, CFG->hidden, 1);
}
static void shared_gate_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_op_linear_bwd(c, HYLA_P_SHARED_EXPERT_GATE, 0, d->p[HYLA_S_HN], d->p[HYLA_S_SG], t->p[HYLA_S_HN], c->n,
                       CFG->hidden, 1);
}
static void mlp_down_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    hyla_op_linear(c, down_role(c), 0, t->p[HYLA_S_SOUT], t->p[HYLA_S_SH], c->n, mlp_width(c), CFG->hidden);
}
static void mlp_down_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    hyla_op_linear_bwd(c, down_role(c), 0, d->p[HYLA_S_SH], d->p[HYLA_S_SOUT], t->p[HYLA_S_SH], c->n, mlp_width(c),
                       CFG->hidden);
}

/* ---- combine: FFN = sum_slots w * EOUT (+ sigmoid(SG) * SOUT) ------------------------------ */
static void combine_fwd(const hyla_op_ctx *c, hyla_tape *t, float *scratch)
{
    int64_t n = c->n, H = CFG->hidden, k = CFG->top_k;
    const int32_t *slot_tok = CI32(HYLA_S_SLOT_TOK), *slot_j = CI32(HYLA_S_SLOT_J);
    float *y = t->p[HYLA_S_FFN];
    memset(y, 0, (size_t)(n * H) * sizeof *y);
    int64_t n_routed = CI32(HYLA_S_OFFS)[CFG->n_experts]; /* slots past this are replay padding */
    for (int64_t s = 0; s < n_routed; s++) { /* expert by expert, increasing index (HF eager order) */
        int64_t tok = slot_tok[s];
        float w = t->p[HYLA_S_TOPW][tok * k + slot_j[s]];
        const float *src = t->p[HYLA_S_EOUT] + s * H;
        float *yt = y + tok * H;
        for (int64_t j = 0; j < H; j++)
            yt[j] += w * src[j];
    }
    if (CFG->shared_inter > 0)
        for (int64_t tok = 0; tok < n; tok++) {
            float g = hyla_sigmoid(t->p[HYLA_S_SG][tok]);
            for (int64_t j = 0; j < H; j++)
                y[tok * H + j] += g * t->p[HYLA_S_SOUT][tok * H + j];
        }
}
static void combine_bwd(const hyla_op_ctx *c, const hyla_tape *t, hyla_tape *d, float *scratch)
{
    int64_t n = c->n, H = CFG->hidden, k = CFG->top_k;
    const int32_t *slot_tok = CI32(HYLA_S_SLOT_TOK), *slot_j = CI32(HYLA_S_SLOT_J);
    const float *dy = d->p[HYLA_S_FFN];
    int64_t n_routed = CI32(HYLA_S_OFFS)[CFG->n_experts];
    for (int64_t s = 0; s < n_routed; s++) {
        int64_t tok = slot_tok[s], at = tok * k + slot_j[s];
        float w = t->p[HYLA_S_TOPW][at];
        const float *eo = t->p[HYLA_S_EOUT] + s * H, *dyt = dy + tok * H;
        float *deo = d->p[HYLA_S_EOUT] + s * H;
        double dw = 0.0;
        for (int64_t j = 0; j < H; j++) {
            deo[j] += w * dyt[j];
            dw += (double)dyt[j] * eo[j];
        }
        d->p[HYLA_S_TOPW][at] += (float)dw;
    }
    if (CFG->shared_inter > 0)
        for (int64_t tok = 0; tok < n; tok++) {
            float g = hyla_sigmoid(t->p[HYLA_S_SG][tok]);
            const float *so = t->p[HYLA_S_SOUT] + tok * H, *dyt = dy + tok * H;
            float *dso = d->p[HYLA_S_SOUT] + tok * H;
            double dg = 0.0;
            for (int64_t j = 0; j < H; j++) {
                dso[j] += g * dyt[j];
                dg += (double)dyt[j] * so[j];
            }
            d->p[HYLA_S_SG][tok] += (float)dg * g * (1.0f - g);
        }
}

#define ROUTED_OPS                                                                                                     \
    {"moe_router", router_fwd, router_bwd, none, none, HYLA_IN(HYLA_S_HN), HYLA_OUT(HYLA_S_RLOGITS), HYLA_READS(HYLA_S_HN)}, \
    {"moe_route", route_fwd, route_bwd, none, route_bwd_scratch, HYLA_IN(HYLA_S_RLOGITS),                              \
     HYLA_OUT(HYLA_S_PROBS, HYLA_S_TOPIDX, HYLA_S_TOPW, HYLA_S_OFFS, HYLA_S_SLOT_TOK, HYLA_S_SLOT_J),                   \
     HYLA_READS(HYLA_S_PROBS, HYLA_S_TOPIDX)},                                                                         \
    {"moe_gather", gather_fwd, gather_bwd, none, none, HYLA_IN(HYLA_S_HN, HYLA_S_SLOT_TOK), HYLA_OUT(HYLA_S_XE),       \
     HYLA_READS(HYLA_S_SLOT_TOK)},                                                                                     \
    {"moe_expert_up", expert_up_fwd, expert_up_bwd, expert_up_scratch, expert_up_scratch, HYLA_IN(HYLA_S_XE, HYLA_S_OFFS),                       \
     HYLA_OUT(HYLA_S_EGATE, HYLA_S_EUP), HYLA_READS(HYLA_S_XE, HYLA_S_OFFS), .lora = 1, .experts = 1},                                          \
    {"moe_expert_act", expert_act_fwd, expert_act_bwd, none, none, HYLA_IN(HYLA_S_EGATE, HYLA_S_EUP),    \
     HYLA_OUT(HYLA_S_EH), HYLA_READS(HYLA_S_EGATE, HYLA_S_EUP)},                                                       \
    {"moe_expert_down", expert_down_fwd, expert_down_bwd, none, none, HYLA_IN(HYLA_S_EH, HYLA_S_OFFS),                 \
     HYLA_OUT(HYLA_S_EOUT), HYLA_READS(HYLA_S_EH, HYLA_S_OFFS), .lora = 1, .experts = 2}

#define MLP_OPS                                                                                                        \
    {"mlp_up", mlp_up_fwd, mlp_up_bwd, mlp_pair_scratch, none, HYLA_IN(HYLA_S_HN), HYLA_OUT(HYLA_S_SGATE, HYLA_S_SUP),             \
     HYLA_READS(HYLA_S_HN), .lora = 1},                                                                                           \
    {"mlp_act", mlp_act_fwd, mlp_act_bwd, none, none, HYLA_IN(HYLA_S_SGATE, HYLA_S_SUP), HYLA_OUT(HYLA_S_SH), \
     HYLA_READS(HYLA_S_SGATE, HYLA_S_SUP)},                                                                            \
    {"mlp_down", mlp_down_fwd, mlp_down_bwd, none, none, HYLA_IN(HYLA_S_SH), HYLA_OUT(HYLA_S_SOUT), HYLA_READS(HYLA_S_SH), \
     .lora = 1}

const hyla_layer_op hyla_ops_moe[] = {
    ROUTED_OPS,
    {"shared_gate", shared_gate_fwd, shared_gate_bwd, none, none, HYLA_IN(HYLA_S_HN), HYLA_OUT(HYLA_S_SG), HYLA_READS(HYLA_S_HN),
     .lora = 1},
    {"shared_up", mlp_up_fwd, mlp_up_bwd, mlp_pair_scratch, none, HYLA_IN(HYLA_S_HN), HYLA_OUT(HYLA_S_SGATE, HYLA_S_SUP),
     HYLA_READS(HYLA_S_HN), .lora = 1},
    {"shared_act", mlp_act_fwd, mlp_act_bwd, none, none, HYLA_IN(HYLA_S_SGATE, HYLA_S_SUP), HYLA_OUT(HYLA_S_SH),
     HYLA_READS(HYLA_S_SGATE, HYLA_S_SUP)},
    {"shared_down", mlp_down_fwd, mlp_down_bwd, none, none, HYLA_IN(HYLA_S_SH), HYLA_OUT(HYLA_S_SOUT), HYLA_READS(HYLA_S_SH),
     .lora = 1},
    {"moe_combine", combine_fwd, combine_bwd, none, none,
     HYLA_IN(HYLA_S_EOUT, HYLA_S_TOPW, HYLA_S_SLOT_TOK, HYLA_S_SLOT_J, HYLA_S_OFFS, HYLA_S_SOUT, HYLA_S_SG),
     HYLA_OUT(HYLA_S_FFN),
     HYLA_READS(HYLA_S_EOUT, HYLA_S_TOPW, HYLA_S_SLOT_TOK, HYLA_S_SLOT_J, HYLA_S_OFFS, HYLA_S_SOUT, HYLA_S_SG)},
};
const int hyla_n_ops_moe = sizeof hyla_ops_moe / sizeof *hyla_ops_moe;

const hyla_layer_op hyla_ops_moe_routed_only[] = {
    ROUTED_OPS,
    {"moe_combine", combine_fwd, combine_bwd, none, none,
     HYLA_IN(HYLA_S_EOUT, HYLA_S_TOPW, HYLA_S_SLOT_TOK, HYLA_S_SLOT_J, HYLA_S_OFFS),
     HYLA_OUT(HYLA_S_FFN), HYLA_READS(HYLA_S_EOUT, HYLA_S_TOPW, HYLA_S_SLOT_TOK, HYLA_S_SLOT_J, HYLA_S_OFFS)},
};
const int hyla_n_ops_moe_routed_only = sizeof hyla_ops_moe_routed_only / sizeof *hyla_ops_moe_routed_only;

const hyla_layer_op hyla_ops_mlp[] = {MLP_OPS};
const int hyla_n_ops_mlp = sizeof hyla_ops_mlp / sizeof *hyla_ops_mlp;
