/* Reading the reference cases' files (tests/reference/make_cases.py) in the C tests. */
#ifndef HYLA_TESTS_CASE_FILES_H
#define HYLA_TESTS_CASE_FILES_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/fileio.h"
#include "io/safetensors.h"

/* The token ids of a case's run of want_T tokens (expected.json "runs"); malloc'd, or NULL when
 * the case has no such run. */
static inline int32_t *case_run_tokens(const char *dir, int64_t want_T)
{
    char path[4200], *text;
    snprintf(path, sizeof path, "%s/expected.json", dir);
    if (hyla_read_text_file(path, &text, NULL))
        return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    int32_t *tokens = NULL;
    const cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(j, "runs")) {
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(run, "tokens");
        if (cJSON_GetArraySize(toks) != want_T || tokens)
            continue;
        tokens = malloc((size_t)want_T * sizeof *tokens);
        for (int64_t i = 0; tokens && i < want_T; i++)
            tokens[i] = (int32_t)cJSON_GetArrayItem(toks, (int)i)->valuedouble;
    }
    cJSON_Delete(j);
    return tokens;
}

/* Largest |value| over every (F32) tensor of a gradient file: the scale of its near-zero tensors. */
static inline double case_max_abs(const hyla_st_set *set)
{
    double m = 0;
    for (size_t i = 0; i < hyla_st_count(set); i++) {
        const hyla_st_tensor *t = hyla_st_at(set, i);
        for (size_t j = 0; j < t->nbytes / 4; j++)
            m = fmax(m, fabs(((const float *)t->data)[j]));
    }
    return m;
}

/* The seven reference models make_cases.py writes. */
static const char *const case_models[] = {"next_moe_8l", "next_moe_6l", "q35_dense", "q35_moe", "irregular", "all_linear",
                                          "all_attention"};
#define CASE_N_MODELS ((int)(sizeof case_models / sizeof *case_models))

/* A file of exactly `count` little-endian floats (an oracle's logits), malloc'd; NULL if it is
 * missing or has another size. */
static inline float *case_read_f32(const char *path, int64_t count)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    float *v = malloc((size_t)count * sizeof *v);
    size_t got = v ? fread(v, sizeof *v, (size_t)count, f) : 0;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != (size_t)count || extra) {
        free(v);
        return NULL;
    }
    return v;
}

/* Index of the largest of x[0..V) (the first on ties) and its margin over the runner-up. */
static inline int32_t case_argmax(const float *x, int64_t V, double *margin)
{
    int32_t a = 0, b = -1;
    for (int64_t v = 1; v < V; v++)
        if (x[v] > x[a])
            b = a, a = (int32_t)v;
        else if (b < 0 || x[v] > x[b])
            b = (int32_t)v;
    *margin = x[a] - x[b];
    return a;
}


#include "core/error.h"
#include "model/model.h"

/* The gradient of HF tensor h of m, gathered from the table layout g (the save's row map). */
static inline void case_hf_grad(const hyla_model *m, const float *g, size_t h, float *out)
{
    const hyla_hf_tensor *ht = &m->table.hf[h];
    for (int64_t r = 0; r < ht->rows; r++) {
        int param;
        int64_t row;
        hyla_hf_row_dest(&m->table, ht, r, &param, &row);
        const hyla_param *p = &m->table.params[param];
        memcpy(out + r * ht->row_len, g + p->offset + (size_t)row * (size_t)p->shape[p->ndim - 1],
               (size_t)ht->row_len * sizeof(float));
    }
}

/* Load the reference case CASES/NAME into m and its expected.json into *expected (dir receives
 * the case's directory); non-zero (message set) when either fails. */
static inline int case_load(const char *cases, const char *name, char *dir, size_t cap, hyla_model *m, cJSON **expected)
{
    char path[4200], *text;
    snprintf(dir, cap, "%s/%s", cases, name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    if (hyla_model_load(m, dir))
        return 1;
    if (hyla_read_text_file(path, &text, NULL)) {
        hyla_model_free(m);
        return 1;
    }
    *expected = cJSON_Parse(text);
    free(text);
    return 0;
}

#endif
