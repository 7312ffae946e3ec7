/* Block schedule (DESIGN §2): the layers grouped into blocks. A block is a run of
 * linear-attention layers closed by one full-attention layer; layers left after the last
 * full-attention layer form a remainder block. Any interleaving works: an attention layer with
 * no linear layers before it is a block of one; an all-linear model is one remainder block. */
#ifndef HYLA_MODEL_SCHEDULE_H
#define HYLA_MODEL_SCHEDULE_H

#include <stddef.h>

#include "model/config.h"

typedef struct {
    int first_layer;  /* index of the block's first layer */
    int n_layers;     /* layers in the block */
    int is_remainder; /* no closing full-attention layer */
} hyla_block;

typedef struct {
    int n_blocks;
    hyla_block blocks[HYLA_MAX_LAYERS];
    int block_of_layer[HYLA_MAX_LAYERS]; /* [n_layers] */
} hyla_schedule;

void hyla_schedule_build(hyla_schedule *s, const hyla_config *cfg);
/* "3+1" style pattern of block b, e.g. "3L+1A" or "2L (remainder)", into buf. */
void hyla_schedule_describe_block(const hyla_schedule *s, const hyla_config *cfg, int b, char *buf, size_t cap);

#endif
