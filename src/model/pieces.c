/* Sharded checkpoints (see pieces.h). */
#include "model/pieces.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "parallel/shard.h"

#define FORMAT "hyla-pieces-1"
#define RULE "fsdp-blocks-4096" /* parallel/shard.h with HYLA_SHARD_ALIGN 4096 */
#define MAX_RANKS 65536
#define MAX_INDEX_BYTES (64u << 20)

static const char *const kind_prefix[3] = {"weight", "exp_avg", "exp_avg_sq"};

struct hyla_pieces_s {
    int ranks, n_params;
    hyla_st_set *files;     /* [ranks] */
    const float **data;     /* [(vector * n_params + param) * ranks + rank]: that piece, or NULL if empty */
    const hyla_param_table *table;
};

int hyla_pieces_is_dir(const char *dir)
{
    char path[4200];
    return hyla_path_join(path, sizeof path, dir, HYLA_PIECES_INDEX) == HYLA_OK && hyla_file_exists(path);
}

static void rank_file(char *buf, size_t cap, int rank, int ranks)
{
    snprintf(buf, cap, "rank-%05d-of-%05d.safetensors", rank, ranks);
}

/* ---- writing ---------------------------------------------------------------------------------- */

typedef struct {
    const hyla_param_table *shard;
    const float *src[3];
    int *param_of;          /* [entry] parameter index */
} write_ctx;

static int fill_piece(void *vctx, size_t index, void *dst)
{
    const write_ctx *c = vctx;
    const hyla_param *q = &c->shard->params[c->param_of[index]];
    memcpy(dst, c->src[index % 3] + q->offset, (size_t)q->numel * sizeof(float));
    return HYLA_OK;
}

int hyla_pieces_write_rank(const char *dir, const hyla_param_table *table, const hyla_param_table *shard, int ranks,
                           int rank, const float *w, const float *m, const float *v)
{
    char sub[4200], name[64];
    HYLA_TRY(hyla_path_join(sub, sizeof sub, dir, "pieces"));
    HYLA_TRY(hyla_mkdir_p(sub));
    rank_file(name, sizeof name, rank, ranks);
    size_t n = 0, cap = 3 * (size_t)table->n_params;
    hyla_st_entry *e = calloc(cap ? cap : 1, sizeof *e);
    char (*names)[112] = calloc(cap ? cap : 1, sizeof *names);
    int *param_of = calloc(cap ? cap : 1, sizeof *param_of);
    int rc = e && names && param_of ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "%s/%s: out of memory", sub, name);
    for (int i = 0; rc == HYLA_OK && i < table->n_params; i++) {
        if (shard->params[i].numel == 0)
            continue; /* this rank holds none of it */
        char label[96];
        hyla_param_label(&table->params[i], label, sizeof label);
        for (int k = 0; k < 3; k++, n++) {
            snprintf(names[n], sizeof names[n], "%s.%s", kind_prefix[k], label);
            e[n].name = names[n];
            e[n].dtype = HYLA_DT_F32;
            e[n].ndim = 1;
            e[n].shape[0] = shard->params[i].numel;
            param_of[n] = i;
        }
    }
    write_ctx ctx = {shard, {w, m, v}, param_of};
    if (rc == HYLA_OK)
        rc = hyla_st_write_named(sub, name, e, n, fill_piece, &ctx);
    free(e);
    free(names);
    free(param_of);
    return rc;
}

static int fill_carried(void *vctx, size_t index, void *dst)
{
    const hyla_model *m = vctx;
    const hyla_st_tensor *src = hyla_st_at(m->carried_set, m->carried[index]);
    memcpy(dst, src->data, src->nbytes);
    return HYLA_OK;
}

static int write_carried(const char *dir, const hyla_model *m)
{
    if (!m->n_carried)
        return HYLA_OK;
    hyla_st_entry *e = calloc(m->n_carried, sizeof *e);
    if (!e)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", dir);
    for (size_t i = 0; i < m->n_carried; i++) {
        const hyla_st_tensor *src = hyla_st_at(m->carried_set, m->carried[i]);
        e[i].name = src->name;
        e[i].dtype = src->dtype;
        e[i].ndim = src->ndim;
        for (int d = 0; d < src->ndim; d++)
            e[i].shape[d] = src->shape[d];
    }
    int rc = hyla_st_write_named(dir, HYLA_PIECES_CARRIED, e, m->n_carried, fill_carried, (void *)m);
    free(e);
    return rc;
}

int hyla_pieces_write_index(const char *dir, const hyla_model *model, int ranks, hyla_dtype save_dtype)
{
    HYLA_TRY(write_carried(dir, model));
    const hyla_param_table *t = &model->table;
    cJSON *o = cJSON_CreateObject(), *lay = cJSON_CreateObject(), *params = cJSON_CreateArray(),
          *files = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "format", FORMAT);
    cJSON_AddNumberToObject(o, "ranks", ranks);
    cJSON_AddStringToObject(o, "piece_rule", RULE);
    cJSON_AddStringToObject(o, "save_dtype", hyla_dtype_name(save_dtype));
    cJSON_AddNumberToObject(o, "mtp_layers", (double)model->cfg.n_mtp_layers);
    cJSON_AddBoolToObject(lay, "gdn_grouped", t->layout.gdn_grouped);
    cJSON_AddBoolToObject(lay, "experts_fused", t->layout.experts_fused);
    cJSON_AddBoolToObject(lay, "language_model_prefix", t->layout.language_model_prefix);
    cJSON_AddItemToObject(o, "layout", lay);
    for (int i = 0; i < t->n_params; i++) {
        char label[96];
        hyla_param_label(&t->params[i], label, sizeof label);
        cJSON *p = cJSON_CreateArray();
        cJSON_AddItemToArray(p, cJSON_CreateString(label));
        cJSON_AddItemToArray(p, cJSON_CreateNumber((double)t->params[i].numel));
        cJSON_AddItemToArray(params, p);
    }
    cJSON_AddItemToObject(o, "parameters", params);
    int rc = HYLA_OK;
    for (int r = 0; r < ranks && rc == HYLA_OK; r++) {
        char name[64], rel[80], path[4300];
        rank_file(name, sizeof name, r, ranks);
        snprintf(rel, sizeof rel, "pieces/%s", name);
        struct stat sb;
        if ((rc = hyla_path_join(path, sizeof path, dir, rel)) == HYLA_OK && stat(path, &sb) != 0)
            rc = hyla_error_set(HYLA_ERR_IO, "%s: rank %d's file is missing", path, r);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", rel);
        cJSON_AddNumberToObject(f, "bytes", rc == HYLA_OK ? (double)sb.st_size : 0.0);
        cJSON_AddItemToArray(files, f);
    }
    cJSON_AddItemToObject(o, "files", files);
    char path[4200];
    if (rc == HYLA_OK && (rc = hyla_path_join(path, sizeof path, dir, HYLA_PIECES_INDEX)) == HYLA_OK)
        rc = hyla_write_json_atomic(path, o, 1);
    cJSON_Delete(o);
    return rc;
}

/* ---- reading ---------------------------------------------------------------------------------- */

typedef struct {
    int ranks, mtp_layers;
    hyla_dtype save_dtype;
    hyla_layout layout;
    cJSON *root;            /* owned: parameters and files are read from it */
} index_info;

static int is_count(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi && v->valuedouble == (double)(int64_t)v->valuedouble;
}

/* The index's header fields (format, ranks, rule, dtype, layout); the arrays stay in root. */
static int read_index(const char *dir, index_info *ix)
{
    char path[4200];
    HYLA_TRY(hyla_path_join(path, sizeof path, dir, HYLA_PIECES_INDEX));
    char *text;
    HYLA_TRY(hyla_read_file_max(path, MAX_INDEX_BYTES, &text, NULL));
    ix->root = cJSON_Parse(text);
    free(text);
    const cJSON *o = ix->root;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format"), *ranks = cJSON_GetObjectItemCaseSensitive(o, "ranks");
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(o, "piece_rule"), *dt = cJSON_GetObjectItemCaseSensitive(o, "save_dtype");
    const cJSON *mtp = cJSON_GetObjectItemCaseSensitive(o, "mtp_layers"), *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
    int rc = HYLA_OK;
    if (!o)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: not valid JSON", path);
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'format' must be \"" FORMAT "\"", path);
    else if (!is_count(ranks, 1, MAX_RANKS))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'ranks' must be an integer in [1, %d]", path, MAX_RANKS);
    else if (!cJSON_IsString(rule) || strcmp(rule->valuestring, RULE))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'piece_rule' must be \"" RULE "\" (this build's FSDP layout)", path);
    else if (!cJSON_IsString(dt) || hyla_dtype_parse(dt->valuestring, &ix->save_dtype) != HYLA_OK)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'save_dtype' must be F32, BF16 or F16", path);
    else if (!is_count(mtp, 0, 64))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'mtp_layers' must be an integer in [0, 64]", path);
    else if (!cJSON_IsObject(lay))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'layout' must be an object", path);
    if (rc == HYLA_OK) {
        const char *keys[3] = {"gdn_grouped", "experts_fused", "language_model_prefix"};
        int *dst[3] = {&ix->layout.gdn_grouped, &ix->layout.experts_fused, &ix->layout.language_model_prefix};
        for (int k = 0; k < 3 && rc == HYLA_OK; k++) {
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(lay, keys[k]);
            if (!cJSON_IsBool(b))
                rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'layout.%s' must be true or false", path, keys[k]);
            else
                *dst[k] = cJSON_IsTrue(b);
        }
        ix->ranks = (int)ranks->valuedouble;
        ix->mtp_layers = (int)mtp->valuedouble;
    }
    if (rc != HYLA_OK) {
        cJSON_Delete(ix->root);
        ix->root = NULL;
    }
    return rc;
}

void hyla_pieces_close(hyla_pieces *pc)
{
    if (!pc)
        return;
    for (int r = 0; pc->files && r < pc->ranks; r++)
        hyla_st_close(&pc->files[r]);
    free(pc->files);
    free(pc->data);
    free(pc);
}

int hyla_pieces_ranks(const hyla_pieces *pc) { return pc->ranks; }

/* The index's parameters against the table, and each rank file against the index. */
static int open_files(hyla_pieces *pc, const char *dir, const cJSON *root)
{
    char path[4200];
    hyla_path_join(path, sizeof path, dir, HYLA_PIECES_INDEX);
    const hyla_param_table *t = pc->table;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsArray(params) || cJSON_GetArraySize(params) != t->n_params)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: 'parameters' must list the %d parameters of the model config.json "
                              "describes", path, t->n_params);
    for (int i = 0; i < t->n_params; i++) {
        const cJSON *p = cJSON_GetArrayItem(params, i);
        char label[96];
        hyla_param_label(&t->params[i], label, sizeof label);
        const cJSON *nm = cJSON_GetArrayItem(p, 0), *len = cJSON_GetArrayItem(p, 1);
        if (!cJSON_IsArray(p) || !cJSON_IsString(nm) || strcmp(nm->valuestring, label) || !is_count(len, 0, 9007199254740992.0) ||
            (int64_t)len->valuedouble != t->params[i].numel)
            return hyla_error_set(HYLA_ERR_MODEL, "%s: parameter %d must be [\"%s\", %lld] (the model of config.json)", path,
                                  i, label, (long long)t->params[i].numel);
    }
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) != pc->ranks)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: 'files' must list one file per rank (%d)", path, pc->ranks);
    for (int r = 0; r < pc->ranks; r++) {
        const cJSON *f = cJSON_GetArrayItem(files, r);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        char want[64], rel[80], file[4300];
        rank_file(want, sizeof want, r, pc->ranks);
        snprintf(rel, sizeof rel, "pieces/%s", want);
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, rel) || !is_count(bytes, 8, 9007199254740992.0))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: files[%d] must be {\"name\": \"%s\", \"bytes\": N}", path, r, rel);
        HYLA_TRY(hyla_path_join(file, sizeof file, dir, rel));
        struct stat sb;
        if (stat(file, &sb) != 0)
            return hyla_error_set(HYLA_ERR_IO, "%s: rank %d's pieces are missing (an incomplete checkpoint?)", file, r);
        if ((double)sb.st_size != bytes->valuedouble)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %lld bytes, the index says %.0f (truncated or replaced)", file,
                                  (long long)sb.st_size, bytes->valuedouble);
        HYLA_TRY(hyla_st_open_file(&pc->files[r], file));
        size_t expect = 0;
        for (int i = 0; i < t->n_params; i++) {
            int64_t lo, len;
            hyla_shard_piece(t->params[i].numel, pc->ranks, r, &lo, &len);
            if (len == 0)
                continue;
            char label[96], name[112];
            hyla_param_label(&t->params[i], label, sizeof label);
            for (int k = 0; k < 3; k++, expect++) {
                snprintf(name, sizeof name, "%s.%s", kind_prefix[k], label);
                const hyla_st_tensor *x = hyla_st_find(&pc->files[r], name);
                if (!x)
                    return hyla_error_set(HYLA_ERR_MODEL, "%s: missing tensor '%s'", file, name);
                if (x->dtype != HYLA_DT_F32 || x->ndim != 1 || x->shape[0] != len)
                    return hyla_error_set(HYLA_ERR_MODEL, "%s: tensor '%s' must be F32 [%lld] (rank %d's piece)", file,
                                          name, (long long)len, r);
                pc->data[((size_t)k * t->n_params + i) * pc->ranks + r] = (const float *)x->data;
            }
        }
        if (hyla_st_count(&pc->files[r]) != expect)
            return hyla_error_set(HYLA_ERR_MODEL, "%s: holds %zu tensors, rank %d's pieces are %zu", file,
                                  hyla_st_count(&pc->files[r]), r, expect);
    }
    return HYLA_OK;
}

static int pieces_open(hyla_pieces **out, const char *dir, const hyla_param_table *table, const index_info *ix)
{
    *out = NULL;
    hyla_pieces *pc = calloc(1, sizeof *pc);
    if (!pc)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    pc->ranks = ix->ranks;
    pc->n_params = table->n_params;
    pc->table = table;
    pc->files = calloc((size_t)ix->ranks, sizeof *pc->files);
    pc->data = calloc(3 * (size_t)table->n_params * (size_t)ix->ranks + 1, sizeof *pc->data);
    int rc = pc->files && pc->data ? open_files(pc, dir, ix->root) : hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    if (rc != HYLA_OK) {
        hyla_pieces_close(pc);
        return rc;
    }
    *out = pc;
    return HYLA_OK;
}

int hyla_pieces_open(hyla_pieces **out, const char *dir, const hyla_param_table *table)
{
    index_info ix;
    memset(&ix, 0, sizeof ix);
    HYLA_TRY(read_index(dir, &ix));
    int rc = pieces_open(out, dir, table, &ix);
    cJSON_Delete(ix.root);
    return rc;
}

void hyla_pieces_read(const hyla_pieces *pc, int vector, int param, int64_t elem0, int64_t len, float *dst)
{
    int64_t n = pc->table->params[param].numel, end = elem0 + len;
    for (int r = 0; r < pc->ranks; r++) {
        int64_t lo, plen;
        hyla_shard_piece(n, pc->ranks, r, &lo, &plen);
        int64_t a = elem0 > lo ? elem0 : lo, b = end < lo + plen ? end : lo + plen;
        if (b > a) {
            const float *src = pc->data[((size_t)vector * pc->n_params + param) * pc->ranks + r] + (a - lo);
            memcpy(dst + (a - elem0), src, (size_t)(b - a) * sizeof(float));
            hyla_drop_mapped_pages(src, (size_t)(b - a) * sizeof(float)); /* copied: the file's pages need not stay */
        }
    }
}

/* ---- a model from a sharded checkpoint ------------------------------------------------------ */

static void read_params(hyla_model *m, int layer)
{
    for (int i = 0; i < m->table.n_params; i++) {
        const hyla_param *p = &m->table.params[i];
        if (layer == INT_MIN || p->layer == layer)
            hyla_pieces_read(m->pieces, HYLA_PIECE_W, i, 0, p->numel, m->w + p->offset);
    }
}

/* m->fetch for a save (hyla convert): layer `layer`'s weights into w, the previous one's given back. */
static int fetch_layer(void *ctx, int vector, int layer)
{
    hyla_model *m = ctx;
    if (vector != HYLA_FETCH_W)
        return hyla_error_set(HYLA_ERR_ARG, "a sharded checkpoint's model saves its weights only");
    if (layer == m->pieces_layer)
        return HYLA_OK;
    for (int i = 0; m->pieces_layer != INT_MIN && i < m->table.n_params; i++) {
        const hyla_param *p = &m->table.params[i];
        if (p->layer == m->pieces_layer)
            hyla_model_release_pages(m->w + p->offset, hyla_param_span(p) * sizeof(float));
    }
    m->pieces_layer = layer;
    read_params(m, layer);
    return HYLA_OK;
}

static int open_carried(hyla_model *m, const char *dir)
{
    char path[4200];
    HYLA_TRY(hyla_path_join(path, sizeof path, dir, HYLA_PIECES_CARRIED));
    if (!hyla_file_exists(path))
        return HYLA_OK;
    if (!(m->carried_set = calloc(1, sizeof *m->carried_set)))
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    HYLA_TRY(hyla_st_open_file(m->carried_set, path));
    m->n_carried = hyla_st_count(m->carried_set);
    if (!(m->carried = calloc(m->n_carried ? m->n_carried : 1, sizeof *m->carried)))
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->n_carried; i++)
        m->carried[i] = i;
    return HYLA_OK;
}

int hyla_model_load_pieces(hyla_model *m, const char *dir, int whole)
{
    memset(m, 0, sizeof *m);
    index_info ix;
    memset(&ix, 0, sizeof ix);
    char path[4200];
    char *text = NULL;
    hyla_config cfg;
    HYLA_TRY(read_index(dir, &ix));
    int rc = hyla_path_join(path, sizeof path, dir, "config.json");
    if (rc == HYLA_OK)
        rc = hyla_read_text_file(path, &text, NULL);
    if (rc == HYLA_OK)
        rc = hyla_config_parse(&cfg, text, path);
    if (rc == HYLA_OK && ix.mtp_layers != cfg.n_mtp_layers) {
        if (ix.mtp_layers == 0) /* saved from a model whose MTP tensors were dropped (config.json still counts them) */
            hyla_config_set_mtp_layers(&cfg, 0);
        else
            rc = hyla_error_set(HYLA_ERR_MODEL, "%s: the index has %d MTP layers, config.json %lld", dir, ix.mtp_layers,
                                (long long)cfg.n_mtp_layers);
    }
    if (rc == HYLA_OK)
        rc = hyla_model_init_empty(m, &cfg, &ix.layout, ix.save_dtype, whole);
    if (rc == HYLA_OK) {
        m->config_json = text, text = NULL;
        m->pieces_layer = INT_MIN;
        if (!(m->source_dir = strdup(dir)))
            rc = hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    }
    if (rc == HYLA_OK)
        rc = open_carried(m, dir);
    if (rc == HYLA_OK)
        rc = pieces_open(&m->pieces, dir, &m->table, &ix);
    free(text);
    cJSON_Delete(ix.root);
    if (rc == HYLA_OK && whole) {
        read_params(m, INT_MIN);
        hyla_model_close_pieces(m);
    } else if (rc == HYLA_OK) {
        m->fetch = fetch_layer, m->fetch_ctx = m;
    }
    if (rc != HYLA_OK && m->table.params)
        hyla_model_free(m);
    return rc;
}

void hyla_model_close_pieces(hyla_model *m)
{
    hyla_pieces_close(m->pieces);
    m->pieces = NULL;
    if (m->fetch == fetch_layer)
        m->fetch = NULL, m->fetch_ctx = NULL;
}
