/* The GGUF tensor map (gguf_map.h): llama.cpp's converter's tensors for a config, row by row. */
#include "model/gguf_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Value-head permutation for Qwen3.5: new position (v * Hk + g) holds old head (g * r + v). */
static int64_t tiled_head(int64_t new_head, int64_t Hk, int64_t r)
{
    int64_t v = new_head / Hk, g = new_head % Hk;
    return g * r + v;
}

/* map[i] for i < n_heads * hd: the source index within a block of value heads of hd each. */
static int64_t *value_head_map(int64_t n_heads, int64_t hd, int64_t Hk, int64_t offset, int64_t total)
{
    int64_t *map = malloc((size_t)total * sizeof *map);
    if (!map)
        return NULL;
    int64_t r = n_heads / Hk;
    for (int64_t i = 0; i < total; i++)
        map[i] = i;
    for (int64_t i = 0; i < n_heads * hd; i++)
        map[offset + i] = offset + tiled_head(i / hd, Hk, r) * hd + i % hd;
    return map;
}

static hyla_gguf_map_tensor *add(hyla_gguf_map *e, const hyla_config *c, const char *name, int layer, hyla_role role, int n_dims, int64_t ne0, int64_t ne1,
                          int64_t ne2)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 256;
        hyla_gguf_map_tensor *t = realloc(e->t, cap * sizeof *t);
        if (!t)
            return NULL;
        e->t = t, e->cap = cap;
    }
    hyla_gguf_map_tensor *t = &e->t[e->n++];
    memset(t, 0, sizeof *t);
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2;
    t->rows = (n_dims > 1 ? ne1 : 1) * (n_dims > 2 ? ne2 : 1);
    t->role = t->role2 = role;
    t->layer = layer;
    size_t len = strlen(t->name);
    /* F32 where llama.cpp's converter keeps F32: vectors, norms, routers, the conv kernel, and
     * anything that is not a ".weight" (ssm_a, ssm_dt.bias) */
    int keep_f32 = n_dims == 1 || (len >= 12 && !strcmp(t->name + len - 12, "_norm.weight")) ||
                   strstr(t->name, "ffn_gate_inp") || strstr(t->name, "ssm_conv1d") ||
                   len < 7 || strcmp(t->name + len - 7, ".weight");
    t->keep_f32 = keep_f32;
    (void)c;
    return t;
}

#define ADD_OR_FAIL(t, call)                                                                                           \
    do {                                                                                                               \
        if (!((t) = (call)))                                                                                           \
            return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");                                       \
    } while (0)

static int add_vector(hyla_gguf_map *e, const hyla_config *c, const char *name, int layer, hyla_role role, int64_t n, hyla_gguf_value_op op)
{
    hyla_gguf_map_tensor *t;
    ADD_OR_FAIL(t, add(e, c, name, layer, role, 1, n, 1, 1));
    t->op = op;
    return HYLA_OK;
}

static int add_matrix(hyla_gguf_map *e, const hyla_config *c, const char *name, int layer, hyla_role role, int64_t rows, int64_t cols, int64_t row0)
{
    hyla_gguf_map_tensor *t;
    ADD_OR_FAIL(t, add(e, c, name, layer, role, 2, cols, rows, 1));
    t->row0 = row0;
    return HYLA_OK;
}

/* Rows [half * I, half * I + I) of each expert's [2I, H] gate_up block. */
static int add_expert_half(hyla_gguf_map *e, const hyla_config *c, const char *name, int layer, int64_t E, int64_t I, int64_t H, int half)
{
    hyla_gguf_map_tensor *t;
    ADD_OR_FAIL(t, add(e, c, name, layer, HYLA_P_MOE_GATE_UP, 3, H, I, E));
    if (!(t->row_map = malloc((size_t)(E * I) * sizeof *t->row_map)))
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
    for (int64_t x = 0; x < E; x++)
        for (int64_t i = 0; i < I; i++)
            t->row_map[x * I + i] = x * 2 * I + half * I + i;
    return HYLA_OK;
}

static int add_linear_attention(hyla_gguf_map *e, const hyla_config *c, int l, int tiled)
{
    int64_t H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dv = c->lin_v_dim, r = Hv / Hk;
    int64_t kd = hyla_cfg_key_dim(c), vd = hyla_cfg_value_dim(c), cd = hyla_cfg_conv_dim(c);
    hyla_gguf_map_tensor *t;
    ADD_OR_FAIL(t, add(e, c, "attn_qkv.weight", l, HYLA_P_GDN_QKV, 2, H, cd, 1));
    if (tiled && !(t->row_map = value_head_map(Hv, dv, Hk, 2 * kd, cd)))
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
    ADD_OR_FAIL(t, add(e, c, "attn_gate.weight", l, HYLA_P_GDN_Z, 2, H, vd, 1));
    if (tiled && !(t->row_map = value_head_map(Hv, dv, Hk, 0, vd)))
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
    if (tiled || c->family != HYLA_FAMILY_QWEN3_NEXT) {
        static const struct { const char *name; hyla_role role; } ba[2] = {{"ssm_beta.weight", HYLA_P_GDN_B},
                                                                         {"ssm_alpha.weight", HYLA_P_GDN_A}};
        for (int i = 0; i < 2; i++) {
            ADD_OR_FAIL(t, add(e, c, ba[i].name, l, ba[i].role, 2, H, Hv, 1));
            if (tiled && !(t->row_map = value_head_map(Hv, 1, Hk, 0, Hv)))
                return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
        }
    } else { /* Qwen3-Next in_proj_ba order: per key head, its r beta rows then its r alpha rows. B and A
              * are adjacent parameters only by luck of the table, so take rows from each through the map. */
        ADD_OR_FAIL(t, add(e, c, "ssm_ba.weight", l, HYLA_P_GDN_B, 2, H, 2 * Hv, 1));
        t->role2 = HYLA_P_GDN_A;
        if (!(t->row_map = malloc((size_t)(2 * Hv) * sizeof *t->row_map)))
            return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
        for (int64_t g = 0; g < Hk; g++)
            for (int64_t j = 0; j < r; j++) {
                t->row_map[g * 2 * r + j] = g * r + j;             /* beta rows of key head g */
                t->row_map[g * 2 * r + r + j] = -1 - (g * r + j);  /* then its alpha rows */
            }
    }
    ADD_OR_FAIL(t, add(e, c, "ssm_conv1d.weight", l, HYLA_P_GDN_CONV, 2, c->conv_kernel, cd, 1));
    if (tiled && !(t->row_map = value_head_map(Hv, dv, Hk, 2 * kd, cd)))
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
    static const struct { const char *name; hyla_role role; hyla_gguf_value_op op; } per_head[2] = {
        {"ssm_dt.bias", HYLA_P_GDN_DT_BIAS, HYLA_GGUF_COPY}, {"ssm_a", HYLA_P_GDN_A_LOG, HYLA_GGUF_NEG_EXP}};
    for (int i = 0; i < 2; i++) {
        ADD_OR_FAIL(t, add(e, c, per_head[i].name, l, per_head[i].role, 1, Hv, 1, 1));
        t->op = per_head[i].op;
        if (tiled && !(t->col_map = value_head_map(Hv, 1, Hk, 0, Hv)))
            return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
    }
    HYLA_TRY(add_vector(e, c, "ssm_norm.weight", l, HYLA_P_GDN_NORM, dv, HYLA_GGUF_COPY));
    ADD_OR_FAIL(t, add(e, c, "ssm_out.weight", l, HYLA_P_GDN_OUT, 2, vd, H, 1));
    if (tiled && !(t->col_map = value_head_map(Hv, dv, Hk, 0, vd)))
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf map: out of memory");
    return HYLA_OK;
}

static int add_full_attention(hyla_gguf_map *e, const hyla_config *c, int l)
{
    int64_t H = c->hidden, hd = c->head_dim;
    HYLA_TRY(add_matrix(e, c, "attn_q.weight", l, HYLA_P_ATTN_Q, c->n_heads * 2 * hd, H, 0));
    HYLA_TRY(add_matrix(e, c, "attn_k.weight", l, HYLA_P_ATTN_K, c->n_kv_heads * hd, H, 0));
    HYLA_TRY(add_matrix(e, c, "attn_v.weight", l, HYLA_P_ATTN_V, c->n_kv_heads * hd, H, 0));
    HYLA_TRY(add_matrix(e, c, "attn_output.weight", l, HYLA_P_ATTN_O, H, c->n_heads * hd, 0));
    HYLA_TRY(add_vector(e, c, "attn_q_norm.weight", l, HYLA_P_ATTN_Q_NORM, hd, HYLA_GGUF_PLUS_ONE));
    return add_vector(e, c, "attn_k_norm.weight", l, HYLA_P_ATTN_K_NORM, hd, HYLA_GGUF_PLUS_ONE);
}

static int add_ffn(hyla_gguf_map *e, const hyla_config *c, int l)
{
    int64_t H = c->hidden;
    if (!c->layer_is_moe[l]) {
        HYLA_TRY(add_matrix(e, c, "ffn_gate.weight", l, HYLA_P_MLP_GATE_UP, c->inter, H, 0));
        HYLA_TRY(add_matrix(e, c, "ffn_up.weight", l, HYLA_P_MLP_GATE_UP, c->inter, H, c->inter));
        return add_matrix(e, c, "ffn_down.weight", l, HYLA_P_MLP_DOWN, H, c->inter, 0);
    }
    int64_t E = c->n_experts, I = c->moe_inter, Is = c->shared_inter;
    HYLA_TRY(add_matrix(e, c, "ffn_gate_inp.weight", l, HYLA_P_MOE_ROUTER, E, H, 0));
    HYLA_TRY(add_expert_half(e, c, "ffn_gate_exps.weight", l, E, I, H, 0));
    HYLA_TRY(add_expert_half(e, c, "ffn_up_exps.weight", l, E, I, H, 1));
    hyla_gguf_map_tensor *t;
    ADD_OR_FAIL(t, add(e, c, "ffn_down_exps.weight", l, HYLA_P_MOE_DOWN, 3, I, H, E));
    HYLA_TRY(add_matrix(e, c, "ffn_gate_inp_shexp.weight", l, HYLA_P_SHARED_EXPERT_GATE, 1, H, 0));
    HYLA_TRY(add_matrix(e, c, "ffn_gate_shexp.weight", l, HYLA_P_SHARED_GATE_UP, Is, H, 0));
    HYLA_TRY(add_matrix(e, c, "ffn_up_shexp.weight", l, HYLA_P_SHARED_GATE_UP, Is, H, Is));
    return add_matrix(e, c, "ffn_down_shexp.weight", l, HYLA_P_SHARED_DOWN, H, Is, 0);
}

int hyla_gguf_map_build(hyla_gguf_map *e, const hyla_config *c)
{
    memset(e, 0, sizeof *e);
    int64_t H = c->hidden;
    int tiled = c->family != HYLA_FAMILY_QWEN3_NEXT && c->lin_k_heads != c->lin_v_heads;
    HYLA_TRY(add_matrix(e, c, "token_embd.weight", -1, HYLA_P_EMBED, c->vocab, H, 0));
    HYLA_TRY(add_vector(e, c, "output_norm.weight", -1, HYLA_P_FINAL_NORM, H, HYLA_GGUF_PLUS_ONE));
    if (!c->tie_word_embeddings)
        HYLA_TRY(add_matrix(e, c, "output.weight", -1, HYLA_P_LM_HEAD, c->vocab, H, 0));
    for (int l = 0; l < c->n_layers; l++) {
        HYLA_TRY(add_vector(e, c, "attn_norm.weight", l, HYLA_P_INPUT_NORM, H, HYLA_GGUF_PLUS_ONE));
        HYLA_TRY(add_vector(e, c, "post_attention_norm.weight", l, HYLA_P_POST_NORM, H, HYLA_GGUF_PLUS_ONE));
        HYLA_TRY(c->layer_kind[l] == HYLA_LAYER_LINEAR ? add_linear_attention(e, c, l, tiled) : add_full_attention(e, c, l));
        HYLA_TRY(add_ffn(e, c, l));
    }
    for (int j = 0; j < c->n_mtp_layers; j++) { /* the MTP head: llama.cpp's nextn block after the trunk's */
        int l = (int)c->n_layers + j;
        HYLA_TRY(add_vector(e, c, "attn_norm.weight", l, HYLA_P_INPUT_NORM, H, HYLA_GGUF_PLUS_ONE));
        HYLA_TRY(add_vector(e, c, "post_attention_norm.weight", l, HYLA_P_POST_NORM, H, HYLA_GGUF_PLUS_ONE));
        HYLA_TRY(add_full_attention(e, c, l));
        HYLA_TRY(add_ffn(e, c, l));
        if (j == 0) { /* fc and the head's norms are shared by its layers: stored with the first */
            HYLA_TRY(add_matrix(e, c, "nextn.eh_proj.weight", l, HYLA_P_MTP_FC, H, 2 * H, 0));
            HYLA_TRY(add_vector(e, c, "nextn.enorm.weight", l, HYLA_P_MTP_NORM_EMB, H, HYLA_GGUF_PLUS_ONE));
            HYLA_TRY(add_vector(e, c, "nextn.hnorm.weight", l, HYLA_P_MTP_NORM_HIDDEN, H, HYLA_GGUF_PLUS_ONE));
            HYLA_TRY(add_vector(e, c, "nextn.shared_head_norm.weight", l, HYLA_P_MTP_NORM, H, HYLA_GGUF_PLUS_ONE));
            for (size_t i = e->n - 4; i < e->n; i++) /* global parameters of the head: found at layer -1 */
                e->t[i].layer = -1;
        }
    }
    return HYLA_OK;
}

/* ---- refusals: what llama.cpp's graphs cannot express ------------------------------------------- */

int hyla_gguf_map_check(const hyla_config *c, const char *arch)
{
    int has_linear = 0;
    for (int l = 0; l < c->n_layers; l++)
        has_linear |= c->layer_kind[l] == HYLA_LAYER_LINEAR;
    if (has_linear && c->lin_k_dim != c->lin_v_dim)
        return hyla_error_set(HYLA_ERR_ARG, "gguf (%s): linear_key_head_dim %lld != linear_value_head_dim %lld; "
                              "llama.cpp uses one head size for both", arch, (long long)c->lin_k_dim, (long long)c->lin_v_dim);
    if (c->family == HYLA_FAMILY_QWEN3_5)
        return HYLA_OK;
    for (int l = 0; l < c->n_layers; l++)
        if (!c->layer_is_moe[l])
            return hyla_error_set(HYLA_ERR_ARG, "gguf (%s): layer %d is a dense MLP (mlp_only_layers / "
                                  "decoder_sparse_step); llama.cpp's %s needs MoE in every layer", arch, l, arch);
    if (c->shared_inter <= 0)
        return hyla_error_set(HYLA_ERR_ARG, "gguf (%s): no shared expert (shared_expert_intermediate_size); "
                              "llama.cpp's %s needs one", arch, arch);
    if (!c->norm_topk_prob)
        return hyla_error_set(HYLA_ERR_ARG, "gguf (%s): norm_topk_prob is false; llama.cpp's %s always "
                              "renormalises the top-k weights", arch, arch);
    return HYLA_OK;
}

void hyla_gguf_map_free(hyla_gguf_map *map)
{
    for (size_t i = 0; i < map->n; i++) {
        free(map->t[i].row_map);
        free(map->t[i].col_map);
    }
    free(map->t);
    memset(map, 0, sizeof *map);
}

const char *hyla_gguf_arch_name(const hyla_config *cfg)
{
    return cfg->family == HYLA_FAMILY_QWEN3_NEXT ? "qwen3next" : cfg->family == HYLA_FAMILY_QWEN3_5 ? "qwen35" : "qwen35moe";
}
