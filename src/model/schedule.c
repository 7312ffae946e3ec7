#include "model/schedule.h"

#include <stdio.h>
#include <string.h>

void hyla_schedule_build(hyla_schedule *s, const hyla_config *cfg)
{
    memset(s, 0, sizeof *s);
    int start = 0;
    for (int i = 0; i < cfg->n_layers; i++) {
        s->block_of_layer[i] = s->n_blocks;
        if (cfg->layer_kind[i] == HYLA_LAYER_FULL) {
            s->blocks[s->n_blocks++] = (hyla_block){start, i - start + 1, 0};
            start = i + 1;
        }
    }
    if (start < cfg->n_layers)
        s->blocks[s->n_blocks++] = (hyla_block){start, (int)cfg->n_layers - start, 1};
}

void hyla_schedule_describe_block(const hyla_schedule *s, const hyla_config *cfg, int b, char *buf, size_t cap)
{
    const hyla_block *blk = &s->blocks[b];
    int n_lin = blk->n_layers - (blk->is_remainder ? 0 : 1);
    (void)cfg;
    if (blk->is_remainder)
        snprintf(buf, cap, "layers %d-%d: %d linear (remainder)", blk->first_layer,
                 blk->first_layer + blk->n_layers - 1, n_lin);
    else
        snprintf(buf, cap, "layers %d-%d: %d linear + 1 full", blk->first_layer,
                 blk->first_layer + blk->n_layers - 1, n_lin);
}
