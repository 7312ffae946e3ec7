/* Model load / init / save through the parameter table. */
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/finite.h"
#include "core/pages.h"
#include "core/rng.h"
#include "io/fileio.h"
#include "io/gguf_read.h"
#include "io/outdir.h"
#include "io/tokenizer.h"
#include "model/pieces.h"

/* The fp32 arena is a zero-filled anonymous mapping: pages never written (the matrix
 * parameters of a bf16-weights model) are never resident. */
static int alloc_weights(hyla_model *m, int huge_pages)
{
    m->w_bytes = m->table.total_floats * sizeof(float);
    /* huge pages only when every page will be written: with the matrices in bf16 only, the
     * vectors scattered over w would each fault a 2 MB page in (150 MB for the 0.8B shape) */
    m->w = huge_pages ? hyla_model_map(m->w_bytes) : hyla_pages_map_small(m->w_bytes);
    m->matrices_in_w = 1;
    m->compute_dtype = HYLA_DT_F32;
    m->hf_dtype = calloc(m->table.n_hf ? m->table.n_hf : 1, 1);
    m->param_dtype = calloc(m->table.n_params ? (size_t)m->table.n_params : 1, 1);
    if (!m->w || !m->hf_dtype || !m->param_dtype)
        return hyla_error_set(HYLA_ERR_NOMEM, "cannot allocate %zu bytes of weights", m->w_bytes);
    return HYLA_OK;
}

float *hyla_model_param(const hyla_model *m, hyla_role role, int layer)
{
    if (role == HYLA_P_LM_HEAD && m->cfg.tie_word_embeddings)
        role = HYLA_P_EMBED, layer = -1;
    int i = hyla_param_find(&m->table, role, layer);
    if (i < 0 || (!m->matrices_in_w && hyla_role_is_matrix(role)))
        return NULL;
    return m->w + m->table.params[i].offset;
}

void hyla_model_embed_rows(const hyla_model *m, const int32_t *tokens, int64_t n, float *out)
{
    int64_t H = m->cfg.hidden;
    const hyla_qmat *EQ = hyla_model_param_q(m, HYLA_P_EMBED, -1);
    const uint16_t *E16 = hyla_model_param_bf16(m, HYLA_P_EMBED, -1);
    const float *E = EQ || E16 ? NULL : hyla_model_param(m, HYLA_P_EMBED, -1);
    for (int64_t i = 0; i < n; i++) {
        if (EQ)
            hyla_qmat_row(EQ, tokens[i], out + i * H);
        else if (E16)
            hyla_bf16_unpack(out + i * H, E16 + (int64_t)tokens[i] * H, H);
        else
            memcpy(out + i * H, E + (int64_t)tokens[i] * H, (size_t)H * sizeof(float));
    }
}

static float *row_ptr(const hyla_model *m, int param, int64_t row)
{
    const hyla_param *p = &m->table.params[param];
    return m->w + p->offset + (size_t)row * (size_t)p->shape[p->ndim - 1];
}

int hyla_model_is_ignored_tensor(const char *name, const hyla_config *cfg)
{
    if ((!strncmp(name, "mtp.", 4) && cfg->n_mtp_layers == 0) || !strncmp(name, "model.visual.", 13) ||
        !strncmp(name, "model.mtp.", 10))
        return 1;
    /* HF ties lm_head to the embedding and ignores a stored copy. */
    return cfg->tie_word_embeddings && !strcmp(name, "lm_head.weight");
}

int hyla_model_detect_layout(const hyla_st_set *set, const hyla_config *cfg, hyla_layout *lay, const char *dir)
{
    int grouped = 0, separate = 0, fused = 0, per_expert = 0, lm = 0, plain = 0;
    for (size_t i = 0; i < hyla_st_count(set); i++) {
        const char *n = hyla_st_at(set, i)->name;
        if (hyla_model_is_ignored_tensor(n, cfg))
            continue;
        grouped |= strstr(n, ".linear_attn.in_proj_qkvz.") != NULL;
        separate |= strstr(n, ".linear_attn.in_proj_qkv.") != NULL;
        fused |= strstr(n, ".mlp.experts.gate_up_proj") != NULL;
        per_expert |= strstr(n, ".mlp.experts.0.gate_proj.") != NULL;
        lm |= !strncmp(n, "model.language_model.", 21);
        plain |= !strncmp(n, "model.layers.", 13) || !strncmp(n, "model.embed_tokens.", 19);
    }
    if (grouped && separate)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: both in_proj_qkvz and in_proj_qkv tensors present (mixed GDN layouts)", dir);
    if (fused && per_expert)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: both fused and per-expert expert tensors present", dir);
    if (lm && plain)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: both 'model.language_model.' and 'model.' tensor prefixes present", dir);
    hyla_default_layout(cfg, lay);
    if (grouped || separate)
        lay->gdn_grouped = grouped;
    if (fused || per_expert)
        lay->experts_fused = fused;
    if (lm || plain)
        lay->language_model_prefix = lm;
    return HYLA_OK;
}

void hyla_default_layout(const hyla_config *cfg, hyla_layout *lay)
{
    lay->gdn_grouped = cfg->family == HYLA_FAMILY_QWEN3_NEXT;
    lay->experts_fused = cfg->family != HYLA_FAMILY_QWEN3_NEXT;
    lay->language_model_prefix = cfg->text_config_wrapped;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* row_buf: [row_len] floats, for rows that go to the bf16 arena */
static int load_tensor(hyla_model *m, size_t h, const hyla_st_tensor *st, const char *dir, float *row_buf)
{
    const hyla_hf_tensor *ht = &m->table.hf[h];
    int same = st->ndim == ht->ndim;
    for (int i = 0; same && i < ht->ndim; i++)
        same = st->shape[i] == ht->shape[i];
    if (!same) {
        char got[96], want[96];
        shape_str(got, sizeof got, st->ndim, st->shape);
        shape_str(want, sizeof want, ht->ndim, ht->shape);
        return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor '%s' has shape %s but the config implies %s", dir,
                              ht->name, got, want);
    }
    size_t esz = hyla_dtype_size(st->dtype), row_bytes = (size_t)ht->row_len * esz, dropped = 0;
    const unsigned char *src = st->data;
    for (int64_t r = 0; r < ht->rows; r++) {
        size_t done = (size_t)r * row_bytes; /* rows copied so far: their file pages may go (4 MB at a time) */
        if (done - dropped >= ((size_t)4 << 20)) {
            hyla_drop_mapped_pages(src + dropped, done - dropped);
            dropped = done;
        }
        int param;
        int64_t row;
        hyla_hf_row_dest(&m->table, ht, r, &param, &row);
        const hyla_param *p = &m->table.params[param];
        int to_bf16 = !m->matrices_in_w && hyla_role_is_matrix(p->role); /* bf16 weights only: into w16 */
        float *dst = to_bf16 ? row_buf : row_ptr(m, param, row);
        hyla_dtype_to_f32(dst, src + (size_t)r * (size_t)ht->row_len * esz, st->dtype, (size_t)ht->row_len);
        size_t bad = hyla_first_nonfinite(dst, (size_t)ht->row_len);
        if (bad < (size_t)ht->row_len) /* NaN/inf weights would only surface as NaN losses much later */
            return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor '%s' holds a non-finite value (%s) at element %lld", dir,
                                  ht->name, isnan(dst[bad]) ? "NaN" : "infinity", (long long)(r * ht->row_len + (int64_t)bad));
        if (to_bf16) {
            uint16_t *d16 = m->w16 + p->offset + (size_t)row * (size_t)p->shape[p->ndim - 1];
            hyla_bf16_pack(d16, dst, ht->row_len);
            for (int64_t j = 0; j < ht->row_len; j++)
                if ((d16[j] & 0x7f80u) == 0x7f80u)
                    return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor '%s' element %lld (%g) does not fit in bf16", dir,
                                          ht->name, (long long)(r * ht->row_len + j), (double)dst[j]);
        }
    }
    m->hf_dtype[h] = (unsigned char)st->dtype;
    if (ht->map == HYLA_HF_ROWS)
        m->param_dtype[ht->param] = (unsigned char)st->dtype;
    else
        for (int64_t r = 0; r < ht->rows; r++) { /* grouped tensors feed several params */
            int param;
            int64_t row;
            hyla_hf_row_dest(&m->table, ht, r, &param, &row);
            m->param_dtype[param] = (unsigned char)st->dtype;
        }
    return HYLA_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Every stored tensor must be one the table expects (or an ignored one). */
static int check_unexpected(const hyla_model *m, const hyla_st_set *set, const char *dir)
{
    size_t n = m->table.n_hf;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        names[i] = m->table.hf[i].name;
    qsort(names, n, sizeof *names, cmp_str);
    int st = HYLA_OK;
    for (size_t i = 0; i < hyla_st_count(set) && st == HYLA_OK; i++) {
        const char *name = hyla_st_at(set, i)->name;
        if (!hyla_model_is_ignored_tensor(name, &m->cfg) && !bsearch(&name, names, n, sizeof *names, cmp_str))
            st = hyla_error_set(HYLA_ERR_MODEL, "%s: unexpected tensor '%s' (not part of a %s model with this config)",
                                dir, name, hyla_family_name(m->cfg.family));
    }
    free(names);
    return st;
}

/* Tensors a save carries through unchanged: those hyla does not use, but not a tied model's
 * stored lm_head copy (HF ignores it; after training it would be stale). */
static int is_carried_tensor(const char *name, const hyla_config *cfg)
{
    return hyla_model_is_ignored_tensor(name, cfg) && strcmp(name, "lm_head.weight");
}

/* Keep `set` mapped (moving it into the model) if it holds tensors to carry. */
static int keep_carried(hyla_model *m, hyla_st_set *set)
{
    size_t n = 0;
    for (size_t i = 0; i < hyla_st_count(set); i++)
        n += is_carried_tensor(hyla_st_at(set, i)->name, &m->cfg);
    if (n == 0)
        return HYLA_OK;
    m->carried = malloc(n * sizeof *m->carried);
    m->carried_set = malloc(sizeof *m->carried_set);
    if (!m->carried || !m->carried_set)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < hyla_st_count(set); i++)
        if (is_carried_tensor(hyla_st_at(set, i)->name, &m->cfg))
            m->carried[m->n_carried++] = i;
    *m->carried_set = *set;
    memset(set, 0, sizeof *set);
    return HYLA_OK;
}

/* deferred: check every tensor but load none; the set stays open in m->source_set for
 * hyla_model_load_layer (FSDP's sharded load). */
static int model_load(hyla_model *m, const char *dir, int bf16_weights, int deferred)
{
    memset(m, 0, sizeof *m);
    if (hyla_is_gguf_path(dir)) { /* training, merging: its values as fp32 (what `hyla convert F.gguf DIR` saves);
                                    * deferred too (FSDP): read whole, each rank then keeps its pieces */
        HYLA_TRY(hyla_model_load_gguf(m, dir));
        int st = hyla_tokenizer_gguf_check(m->gguf); /* (the vocabulary its saves write: io/tokenizer.h) */
        if (st == HYLA_OK)
            st = hyla_model_gguf_dequantize(m);
        if (st == HYLA_OK && bf16_weights)
            st = hyla_model_set_compute_bf16(m, 1);
        if (st != HYLA_OK)
            hyla_model_free(m);
        return st;
    }
    if (hyla_pieces_is_dir(dir)) { /* a sharded checkpoint: every rank's pieces read back into whole tensors */
        HYLA_TRY(hyla_model_load_pieces(m, dir, 1));
        int st = bf16_weights ? hyla_model_set_compute_bf16(m, 1) : HYLA_OK;
        if (st != HYLA_OK)
            hyla_model_free(m);
        return st;
    }
    char path[4096];
    HYLA_TRY(hyla_path_join(path, sizeof path, dir, "config.json"));
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &m->config_json, &len));
    if (!(m->source_dir = strdup(dir))) {
        hyla_model_free(m);
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    }
    int st = hyla_config_parse(&m->cfg, m->config_json, path);
    if (st) {
        hyla_model_free(m);
        return st;
    }
    hyla_schedule_build(&m->sched, &m->cfg);
    hyla_st_set set;
    if ((st = hyla_st_open(&set, dir)) != HYLA_OK) {
        hyla_model_free(m);
        return st;
    }
    int has_mtp = 0;
    for (size_t i = 0; i < hyla_st_count(&set); i++)
        has_mtp |= !strncmp(hyla_st_at(&set, i)->name, "mtp.", 4);
    if (!has_mtp) /* a checkpoint saved by Hugging Face: its config still counts the MTP layers it dropped */
        hyla_config_set_mtp_layers(&m->cfg, 0);
    hyla_layout layout;
    if ((st = hyla_model_detect_layout(&set, &m->cfg, &layout, dir)) == HYLA_OK &&
        (st = hyla_params_build(&m->table, &m->cfg, &layout)) == HYLA_OK &&
        (st = alloc_weights(m, !bf16_weights && !deferred)) == HYLA_OK)
        st = check_unexpected(m, &set, dir);
    if (deferred) { /* every tensor there now; loaded layer by layer later */
        for (size_t h = 0; st == HYLA_OK && h < m->table.n_hf; h++)
            if (!hyla_st_find(&set, m->table.hf[h].name))
                st = hyla_error_set(HYLA_ERR_MODEL, "%s: missing tensor '%s'", dir, m->table.hf[h].name);
        if (st == HYLA_OK && !(m->source_set = malloc(sizeof *m->source_set)))
            st = hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
        if (st == HYLA_OK) {
            *m->source_set = set;
            return HYLA_OK;
        }
        hyla_st_close(&set);
        hyla_model_free(m);
        return st;
    }
    float *row_buf = NULL;
    if (st == HYLA_OK && bf16_weights) {
        int64_t longest = 1;
        for (size_t h = 0; h < m->table.n_hf; h++)
            longest = m->table.hf[h].row_len > longest ? m->table.hf[h].row_len : longest;
        if ((st = hyla_model_alloc_bf16(m)) == HYLA_OK && !(row_buf = malloc((size_t)longest * sizeof *row_buf)))
            st = hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
        m->matrices_in_w = 0;
    }
    for (size_t h = 0; st == HYLA_OK && h < m->table.n_hf; h++) {
        const hyla_st_tensor *t = hyla_st_find(&set, m->table.hf[h].name);
        if (!t)
            st = hyla_error_set(HYLA_ERR_MODEL, "%s: missing tensor '%s'", dir, m->table.hf[h].name);
        else if ((st = load_tensor(m, h, t, dir, row_buf)) == HYLA_OK)
            hyla_drop_mapped_pages(t->data, t->nbytes); /* copied: the file's pages need not stay resident */
    }
    free(row_buf);
    if (st == HYLA_OK)
        st = keep_carried(m, &set);
    hyla_st_close(&set); /* emptied by keep_carried when it kept the set */
    if (st)
        hyla_model_free(m);
    return st;
}

int hyla_model_load(hyla_model *m, const char *dir) { return model_load(m, dir, 0, 0); }
int hyla_model_load_bf16(hyla_model *m, const char *dir) { return model_load(m, dir, 1, 0); }

int hyla_model_load_deferred(hyla_model *m, const char *dir)
{
    if (hyla_pieces_is_dir(dir))
        return hyla_model_load_pieces(m, dir, 0);
    return model_load(m, dir, 0, 1);
}

/* Does HF tensor ht fill parameter i (some of its rows)? */
static int feeds(const hyla_param_table *t, const hyla_hf_tensor *ht, int i)
{
    if (ht->map == HYLA_HF_ROWS)
        return ht->param == i;
    for (int64_t r = 0; r < ht->rows; r++) { /* grouped: rows go to several parameters of its layer */
        int param;
        int64_t row;
        hyla_hf_row_dest(t, ht, r, &param, &row);
        if (param == i)
            return 1;
    }
    return 0;
}

int hyla_model_load_param(hyla_model *m, int i)
{
    if (m->pieces) { /* a sharded checkpoint's */
        hyla_pieces_read(m->pieces, HYLA_PIECE_W, i, 0, m->table.params[i].numel, m->w + m->table.params[i].offset);
        return HYLA_OK;
    }
    if (!m->source_set)
        return hyla_error_set(HYLA_ERR_ARG, "hyla_model_load_param: the model was not opened deferred");
    for (size_t h = 0; h < m->table.n_hf; h++) {
        if (m->table.hf[h].layer != m->table.params[i].layer || !feeds(&m->table, &m->table.hf[h], i))
            continue;
        const hyla_st_tensor *t = hyla_st_find(m->source_set, m->table.hf[h].name);
        HYLA_TRY(load_tensor(m, h, t, m->source_dir, NULL));
        hyla_drop_mapped_pages(t->data, t->nbytes);
    }
    return HYLA_OK;
}

int hyla_model_loaded(hyla_model *m)
{
    if (m->pieces) {
        hyla_model_close_pieces(m);
        return HYLA_OK;
    }
    if (!m->source_set)
        return HYLA_OK;
    int st = keep_carried(m, m->source_set);
    hyla_st_close(m->source_set); /* emptied by keep_carried when it kept the set */
    free(m->source_set);
    m->source_set = NULL;
    return st;
}

void hyla_model_free(hyla_model *m)
{
    for (int i = 0; m->qw && i < m->table.n_params; i++) {
        free(m->qw[i].row);
        free(m->qw[i].row_type);
        free(m->qw[i].col_map);
    }
    free(m->qw);
    hyla_gguf_close(m->gguf);
    hyla_params_free(&m->table);
    hyla_model_unmap(m->w, m->w_bytes);
    hyla_model_unmap(m->w16, m->w16_bytes);
    free(m->hf_dtype);
    free(m->param_dtype);
    free(m->config_json);
    free(m->source_dir);
    free(m->source_gguf);
    if (m->carried_set)
        hyla_st_close(m->carried_set);
    free(m->carried_set);
    free(m->carried);
    hyla_pieces_close(m->pieces);
    if (m->source_set)
        hyla_st_close(m->source_set);
    free(m->source_set);
    memset(m, 0, sizeof *m);
}

/* ---- initialisation (spec §6) ------------------------------------------------------------- */

static void init_param(float *w, const hyla_param *p, const hyla_config *cfg, hyla_rng *rng)
{
    double std = cfg->initializer_range;
    switch (p->role) {
    case HYLA_P_FINAL_NORM: case HYLA_P_INPUT_NORM: case HYLA_P_POST_NORM:
    case HYLA_P_ATTN_Q_NORM: case HYLA_P_ATTN_K_NORM:
    case HYLA_P_MTP_NORM_EMB: case HYLA_P_MTP_NORM_HIDDEN: case HYLA_P_MTP_NORM:
        memset(w, 0, (size_t)p->numel * sizeof *w); /* zero-centred: effective scale 1 + 0 */
        return;
    case HYLA_P_GDN_NORM: case HYLA_P_GDN_DT_BIAS:
        for (int64_t i = 0; i < p->numel; i++)
            w[i] = 1.0f;
        return;
    case HYLA_P_GDN_A_LOG: {
        double lo = cfg->family == HYLA_FAMILY_QWEN3_NEXT ? 0.0 : 0.01;
        for (int64_t i = 0; i < p->numel; i++) {
            double u = lo + (16.0 - lo) * (1.0 - hyla_rng_uniform(rng)); /* (lo, 16] avoids log 0 */
            w[i] = (float)log(u);
        }
        return;
    }
    default:
        for (int64_t i = 0; i < p->numel; i++)
            w[i] = (float)(std * hyla_rng_normal(rng));
    }
}

int hyla_model_init_empty(hyla_model *m, const hyla_config *cfg, const hyla_layout *layout, hyla_dtype dtype,
                          int huge_pages)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    hyla_schedule_build(&m->sched, cfg);
    int st = hyla_params_build(&m->table, cfg, layout);
    if (st == HYLA_OK)
        st = alloc_weights(m, huge_pages);
    if (st) {
        hyla_model_free(m);
        return st;
    }
    memset(m->hf_dtype, (int)dtype, m->table.n_hf);
    memset(m->param_dtype, (int)dtype, (size_t)m->table.n_params);
    return HYLA_OK;
}

int hyla_model_init(hyla_model *m, const hyla_config *cfg, const hyla_layout *layout, uint64_t seed,
                    hyla_dtype dtype)
{
    HYLA_TRY(hyla_model_init_empty(m, cfg, layout, dtype, 1));
    hyla_rng rng;
    hyla_rng_seed(&rng, seed);
    for (int i = 0; i < m->table.n_params; i++) {
        const hyla_param *p = &m->table.params[i];
        float *w = m->w + p->offset;
        init_param(w, p, cfg, &rng);
        /* Store exactly what the saved dtype can represent, so save -> load is the identity. */
        if (dtype != HYLA_DT_F32) {
            unsigned short tmp;
            for (int64_t j = 0; j < p->numel; j++) {
                hyla_dtype_from_f32(&tmp, &w[j], dtype, 1);
                hyla_dtype_to_f32(&w[j], &tmp, dtype, 1);
            }
        }
    }
    return HYLA_OK;
}

/* ---- save ----------------------------------------------------------------------------------- */

typedef struct {
    const hyla_model *m;
    const hyla_param_table *t; /* table of the output layout */
    const unsigned char *dtype; /* [t->n_hf] */
} save_ctx;

static int fill_tensor(void *vctx, size_t index, void *dst)
{
    const save_ctx *c = vctx;
    if (index >= c->t->n_hf) { /* a carried tensor: its stored bytes */
        const hyla_st_tensor *src = hyla_st_at(c->m->carried_set, c->m->carried[index - c->t->n_hf]);
        memcpy(dst, src->data, src->nbytes);
        return HYLA_OK;
    }
    const hyla_hf_tensor *ht = &c->t->hf[index];
    hyla_dtype dt = (hyla_dtype)c->dtype[index];
    size_t esz = hyla_dtype_size(dt);
    if (c->m->fetch) /* its layer's weights into w first */
        HYLA_TRY(c->m->fetch(c->m->fetch_ctx, HYLA_FETCH_W, ht->layer));
    for (int64_t r = 0; r < ht->rows; r++) {
        int param;
        int64_t row;
        hyla_hf_row_dest(c->t, ht, r, &param, &row);
        /* Same (role, layer) in both tables: find it in the model's own table. */
        const hyla_param *p = &c->t->params[param];
        int own = hyla_param_find(&c->m->table, p->role, hyla_param_find_layer(c->t, p));
        HYLA_ASSERT(own >= 0);
        unsigned char *out = (unsigned char *)dst + (size_t)r * (size_t)ht->row_len * esz;
        hyla_dtype_from_f32(out, row_ptr(c->m, own, row), dt, (size_t)ht->row_len);
        /* the weights are finite (checked at load and after every update): an all-ones exponent
         * in a 16-bit result is a value the dtype cannot hold */
        uint16_t exp_mask = dt == HYLA_DT_BF16 ? 0x7f80 : 0x7c00;
        for (int64_t j = 0; dt != HYLA_DT_F32 && j < ht->row_len; j++)
            if ((((uint16_t)out[2 * j] | (uint16_t)out[2 * j + 1] << 8) & exp_mask) == exp_mask)
                return hyla_error_set(HYLA_ERR_ARG, "tensor '%s': element %lld (%g) overflows %s", ht->name,
                                      (long long)(r * ht->row_len + j), (double)row_ptr(c->m, own, row)[j], hyla_dtype_name(dt));
    }
    return HYLA_OK;
}

/* Dtype of each output tensor: as loaded when the layout is unchanged, else the dtype of the
 * parameter holding its first row. */
static void output_dtypes(const hyla_model *m, const hyla_param_table *out, unsigned char *dt)
{
    int same = !memcmp(&out->layout, &m->table.layout, sizeof out->layout) && out->n_hf == m->table.n_hf;
    for (size_t i = 0; i < out->n_hf; i++) {
        if (same) {
            dt[i] = m->hf_dtype[i];
            continue;
        }
        int param;
        int64_t row;
        hyla_hf_row_dest(out, &out->hf[i], 0, &param, &row);
        int own = hyla_param_find(&m->table, out->params[param].role, hyla_param_find_layer(out, &out->params[param]));
        dt[i] = m->param_dtype[own];
    }
}

/* config.json: the loaded text (or one made from the config), its torch_dtype set to the
 * tensors' dtype when they all share one. */
static int write_config(const hyla_model *m, const char *path, const unsigned char *dt, size_t n)
{
    char *made = m->config_json ? NULL : hyla_config_to_json(&m->cfg);
    const char *text = m->config_json ? m->config_json : made;
    if (!text)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot serialise config", path);
    int uniform = n > 0;
    for (size_t i = 1; i < n; i++)
        uniform &= dt[i] == dt[0];
    static const char *const torch_names[] = {"float32", "bfloat16", "float16"};
    char *patched = uniform ? hyla_config_with_torch_dtype(text, torch_names[dt[0]]) : NULL;
    if (patched)
        text = patched;
    int st = hyla_write_file_atomic(path, text, strlen(text));
    free(patched);
    free(made);
    return st;
}

/* A file of the source directory that a save carries over: everything but what the save writes
 * itself (config.json, safetensors and their index), hyla's own files, weights in other formats
 * (stale after training or conversion), temporaries and hidden files. */
static int is_companion_file(const char *name)
{
    static const char *const own[] = {"config.json", "model.safetensors.index.json", HYLA_OUTDIR_MARKER, "trainer_state.json",
                                      HYLA_PIECES_INDEX};
    static const char *const weight_ext[] = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt"};
    if (name[0] == '.' || strstr(name, ".tmp."))
        return 0;
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(name, own[i]))
            return 0;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof weight_ext / sizeof *weight_ext; i++) {
        size_t e = strlen(weight_ext[i]);
        if (n >= e && !strcmp(name + n - e, weight_ext[i]))
            return 0;
    }
    return 1;
}

/* Copy the source directory's companion files (tokenizer.json, tokenizer_config.json with the chat
 * template, generation_config.json, vocab.json, merges.txt, ...) byte for byte into `dir`. */
static int copy_companion_files(const char *src_dir, const char *dir)
{
    if (!src_dir)
        return HYLA_OK;
    DIR *d = opendir(src_dir);
    if (!d)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot read the source directory to carry its files: %s", src_dir,
                              strerror(errno));
    int st = HYLA_OK;
    struct dirent *e;
    while (st == HYLA_OK && (e = readdir(d))) {
        char from[4400], to[4400];
        struct stat sb;
        if (!is_companion_file(e->d_name) || hyla_path_join(from, sizeof from, src_dir, e->d_name) != HYLA_OK ||
            stat(from, &sb) != 0 || !S_ISREG(sb.st_mode)) /* symlinks to files (a hub cache) are followed */
            continue;
        char *data = NULL;
        size_t len = 0;
        if ((st = hyla_path_join(to, sizeof to, dir, e->d_name)) == HYLA_OK &&
            (st = hyla_read_text_file(from, &data, &len)) == HYLA_OK)
            st = hyla_write_file_atomic(to, data, len);
        free(data);
    }
    closedir(d);
    return st;
}

void hyla_model_set_save_dtype(hyla_model *m, hyla_dtype dtype)
{
    memset(m->hf_dtype, (int)dtype, m->table.n_hf);
    memset(m->param_dtype, (int)dtype, (size_t)m->table.n_params);
}

/* The save's files in dir: with `tensors` the safetensors, always config.json and the companions. */
static int write_files(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes,
                       int tensors)
{
    if (!m->matrices_in_w)
        return hyla_error_set(HYLA_ERR_ARG, "%s: a model loaded with bf16 weights only (for inference) is not saved; "
                                            "save from an fp32 load (hyla convert --dtype bf16 keeps BF16 tensors)", dir);
    hyla_param_table out;
    HYLA_TRY(hyla_params_build(&out, &m->cfg, layout ? layout : &m->table.layout));
    int st = HYLA_OK;
    size_t n_entries = out.n_hf + m->n_carried;
    hyla_st_entry *entries = calloc(n_entries ? n_entries : 1, sizeof *entries);
    unsigned char *dt = malloc(out.n_hf ? out.n_hf : 1);
    if (!entries || !dt) {
        st = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    output_dtypes(m, &out, dt);
    for (size_t i = 0; i < out.n_hf; i++) {
        entries[i].name = out.hf[i].name;
        entries[i].dtype = (hyla_dtype)dt[i];
        entries[i].ndim = out.hf[i].ndim;
        for (int d = 0; d < out.hf[i].ndim; d++)
            entries[i].shape[d] = out.hf[i].shape[d];
    }
    for (size_t i = 0; i < m->n_carried; i++) {
        const hyla_st_tensor *src = hyla_st_at(m->carried_set, m->carried[i]);
        hyla_st_entry *e = &entries[out.n_hf + i];
        e->name = src->name;
        e->dtype = src->dtype;
        e->ndim = src->ndim;
        for (int d = 0; d < src->ndim; d++)
            e->shape[d] = src->shape[d];
    }
    save_ctx ctx = {m, &out, dt};
    if (tensors && (st = hyla_st_write(dir, entries, n_entries, max_shard_bytes, fill_tensor, &ctx)) != HYLA_OK)
        goto done;
    char path[4096];
    if ((st = hyla_path_join(path, sizeof path, dir, "config.json")) != HYLA_OK)
        goto done;
    if ((st = write_config(m, path, dt, out.n_hf)) == HYLA_OK)
        st = m->source_gguf ? hyla_tokenizer_files_from_gguf(dir, m->source_gguf)
                            : copy_companion_files(m->source_dir, dir);
done:
    free(entries);
    free(dt);
    hyla_params_free(&out);
    return st;
}

int hyla_model_write_files(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes)
{
    return write_files(m, dir, layout, max_shard_bytes, 1);
}

int hyla_model_write_meta(const hyla_model *m, const char *dir) { return write_files(m, dir, NULL, 0, 0); }

int hyla_model_save(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes)
{
    hyla_outdir o;
    HYLA_TRY(hyla_outdir_begin(&o, dir, HYLA_OUTDIR_MODEL, "hyla"));
    int st = hyla_model_write_files(m, o.tmp, layout, max_shard_bytes);
    if (st == HYLA_OK)
        return hyla_outdir_commit(&o);
    hyla_outdir_abort(&o);
    return st;
}
