/* The seam between training and whatever moves bytes between processes: a communicator of
 * `size` ranks with the collectives hyla uses. Only data movement crosses it; every sum
 * over ranks is done by hyla itself in a fixed order (parallel/grad_reduce.h), because MPI's own
 * reductions do not promise one.
 *
 * Backends: hyla_comm_self() (one process, in this library) and the MPI one (parallel/comm_mpi.c,
 * linked into the hyla binary only, so the library and its users need no MPI). A backend for
 * another transport (NCCL between GPUs, say) fills the same table.
 *
 * Every call but isend / recv is collective: all ranks make it, in the same order, with the same sizes. A failing
 * call returns a hyla error code with the message set; the caller then stops the whole job
 * (hyla_comm.abort), since the other ranks are blocked in the same collective. */
#ifndef HYLA_PARALLEL_COMM_H
#define HYLA_PARALLEL_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct hyla_comm hyla_comm;

struct hyla_comm {
    int rank, size;
    void *impl;
    /* send[r * bytes .. (r + 1) * bytes) goes to rank r; recv[r * bytes ..) comes from rank r */
    int (*alltoall)(hyla_comm *c, const void *send, void *recv, size_t bytes);
    /* recv[r * bytes ..) = rank r's send[0 .. bytes) */
    int (*allgather)(hyla_comm *c, const void *send, void *recv, size_t bytes);
    /* buf[0 .. bytes) of rank `root` on every rank */
    int (*bcast)(hyla_comm *c, void *buf, size_t bytes, int root);
    /* to rank r: send[sdispl[r] .. + scount[r]); from rank r: recv[rdispl[r] .. + rcount[r]) (bytes) */
    int (*alltoallv)(hyla_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                     const size_t *rcount, const size_t *rdispl);
    /* recv[displ[r] .. + count[r]) = rank r's send[0 .. count[r]) (bytes) */
    int (*allgatherv)(hyla_comm *c, const void *send, void *recv, const size_t *count, const size_t *displ);
    /* allgatherv started: *req completes it (wait) or polls it (test); the self comm completes at
     * once (*req = NULL). recv must not be touched until the wait. */
    int (*iallgatherv)(hyla_comm *c, const void *send, void *recv, const size_t *count, const size_t *displ, void **req);
    /* alltoallv started, the same way (send and recv untouched until the wait) */
    int (*ialltoallv)(hyla_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                      const size_t *rcount, const size_t *rdispl, void **req);
    int (*wait)(hyla_comm *c, void *req);            /* completes and frees req (NULL: nothing) */
    int (*test)(hyla_comm *c, void *req, int *done); /* lets it progress; *done when complete (req still to wait) */
    int (*barrier)(hyla_comm *c);
    /* stop every rank of the job with this exit code (does not return) */
    void (*abort)(hyla_comm *c, int code);
    /* the ranks that give the same color, ordered by key, as a communicator of their own
     * (collective over c); close frees one made so */
    int (*split)(hyla_comm *c, int color, int key, hyla_comm **out);
    void (*close)(hyla_comm *c);
    /* point to point (not collective): buf's bytes to rank `to`, started (*req completes with wait;
     * buf untouched until then), and from rank `from` into buf, complete on return; messages of
     * one tag between two ranks arrive in the order sent */
    int (*isend)(hyla_comm *c, const void *buf, size_t bytes, int to, int tag, void **req);
    int (*recv)(hyla_comm *c, void *buf, size_t bytes, int from, int tag);
    /* bytes this rank sent to other ranks, and seconds spent inside collectives (since reset) */
    uint64_t bytes_sent;
    double seconds;
};

/* The one-process communicator (size 1, rank 0): collectives are copies. */
hyla_comm *hyla_comm_self(void);

void hyla_comm_stats_reset(hyla_comm *c);

#endif
