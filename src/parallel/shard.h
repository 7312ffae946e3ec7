/* FSDP's layout: every tensor split over N ranks. Tensor i of n elements is cut into chunks of
 * c = ceil(n / N) rounded up to a multiple of HYLA_SHARD_ALIGN; rank r owns elements
 * [r c, min(n, (r + 1) c)) (possibly none). A rank's shard is its pieces of every tensor, in table
 * order, back to back. The alignment is the gradient norm's block (train/optimizer.h), so every
 * block of squares lies in one rank's piece and the sharded norm adds the same blocks in the
 * same order as one process.
 *
 * One source of truth: the trainer allocates by this layout and hyla plan sizes by it. */
#ifndef HYLA_PARALLEL_SHARD_H
#define HYLA_PARALLEL_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define HYLA_SHARD_ALIGN 4096 /* elements */

/* Elements per rank's chunk of an n-element tensor. */
static inline int64_t hyla_shard_chunk(int64_t n, int ranks)
{
    int64_t c = (n + ranks - 1) / ranks;
    return (c + HYLA_SHARD_ALIGN - 1) / HYLA_SHARD_ALIGN * HYLA_SHARD_ALIGN;
}

/* Rank r's piece of an n-element tensor: first element and length. */
static inline void hyla_shard_piece(int64_t n, int ranks, int r, int64_t *lo, int64_t *len)
{
    int64_t c = hyla_shard_chunk(n, ranks), a = (int64_t)r * c, b = a + c < n ? a + c : n;
    *lo = a < n ? a : n;
    *len = b > *lo ? b - *lo : 0;
}

#endif
