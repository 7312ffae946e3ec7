/* Gated DeltaNet mixer (spec §3.4) for B sequences of T tokens. */
#include <math.h>
#include <string.h>

#include "core/gemm.h"
#include "core/profile.h"
#include "model/layers.h"
#include "ops/ops.h"

size_t hyla_gdn_layer_work_bytes(const hyla_config *c, int64_t n, int64_t T __attribute__((unused)))
{
    int64_t cd = hyla_cfg_conv_dim(c), kd = hyla_cfg_key_dim(c), vd = hyla_cfg_value_dim(c), Hv = c->lin_v_heads;
    return 2 * hyla_fbytes(n * cd)                  /* qkv, conv */
         + 4 * hyla_fbytes(n * vd)                  /* z, v, core, normed */
         + 4 * hyla_fbytes(n * Hv)                  /* b, a, g, beta */
         + 2 * hyla_fbytes(n * kd)                  /* q, k */
         + hyla_fbytes(Hv * c->lin_k_dim * c->lin_v_dim) /* state */
         + hyla_fbytes((int64_t)hyla_delta_rule_chunked_work_floats(Hv, c->lin_k_dim, c->lin_v_dim));
}

/* Copy columns [col0, col0 + w) of src [n, ld] into dst [n, w]. */
static void copy_cols(float *dst, const float *src, int64_t n, int64_t ld, int64_t col0, int64_t w)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * w, src + i * ld + col0, (size_t)w * sizeof *dst);
}

void hyla_gdn_layer_fwd(hyla_fwd_ctx *c, int l, float *y, const float *x)
{
    const hyla_model *m = c->m;
    const hyla_config *cfg = &m->cfg;
    int64_t n = c->n, T = c->T, H = cfg->hidden;
    int64_t Hk = cfg->lin_k_heads, Hv = cfg->lin_v_heads, dk = cfg->lin_k_dim, dv = cfg->lin_v_dim;
    int64_t kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd, K = cfg->conv_kernel;
    size_t mark = hyla_arena_mark(c->arena);
    hyla_arena *a = c->arena;

    double t0 = HYLA_PROF_BEGIN();
    float *qkv = hyla_arena_floats(a, (size_t)(n * cd));   /* [n, cd] gdn_in_proj */
    float *z = hyla_arena_floats(a, (size_t)(n * vd));     /* [n, Hv, dv] */
    float *bl = hyla_arena_floats(a, (size_t)(n * Hv));    /* [n, Hv] beta logits */
    float *al = hyla_arena_floats(a, (size_t)(n * Hv));    /* [n, Hv] decay logits */
    hyla_linear(qkv, x, hyla_model_param(m, HYLA_P_GDN_QKV, l), n, H, cd, 0);
    hyla_linear(z, x, hyla_model_param(m, HYLA_P_GDN_Z, l), n, H, vd, 0);
    hyla_linear(bl, x, hyla_model_param(m, HYLA_P_GDN_B, l), n, H, Hv, 0);
    hyla_linear(al, x, hyla_model_param(m, HYLA_P_GDN_A, l), n, H, Hv, 0);

    HYLA_PROF_END(HYLA_PROF_GDN_PROJ, t0);
    t0 = HYLA_PROF_BEGIN();
    float *conv = hyla_arena_floats(a, (size_t)(n * cd));  /* [n, cd] gdn_conv */
    const float *conv_w = hyla_model_param(m, HYLA_P_GDN_CONV, l);
    for (int64_t b = 0; b < c->B; b++)
        hyla_conv_silu_fwd(conv + b * T * cd, NULL, qkv + b * T * cd, conv_w, NULL, T, cd, K);

    float *q = hyla_arena_floats(a, (size_t)(n * kd));     /* [n, Hk, dk] */
    float *k = hyla_arena_floats(a, (size_t)(n * kd));     /* [n, Hk, dk] */
    float *v = hyla_arena_floats(a, (size_t)(n * vd));     /* [n, Hv, dv] */
    copy_cols(q, conv, n, cd, 0, kd);
    copy_cols(k, conv, n, cd, kd, kd);
    copy_cols(v, conv, n, cd, 2 * kd, vd);
    hyla_l2norm_fwd(q, NULL, q, n * Hk, dk, 1e-6f, (float)(1.0 / sqrt((double)dk)));
    hyla_l2norm_fwd(k, NULL, k, n * Hk, dk, 1e-6f, 1.0f);

    float *g = hyla_arena_floats(a, (size_t)(n * Hv));     /* [n, Hv] */
    float *beta = hyla_arena_floats(a, (size_t)(n * Hv));  /* [n, Hv] */
    hyla_gdn_gates_fwd(g, beta, al, bl, hyla_model_param(m, HYLA_P_GDN_A_LOG, l),
                       hyla_model_param(m, HYLA_P_GDN_DT_BIAS, l), n, Hv);

    HYLA_PROF_END(HYLA_PROF_GDN_CONV, t0);
    t0 = HYLA_PROF_BEGIN();
    float *core = hyla_arena_floats(a, (size_t)(n * vd));  /* [n, Hv, dv] gdn_core */
    float *state = hyla_arena_floats(a, (size_t)(Hv * dk * dv));
    float *work = hyla_arena_floats(a, hyla_delta_rule_chunked_work_floats(Hv, dk, dv));
    for (int64_t b = 0; b < c->B; b++) {
        memset(state, 0, (size_t)(Hv * dk * dv) * sizeof *state);
        int64_t o = b * T;
        if (c->delta_mode == HYLA_DELTA_RECURRENT)
            hyla_delta_rule_recurrent_fwd(core + o * vd, state, q + o * kd, k + o * kd, v + o * vd, g + o * Hv,
                                          beta + o * Hv, T, Hk, Hv, dk, dv);
        else
            hyla_delta_rule_chunked_fwd(core + o * vd, state, q + o * kd, k + o * kd, v + o * vd, g + o * Hv,
                                        beta + o * Hv, T, Hk, Hv, dk, dv, work);
    }

    HYLA_PROF_END(HYLA_PROF_GDN_DELTA, t0);
    t0 = HYLA_PROF_BEGIN();
    float *normed = hyla_arena_floats(a, (size_t)(n * vd)); /* [n, Hv, dv] gdn_norm */
    hyla_gated_rmsnorm_fwd(normed, NULL, core, z, hyla_model_param(m, HYLA_P_GDN_NORM, l), n * Hv, dv,
                           (float)cfg->rms_norm_eps);
    HYLA_PROF_END(HYLA_PROF_GDN_NORM, t0);
    t0 = HYLA_PROF_BEGIN();
    hyla_linear(y, normed, hyla_model_param(m, HYLA_P_GDN_OUT, l), n, vd, H, 0);
    HYLA_PROF_END(HYLA_PROF_GDN_PROJ, t0);
    hyla_arena_reset_to(a, mark);
}
