/* Parameter table construction (see params.h for the layouts). */
#include "model/params.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/shard.h"

static const char *const role_names[HYLA_P__COUNT] = {
    "embed", "final_norm", "lm_head", "input_norm", "post_norm",
    "gdn_qkv", "gdn_z", "gdn_b", "gdn_a", "gdn_conv", "gdn_dt_bias", "gdn_A_log", "gdn_norm", "gdn_out",
    "attn_q", "attn_k", "attn_v", "attn_o", "attn_q_norm", "attn_k_norm",
    "moe_router", "moe_gate_up", "moe_down", "shared_gate_up", "shared_down", "shared_expert_gate",
    "mlp_gate_up", "mlp_down",
    "mtp_fc", "mtp_norm_emb", "mtp_norm_hidden", "mtp_norm",
};

const char *hyla_role_name(hyla_role r) { return (r >= 0 && r < HYLA_P__COUNT) ? role_names[r] : "?"; }

void hyla_param_label(const hyla_param *p, char *buf, size_t cap)
{
    const char *role = hyla_role_name(p->role);
    if (p->layer >= 0)
        snprintf(buf, cap, "layers.%d.%s", p->layer, role);
    else if (p->mtp && p->role < HYLA_P_MTP_FC)
        snprintf(buf, cap, "mtp.layers.%d.%s", p->mtp - 1, role);
    else
        snprintf(buf, cap, "%s%s", p->mtp ? "mtp." : "", role);
}

typedef struct {
    hyla_param_table *t;
    size_t cap_params, cap_hf;
    int failed;
} builder;

static int add_param(builder *b, hyla_role role, int layer, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    hyla_param_table *t = b->t;
    if (b->failed)
        return -1;
    if ((size_t)t->n_params == b->cap_params) { /* capacity grows only once the block did */
        size_t cap = b->cap_params ? 2 * b->cap_params : 64;
        hyla_param *p = realloc(t->params, cap * sizeof *p);
        if (!p) {
            b->failed = 1;
            return -1;
        }
        t->params = p;
        b->cap_params = cap;
    }
    hyla_param *p = &t->params[t->n_params];
    memset(p, 0, sizeof *p);
    int64_t N = t->cfg.n_layers;
    p->role = role;
    p->layer = layer < N ? layer : -1;
    p->mtp = layer >= N ? 1 + (int)(layer - N) : role >= HYLA_P_MTP_FC;
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 1;
    p->shape[2] = ndim > 2 ? d2 : 1;
    p->numel = p->shape[0] * p->shape[1] * p->shape[2];
    p->offset = t->total_floats;
    t->total_floats += hyla_param_span(p);
    p->no_decay = ndim == 1 || role == HYLA_P_GDN_CONV || role == HYLA_P_SHARED_EXPERT_GATE;
    t->index[layer < 0 ? hyla_cfg_all_layers(&t->cfg) : layer][role] = t->n_params;
    return t->n_params++;
}

static void add_hf(builder *b, hyla_hf_map map, int param, int64_t row0, int layer, int ndim,
                   const int64_t *shape, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static void add_hf(builder *b, hyla_hf_map map, int param, int64_t row0, int layer, int ndim,
                   const int64_t *shape, const char *fmt, ...)
{
    hyla_param_table *t = b->t;
    if (b->failed || param < 0)
        return;
    if (t->n_hf == b->cap_hf) {
        size_t cap = b->cap_hf ? 2 * b->cap_hf : 256;
        hyla_hf_tensor *h = realloc(t->hf, cap * sizeof *h);
        if (!h) {
            b->failed = 1;
            return;
        }
        t->hf = h;
        b->cap_hf = cap;
    }
    hyla_hf_tensor *h = &t->hf[t->n_hf++];
    memset(h, 0, sizeof *h);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->name, sizeof h->name, fmt, ap);
    va_end(ap);
    h->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        h->shape[i] = shape[i];
        n *= shape[i];
    }
    h->row_len = shape[ndim - 1];
    h->rows = n / h->row_len;
    h->map = map;
    h->param = param;
    h->row0 = row0;
    h->layer = layer < t->cfg.n_layers ? layer : -1;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void build_gdn(builder *b, int l, const char *P)
{
    const hyla_config *c = &b->t->cfg;
    int64_t H = c->hidden, kd = hyla_cfg_key_dim(c), vd = hyla_cfg_value_dim(c), cd = hyla_cfg_conv_dim(c);
    int64_t Hv = c->lin_v_heads;
    int qkv = add_param(b, HYLA_P_GDN_QKV, l, 2, cd, H, 0);
    int z = add_param(b, HYLA_P_GDN_Z, l, 2, vd, H, 0);
    int pb = add_param(b, HYLA_P_GDN_B, l, 2, Hv, H, 0);
    int pa = add_param(b, HYLA_P_GDN_A, l, 2, Hv, H, 0);
    int conv = add_param(b, HYLA_P_GDN_CONV, l, 2, cd, c->conv_kernel, 0);
    int dtb = add_param(b, HYLA_P_GDN_DT_BIAS, l, 1, Hv, 0, 0);
    int alog = add_param(b, HYLA_P_GDN_A_LOG, l, 1, Hv, 0, 0);
    int nw = add_param(b, HYLA_P_GDN_NORM, l, 1, c->lin_v_dim, 0, 0);
    int out = add_param(b, HYLA_P_GDN_OUT, l, 2, H, vd, 0);
    if (b->t->layout.gdn_grouped) {
        add_hf(b, HYLA_HF_QKVZ, qkv, 0, l, 2, SHAPE(2 * kd + 2 * vd, H), "%slinear_attn.in_proj_qkvz.weight", P);
        add_hf(b, HYLA_HF_BA, pb, 0, l, 2, SHAPE(2 * Hv, H), "%slinear_attn.in_proj_ba.weight", P);
    } else {
        add_hf(b, HYLA_HF_ROWS, qkv, 0, l, 2, SHAPE(cd, H), "%slinear_attn.in_proj_qkv.weight", P);
        add_hf(b, HYLA_HF_ROWS, z, 0, l, 2, SHAPE(vd, H), "%slinear_attn.in_proj_z.weight", P);
        add_hf(b, HYLA_HF_ROWS, pb, 0, l, 2, SHAPE(Hv, H), "%slinear_attn.in_proj_b.weight", P);
        add_hf(b, HYLA_HF_ROWS, pa, 0, l, 2, SHAPE(Hv, H), "%slinear_attn.in_proj_a.weight", P);
    }
    add_hf(b, HYLA_HF_ROWS, conv, 0, l, 3, SHAPE(cd, 1, c->conv_kernel), "%slinear_attn.conv1d.weight", P);
    add_hf(b, HYLA_HF_ROWS, dtb, 0, l, 1, SHAPE(Hv), "%slinear_attn.dt_bias", P);
    add_hf(b, HYLA_HF_ROWS, alog, 0, l, 1, SHAPE(Hv), "%slinear_attn.A_log", P);
    add_hf(b, HYLA_HF_ROWS, nw, 0, l, 1, SHAPE(c->lin_v_dim), "%slinear_attn.norm.weight", P);
    add_hf(b, HYLA_HF_ROWS, out, 0, l, 2, SHAPE(H, vd), "%slinear_attn.out_proj.weight", P);
}

static void build_attention(builder *b, int l, const char *P)
{
    const hyla_config *c = &b->t->cfg;
    int64_t H = c->hidden, hd = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    int q = add_param(b, HYLA_P_ATTN_Q, l, 2, Hq * 2 * hd, H, 0);
    int k = add_param(b, HYLA_P_ATTN_K, l, 2, Hkv * hd, H, 0);
    int v = add_param(b, HYLA_P_ATTN_V, l, 2, Hkv * hd, H, 0);
    int o = add_param(b, HYLA_P_ATTN_O, l, 2, H, Hq * hd, 0);
    int qn = add_param(b, HYLA_P_ATTN_Q_NORM, l, 1, hd, 0, 0);
    int kn = add_param(b, HYLA_P_ATTN_K_NORM, l, 1, hd, 0, 0);
    add_hf(b, HYLA_HF_ROWS, q, 0, l, 2, SHAPE(Hq * 2 * hd, H), "%sself_attn.q_proj.weight", P);
    add_hf(b, HYLA_HF_ROWS, k, 0, l, 2, SHAPE(Hkv * hd, H), "%sself_attn.k_proj.weight", P);
    add_hf(b, HYLA_HF_ROWS, v, 0, l, 2, SHAPE(Hkv * hd, H), "%sself_attn.v_proj.weight", P);
    add_hf(b, HYLA_HF_ROWS, o, 0, l, 2, SHAPE(H, Hq * hd), "%sself_attn.o_proj.weight", P);
    add_hf(b, HYLA_HF_ROWS, qn, 0, l, 1, SHAPE(hd), "%sself_attn.q_norm.weight", P);
    add_hf(b, HYLA_HF_ROWS, kn, 0, l, 1, SHAPE(hd), "%sself_attn.k_norm.weight", P);
}

/* A SwiGLU with fused internal gate|up rows, from HF's separate gate_proj/up_proj/down_proj. */
static void add_swiglu_hf(builder *b, int gu, int down, int64_t gu_row0, int64_t down_row0, int64_t I,
                          int l, const char *P, const char *mod)
{
    int64_t H = b->t->cfg.hidden;
    add_hf(b, HYLA_HF_ROWS, gu, gu_row0, l, 2, SHAPE(I, H), "%s%s.gate_proj.weight", P, mod);
    add_hf(b, HYLA_HF_ROWS, gu, gu_row0 + I, l, 2, SHAPE(I, H), "%s%s.up_proj.weight", P, mod);
    add_hf(b, HYLA_HF_ROWS, down, down_row0, l, 2, SHAPE(H, I), "%s%s.down_proj.weight", P, mod);
}

static void build_moe(builder *b, int l, const char *P)
{
    const hyla_config *c = &b->t->cfg;
    int64_t H = c->hidden, E = c->n_experts, Ie = c->moe_inter, Is = c->shared_inter;
    int router = add_param(b, HYLA_P_MOE_ROUTER, l, 2, E, H, 0);
    int gu = add_param(b, HYLA_P_MOE_GATE_UP, l, 3, E, 2 * Ie, H);
    int down = add_param(b, HYLA_P_MOE_DOWN, l, 3, E, H, Ie);
    add_hf(b, HYLA_HF_ROWS, router, 0, l, 2, SHAPE(E, H), "%smlp.gate.weight", P);
    if (b->t->layout.experts_fused) {
        add_hf(b, HYLA_HF_ROWS, gu, 0, l, 3, SHAPE(E, 2 * Ie, H), "%smlp.experts.gate_up_proj", P);
        add_hf(b, HYLA_HF_ROWS, down, 0, l, 3, SHAPE(E, H, Ie), "%smlp.experts.down_proj", P);
    } else {
        char mod[64];
        for (int64_t e = 0; e < E; e++) {
            snprintf(mod, sizeof mod, "mlp.experts.%lld", (long long)e);
            add_swiglu_hf(b, gu, down, e * 2 * Ie, e * H, Ie, l, P, mod);
        }
    }
    if (Is > 0) {
        int sgu = add_param(b, HYLA_P_SHARED_GATE_UP, l, 2, 2 * Is, H, 0);
        int sdown = add_param(b, HYLA_P_SHARED_DOWN, l, 2, H, Is, 0);
        int sg = add_param(b, HYLA_P_SHARED_EXPERT_GATE, l, 2, 1, H, 0);
        add_swiglu_hf(b, sgu, sdown, 0, 0, Is, l, P, "mlp.shared_expert");
        add_hf(b, HYLA_HF_ROWS, sg, 0, l, 2, SHAPE(1, H), "%smlp.shared_expert_gate.weight", P);
    }
}

static void build_dense(builder *b, int l, const char *P)
{
    const hyla_config *c = &b->t->cfg;
    int gu = add_param(b, HYLA_P_MLP_GATE_UP, l, 2, 2 * c->inter, c->hidden, 0);
    int down = add_param(b, HYLA_P_MLP_DOWN, l, 2, c->hidden, c->inter, 0);
    add_swiglu_hf(b, gu, down, 0, 0, c->inter, l, P, "mlp");
}

/* Decoder layer l (trunk, or MTP layer l - n_layers) with tensor name prefix P. */
static void build_layer(builder *b, int l, const char *P)
{
    const hyla_config *cfg = &b->t->cfg;
    int64_t H = cfg->hidden;
    int in = add_param(b, HYLA_P_INPUT_NORM, l, 1, H, 0, 0);
    add_hf(b, HYLA_HF_ROWS, in, 0, l, 1, SHAPE(H), "%sinput_layernorm.weight", P);
    if (cfg->layer_kind[l] == HYLA_LAYER_LINEAR)
        build_gdn(b, l, P);
    else
        build_attention(b, l, P);
    int post = add_param(b, HYLA_P_POST_NORM, l, 1, H, 0, 0);
    add_hf(b, HYLA_HF_ROWS, post, 0, l, 1, SHAPE(H), "%spost_attention_layernorm.weight", P);
    if (cfg->layer_is_moe[l])
        build_moe(b, l, P);
    else
        build_dense(b, l, P);
}

static void build_mtp(builder *b)
{
    const hyla_config *cfg = &b->t->cfg;
    int64_t H = cfg->hidden;
    int fc = add_param(b, HYLA_P_MTP_FC, -1, 2, H, 2 * H, 0);
    add_hf(b, HYLA_HF_ROWS, fc, 0, -1, 2, SHAPE(H, 2 * H), "mtp.fc.weight");
    static const struct { hyla_role role; const char *name; } norms[3] = {
        {HYLA_P_MTP_NORM_EMB, "mtp.pre_fc_norm_embedding.weight"},
        {HYLA_P_MTP_NORM_HIDDEN, "mtp.pre_fc_norm_hidden.weight"},
        {HYLA_P_MTP_NORM, "mtp.norm.weight"},
    };
    for (int i = 0; i < 3; i++) {
        int p = add_param(b, norms[i].role, -1, 1, H, 0, 0);
        add_hf(b, HYLA_HF_ROWS, p, 0, -1, 1, SHAPE(H), "%s", norms[i].name);
    }
    char P[64];
    for (int j = 0; j < cfg->n_mtp_layers; j++) {
        snprintf(P, sizeof P, "mtp.layers.%d.", j);
        build_layer(b, (int)cfg->n_layers + j, P);
    }
}

int hyla_params_build(hyla_param_table *t, const hyla_config *cfg, const hyla_layout *layout)
{
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->layout = *layout;
    size_t rows = (size_t)hyla_cfg_all_layers(cfg) + 1;
    t->index = malloc(sizeof(*t->index) * rows);
    if (!t->index)
        return hyla_error_set(HYLA_ERR_NOMEM, "parameter table: out of memory");
    memset(t->index, 0xff, sizeof(*t->index) * rows); /* all -1 */
    builder b = {t, 0, 0, 0};
    const char *base = layout->language_model_prefix ? "model.language_model." : "model.";
    int64_t H = cfg->hidden, V = cfg->vocab;

    int emb = add_param(&b, HYLA_P_EMBED, -1, 2, V, H, 0);
    add_hf(&b, HYLA_HF_ROWS, emb, 0, -1, 2, SHAPE(V, H), "%sembed_tokens.weight", base);
    char P[96];
    for (int l = 0; l < cfg->n_layers; l++) {
        snprintf(P, sizeof P, "%slayers.%d.", base, l);
        build_layer(&b, l, P);
    }
    int fn = add_param(&b, HYLA_P_FINAL_NORM, -1, 1, H, 0, 0);
    add_hf(&b, HYLA_HF_ROWS, fn, 0, -1, 1, SHAPE(H), "%snorm.weight", base);
    if (!cfg->tie_word_embeddings) {
        int head = add_param(&b, HYLA_P_LM_HEAD, -1, 2, V, H, 0);
        add_hf(&b, HYLA_HF_ROWS, head, 0, -1, 2, SHAPE(V, H), "lm_head.weight");
    }
    if (cfg->n_mtp_layers > 0) /* the MTP head, named as the released checkpoints name it (no prefix) */
        build_mtp(&b);
    if (b.failed) {
        hyla_params_free(t);
        return hyla_error_set(HYLA_ERR_NOMEM, "parameter table: out of memory");
    }
    return HYLA_OK;
}

void hyla_params_free(hyla_param_table *t)
{
    free(t->params);
    free(t->hf);
    free(t->index);
    memset(t, 0, sizeof *t);
}

int hyla_param_find(const hyla_param_table *t, hyla_role role, int layer)
{
    return t->index[layer < 0 ? hyla_cfg_all_layers(&t->cfg) : layer][role];
}

void hyla_hf_row_dest(const hyla_param_table *t, const hyla_hf_tensor *ht, int64_t r, int *param, int64_t *row)
{
    const hyla_config *c = &t->cfg;
    if (ht->map == HYLA_HF_ROWS) {
        *param = ht->param;
        *row = ht->row0 + r;
        return;
    }
    int64_t dk = c->lin_k_dim, dv = c->lin_v_dim, ratio = c->lin_v_heads / c->lin_k_heads;
    int64_t kd = hyla_cfg_key_dim(c);
    int l = ht->layer;
    if (ht->map == HYLA_HF_QKVZ) { /* spec §2.3: groups of [q dk | k dk | v r*dv | z r*dv] */
        int64_t gw = 2 * dk + 2 * ratio * dv, g = r / gw, j = r % gw;
        if (j < dk) {
            *param = hyla_param_find(t, HYLA_P_GDN_QKV, l);
            *row = g * dk + j;
        } else if (j < 2 * dk) {
            *param = hyla_param_find(t, HYLA_P_GDN_QKV, l);
            *row = kd + g * dk + (j - dk);
        } else if (j < 2 * dk + ratio * dv) {
            *param = hyla_param_find(t, HYLA_P_GDN_QKV, l);
            *row = 2 * kd + g * ratio * dv + (j - 2 * dk);
        } else {
            *param = hyla_param_find(t, HYLA_P_GDN_Z, l);
            *row = g * ratio * dv + (j - 2 * dk - ratio * dv);
        }
        return;
    }
    /* HYLA_HF_BA: groups of [b r | a r] */
    int64_t g = r / (2 * ratio), j = r % (2 * ratio);
    *param = hyla_param_find(t, j < ratio ? HYLA_P_GDN_B : HYLA_P_GDN_A, l);
    *row = g * ratio + (j < ratio ? j : j - ratio);
}

void hyla_params_count(const hyla_param_table *t, hyla_param_counts *out)
{
    memset(out, 0, sizeof *out);
    const hyla_config *c = &t->cfg;
    for (int i = 0; i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        int64_t n = p->numel, active = n;
        if (p->mtp) {
            out->mtp += n;
            continue;
        }
        if (p->role == HYLA_P_MOE_GATE_UP || p->role == HYLA_P_MOE_DOWN)
            active = n / c->n_experts * c->top_k;
        out->total += n;
        out->active += active;
        if (p->layer < 0) {
            if (p->role != HYLA_P_FINAL_NORM)
                out->embedding += n;
            continue;
        }
        switch (p->role) {
        case HYLA_P_INPUT_NORM: case HYLA_P_POST_NORM: break;
        case HYLA_P_MOE_ROUTER: case HYLA_P_MOE_GATE_UP: case HYLA_P_MOE_DOWN:
        case HYLA_P_SHARED_GATE_UP: case HYLA_P_SHARED_DOWN: case HYLA_P_SHARED_EXPERT_GATE:
            out->per_kind[2] += n; break;
        case HYLA_P_MLP_GATE_UP: case HYLA_P_MLP_DOWN: out->per_kind[3] += n; break;
        default:
            out->per_kind[c->layer_kind[p->layer] == HYLA_LAYER_FULL ? 1 : 0] += n;
        }
    }
}

size_t hyla_params_shard_floats(const hyla_param_table *t, int ranks, int rank)
{
    size_t sum = 0;
    for (int i = 0; i < t->n_params; i++) {
        int64_t lo, len;
        hyla_shard_piece(t->params[i].numel, ranks, rank, &lo, &len);
        sum += hyla_span_floats(len);
    }
    return sum;
}
