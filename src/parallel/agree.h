/* Before the first step every rank checks that all ranks run the same job: a 64-bit content hash
 * per item (the flags, the model's weights, the data), gathered from every rank and compared
 * with rank 0's. Collective. */
#ifndef HYLA_PARALLEL_AGREE_H
#define HYLA_PARALLEL_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"

#define HYLA_AGREE_MAX 8

/* A fast content hash of n bytes (8 bytes at a time; not cryptographic). */
uint64_t hyla_content_hash(const void *data, size_t n, uint64_t seed);

/* what[i] names hash[i] ("flags", "model weights", ...). HYLA_ERR_ARG, naming the first item
 * and rank that differ from rank 0, on every rank alike (each sees the same gathered table). */
int hyla_ranks_agree(hyla_comm *c, const char *const *what, const uint64_t *hash, int n);

#endif
