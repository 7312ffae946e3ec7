/* Reading the reference cases' files (tests/reference/make_cases.py) in the C tests. */
#ifndef HYLA_TESTS_CASE_FILES_H
#define HYLA_TESTS_CASE_FILES_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/fileio.h"
#include "io/safetensors.h"

/* The token ids of a case's run of want_T tokens (expected.json "runs"); malloc'd, or NULL when
 * the case has no such run. */
static int32_t *case_run_tokens(const char *dir, int64_t want_T)
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
static double case_max_abs(const hyla_st_set *set)
{
    double m = 0;
    for (size_t i = 0; i < hyla_st_count(set); i++) {
        const hyla_st_tensor *t = hyla_st_at(set, i);
        for (size_t j = 0; j < t->nbytes / 4; j++)
            m = fmax(m, fabs(((const float *)t->data)[j]));
    }
    return m;
}

#endif
