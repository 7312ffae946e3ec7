/* A GGUF file as a model (model.h, hyla_model_load_gguf): the export's map (model/gguf_map.h)
 * inverted.
 *
 * Config: from the architecture's metadata keys (those model/gguf_export.c writes, which are
 * llama.cpp's converter's), turned into the config.json they stand for and validated by the same
 * parser as a Hugging Face model (model/config.c), so the same limits hold. What GGUF does not
 * say: the vocabulary is token_embd's row count, the embedding is tied when output.weight is
 * absent, norm_topk_prob is true (llama.cpp always renormalises), partial_rotary_factor is
 * rope.dimension_count / key_length.
 *
 * Vectors (norms, conv kernel, dt bias, ssm_a, router): dequantized into w with the export's
 * transformation undone: a norm weight v stored as 1 + w comes back as v - 1, exact for v in
 * [0.5, 2] (Sterbenz), so 1 + (v - 1) is the v llama.cpp multiplies by; ssm_a = -exp(A_log)
 * comes back as A_log = log(-ssm_a), within 2 ulp of the original through exp(log(.)).
 * Matrices: never copied: each internal row points at its row in the mapping (core/quant.h's
 * hyla_qmat), so the row merges and permutations of the map (gate | up, Qwen3-Next's ssm_ba,
 * Qwen3.5's value-head order) cost nothing; Qwen3.5's permuted out_proj columns become the
 * matrix's col_map (the product gathers x). */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pages.h"
#include "core/quant.h"
#include "io/gguf_read.h"
#include "model/gguf_map.h"

/* ---- config -------------------------------------------------------------------------------------- */

typedef struct {
    const hyla_gguf_file *f;
    char arch[16];
} meta;

static int meta_int(const meta *g, const char *suffix, int required, int64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", g->arch, suffix);
    return hyla_gguf_get_int(g->f, key, required, out);
}

static int meta_f64(const meta *g, const char *suffix, double *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", g->arch, suffix);
    return hyla_gguf_get_f64(g->f, key, 1, out);
}

/* The trunk's layer kinds; blocks is block_count (the trunk and llama.cpp's nextn blocks). */
static int layer_kinds(const meta *g, hyla_config *c, int64_t blocks)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", g->arch);
    const hyla_gguf_kv *kv = hyla_gguf_find_kv(g->f, key);
    if (kv) {
        if (kv->type != HYLA_GGUF_ARRAY || kv->count != (uint64_t)blocks)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s must be an array of block_count (%lld) values",
                                  hyla_gguf_path(g->f), key, (long long)blocks);
        for (int64_t l = 0; l < c->n_layers; l++)
            c->layer_kind[l] = hyla_gguf_arr_int(kv, (uint64_t)l) ? HYLA_LAYER_LINEAR : HYLA_LAYER_FULL;
        return HYLA_OK;
    }
    int64_t interval = 4;
    HYLA_TRY(meta_int(g, "full_attention_interval", 0, &interval));
    if (interval < 1 || interval > HYLA_MAX_LAYERS)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.full_attention_interval is %lld", hyla_gguf_path(g->f), g->arch,
                              (long long)interval);
    for (int64_t l = 0; l < c->n_layers; l++)
        c->layer_kind[l] = (l + 1) % interval ? HYLA_LAYER_LINEAR : HYLA_LAYER_FULL;
    return HYLA_OK;
}

/* The config f's metadata describes (*json: it as config.json, allocated), checked against the
 * tensor map of its architecture. */
static int read_config(const hyla_gguf_file *f, hyla_config *out, char **json)
{
    const char *path = hyla_gguf_path(f);
    meta g = {f, ""};
    const char *arch;
    size_t n;
    HYLA_TRY(hyla_gguf_get_str(f, "general.architecture", 1, &arch, &n));
    hyla_config c;
    memset(&c, 0, sizeof c);
    if (n == 9 && !memcmp(arch, "qwen3next", 9))
        c.family = HYLA_FAMILY_QWEN3_NEXT;
    else if (n == 6 && !memcmp(arch, "qwen35", 6))
        c.family = HYLA_FAMILY_QWEN3_5;
    else if (n == 9 && !memcmp(arch, "qwen35moe", 9))
        c.family = HYLA_FAMILY_QWEN3_5_MOE;
    else
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: general.architecture is \"%.*s\"; hyla runs qwen3next, qwen35 and "
                              "qwen35moe", path, (int)(n < 64 ? n : 64), arch);
    memcpy(g.arch, arch, n);
    c.text_config_wrapped = c.family != HYLA_FAMILY_QWEN3_NEXT;
    const hyla_gguf_tensor *embd = hyla_gguf_find_tensor(f, "token_embd.weight");
    if (!embd || embd->n_dims != 2)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor token_embd.weight (2-D) is missing", path);
    c.vocab = embd->ne[1];
    c.tie_word_embeddings = !hyla_gguf_find_tensor(f, "output.weight");
    int64_t key_len = 0, value_len = 0, inner = 0;
    int64_t blocks = 0, nextn = 0;
    HYLA_TRY(meta_int(&g, "block_count", 1, &blocks));
    HYLA_TRY(meta_int(&g, "nextn_predict_layers", 0, &nextn));
    if (nextn < 0 || nextn >= blocks)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.nextn_predict_layers is %lld with block_count %lld", path, g.arch,
                              (long long)nextn, (long long)blocks);
    c.n_layers = blocks - nextn; /* the MTP (nextn) blocks follow the trunk's */
    char head[64];
    snprintf(head, sizeof head, "blk.%lld.nextn.shared_head_norm.weight", (long long)c.n_layers);
    /* one MTP block with its own output norm (hyla's export, Qwen3.5's converters): hyla's draft head;
     * otherwise the blocks are carried and not run */
    c.n_mtp_layers = nextn == 1 && hyla_gguf_find_tensor(f, head) ? 1 : 0;
    HYLA_TRY(meta_int(&g, "embedding_length", 1, &c.hidden));
    HYLA_TRY(meta_int(&g, "attention.head_count", 1, &c.n_heads));
    HYLA_TRY(meta_int(&g, "attention.head_count_kv", 1, &c.n_kv_heads));
    HYLA_TRY(meta_int(&g, "attention.key_length", 1, &key_len));
    HYLA_TRY(meta_int(&g, "attention.value_length", 0, &value_len));
    HYLA_TRY(meta_int(&g, "rope.dimension_count", 1, &c.rotary_dim));
    HYLA_TRY(meta_f64(&g, "rope.freq_base", &c.rope_theta));
    HYLA_TRY(meta_f64(&g, "attention.layer_norm_rms_epsilon", &c.rms_norm_eps));
    HYLA_TRY(meta_int(&g, "context_length", 0, &c.max_position_embeddings));
    HYLA_TRY(meta_int(&g, "ssm.conv_kernel", 1, &c.conv_kernel));
    HYLA_TRY(meta_int(&g, "ssm.state_size", 1, &c.lin_k_dim));
    HYLA_TRY(meta_int(&g, "ssm.group_count", 1, &c.lin_k_heads));
    HYLA_TRY(meta_int(&g, "ssm.time_step_rank", 1, &c.lin_v_heads));
    HYLA_TRY(meta_int(&g, "ssm.inner_size", 1, &inner));
    HYLA_TRY(meta_int(&g, "feed_forward_length", c.family == HYLA_FAMILY_QWEN3_5, &c.inter));
    if (c.family != HYLA_FAMILY_QWEN3_5) {
        HYLA_TRY(meta_int(&g, "expert_count", 1, &c.n_experts));
        HYLA_TRY(meta_int(&g, "expert_used_count", 1, &c.top_k));
        HYLA_TRY(meta_int(&g, "expert_feed_forward_length", 1, &c.moe_inter));
        HYLA_TRY(meta_int(&g, "expert_shared_feed_forward_length", 0, &c.shared_inter));
        c.norm_topk_prob = 1;
    }
    if (c.n_layers < 1 || c.n_layers > HYLA_MAX_LAYERS)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.block_count is %lld (1..%d)", path, g.arch, (long long)c.n_layers,
                              HYLA_MAX_LAYERS);
    if (value_len && value_len != key_len)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.attention.value_length %lld != key_length %lld", path, g.arch,
                              (long long)value_len, (long long)key_len);
    if (c.lin_v_heads < 1 || inner % c.lin_v_heads || key_len < 1 || key_len > HYLA_MAX_HEAD_DIM)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.ssm.inner_size %lld is not a multiple of ssm.time_step_rank "
                              "%lld, or attention.key_length %lld is out of range", path, g.arch, (long long)inner,
                              (long long)c.lin_v_heads, (long long)key_len);
    c.lin_v_dim = inner / c.lin_v_heads;
    c.head_dim = key_len;
    c.partial_rotary_factor = (double)c.rotary_dim / (double)key_len;
    c.initializer_range = 0.02;
    c.router_aux_loss_coef = 0.001;
    HYLA_TRY(layer_kinds(&g, &c, blocks));
    for (int64_t l = 0; l < c.n_layers; l++)
        c.layer_is_moe[l] = c.family != HYLA_FAMILY_QWEN3_5;
    int64_t rotary = c.rotary_dim;
    if (!(*json = hyla_config_to_json(&c)))
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    char origin[4200];
    snprintf(origin, sizeof origin, "%s (its metadata as config.json)", path);
    HYLA_TRY(hyla_config_parse(out, *json, origin));
    if (out->rotary_dim != rotary)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.rope.dimension_count %lld is not an even part of key_length %lld",
                              path, g.arch, (long long)rotary, (long long)key_len);
    return hyla_gguf_map_check(out, hyla_gguf_arch_name(out));
}

/* ---- tensors ------------------------------------------------------------------------------------- */

/* ne equal up to trailing ones (the converter writes a [1, H] gate as [H]). */
static int same_shape(const hyla_gguf_tensor *g, const hyla_gguf_map_tensor *t)
{
    for (int d = 0; d < 4; d++)
        if (g->ne[d] != (d < t->n_dims ? t->ne[d] : 1))
            return 0;
    return 1;
}

/* The parameter and row a map row lands in; an error if the table has no such place (a map and a
 * table built from one checked config always agree: this guards the invariant). */
static int dest(const hyla_model *m, const hyla_gguf_map_tensor *t, int64_t row, int *param, int64_t *irow)
{
    *param = hyla_param_find(&m->table, row >= 0 ? t->role : t->role2, t->layer);
    *irow = row >= 0 ? row : -1 - row;
    const hyla_param *p = *param >= 0 ? &m->table.params[*param] : NULL;
    if (!p || *irow >= p->numel / p->shape[p->ndim - 1] || p->shape[p->ndim - 1] != t->ne[0])
        return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor %s does not fit the parameters its metadata describes",
                              hyla_gguf_path(m->gguf), t->name);
    return HYLA_OK;
}

static int load_vector(hyla_model *m, const hyla_gguf_map_tensor *t, const hyla_gguf_tensor *g, float *buf)
{
    int64_t C = t->ne[0];
    hyla_ggml_to_f32(g->type, buf, g->data, t->rows * C);
    for (int64_t r = 0; r < t->rows; r++) {
        int p;
        int64_t ir;
        HYLA_TRY(dest(m, t, t->row_map ? t->row_map[r] : t->row0 + r, &p, &ir));
        float *dst = m->w + m->table.params[p].offset + ir * C;
        for (int64_t j = 0; j < C; j++) {
            float v = buf[r * C + j];
            if (t->op == HYLA_GGUF_NEG_EXP && !(v < 0))
                return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor %s: value %g at %lld is not negative (ssm_a = "
                                      "-exp(A_log))", hyla_gguf_path(m->gguf), t->name, (double)v, (long long)j);
            if (!isfinite(v))
                return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor %s: non-finite value at %lld",
                                      hyla_gguf_path(m->gguf), t->name, (long long)(r * C + j));
            dst[t->col_map ? t->col_map[j] : j] = t->op == HYLA_GGUF_PLUS_ONE ? v - 1.0f
                                                : t->op == HYLA_GGUF_NEG_EXP ? logf(-v) : v;
        }
    }
    return HYLA_OK;
}

static int point_matrix(hyla_model *m, const hyla_gguf_map_tensor *t, const hyla_gguf_tensor *g, int64_t *covered)
{
    size_t row_bytes = hyla_ggml_bytes(g->type, (size_t)t->ne[0]);
    for (int64_t r = 0; r < t->rows; r++) {
        int p;
        int64_t ir;
        HYLA_TRY(dest(m, t, t->row_map ? t->row_map[r] : t->row0 + r, &p, &ir));
        hyla_qmat *q = &m->qw[p];
        if (q->row[ir])
            return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor %s: row %lld written twice", hyla_gguf_path(m->gguf),
                                  t->name, (long long)ir);
        q->row[ir] = g->data + (size_t)r * row_bytes;
        q->row_type[ir] = (unsigned char)g->type;
        covered[p]++;
    }
    if (t->col_map) {
        int p;
        int64_t ir;
        HYLA_TRY(dest(m, t, 0, &p, &ir));
        hyla_qmat *q = &m->qw[p];
        free(q->col_map);
        if (!(q->col_map = malloc((size_t)t->ne[0] * sizeof *q->col_map)))
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", hyla_gguf_path(m->gguf));
        for (int64_t j = 0; j < t->ne[0]; j++)
            q->col_map[j] = (int32_t)t->col_map[j];
    }
    return HYLA_OK;
}

/* qw for every matrix parameter: row pointers filled by point_matrix. */
static int alloc_qmats(hyla_model *m)
{
    if (!(m->qw = calloc((size_t)m->table.n_params, sizeof *m->qw)))
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->table.n_params; i++) {
        const hyla_param *p = &m->table.params[i];
        hyla_qmat *q = &m->qw[i];
        q->type = (hyla_ggml_type)-1;
        if (!hyla_role_is_matrix(p->role))
            continue;
        q->cols = p->shape[p->ndim - 1];
        q->rows = p->numel / q->cols;
        q->row = calloc((size_t)q->rows, sizeof *q->row);
        q->row_type = malloc((size_t)q->rows);
        if (!q->row || !q->row_type)
            return hyla_error_set(HYLA_ERR_NOMEM, "out of memory for the row table of %s", hyla_role_name(p->role));
    }
    return HYLA_OK;
}

/* Every row of every matrix came from the file; one type for all rows: row_type dropped. */
static int finish_qmats(hyla_model *m, const int64_t *covered)
{
    for (int i = 0; i < m->table.n_params; i++) {
        hyla_qmat *q = &m->qw[i];
        if (!q->row)
            continue;
        if (covered[i] != q->rows)
            return hyla_error_set(HYLA_ERR_MODEL, "%s: parameter %s of layer %d: %lld of %lld rows in the file",
                                  hyla_gguf_path(m->gguf), hyla_role_name(m->table.params[i].role),
                                  m->table.params[i].layer, (long long)covered[i], (long long)q->rows);
        q->type = (hyla_ggml_type)q->row_type[0];
        int mixed = 0;
        for (int64_t r = 1; r < q->rows && !mixed; r++)
            mixed = q->row_type[r] != q->row_type[0];
        if (!mixed) {
            free(q->row_type);
            q->row_type = NULL;
        }
    }
    return HYLA_OK;
}

static int load_tensors(hyla_model *m)
{
    hyla_gguf_map map;
    HYLA_TRY(hyla_gguf_map_build(&map, &m->cfg));
    const char *path = hyla_gguf_path(m->gguf);
    size_t max_floats = 1;
    for (size_t i = 0; i < map.n; i++)
        if (!hyla_role_is_matrix(map.t[i].role) && (size_t)(map.t[i].rows * map.t[i].ne[0]) > max_floats)
            max_floats = (size_t)(map.t[i].rows * map.t[i].ne[0]);
    float *buf = malloc(max_floats * sizeof *buf);
    int64_t *covered = calloc((size_t)m->table.n_params, sizeof *covered);
    int st = buf && covered ? alloc_qmats(m) : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; st == HYLA_OK && i < map.n; i++) {
        const hyla_gguf_map_tensor *t = &map.t[i];
        const hyla_gguf_tensor *g = hyla_gguf_find_tensor(m->gguf, t->name);
        if (!g)
            st = hyla_error_set(HYLA_ERR_MODEL, "%s: tensor %s is missing", path, t->name);
        else if (!same_shape(g, t))
            st = hyla_error_set(HYLA_ERR_MODEL, "%s: tensor %s is [%lld, %lld, %lld, %lld] (ggml order); the "
                                "metadata says [%lld, %lld, %lld]", path, t->name, (long long)g->ne[0],
                                (long long)g->ne[1], (long long)g->ne[2], (long long)g->ne[3], (long long)t->ne[0],
                                (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)(t->n_dims > 2 ? t->ne[2] : 1));
        else if (hyla_role_is_matrix(t->role))
            st = point_matrix(m, t, g, covered);
        else
            st = load_vector(m, t, g, buf);
    }
    for (size_t i = 0; st == HYLA_OK && i < hyla_gguf_n_tensors(m->gguf); i++) {
        const char *name = hyla_gguf_tensor_at(m->gguf, i)->name;
        int block = -1;
        /* tensors of MTP (nextn) blocks hyla does not run (a second block, a private embedding or head) */
        int known = sscanf(name, "blk.%d.", &block) == 1 && block >= m->cfg.n_layers;
        for (size_t j = 0; j < map.n && !known; j++)
            known = !strcmp(map.t[j].name, name);
        if (!known)
            st = hyla_error_set(HYLA_ERR_MODEL, "%s: unexpected tensor %s for %s", path, name,
                                hyla_gguf_arch_name(&m->cfg));
    }
    if (st == HYLA_OK)
        st = finish_qmats(m, covered);
    free(buf);
    free(covered);
    hyla_gguf_map_free(&map);
    return st;
}

/* Every parameter element comes from one element of the file: a config claiming far more than the
 * file holds is refused before anything sized by the config is allocated, so what is allocated is
 * bounded by the file's size. (A small excess is left to the per-tensor checks, which name the
 * tensor that is missing or mis-shaped.) */
static int check_sizes(const hyla_model *m)
{
    uint64_t need = 0, have = 0;
    for (int i = 0; i < m->table.n_params; i++)
        need += (uint64_t)m->table.params[i].numel;
    for (size_t i = 0; i < hyla_gguf_n_tensors(m->gguf); i++) {
        const hyla_gguf_tensor *t = hyla_gguf_tensor_at(m->gguf, i);
        have += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    if (need > 2 * have + (1u << 20))
        return hyla_error_set(HYLA_ERR_MODEL, "%s: the metadata describes %llu parameters, the file's tensors hold %llu",
                              hyla_gguf_path(m->gguf), (unsigned long long)need, (unsigned long long)have);
    return HYLA_OK;
}

int hyla_model_load_gguf(hyla_model *m, const char *path)
{
    memset(m, 0, sizeof *m);
    hyla_gguf_file *f;
    HYLA_TRY(hyla_gguf_open(&f, path));
    m->gguf = f;
    int st = (m->source_gguf = strdup(path)) ? read_config(f, &m->cfg, &m->config_json)
                                             : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    if (st == HYLA_OK)
        hyla_schedule_build(&m->sched, &m->cfg);
    hyla_layout lay;
    hyla_default_layout(&m->cfg, &lay);
    if (st == HYLA_OK)
        st = hyla_params_build(&m->table, &m->cfg, &lay);
    if (st == HYLA_OK)
        st = check_sizes(m);
    if (st == HYLA_OK) {
        m->w_bytes = m->table.total_floats * sizeof(float);
        /* small pages: only the vectors are written, scattered over the arena */
        if (!(m->w = hyla_pages_map_small(m->w_bytes)) ||
            !(m->hf_dtype = calloc(m->table.n_hf ? m->table.n_hf : 1, 1)) ||
            !(m->param_dtype = calloc((size_t)m->table.n_params + 1, 1)))
            st = hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %zu bytes for the vectors", path, m->w_bytes);
        m->matrices_in_w = 0;
        m->compute_dtype = HYLA_DT_F32;
    }
    if (st == HYLA_OK)
        st = load_tensors(m);
    if (st != HYLA_OK)
        hyla_model_free(m);
    return st;
}

int hyla_model_gguf_config(const char *path, hyla_config *out)
{
    hyla_gguf_file *f;
    HYLA_TRY(hyla_gguf_open(&f, path));
    char *json = NULL;
    int st = read_config(f, out, &json);
    free(json);
    hyla_gguf_close(f);
    return st;
}

const hyla_qmat *hyla_model_param_q(const hyla_model *m, hyla_role role, int layer)
{
    if (!m->qw || !hyla_role_is_matrix(role))
        return NULL;
    if (role == HYLA_P_LM_HEAD && m->cfg.tie_word_embeddings)
        role = HYLA_P_EMBED, layer = -1;
    int i = hyla_param_find(&m->table, role, layer);
    return i < 0 ? NULL : &m->qw[i];
}

int hyla_model_gguf_dequantize(hyla_model *m)
{
    if (!m->qw)
        return HYLA_OK;
    for (int i = 0; i < m->table.n_params; i++) {
        hyla_qmat *q = &m->qw[i];
        if (!q->row)
            continue;
        float *dst = m->w + m->table.params[i].offset;
        for (int64_t r = 0; r < q->rows; r++)
            hyla_qmat_row(q, r, dst + r * q->cols);
        free(q->row);
        free(q->row_type);
        free(q->col_map);
    }
    free(m->qw);
    m->qw = NULL;
    m->matrices_in_w = 1;
    hyla_gguf_close(m->gguf); /* nothing points into it any more */
    m->gguf = NULL;
    return HYLA_OK;
}
