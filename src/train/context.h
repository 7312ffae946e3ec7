/* Context parallelism over a communicator's ranks (train --context-parallel C: the trainer splits
 * the job's ranks into groups of C consecutive ranks, each group's own communicator here): every
 * sequence of a micro-batch is cut into C equal slices, rank r of the group computing slice r. The link
 * (model/layer_ops.h, hyla_context_link) carries what crosses the slice boundaries:
 *   - the conv window: each rank's last K inputs to the next rank (forward, and again in the
 *     recompute and backward), the first taps' part of the previous slice's dx back (backward);
 *   - the delta rule's state, a chain in rank order: rank r waits for rank r - 1's final state,
 *     runs its slice from it, hands its own on; the backward hands the state gradient back in
 *     reverse order. The dependency is sequential: per Gated DeltaNet layer the ranks take turns
 *     (pipelined over the layers as above: the bubble is C - 1 delta rules per run of Gated
 *     DeltaNet layers between attention layers); the recompute uses the kept initial states and
 *     passes nothing;
 *   - attention: every rank's keys and values gathered (its queries read the slices up to its own,
 *     positions offset by r T), and in backward each key slice's gradient summed over the ranks
 *     in rank order;
 *   - the router statistics (the aux loss is of the whole sequences).
 * The chain's and the conv window's messages are point to point (a rank waits only for the rank
 * it receives from, so the chain pipelines over consecutive Gated DeltaNet layers: rank r runs
 * layer l's delta rule while rank r + 1 waits for it and rank r - 1 is already at layer l + 1,
 * up to the next attention layer, whose gathers every rank of the group makes); the gathers and
 * the key gradients' exchange are collectives, made by every rank in the same order because
 * every rank runs the same ops.
 * Buffers: the link's four scratch buffers and reduce staging (hyla_context_sizes) and the kept
 * initial states of every linear layer, allocated at init; hyla plan --context-parallel counts
 * them, and the messages. */
#ifndef HYLA_TRAIN_CONTEXT_H
#define HYLA_TRAIN_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "model/layer_ops.h"
#include "parallel/comm.h"

typedef struct {
    hyla_comm *comm;
    hyla_context_link link;
    float *buf[4];
    size_t buf_floats[4];
    float *stage;          /* [stage_floats] a reduce's received blocks */
    size_t stage_floats;
    float *kept;           /* the linear layers' kept initial states, kept_floats each */
    size_t kept_floats;
    float *out[4];         /* the sends in flight, by kind: the chain's state forward / backward, the conv
                            * window forward, its partial dx backward */
    size_t out_floats[4];
    void *out_req[4];
    int64_t kept_at[HYLA_MAX_LAYERS]; /* a linear layer's place in kept (-1 for the others) */
    double *aux;           /* [size][2 E + 1] the ranks' router statistics */
    int64_t E;
    size_t bytes;          /* all of it (hyla_context_link_bytes) */
    int status;            /* the first failed message of the step (HYLA_OK: none) */
    double seconds;        /* in the link's messages, since reset (the chain's hops: waiting for the ranks before) */
    double chain_seconds;  /* ... of it in the delta-rule chain's hops (the state passing and its bubble) */
    double chain_wait_seconds;   /* ... of that waiting for the state to arrive */
    double chain_run_seconds[2]; /* the delta rule's own time inside the chain: forward, backward */
} hyla_context;

/* A link for micro-batches of n_seq sequences of T rows per rank (slices of size x T). */
int hyla_context_init(hyla_context *cx, hyla_comm *comm, const hyla_config *cfg, int64_t n_seq, int64_t T);
void hyla_context_free(hyla_context *cx);
/* Bytes it holds (buffers, staging, kept states, the statistics' exchange:
 * hyla_context_link_bytes, which hyla plan counts). */
size_t hyla_context_bytes(const hyla_context *cx);
/* The first failure since the last call (then cleared). */
int hyla_context_status(hyla_context *cx);

#endif
