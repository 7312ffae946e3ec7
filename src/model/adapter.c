#include "model/adapter.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/finite.h"
#include "io/fileio.h"
#include "io/gguf_read.h"

#define KEY_PREFIX "base_model.model."

int hyla_adapter_read_config(const char *dir, hyla_adapter_info *info)
{
    char path[4200], *text;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    HYLA_TRY(hyla_read_file_max(path, 1 << 20, &text, NULL));
    cJSON *o = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: not a JSON object", path);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "peft_type"), *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    const cJSON *alpha = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    int rc = HYLA_OK;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "LORA"))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: peft_type must be \"LORA\"", path);
    else if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > 65536 || r->valuedouble != (int64_t)r->valuedouble)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'r' must be an integer in [1, 65536]", path);
    else if (!cJSON_IsNumber(alpha) || !isfinite(alpha->valuedouble))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: field 'lora_alpha' must be a number", path);
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "use_dora")))
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: use_dora: DoRA adapters are not supported", path);
    const char *unsupported[] = {"rank_pattern", "alpha_pattern", "modules_to_save"};
    for (int i = 0; rc == HYLA_OK && i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, unsupported[i]);
        if (v && !cJSON_IsNull(v) && cJSON_GetArraySize(v) > 0)
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: '%s' is not supported (set it empty)", path, unsupported[i]);
    }
    if (rc == HYLA_OK) {
        info->r = (int64_t)r->valuedouble;
        info->alpha = alpha->valuedouble;
        int rs = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "use_rslora"));
        const cJSON *dr = cJSON_GetObjectItemCaseSensitive(o, "lora_dropout");
        info->use_rslora = rs;
        info->dropout = cJSON_IsNumber(dr) && dr->valuedouble >= 0 && dr->valuedouble < 1 ? dr->valuedouble : 0.0;
        info->scaling = rs ? info->alpha / sqrt((double)info->r) : info->alpha / (double)info->r;
    }
    cJSON_Delete(o);
    return rc;
}

/* The table's HF tensor named `name`, or -1. */
static long find_hf(const hyla_param_table *t, const char *name)
{
    for (size_t i = 0; i < t->n_hf; i++)
        if (!strcmp(t->hf[i].name, name))
            return (long)i;
    return -1;
}

/* W[rows] += s * B @ A for HF tensor h, A [r, in] and B [out, r] as f32. */
static void merge_rows(hyla_model *m, size_t h, const float *A, const float *B, int64_t r, double s)
{
    const hyla_hf_tensor *ht = &m->table.hf[h];
    int64_t in = ht->row_len;
    float *delta = malloc((size_t)in * sizeof *delta);
    for (int64_t o = 0; delta && o < ht->rows; o++) {
        for (int64_t j = 0; j < in; j++) {
            double acc = 0;
            for (int64_t k = 0; k < r; k++)
                acc += (double)B[o * r + k] * (double)A[k * in + j];
            delta[j] = (float)(s * acc);
        }
        int param;
        int64_t row;
        hyla_hf_row_dest(&m->table, ht, o, &param, &row);
        const hyla_param *p = &m->table.params[param];
        float *w = m->w + p->offset + (size_t)row * (size_t)p->shape[p->ndim - 1];
        for (int64_t j = 0; j < in; j++)
            w[j] += delta[j];
    }
    free(delta);
}

static float *as_f32(const hyla_st_tensor *t)
{
    size_t n = t->nbytes / hyla_dtype_size(t->dtype);
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (f)
        hyla_dtype_to_f32(f, t->data, t->dtype, n);
    return f;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int hyla_adapter_open(hyla_adapter_file *f, const char *dir)
{
    memset(f, 0, sizeof *f);
    HYLA_TRY(hyla_adapter_read_config(dir, &f->info));
    snprintf(f->path, sizeof f->path, "%s/adapter_model.safetensors", dir);
    HYLA_TRY(hyla_st_open_file(&f->set, f->path));
    int rc = HYLA_OK, any = 0;
    for (size_t i = 0; rc == HYLA_OK && i < hyla_st_count(&f->set); i++) {
        const char *nm = f->set.tensors[i].name;
        size_t len = strlen(nm), pre = strlen(KEY_PREFIX);
        int is_a = ends_with(nm, ".lora_A.weight"), is_b = ends_with(nm, ".lora_B.weight");
        if (strncmp(nm, KEY_PREFIX, pre) || len <= pre + 14 || (!is_a && !is_b)) {
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' is not a LoRA A/B matrix of a linear module (%sM.lora_A"
                                ".weight / .lora_B.weight; embedding adapters are not supported)", f->path, nm, KEY_PREFIX);
            break;
        }
        char other[600]; /* each of lora_A / lora_B needs the other */
        snprintf(other, sizeof other, "%.*s.lora_%c.weight", (int)(len - 14), nm, is_a ? 'B' : 'A');
        if (!hyla_st_find(&f->set, other))
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: '%s' has no matching '%s'", f->path, nm, other);
        any = 1;
    }
    if (rc == HYLA_OK && !any)
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: no LoRA tensors", f->path);
    if (rc != HYLA_OK)
        hyla_st_close(&f->set);
    return rc;
}

void hyla_adapter_close(hyla_adapter_file *f) { hyla_st_close(&f->set); }

int hyla_adapter_next_module(hyla_adapter_file *f, const hyla_param_table *t, size_t *cursor, size_t *hf, float **A,
                             float **B)
{
    *A = *B = NULL;
    while (*cursor < hyla_st_count(&f->set) && !ends_with(f->set.tensors[*cursor].name, ".lora_A.weight"))
        (*cursor)++;
    if (*cursor >= hyla_st_count(&f->set))
        return 0;
    const hyla_st_tensor *a = &f->set.tensors[(*cursor)++];
    const char *path = f->path;
    int64_t r = f->info.r;
    size_t len = strlen(a->name);
    char module[512], weight[520], bname[560];
    snprintf(module, sizeof module, "%.*s", (int)(len - strlen(KEY_PREFIX) - 14), a->name + strlen(KEY_PREFIX));
    snprintf(weight, sizeof weight, "%s.weight", module);
    snprintf(bname, sizeof bname, KEY_PREFIX "%s.lora_B.weight", module);
    const hyla_st_tensor *b = hyla_st_find(&f->set, bname);
    long h = find_hf(t, weight);
    const hyla_hf_tensor *ht = h >= 0 ? &t->hf[h] : NULL;
    if (!ht)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: module '%s' is not in this model (an adapter for another model or "
                              "layout?)", path, module);
    if (ht->ndim != 2)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: module '%s' is not a linear layer's 2-D weight", path, module);
    if (a->ndim != 2 || a->shape[0] != r || a->shape[1] != ht->shape[1])
        return hyla_error_set(HYLA_ERR_MODEL, "%s: '%s' must be [%lld, %lld] (r, in_features of %s), got %s[%lld, %lld]",
                              path, a->name, (long long)r, (long long)ht->shape[1], weight, a->ndim == 2 ? "" : "not ",
                              (long long)a->shape[0], (long long)(a->ndim > 1 ? a->shape[1] : 0));
    if (b->ndim != 2 || b->shape[0] != ht->shape[0] || b->shape[1] != r)
        return hyla_error_set(HYLA_ERR_MODEL, "%s: '%s' must be [%lld, %lld] (out_features of %s, r)", path, bname,
                              (long long)ht->shape[0], (long long)r, weight);
    *A = as_f32(a), *B = as_f32(b);
    int rc = HYLA_OK;
    if (!*A || !*B)
        rc = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    else if (hyla_first_nonfinite(*A, (size_t)(r * ht->shape[1])) < (size_t)(r * ht->shape[1]) ||
             hyla_first_nonfinite(*B, (size_t)(r * ht->shape[0])) < (size_t)(r * ht->shape[0]))
        rc = hyla_error_set(HYLA_ERR_MODEL, "%s: module '%s' holds a non-finite value", path, module);
    if (rc != HYLA_OK) {
        free(*A), free(*B);
        *A = *B = NULL;
        return rc;
    }
    *hf = (size_t)h;
    return 1;
}

int hyla_model_merge_adapter(hyla_model *m, const char *dir, hyla_adapter_info *info)
{
    hyla_adapter_file f;
    HYLA_TRY(hyla_adapter_open(&f, dir));
    *info = f.info;
    size_t cursor = 0, h;
    float *A, *B;
    int st;
    while ((st = hyla_adapter_next_module(&f, &m->table, &cursor, &h, &A, &B)) == 1) {
        merge_rows(m, h, A, B, info->r, info->scaling);
        info->modules++;
        free(A);
        free(B);
    }
    hyla_adapter_close(&f);
    return st;
}

int hyla_model_load_adapted(hyla_model *m, const char *dir, const char *adapter, hyla_adapter_info *info)
{
    memset(info, 0, sizeof *info);
    HYLA_TRY(hyla_model_load(m, dir));
    int rc = adapter ? hyla_model_merge_adapter(m, adapter, info) : HYLA_OK;
    if (rc != HYLA_OK)
        hyla_model_free(m);
    return rc;
}

int hyla_model_load_inference(hyla_model *m, const char *dir, const char *adapter, hyla_adapter_info *info,
                              int compute_bf16, int weights_bf16)
{
    if (hyla_is_gguf_path(dir)) {
        memset(info, 0, sizeof *info);
        if (adapter)
            return hyla_error_set(HYLA_ERR_ARG, "%s: --adapter needs a Hugging Face model directory (a GGUF model's "
                                  "weights are read in place, not merged)", dir);
        if (compute_bf16 || weights_bf16)
            return hyla_error_set(HYLA_ERR_ARG, "%s: --act-dtype / --param-dtype bf16: a GGUF model computes with "
                                  "its tensors' stored types and fp32 activations", dir);
        return hyla_model_load_gguf(m, dir);
    }
    if (weights_bf16 && !adapter) {
        memset(info, 0, sizeof *info);
        return hyla_model_load_bf16(m, dir);
    }
    HYLA_TRY(hyla_model_load_adapted(m, dir, adapter, info));
    int st = compute_bf16 || weights_bf16 ? hyla_model_set_compute_bf16(m, weights_bf16) : HYLA_OK;
    if (st != HYLA_OK)
        hyla_model_free(m);
    return st;
}
