/* Decoder-layer parts. Each reads x [n,H] (already normed) and writes y [n,H] (overwrite).
 * Scratch comes from ctx->arena and is released before returning; *_work_bytes gives the
 * scratch each needs. */
#ifndef HYLA_MODEL_LAYERS_H
#define HYLA_MODEL_LAYERS_H

#include "model/forward.h"

void hyla_gdn_layer_fwd(hyla_fwd_ctx *c, int layer, float *y /*[n,H]*/, const float *x /*[n,H]*/);
void hyla_attn_layer_fwd(hyla_fwd_ctx *c, int layer, float *y /*[n,H]*/, const float *x /*[n,H]*/);
void hyla_moe_layer_fwd(hyla_fwd_ctx *c, int layer, float *y /*[n,H]*/, const float *x /*[n,H]*/);
void hyla_mlp_layer_fwd(hyla_fwd_ctx *c, int layer, float *y /*[n,H]*/, const float *x /*[n,H]*/);

size_t hyla_gdn_layer_work_bytes(const hyla_config *cfg, int64_t n, int64_t T);
size_t hyla_attn_layer_work_bytes(const hyla_config *cfg, int64_t n, int64_t T);
size_t hyla_moe_layer_work_bytes(const hyla_config *cfg, int64_t n);
size_t hyla_mlp_layer_work_bytes(const hyla_config *cfg, int64_t n);

/* Bytes of `floats` fp32 values as carved from an arena (64-byte aligned). */
static inline size_t hyla_fbytes(int64_t floats) { return hyla_align_up((size_t)floats * sizeof(float)); }

#endif
