/* Summing a step's micro-batch gradients over ranks in a fixed order: bit for bit what one
 * process computes when it accumulates the same micro-batches one after another.
 *
 * The order. A step has N ranks x A micro-batches; global micro-batch g runs on rank g mod N as
 * that rank's round g / N. The step's gradient is ((g_0 + g_1) + g_2) + ... in g order, each g_i
 * computed on its own from zero. One process with --accum N*A does exactly that (its micro-batch
 * buffer is added into the sum after each micro-batch), and so does this reducer: rank p owns
 * one N-th part of every exchange window (its shard); in each round every rank sends each owner
 * its part of the round's micro-batch gradient (alltoall, data movement only) and the owner adds
 * the N received parts in rank order, which is g order. MPI's own reductions are not used: they
 * promise no order.
 *
 * Memory: the shard (n / N floats, rounded up to whole windows) and two exchange windows of
 * N x part floats, part <= HYLA_REDUCE_PART. Communication per round: (N-1)/N of the gradient
 * out and in per rank, plus the same again for the final allgather (hyla_grad_reducer_gather). */
#ifndef HYLA_PARALLEL_GRAD_REDUCE_H
#define HYLA_PARALLEL_GRAD_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"

#define HYLA_REDUCE_PART ((size_t)1 << 18) /* floats per owner per window (1 MiB) */

typedef struct {
    hyla_comm *comm;
    size_t n;          /* floats reduced */
    size_t part;       /* floats per owner per window */
    size_t n_windows;  /* ceil(n / (size * part)) */
    float *acc;        /* [n_windows * part] this rank's shard of the running sum */
    float *pad;        /* [size * part] the last, partial window of a gradient, zero-padded */
    float *recv;       /* [size * part] the parts received in one window, rank-major */
} hyla_grad_reducer;

/* What a reducer of n floats over `ranks` allocates (hyla_grad_reducer_bytes, for the plan). */
size_t hyla_grad_reduce_bytes(size_t n, int ranks);
/* Doubles each micro-batch contributes to the step's loss exchange (an allgather over the ranks):
 * its cross-entropy sum, router aux loss and MTP cross-entropy sum (train/trainer.c). */
#define HYLA_STEP_LOSS_PARTS 3

/* Bytes one rank sends in a data-parallel step of `accum` rounds: every round's alltoall, the
 * final allgather, and the step's loss parts (trainer: 2 doubles per micro-batch, allgathered). */
uint64_t hyla_dp_step_comm_bytes(size_t n, int ranks, int64_t accum);
/* ... of one reduction of n floats over `rounds` rounds: the alltoalls and the allgather. */
uint64_t hyla_grad_reduce_comm_bytes(size_t n, int ranks, int64_t rounds);

int hyla_grad_reducer_init(hyla_grad_reducer *r, hyla_comm *comm, size_t n);
void hyla_grad_reducer_free(hyla_grad_reducer *r);
/* One round: g[0..n) is this rank's micro-batch gradient of the round; first: the step's first
 * round (the shard is set, not added to). Collective. */
int hyla_grad_reducer_add(hyla_grad_reducer *r, const float *g, int first);
/* out[0..n) = the step's sum, on every rank. Collective. */
int hyla_grad_reducer_gather(hyla_grad_reducer *r, float *out);
size_t hyla_grad_reducer_bytes(const hyla_grad_reducer *r);

#endif
