/* FSDP's two collectives on one tensor in the shard layout (parallel/shard.h), in pieces of at most
 * HYLA_SHARD_STEP elements per rank per call, so no call and no buffer grows with the tensor:
 *
 *  gather:         full[0..n) on every rank from each rank's piece (allgatherv straight into
 *                  full: exact data movement, no staging);
 *  reduce-scatter: each rank holds a whole gradient g[0..n); the owner of every piece adds the
 *                  ranks' copies of it in rank order (acc = first ? g_0 : acc + g_0, then + g_1,
 *                  ...), the order one process adds micro-batches in (parallel/grad_reduce.h).
 *                  Staging: HYLA_SHARD_STEP x ranks floats (hyla_shard_comm_floats). */
#ifndef HYLA_PARALLEL_SHARD_COMM_H
#define HYLA_PARALLEL_SHARD_COMM_H

#include <stdint.h>

#include "parallel/comm.h"

#define HYLA_SHARD_STEP ((int64_t)1 << 18) /* elements per rank per call (1 MiB of fp32) */

/* Floats of the reduce-scatter's staging buffer for `ranks`. */
int64_t hyla_shard_comm_floats(int ranks);

/* full: [n], this rank's piece already in place at its offset; the rest arrives. */
int hyla_shard_gather(hyla_comm *c, int64_t n, float *full);
/* Gathers in flight (a prefetch): the requests of their calls. */
typedef struct {
    void **req;
    int n, cap;
} hyla_shard_requests;
/* Only elements [a, b) of full (FSDP's expert groups: a group of experts' rows): every rank's
 * piece of that range (this rank's already in place); r NULL: complete on return, else started
 * and its calls' requests appended to r. */
int hyla_shard_gather_range(hyla_comm *c, int64_t n, int64_t a, int64_t b, float *full, hyla_shard_requests *r);

/* The gather of full[0..n) started (this rank's piece already in place); its calls' requests
 * appended to r. full must not be read until hyla_shard_wait. */
int hyla_shard_gather_start(hyla_comm *c, int64_t n, float *full, hyla_shard_requests *r);
/* Complete every request of r (r emptied). */
int hyla_shard_wait(hyla_comm *c, hyla_shard_requests *r);
/* Let r's calls progress (MPI moves data only inside its calls). */
int hyla_shard_poll(hyla_comm *c, hyla_shard_requests *r);
void hyla_shard_requests_free(hyla_shard_requests *r);

/* g: [n] this rank's gradient; acc: [piece length] this rank's sum; stage: hyla_shard_comm_floats. */
int hyla_shard_reduce_scatter(hyla_comm *c, int64_t n, const float *g, float *acc, int first, float *stage);
/* Only elements [a, b) of g (g: the whole gradient [n], only the range read): this rank's piece
 * of the range summed into acc (acc: this rank's whole piece, as above), the same arithmetic. */
int hyla_shard_reduce_scatter_range(hyla_comm *c, int64_t n, int64_t a, int64_t b, const float *g, float *acc,
                                    int first, float *stage);
/* The same overlapped with compute: _start sends g (untouched until the requests complete) and
 * receives every rank's copy of this rank's piece into stage [hyla_shard_overlap_floats]; after
 * hyla_shard_wait, _finish adds them into acc in rank order: the same arithmetic. */
int64_t hyla_shard_overlap_floats(int64_t n, int ranks, int rank);
int hyla_shard_reduce_scatter_start(hyla_comm *c, int64_t n, const float *g, float *stage, hyla_shard_requests *r);
void hyla_shard_reduce_scatter_finish(hyla_comm *c, int64_t n, float *acc, int first, const float *stage);
/* ... of range [a, b) only (staging: hyla_shard_overlap_range_floats; acc: this rank's whole piece). */
int64_t hyla_shard_overlap_range_floats(int64_t n, int64_t a, int64_t b, int ranks, int rank);
int hyla_shard_reduce_scatter_range_start(hyla_comm *c, int64_t n, int64_t a, int64_t b, const float *g, float *stage,
                                          hyla_shard_requests *r);
void hyla_shard_reduce_scatter_range_finish(hyla_comm *c, int64_t n, int64_t a, int64_t b, float *acc, int first,
                                            const float *stage);

#endif
