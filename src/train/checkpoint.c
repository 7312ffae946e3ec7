#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/outdir.h"
#include "io/safetensors.h"

static void param_name(const hyla_param *p, const char *prefix, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "%s.", prefix);
    if (n < cap)
        hyla_param_label(p, buf + n, cap - n);
}

typedef struct {
    const hyla_param_table *t;
    const hyla_adamw *opt;
    const float *master; /* fp32 master weights (table layout) saved after the moments, or NULL */
    const hyla_model *m; /* its fetch (FSDP) brings each tensor's layer in first, or NULL */
} moments_ctx;

/* Entry j of the optimizer file: exp_avg / exp_avg_sq of parameter j / 2 for j < 2 n, then the
 * master weights of parameter j - 2 n. Its parameter: */
static const hyla_param *entry_param(const hyla_param_table *t, size_t j)
{
    size_t n2 = 2 * (size_t)t->n_params;
    return &t->params[j < n2 ? j / 2 : j - n2];
}

static int fill_moment(void *vctx, size_t index, void *dst)
{
    const moments_ctx *c = vctx;
    const hyla_param *p = entry_param(c->t, index);
    int vector = index >= 2 * (size_t)c->t->n_params ? HYLA_FETCH_W : index % 2 ? HYLA_FETCH_V : HYLA_FETCH_M;
    if (c->m && c->m->fetch)
        HYLA_TRY(c->m->fetch(c->m->fetch_ctx, vector, p->layer));
    const float *src = (vector == HYLA_FETCH_W ? c->master : vector == HYLA_FETCH_V ? c->opt->v : c->opt->m) + p->offset;
    memcpy(dst, src, (size_t)p->numel * sizeof(float));
    return HYLA_OK;
}

/* Moment tensor j of table t: exp_avg / exp_avg_sq of parameter j / 2, named by its parameter
 * (the model's: layers.L.ROLE; an adapter's: adapter.I, its index in the adapter arena). */
static void moment_name(const hyla_param_table *t, int adapter, size_t j, char *buf, size_t cap)
{
    if (j >= 2 * (size_t)t->n_params) { /* master weights */
        param_name(entry_param(t, j), "master", buf, cap);
        return;
    }
    const char *kind = j % 2 ? "exp_avg_sq" : "exp_avg";
    if (adapter)
        snprintf(buf, cap, "%s.adapter.%zu", kind, j / 2);
    else
        param_name(&t->params[j / 2], kind, buf, cap);
}

/* optimizer/model.safetensors under dir: both moments of every parameter of t, then (master not
 * NULL: a model saved in bf16 after bf16-compute training) its fp32 master weights, master.NAME. */
static int write_moments(const char *dir, const hyla_param_table *t, const hyla_adamw *opt, int adapter,
                         const float *master, const hyla_model *m)
{
    size_t n = (master ? 3 : 2) * (size_t)t->n_params;
    hyla_st_entry *e = calloc(n ? n : 1, sizeof *e);
    char (*names)[96] = calloc(n ? n : 1, sizeof *names);
    int rc = e && names ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (size_t j = 0; rc == HYLA_OK && j < n; j++) {
        moment_name(t, adapter, j, names[j], sizeof names[j]);
        e[j].name = names[j];
        e[j].dtype = HYLA_DT_F32;
        e[j].ndim = 1;
        e[j].shape[0] = entry_param(t, j)->numel;
    }
    if (rc == HYLA_OK) {
        moments_ctx ctx = {t, opt, master, m};
        char optdir[4300];
        snprintf(optdir, sizeof optdir, "%s/optimizer", dir);
        rc = hyla_mkdir_p(optdir);
        if (rc == HYLA_OK)
            rc = hyla_st_write(optdir, e, n, 0, fill_moment, &ctx);
    }
    free(e);
    free(names);
    return rc;
}

/* The moments into opt, and master weights (if the file has them) into master; whole tensors at
 * their table offsets, or with `shard` (FSDP) this rank's pieces only: elements [elem0[i],
 * elem0[i] + shard->params[i].numel) at shard->params[i].offset, the file's other pages never
 * kept (mapped, copied, dropped). */
static int read_moments_into(const char *dir, const hyla_param_table *t, hyla_adamw *opt, int adapter, float *master,
                             const hyla_param_table *shard, const int64_t *elem0)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer/model.safetensors", dir);
    hyla_st_set set;
    HYLA_TRY(hyla_st_open_file(&set, path));
    size_t n2 = 2 * (size_t)t->n_params, n = master && hyla_st_count(&set) == 3 * (size_t)t->n_params ? 3 * n2 / 2 : n2;
    int rc = HYLA_OK;
    for (size_t j = 0; rc == HYLA_OK && j < n; j++) {
        char name[96];
        moment_name(t, adapter, j, name, sizeof name);
        const hyla_param *p = entry_param(t, j);
        const hyla_st_tensor *x = hyla_st_find(&set, name);
        if (!x)
            rc = hyla_error_set(HYLA_ERR_MODEL, "%s: missing tensor '%s'", path, name);
        else if (x->dtype != HYLA_DT_F32 || x->ndim != 1 || x->shape[0] != p->numel)
            rc = hyla_error_set(HYLA_ERR_MODEL, "%s: tensor '%s' must be F32 [%lld]", path, name, (long long)p->numel);
        else if (!shard)
            memcpy((j >= n2 ? master : j % 2 ? opt->v : opt->m) + p->offset, x->data, x->nbytes);
        else { /* this rank's piece */
            size_t i = (size_t)(p - t->params);
            const hyla_param *q = &shard->params[i];
            const float *src = (const float *)x->data + elem0[i];
            memcpy((j >= n2 ? master : j % 2 ? opt->v : opt->m) + q->offset, src, (size_t)q->numel * sizeof(float));
            hyla_drop_mapped_pages(src, (size_t)q->numel * sizeof(float));
        }
    }
    if (rc == HYLA_OK && hyla_st_count(&set) != n)
        rc = hyla_error_set(HYLA_ERR_MODEL, "%s: holds %zu tensors, expected %zu", path, hyla_st_count(&set), n);
    hyla_st_close(&set);
    return rc;
}


static int write_state_json(const char *path, const hyla_adamw *opt, const hyla_train_state *st)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "hyla-train-state-1");
    cJSON_AddNumberToObject(o, "step", (double)st->step);
    cJSON_AddNumberToObject(o, "optimizer_step", (double)opt->step);
    cJSON_AddNumberToObject(o, "data_pos", (double)st->data_pos);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)st->seed);
    cJSON_AddStringToObject(o, "seed", seed); /* string: 64-bit exact */
    cJSON_AddStringToObject(o, "data_source", st->data_source);
    cJSON *run = st->run[0] ? cJSON_Parse(st->run) : NULL;
    if (run)
        cJSON_AddItemToObject(o, "run", run);
    int rc = hyla_write_json_atomic(path, o, 1);
    cJSON_Delete(o);
    return rc;
}

int hyla_checkpoint_save(const char *dir, const hyla_model *m, const hyla_adamw *opt, const hyla_train_state *st)
{
    hyla_outdir o;
    HYLA_TRY(hyla_outdir_begin(&o, dir, HYLA_OUTDIR_CHECKPOINT, "hyla train"));
    const char *tmp = o.tmp;
    char path[4300];
    /* parameters in F32 whatever they were loaded from (training made them fp32 values), or, after
     * bf16-compute training, in BF16 as users of such a model expect, with the fp32 master
     * weights beside the moments so a resume continues exactly */
    int bf16 = m->compute_dtype == HYLA_DT_BF16;
    hyla_model_set_save_dtype((hyla_model *)m, bf16 ? HYLA_DT_BF16 : HYLA_DT_F32);
    int rc = hyla_model_write_files(m, tmp, NULL, 0);
    if (rc == HYLA_OK)
        rc = write_moments(tmp, &m->table, opt, 0, bf16 ? m->w : NULL, m);
    if (rc == HYLA_OK) {
        snprintf(path, sizeof path, "%s/trainer_state.json", tmp);
        rc = write_state_json(path, opt, st);
    }
    if (rc == HYLA_OK)
        return hyla_outdir_commit(&o);
    hyla_outdir_abort(&o);
    return rc;
}

int hyla_checkpoint_load_model(const char *dir, hyla_model *m) { return hyla_model_load(m, dir); }

/* A count stored as a JSON number: an integer in [0, 2^53], where doubles are still exact. */
static int count_field(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 &&
           v->valuedouble == floor(v->valuedouble);
}

static int parse_u64(const char *text, uint64_t *out)
{
    if (!*text || strlen(text) > 20)
        return 0;
    for (const char *c = text; *c; c++)
        if (*c < '0' || *c > '9')
            return 0;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static int read_state_json(const char *path, hyla_adamw *opt, hyla_train_state *st)
{
    st->run[0] = '\0';
    char *text;
    HYLA_TRY(hyla_read_file_max(path, 1 << 20, &text, NULL)); /* a few hundred bytes when hyla wrote it */
    cJSON *o = cJSON_Parse(text);
    free(text);
    int rc = HYLA_OK;
    const cJSON *fmt = o ? cJSON_GetObjectItemCaseSensitive(o, "format") : NULL;
    const cJSON *step = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    const cJSON *ostep = o ? cJSON_GetObjectItemCaseSensitive(o, "optimizer_step") : NULL;
    const cJSON *pos = o ? cJSON_GetObjectItemCaseSensitive(o, "data_pos") : NULL;
    const cJSON *seed = o ? cJSON_GetObjectItemCaseSensitive(o, "seed") : NULL;
    const cJSON *src = o ? cJSON_GetObjectItemCaseSensitive(o, "data_source") : NULL;
    if (!o)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: not valid JSON", path);
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "hyla-train-state-1"))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'format' must be \"hyla-train-state-1\"", path);
    else if (!count_field(step))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'step' must be an integer in [0, 2^53]", path);
    else if (!count_field(ostep) || ostep->valuedouble > step->valuedouble)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'optimizer_step' must be an integer in [0, step]", path);
    else if (!count_field(pos))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'data_pos' must be an integer in [0, 2^53]", path);
    else if (!cJSON_IsString(seed) || !cJSON_IsString(src))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: fields 'seed' and 'data_source' must be strings", path);
    else if (!parse_u64(seed->valuestring, &st->seed))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'seed' must be a decimal integer in [0, 2^64)", path);
    else if (strlen(src->valuestring) >= sizeof st->data_source)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'data_source' is longer than %zu bytes", path,
                            sizeof st->data_source - 1);
    else {
        st->step = (int64_t)step->valuedouble;
        if (opt)
            opt->step = (int64_t)ostep->valuedouble;
        st->data_pos = (int64_t)pos->valuedouble;
        snprintf(st->data_source, sizeof st->data_source, "%s", src->valuestring);
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(o, "run");
        char *rt = cJSON_IsObject(run) ? cJSON_PrintUnformatted(run) : NULL;
        if (run && !cJSON_IsObject(run))
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'run' must be an object", path);
        else if (rt && strlen(rt) >= sizeof st->run)
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'run' is longer than %zu bytes", path, sizeof st->run - 1);
        else if (rt)
            snprintf(st->run, sizeof st->run, "%s", rt);
        free(rt);
    }
    cJSON_Delete(o);
    return rc;
}

static int read_moments(const char *dir, const hyla_param_table *t, hyla_adamw *opt, int adapter, float *master)
{
    return read_moments_into(dir, t, opt, adapter, master, NULL, NULL);
}

int hyla_checkpoint_load_state_pieces(const char *dir, const hyla_param_table *t, const hyla_param_table *shard,
                                      const int64_t *elem0, hyla_adamw *opt, float *w_pieces, hyla_train_state *st)
{
    HYLA_TRY(read_moments_into(dir, t, opt, 0, w_pieces, shard, elem0));
    return hyla_checkpoint_read_state_opt(dir, opt, st);
}

int hyla_checkpoint_load_state(const char *dir, const hyla_model *m, hyla_adamw *opt, hyla_train_state *st)
{
    char path[4200];
    int rc = read_moments(dir, &m->table, opt, 0, m->w); /* master weights, if saved, replace the BF16 ones */
    hyla_model_refresh_bf16((hyla_model *)m);
    if (rc == HYLA_OK) {
        snprintf(path, sizeof path, "%s/trainer_state.json", dir);
        rc = read_state_json(path, opt, st);
    }
    return rc;
}

int hyla_checkpoint_write_state(const char *dir, const hyla_adamw *opt, const hyla_train_state *st)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    return write_state_json(path, opt, st);
}

int hyla_checkpoint_read_state_opt(const char *dir, hyla_adamw *opt, hyla_train_state *st)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    return read_state_json(path, opt, st);
}

int hyla_checkpoint_read_state(const char *dir, hyla_train_state *st)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    return read_state_json(path, NULL, st);
}

int hyla_checkpoint_load(const char *dir, hyla_model *m, hyla_adamw *opt, hyla_train_state *st)
{
    HYLA_TRY(hyla_checkpoint_load_model(dir, m));
    int rc = hyla_checkpoint_load_state(dir, m, opt, st);
    if (rc)
        hyla_model_free(m);
    return rc;
}

int hyla_checkpoint_is_adapter(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    return hyla_file_exists(path);
}

int hyla_checkpoint_save_adapter(const char *dir, const hyla_lora *L, const hyla_param_table *base, const hyla_adamw *opt,
                                 const hyla_train_state *st, const char *base_model)
{
    hyla_outdir o;
    HYLA_TRY(hyla_outdir_begin(&o, dir, HYLA_OUTDIR_CHECKPOINT, "hyla train"));
    int rc = hyla_lora_write(L, base, o.tmp, base_model);
    if (rc == HYLA_OK)
        rc = write_moments(o.tmp, &L->table, opt, 1, NULL, NULL);
    if (rc == HYLA_OK) {
        char path[4300];
        snprintf(path, sizeof path, "%s/trainer_state.json", o.tmp);
        rc = write_state_json(path, opt, st);
    }
    if (rc == HYLA_OK)
        return hyla_outdir_commit(&o);
    hyla_outdir_abort(&o);
    return rc;
}

int hyla_checkpoint_load_adapter_state(const char *dir, const hyla_lora *L, hyla_adamw *opt, hyla_train_state *st)
{
    HYLA_TRY(read_moments(dir, &L->table, opt, 1, NULL));
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    return read_state_json(path, opt, st);
}
