/* The GGUF tensor map: which GGUF tensors llama.cpp's converter writes for a model, and where
 * each of their rows and columns lives in hyla's parameter table (model/params.h), with the value
 * transformation between them. One table for both directions: export (model/gguf_export.c)
 * reads parameters through it, loading a GGUF model (model/gguf_load.c) inverts it.
 *
 * A map tensor of n_dims <= 3 dims ne (ggml order, ne[0] = row length) is `rows` rows of ne[0]
 * values; output row r is row row_map[r] of parameter (role, layer), or row -1 - row_map[r] of
 * (role2, layer) when negative (Qwen3-Next's ssm_ba: beta and alpha rows interleaved per key
 * head); with no row_map, rows row0, row0 + 1, ... Output column j is source column col_map[j]
 * (Qwen3.5's value-head reordering of out_proj's columns and of the per-head vectors), or j. The
 * transformations are in model/gguf_export.h. */
#ifndef HYLA_MODEL_GGUF_MAP_H
#define HYLA_MODEL_GGUF_MAP_H

#include <stdint.h>

#include "model/config.h"
#include "model/params.h"

typedef enum {
    HYLA_GGUF_COPY,     /* value as is */
    HYLA_GGUF_PLUS_ONE, /* zero-centred norm weight w -> 1 + w */
    HYLA_GGUF_NEG_EXP,  /* A_log -> ssm_a = -exp(A_log) */
} hyla_gguf_value_op;

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[3];
    hyla_role role, role2;
    int layer;
    int64_t rows, row0;
    int64_t *row_map;   /* [rows] or NULL */
    int64_t *col_map;   /* [ne[0]] or NULL */
    hyla_gguf_value_op op;
    int keep_f32;       /* llama.cpp's converter keeps it F32 (vectors, norms, routers, conv, ssm_a / dt) */
} hyla_gguf_map_tensor;

typedef struct {
    hyla_gguf_map_tensor *t;
    size_t n, cap;
} hyla_gguf_map;

/* The map for `cfg` (the tensors in the order the converter writes them). */
int hyla_gguf_map_build(hyla_gguf_map *map, const hyla_config *cfg);
void hyla_gguf_map_free(hyla_gguf_map *map);

/* What llama.cpp's graphs for `arch` cannot express (value head dim != key head dim; for the MoE
 * architectures a dense layer, no shared expert, or top-k weights not renormalised): an error
 * with the reason, else HYLA_OK. The map assumes a config that passes. */
int hyla_gguf_map_check(const hyla_config *cfg, const char *arch);

/* "qwen3next", "qwen35" or "qwen35moe". */
const char *hyla_gguf_arch_name(const hyla_config *cfg);

#endif
