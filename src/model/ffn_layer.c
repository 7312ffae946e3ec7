/* Feed-forward parts: routed + shared MoE (spec §3.7) and dense SwiGLU. */
#include <math.h>
#include <string.h>

#include "core/gemm.h"
#include "core/profile.h"
#include "model/layers.h"
#include "ops/ops.h"

/* y[n,H] = down(swiglu(gate_up x)); gate_up [2I, H] (gate rows then up rows), down [H, I].
 * gu [n, 2I] and h [n, I] are scratch. */
static void swiglu_ffn(float *y, const float *x, const float *gate_up, const float *down, int64_t n,
                       int64_t H, int64_t I, float *gu, float *h)
{
    hyla_linear(gu, x, gate_up, n, H, 2 * I, 0);
    hyla_swiglu_fwd(h, gu, n, I);
    hyla_linear(y, h, down, n, I, H, 0);
}

size_t hyla_mlp_layer_work_bytes(const hyla_config *c, int64_t n)
{
    return hyla_fbytes(n * 2 * c->inter) + hyla_fbytes(n * c->inter);
}

void hyla_mlp_layer_fwd(hyla_fwd_ctx *c, int l, float *y, const float *x)
{
    const hyla_config *cfg = &c->m->cfg;
    size_t mark = hyla_arena_mark(c->arena);
    double t0 = HYLA_PROF_BEGIN();
    float *gu = hyla_arena_floats(c->arena, (size_t)(c->n * 2 * cfg->inter)); /* [n, 2I] mlpwi_0|mlpwi_1 */
    float *h = hyla_arena_floats(c->arena, (size_t)(c->n * cfg->inter));      /* [n, I] */
    swiglu_ffn(y, x, hyla_model_param(c->m, HYLA_P_MLP_GATE_UP, l), hyla_model_param(c->m, HYLA_P_MLP_DOWN, l),
               c->n, cfg->hidden, cfg->inter, gu, h);
    HYLA_PROF_END(HYLA_PROF_MLP, t0);
    hyla_arena_reset_to(c->arena, mark);
}

size_t hyla_moe_layer_work_bytes(const hyla_config *c, int64_t n)
{
    int64_t E = c->n_experts, k = c->top_k, H = c->hidden, Ie = c->moe_inter, Is = c->shared_inter;
    int64_t s = n * k;
    size_t routed = 2 * hyla_fbytes(n * E)          /* logits, probs */
                  + 2 * hyla_fbytes(n * k)          /* top idx, top w */
                  + hyla_fbytes(E + 1)              /* expert offsets */
                  + 2 * hyla_fbytes(s)              /* slot token, slot weight */
                  + 2 * hyla_fbytes(s * H)          /* gathered x, expert output */
                  + hyla_fbytes(s * 2 * Ie) + hyla_fbytes(s * Ie);
    size_t shared = Is > 0 ? hyla_fbytes(n * 2 * Is) + hyla_fbytes(n * Is) + hyla_fbytes(n * H) + hyla_fbytes(n) : 0;
    return routed + shared;
}

/* Sort the n*k (token, slot) selections by expert: slots of expert e are
 * [offs[e], offs[e+1]), in token order. */
static void group_by_expert(int32_t *offs /*[E+1]*/, int32_t *slot_tok /*[n*k]*/, float *slot_w /*[n*k]*/,
                            const int32_t *idx /*[n,k]*/, const float *w /*[n,k]*/, int64_t n, int64_t k, int64_t E)
{
    memset(offs, 0, (size_t)(E + 1) * sizeof *offs);
    for (int64_t i = 0; i < n * k; i++)
        offs[idx[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        offs[e + 1] += offs[e];
    /* fill using offs as cursors, then restore */
    for (int64_t t = 0; t < n; t++)
        for (int64_t s = 0; s < k; s++) {
            int32_t e = idx[t * k + s];
            int32_t at = offs[e]++;
            slot_tok[at] = (int32_t)t;
            slot_w[at] = w[t * k + s];
        }
    for (int64_t e = E; e > 0; e--)
        offs[e] = offs[e - 1];
    offs[0] = 0;
}

void hyla_moe_layer_fwd(hyla_fwd_ctx *c, int l, float *y, const float *x)
{
    const hyla_model *m = c->m;
    const hyla_config *cfg = &m->cfg;
    int64_t n = c->n, H = cfg->hidden, E = cfg->n_experts, k = cfg->top_k, Ie = cfg->moe_inter, Is = cfg->shared_inter;
    hyla_arena *a = c->arena;
    size_t mark = hyla_arena_mark(a);

    double t0 = HYLA_PROF_BEGIN();
    float *logits = hyla_arena_floats(a, (size_t)(n * E));             /* [n, E] router_logits */
    float *probs = hyla_arena_floats(a, (size_t)(n * E));              /* [n, E] */
    int32_t *idx = hyla_arena_alloc(a, (size_t)(n * k) * sizeof(int32_t)); /* [n, k] */
    float *w = hyla_arena_floats(a, (size_t)(n * k));                  /* [n, k] */
    hyla_linear(logits, x, hyla_model_param(m, HYLA_P_MOE_ROUTER, l), n, H, E, 0);
    hyla_moe_route_fwd(idx, w, probs, logits, n, E, k, cfg->norm_topk_prob);
    hyla_aux_loss_accumulate(c->aux_counts, c->aux_psum, idx, probs, n, E, k);
    c->aux_rows += n;

    int32_t *offs = hyla_arena_alloc(a, (size_t)(E + 1) * sizeof(int32_t));
    int32_t *slot_tok = hyla_arena_alloc(a, (size_t)(n * k) * sizeof(int32_t));
    float *slot_w = hyla_arena_floats(a, (size_t)(n * k));
    group_by_expert(offs, slot_tok, slot_w, idx, w, n, k, E);

    HYLA_PROF_END(HYLA_PROF_MOE_ROUTE, t0);
    t0 = HYLA_PROF_BEGIN();
    float *xe = hyla_arena_floats(a, (size_t)(n * k * H));        /* [n*k, H] tokens grouped by expert */
    float *ye = hyla_arena_floats(a, (size_t)(n * k * H));        /* [n*k, H] moe_mlpwo */
    float *gu = hyla_arena_floats(a, (size_t)(n * k * 2 * Ie));   /* [n*k, 2Ie] moe_mlpwi_0|moe_mlpwi_1 */
    float *h = hyla_arena_floats(a, (size_t)(n * k * Ie));        /* [n*k, Ie] */
    for (int64_t s = 0; s < n * k; s++)
        memcpy(xe + s * H, x + (int64_t)slot_tok[s] * H, (size_t)H * sizeof *xe);
    const float *gate_up = hyla_model_param(m, HYLA_P_MOE_GATE_UP, l); /* [E, 2Ie, H] */
    const float *down = hyla_model_param(m, HYLA_P_MOE_DOWN, l);       /* [E, H, Ie] */
    for (int64_t e = 0; e < E; e++) {
        int64_t s0 = offs[e], cnt = offs[e + 1] - offs[e];
        if (cnt == 0)
            continue;
        swiglu_ffn(ye + s0 * H, xe + s0 * H, gate_up + e * 2 * Ie * H, down + e * H * Ie, cnt, H, Ie,
                   gu + s0 * 2 * Ie, h + s0 * Ie);
    }
    /* Routed output: accumulate expert by expert in increasing expert index (as HF eager). */
    memset(y, 0, (size_t)(n * H) * sizeof *y);
    for (int64_t s = 0; s < n * k; s++) {
        float *yt = y + (int64_t)slot_tok[s] * H;
        const float *src = ye + s * H;
        float ws = slot_w[s];
        for (int64_t j = 0; j < H; j++)
            yt[j] += ws * src[j];
    }
    HYLA_PROF_END(HYLA_PROF_MOE_EXPERTS, t0);
    t0 = HYLA_PROF_BEGIN();
    if (Is > 0) {
        float *sgu = hyla_arena_floats(a, (size_t)(n * 2 * Is)); /* [n, 2Is] mlpwi_0|mlpwi_1 */
        float *sh = hyla_arena_floats(a, (size_t)(n * Is));      /* [n, Is] */
        float *ys = hyla_arena_floats(a, (size_t)(n * H));       /* [n, H] mlpwo */
        float *sg = hyla_arena_floats(a, (size_t)n);             /* [n] shared gate logit */
        swiglu_ffn(ys, x, hyla_model_param(m, HYLA_P_SHARED_GATE_UP, l), hyla_model_param(m, HYLA_P_SHARED_DOWN, l),
                   n, H, Is, sgu, sh);
        hyla_linear(sg, x, hyla_model_param(m, HYLA_P_SHARED_EXPERT_GATE, l), n, H, 1, 0);
        for (int64_t t = 0; t < n; t++) {
            float gt = 1.0f / (1.0f + expf(-sg[t]));
            for (int64_t j = 0; j < H; j++)
                y[t * H + j] += gt * ys[t * H + j];
        }
    }
    HYLA_PROF_END(HYLA_PROF_MOE_SHARED, t0);
    hyla_arena_reset_to(a, mark);
}
