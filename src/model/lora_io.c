/* Trainable LoRA adapters <-> PEFT adapter directories (adapter_config.json +
 * adapter_model.safetensors). B is permuted between PEFT's HF row order and hyla's internal
 * segments here and only here (model/lora.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
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

int hyla_lora_load(hyla_lora *L, const hyla_param_table *t, const char *dir)
{
    memset(L, 0, sizeof *L);
    hyla_adapter_file f;
    HYLA_TRY(hyla_adapter_open(&f, dir));
    /* the modules and their A, B (the reader checks them against the model), then the arena */
    size_t n_st = hyla_st_count(&f.set), n = 0, cursor = 0, *hf = malloc((n_st + 1) * sizeof *hf);
    float **A = calloc(n_st + 1, sizeof *A), **B = calloc(n_st + 1, sizeof *B);
    unsigned char *sel = calloc(t->n_hf ? t->n_hf : 1, 1);
    int rc = hf && A && B && sel ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", f.path);
    int got = rc == HYLA_OK;
    while (got == 1 && (got = hyla_adapter_next_module(&f, t, &cursor, &hf[n], &A[n], &B[n])) == 1)
        sel[hf[n++]] = 1;
    if (rc == HYLA_OK && got < 0)
        rc = got;
    hyla_lora_options o = {.r = f.info.r, .alpha = f.info.alpha, .dropout = f.info.dropout,
                           .use_rslora = f.info.use_rslora, .targets = NULL, .seed = 0};
    if (rc == HYLA_OK)
        rc = hyla_lora_create_modules(L, t, sel, &o);
    for (size_t i = 0; rc == HYLA_OK && i < n; i++) {
        int m = 0;
        while (L->modules[m].hf != hf[i])
            m++;
        memcpy(L->w + L->modules[m].a_offset, A[i], (size_t)(L->r * L->modules[m].in) * sizeof(float));
        hyla_lora_b_rows(L, t, m, B[i], L->w, 0);
    }
    for (size_t i = 0; A && B && i < n_st; i++)
        free(A[i]), free(B[i]);
    free(hf), free(A), free(B), free(sel);
    hyla_adapter_close(&f);
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
 * PEFT matches it as a suffix, so it selects exactly this kind of module in every layer. An MTP
 * head's module keeps its whole name (mtp.layers.0.self_attn.q_proj), which no trunk module ends in. */
static const char *layer_relative(const char *name)
{
    if (!strncmp(name, "mtp.", 4))
        return name;
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
        if (L->modules[m].layer != last && L->modules[m].layer >= 0 && L->modules[m].layer < L->table.cfg.n_layers) {
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
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int rc = hyla_write_json_atomic(path, o, 1);
    cJSON_Delete(o);
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
