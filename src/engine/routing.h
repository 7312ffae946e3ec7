/* Router replay files: the top-k experts chosen per MoE layer and token, recorded at generation
 * and replayed in training (reinforcement learning on generated samples).
 *
 * Format "HYLAROU1" (little-endian): bytes 0-7 magic; 8-11 uint32 number of MoE layers L (in
 * layer order; remainder-block layers included, each its own slice); 12-15 uint32 top-k k;
 * 16-23 uint64 rows N (tokens); then int32 expert ids [L][N][k]; -1 marks a padding slot (zero
 * weight). Within a row an expert appears at most once. */
#ifndef HYLA_ENGINE_ROUTING_H
#define HYLA_ENGINE_ROUTING_H

#include <stdint.h>

#include "model/config.h"

typedef struct hyla_routing_s {
    int64_t n_layers, k, rows;
    int32_t *ids;            /* [n_layers][rows][k], owned */
} hyla_routing;

int hyla_moe_layer_count(const hyla_config *cfg);
int hyla_routing_write(const char *path, const hyla_routing *r);
/* Reads and validates against cfg: layer count, k, ids in [-1, E), no duplicate within a row. */
int hyla_routing_read(const char *path, const hyla_config *cfg, hyla_routing *r);
void hyla_routing_free(hyla_routing *r);

#endif
