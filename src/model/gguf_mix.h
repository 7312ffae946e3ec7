/* llama.cpp's per-tensor type mix for the Q4_K_M / Q5_K_M / Q3_K_M / Q2_K presets (model/gguf_mix.c). */
#ifndef HYLA_MODEL_GGUF_MIX_H
#define HYLA_MODEL_GGUF_MIX_H

#include "core/quant.h"
#include "model/gguf_map.h"

/* types[i] for the map's tensors: those already F32 stay; the others get the preset's choice for
 * base Q4_K / Q5_K / Q3_K / Q2_K with k_m (Q4_K_M / Q5_K_M / Q3_K_M / Q2_K), or base Q6_K without (the
 * Q6_K preset). -1 when out of memory. Rows that are not whole blocks of the chosen type are the caller's to handle. */
int hyla_gguf_k_m_types(const hyla_gguf_map *map, const hyla_config *cfg, hyla_ggml_type base, int k_m,
                        hyla_ggml_type *types);

#endif
