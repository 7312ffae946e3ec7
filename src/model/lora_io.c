/* Trainable LoRA adapters <-> PEFT adapter directories (adapter_config.json +
 * adapter_model.safetensors). B is permuted between PEFT's HF row order and hyla's internal
 * segments here and only here (model/lora.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/finite.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "model/adapter.h"
#include "model/lora.h"

#define KEY_PREFIX "base_model.model."

/* Index of the segment of module md that holds internal parameter p. */
static const hyla_lora_segment *segment_of(const hyla_lora *L, const hyla_lora_module *md, int p)
{
    for (int s = md->seg0; s < md->seg0 + md->n_seg; s++)
        if (L->segments[s].param == p)
            return &L->segments[s];
    return NULL;
}

void hyla_lora_b_rows(const hyla_lora *L, const hyla_param_table *t, int module, float *hf, float *internal_w,
                      int to_hf)
{
    const hyla_lora_module *md = &L->modules[module];
    const hyla_hf_tensor *h = &t->hf[md->hf];
    int64_t r = L->r;
    for (int64_t k = 0; k < h->rows; k++) {
        int p;
        int64_t row;
        hyla_hf_row_dest(t, h, k, &p, &row);
        const hyla_lora_segment *sg = segment_of(L, md, p);
        float *in = internal_w + sg->b_offset + (size_t)(row - sg->row0) * (size_t)r;
        if (to_hf)
            memcpy(hf + k * r, in, (size_t)r * sizeof(float));
        else
            memcpy(in, hf + k * r, (size_t)r * sizeof(float));
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int hyla_lora_load(hyla_lora *L, const hyla_param_table *t, const char *dir)
{
    memset(L, 0, sizeof *L);
    hyla_adapter_info info;
    HYLA_TRY(hyla_adapter_read_config(dir, &info));
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    hyla_st_set set;
    HYLA_TRY(hyla_st_open_file(&set, path));
    size_t n = hyla_st_count(&set);
    /* the module list: every tensor must be M.lora_A.weight / M.lora_B.weight of a linear module */
    size_t list_cap = 8 * n + 2;
    char *list = calloc(list_cap + 1, 1);
    size_t used = 0;
    int rc = list ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; rc == HYLA_OK && i < n; i++) {
        const char *nm = set.tensors[i].name;
        int is_a = ends_with(nm, ".lora_A.weight");
        if (strncmp(nm, KEY_PREFIX, strlen(KEY_PREFIX)) || (!is_a && !ends_with(nm, ".lora_B.weight"))) {
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' is not a LoRA A/B matrix of a linear module", path, nm);
            break;
        }
        char mod[200], weight[220];
        snprintf(mod, sizeof mod, "%.*s", (int)(strlen(nm) - strlen(KEY_PREFIX) - 14), nm + strlen(KEY_PREFIX));
        snprintf(weight, sizeof weight, "%s.weight", mod);
        size_t h = 0;
        while (h < t->n_hf && strcmp(t->hf[h].name, weight))
            h++;
        if (h == t->n_hf || t->hf[h].layer < 0 || t->hf[h].ndim != 2)
            rc = hyla_error_set(HYLA_ERR_MODEL, "%s: module '%s' is not a linear module of this model (an adapter for "
                                "another model or layout?)", path, mod);
        else if (is_a) {
            size_t need = strlen(mod) + 1;
            if (used + need + 1 > list_cap) {
                char *bigger = realloc(list, 2 * (list_cap + need) + 1);
                if (!bigger) {
                    rc = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
                    break;
                }
                list = bigger;
                list_cap = 2 * (list_cap + need);
            }
            used += (size_t)sprintf(list + used, "%s%s", used ? "," : "", mod);
        }
    }
    if (rc == HYLA_OK && used == 0)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: no LoRA tensors", path);
    hyla_lora_options o = {.r = info.r, .alpha = info.alpha, .dropout = info.dropout, .use_rslora = info.use_rslora,
                           .targets = list, .seed = 0};
    /* exact module names as targets select exactly these modules (a full name matches itself) */
    if (rc == HYLA_OK)
        rc = hyla_lora_create(L, t, &o);
    free(list);
    for (int m = 0; rc == HYLA_OK && m < L->n_modules; m++) {
        const hyla_lora_module *md = &L->modules[m];
        char an[260], bn[260];
        snprintf(an, sizeof an, KEY_PREFIX "%s.lora_A.weight", md->name);
        snprintf(bn, sizeof bn, KEY_PREFIX "%s.lora_B.weight", md->name);
        const hyla_st_tensor *a = hyla_st_find(&set, an), *b = hyla_st_find(&set, bn);
        if (!a || !b) {
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: module '%s' needs both lora_A and lora_B", path, md->name);
            break;
        }
        if (a->ndim != 2 || a->shape[0] != L->r || a->shape[1] != md->in || b->ndim != 2 || b->shape[0] != md->out ||
            b->shape[1] != L->r) {
            rc = hyla_error_set(HYLA_ERR_MODEL, "%s: module '%s' must have lora_A [%lld, %lld] and lora_B [%lld, %lld] "
                                "(r = %lld)", path, md->name, (long long)L->r, (long long)md->in, (long long)md->out,
                                (long long)L->r, (long long)L->r);
            break;
        }
        float *B = malloc((size_t)(md->out * L->r) * sizeof *B);
        if (!B) {
            rc = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        hyla_dtype_to_f32(L->w + md->a_offset, a->data, a->dtype, (size_t)(L->r * md->in));
        hyla_dtype_to_f32(B, b->data, b->dtype, (size_t)(md->out * L->r));
        hyla_lora_b_rows(L, t, m, B, L->w, 0);
        free(B);
    }
    if (rc == HYLA_OK && hyla_st_count(&set) != 2 * (size_t)L->n_modules)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: holds %zu tensors, expected lora_A + lora_B of %d modules", path,
                            hyla_st_count(&set), L->n_modules);
    if (rc == HYLA_OK) {
        size_t bad = hyla_first_nonfinite(L->w, L->table.total_floats);
        if (bad < L->table.total_floats)
            rc = hyla_error_set(HYLA_ERR_MODEL, "%s: a non-finite value in the adapter", path);
    }
    hyla_st_close(&set);
    if (rc != HYLA_OK && L->w)
        hyla_lora_free(L);
    return rc;
}

/* ---- writing ---------------------------------------------------------------------------------- */

typedef struct {
    const hyla_lora *L;
    const hyla_param_table *t;
} write_ctx;

static int fill_tensor(void *vctx, size_t index, void *dst)
{
    const write_ctx *c = vctx;
    const hyla_lora_module *md = &c->L->modules[index / 2];
    if (index % 2 == 0)
        memcpy(dst, c->L->w + md->a_offset, (size_t)(c->L->r * md->in) * sizeof(float));
    else
        hyla_lora_b_rows(c->L, c->t, (int)(index / 2), dst, c->L->w, 1);
    return HYLA_OK;
}

/* The module's name below "model.layers.N." (self_attn.q_proj, mlp.shared_expert.gate_proj, ...):
 * PEFT matches it as a suffix, so it selects exactly this kind of module in every layer. */
static const char *layer_relative(const char *name)
{
    const char *p = strstr(name, "layers.");
    if (!p)
        return name;
    p += 7;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == '.' ? p + 1 : name;
}

static int write_config(const hyla_lora *L, const char *dir, const char *base_model)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    if (base_model)
        cJSON_AddStringToObject(o, "base_model_name_or_path", base_model);
    else
        cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddNumberToObject(o, "r", (double)L->r);
    cJSON_AddNumberToObject(o, "lora_alpha", L->alpha);
    cJSON_AddNumberToObject(o, "lora_dropout", L->dropout);
    cJSON_AddBoolToObject(o, "use_rslora", L->use_rslora);
    cJSON_AddBoolToObject(o, "use_dora", 0);
    cJSON_AddBoolToObject(o, "fan_in_fan_out", 0);
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "inference_mode", 1);
    cJSON_AddBoolToObject(o, "init_lora_weights", 1);
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddItemToObject(o, "rank_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(o, "alpha_pattern", cJSON_CreateObject());
    cJSON *tm = cJSON_CreateArray();
    for (int m = 0; m < L->n_modules; m++) { /* distinct layer-relative names, first-seen order */
        const char *rel = layer_relative(L->modules[m].name);
        int seen = 0;
        for (int j = 0; j < cJSON_GetArraySize(tm) && !seen; j++)
            seen = !strcmp(cJSON_GetArrayItem(tm, j)->valuestring, rel);
        if (!seen)
            cJSON_AddItemToArray(tm, cJSON_CreateString(rel));
    }
    cJSON_AddItemToObject(o, "target_modules", tm);
    cJSON *layers = cJSON_CreateArray(); /* the layers adapted (all that hold a selected module) */
    int last = -1, all = 1;
    for (int m = 0; m < L->n_modules; m++)
        if (L->modules[m].layer != last) {
            last = L->modules[m].layer;
            cJSON_AddItemToArray(layers, cJSON_CreateNumber(last));
        }
    all = cJSON_GetArraySize(layers) == L->table.cfg.n_layers;
    if (all) {
        cJSON_Delete(layers);
        cJSON_AddNullToObject(o, "layers_to_transform");
    } else {
        cJSON_AddItemToObject(o, "layers_to_transform", layers);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int rc = text ? hyla_write_file_atomic(path, text, strlen(text)) : hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    free(text);
    return rc;
}

int hyla_lora_write(const hyla_lora *L, const hyla_param_table *t, const char *dir, const char *base_model)
{
    size_t n = 2 * (size_t)L->n_modules;
    hyla_st_entry *e = calloc(n, sizeof *e);
    char (*names)[260] = calloc(n, sizeof *names);
    int rc = e && names ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (int m = 0; rc == HYLA_OK && m < L->n_modules; m++) {
        const hyla_lora_module *md = &L->modules[m];
        for (int k = 0; k < 2; k++) {
            size_t j = 2 * (size_t)m + (size_t)k;
            snprintf(names[j], sizeof names[j], KEY_PREFIX "%s.lora_%c.weight", md->name, k ? 'B' : 'A');
            e[j].name = names[j];
            e[j].dtype = HYLA_DT_F32;
            e[j].ndim = 2;
            e[j].shape[0] = k ? md->out : L->r;
            e[j].shape[1] = k ? L->r : md->in;
        }
    }
    write_ctx ctx = {L, t};
    if (rc == HYLA_OK)
        rc = hyla_st_write_named(dir, "adapter_model.safetensors", e, n, fill_tensor, &ctx);
    free(e);
    free(names);
    if (rc == HYLA_OK)
        rc = write_config(L, dir, base_model);
    return rc;
}
