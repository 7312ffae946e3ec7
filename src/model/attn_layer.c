/* Gated full attention (spec §3.5) for B sequences of T tokens. */
#include <math.h>
#include <string.h>

#include "core/gemm.h"
#include "core/profile.h"
#include "model/layers.h"
#include "ops/ops.h"

size_t hyla_attn_layer_work_bytes(const hyla_config *c, int64_t n, int64_t T)
{
    int64_t hd = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads, R = c->rotary_dim;
    return hyla_fbytes(n * Hq * 2 * hd)   /* qg */
         + 3 * hyla_fbytes(n * Hq * hd)   /* q, gate, attn */
         + 2 * hyla_fbytes(n * Hkv * hd)  /* k, v */
         + 2 * hyla_fbytes(n * R / 2)     /* cos, sin */
         + hyla_fbytes((int64_t)hyla_attention_work_floats(T));
}

void hyla_attn_layer_fwd(hyla_fwd_ctx *c, int l, float *y, const float *x)
{
    const hyla_model *m = c->m;
    const hyla_config *cfg = &m->cfg;
    int64_t n = c->n, T = c->T, H = cfg->hidden;
    int64_t hd = cfg->head_dim, Hq = cfg->n_heads, Hkv = cfg->n_kv_heads, R = cfg->rotary_dim;
    float eps = (float)cfg->rms_norm_eps;
    size_t mark = hyla_arena_mark(c->arena);
    hyla_arena *a = c->arena;

    double t0 = HYLA_PROF_BEGIN();
    float *qg = hyla_arena_floats(a, (size_t)(n * Hq * 2 * hd)); /* [n, Hq, 2, hd] query | gate */
    float *k = hyla_arena_floats(a, (size_t)(n * Hkv * hd));     /* [n, Hkv, hd] key_proj */
    float *v = hyla_arena_floats(a, (size_t)(n * Hkv * hd));     /* [n, Hkv, hd] value_proj */
    hyla_linear(qg, x, hyla_model_param(m, HYLA_P_ATTN_Q, l), n, H, Hq * 2 * hd, 0);
    hyla_linear(k, x, hyla_model_param(m, HYLA_P_ATTN_K, l), n, H, Hkv * hd, 0);
    hyla_linear(v, x, hyla_model_param(m, HYLA_P_ATTN_V, l), n, H, Hkv * hd, 0);

    HYLA_PROF_END(HYLA_PROF_ATTN_PROJ, t0);
    t0 = HYLA_PROF_BEGIN();
    float *q = hyla_arena_floats(a, (size_t)(n * Hq * hd));      /* [n, Hq, hd] query_proj */
    float *gate = hyla_arena_floats(a, (size_t)(n * Hq * hd));   /* [n, Hq, hd] */
    for (int64_t i = 0; i < n * Hq; i++) {
        memcpy(q + i * hd, qg + i * 2 * hd, (size_t)hd * sizeof *q);
        memcpy(gate + i * hd, qg + i * 2 * hd + hd, (size_t)hd * sizeof *q);
    }
    hyla_rmsnorm1p_fwd(q, NULL, q, hyla_model_param(m, HYLA_P_ATTN_Q_NORM, l), n * Hq, hd, eps);
    hyla_rmsnorm1p_fwd(k, NULL, k, hyla_model_param(m, HYLA_P_ATTN_K_NORM, l), n * Hkv, hd, eps);

    float *cos_t = hyla_arena_floats(a, (size_t)(n * R / 2)); /* [n, R/2] */
    float *sin_t = hyla_arena_floats(a, (size_t)(n * R / 2)); /* [n, R/2] */
    hyla_rope_table(cos_t, sin_t, c->pos, n, R, cfg->rope_theta);
    hyla_rope_fwd(q, cos_t, sin_t, n, Hq, hd, R);
    hyla_rope_fwd(k, cos_t, sin_t, n, Hkv, hd, R);

    float *att = hyla_arena_floats(a, (size_t)(n * Hq * hd)); /* [n, Hq, hd] context */
    float *work = hyla_arena_floats(a, hyla_attention_work_floats(T));
    float scale = (float)(1.0 / sqrt((double)hd));
    for (int64_t b = 0; b < c->B; b++)
        hyla_attention_fwd(att + b * T * Hq * hd, NULL, q + b * T * Hq * hd, k + b * T * Hkv * hd,
                           v + b * T * Hkv * hd, T, 0, Hq, Hkv, hd, scale, work);
    for (int64_t i = 0; i < n * Hq * hd; i++) /* sigmoid output gate, before o_proj */
        att[i] *= 1.0f / (1.0f + expf(-gate[i]));
    HYLA_PROF_END(HYLA_PROF_ATTN_CORE, t0);
    t0 = HYLA_PROF_BEGIN();
    hyla_linear(y, att, hyla_model_param(m, HYLA_P_ATTN_O, l), n, Hq * hd, H, 0);
    HYLA_PROF_END(HYLA_PROF_ATTN_PROJ, t0);
    hyla_arena_reset_to(a, mark);
}
