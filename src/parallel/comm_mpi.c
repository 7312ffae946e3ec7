/* The MPI communicator: hyla's collectives on MPI_COMM_WORLD (or a split of it), bytes only (MPI_BYTE), so no
 * MPI reduction and no MPI datatype conversion touches the data. Errors return (MPI_ERRORS_RETURN)
 * as hyla errors naming the collective; the caller aborts the job. */
#include "parallel/comm_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/profile.h"

/* c->impl: which MPI communicator c is */
typedef struct {
    MPI_Comm comm;
} mpi_impl;

static MPI_Comm mc(const hyla_comm *c) { return ((const mpi_impl *)c->impl)->comm; }

static int mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return hyla_error_set(HYLA_ERR_IO, "MPI %s failed: %.*s", what, len, msg);
}

static int count_of(size_t bytes, const char *what, int *count)
{
    if (bytes > (size_t)INT_MAX)
        return hyla_error_set(HYLA_ERR_ARG, "MPI %s: %zu bytes per rank is more than one call carries (%d)", what,
                              bytes, INT_MAX);
    *count = (int)bytes;
    return HYLA_OK;
}

/* A collective's end: its time and the bytes this rank sent go into the counters. */
static int account(hyla_comm *c, double t0, uint64_t sent, int rc, const char *what)
{
    c->seconds += hyla_now() - t0;
    c->bytes_sent += sent;
    return rc == MPI_SUCCESS ? HYLA_OK : mpi_fail(rc, what);
}

static int mpi_alltoall(hyla_comm *c, const void *send, void *recv, size_t bytes)
{
    int n = 0;
    HYLA_TRY(count_of(bytes, "alltoall", &n));
    double t0 = hyla_now();
    int rc = MPI_Alltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, mc(c));
    return account(c, t0, (uint64_t)bytes * (uint64_t)(c->size - 1), rc, "alltoall");
}

static int mpi_allgather(hyla_comm *c, const void *send, void *recv, size_t bytes)
{
    int n = 0;
    HYLA_TRY(count_of(bytes, "allgather", &n));
    double t0 = hyla_now();
    int rc = MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, mc(c));
    return account(c, t0, (uint64_t)bytes * (uint64_t)(c->size - 1), rc, "allgather");
}

static int mpi_bcast(hyla_comm *c, void *buf, size_t bytes, int root)
{
    int n = 0;
    HYLA_TRY(count_of(bytes, "bcast", &n));
    double t0 = hyla_now();
    int rc = MPI_Bcast(buf, n, MPI_BYTE, root, mc(c));
    return account(c, t0, c->rank == root ? (uint64_t)bytes * (uint64_t)(c->size - 1) : 0, rc, "bcast");
}

/* byte counts and displacements as MPI's ints (HYLA_ERR_ARG past INT_MAX: callers chunk) */
static int int_array(const size_t *in, int n, int *out, const char *what)
{
    for (int r = 0; r < n; r++) {
        if (in[r] > (size_t)INT_MAX)
            return hyla_error_set(HYLA_ERR_ARG, "MPI %s: %zu bytes is more than one call carries", what, in[r]);
        out[r] = (int)in[r];
    }
    return HYLA_OK;
}

/* An alltoallv's four arrays as MPI's ints, v[0..4n): counts and displacements sent, received. */
static int alltoallv_ints(int n, const size_t *scount, const size_t *sdispl, const size_t *rcount, const size_t *rdispl,
                          int *v, const char *what)
{
    const size_t *in[4] = {scount, sdispl, rcount, rdispl};
    for (int k = 0; k < 4; k++)
        HYLA_TRY(int_array(in[k], n, v + k * n, what));
    return HYLA_OK;
}

/* Bytes an alltoallv sends to the other ranks. */
static uint64_t alltoallv_sent(const hyla_comm *c, const size_t *scount)
{
    uint64_t sent = 0;
    for (int r = 0; r < c->size; r++)
        sent += r != c->rank ? scount[r] : 0;
    return sent;
}

static int mpi_alltoallv(hyla_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                         const size_t *rcount, const size_t *rdispl)
{
    int n = c->size, *v = malloc((size_t)(4 * n) * sizeof *v);
    if (!v)
        return hyla_error_set(HYLA_ERR_NOMEM, "MPI alltoallv: out of memory");
    int st = alltoallv_ints(n, scount, sdispl, rcount, rdispl, v, "alltoallv");
    if (st == HYLA_OK) {
        double t0 = hyla_now();
        int rc = MPI_Alltoallv(send, v, v + n, MPI_BYTE, recv, v + 2 * n, v + 3 * n, MPI_BYTE, mc(c));
        st = account(c, t0, alltoallv_sent(c, scount), rc, "alltoallv");
    }
    free(v);
    return st;
}

static int mpi_allgatherv(hyla_comm *c, const void *send, void *recv, const size_t *count, const size_t *displ)
{
    int n = c->size, *v = malloc((size_t)(2 * n) * sizeof *v);
    if (!v)
        return hyla_error_set(HYLA_ERR_NOMEM, "MPI allgatherv: out of memory");
    int st = int_array(count, n, v, "allgatherv");
    if (st == HYLA_OK)
        st = int_array(displ, n, v + n, "allgatherv");
    if (st == HYLA_OK) {
        double t0 = hyla_now();
        int in_place = (const char *)recv + displ[c->rank] == (const char *)send; /* MPI wants it said */
        int rc = MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, v[c->rank], MPI_BYTE, recv, v, v + n, MPI_BYTE,
                                mc(c));
        st = account(c, t0, count[c->rank] * (uint64_t)(n - 1), rc, "allgatherv");
    }
    free(v);
    return st;
}

static int mpi_iallgatherv(hyla_comm *c, const void *send, void *recv, const size_t *count, const size_t *displ,
                           void **req)
{
    int n = c->size, *v = malloc((size_t)(2 * n) * sizeof *v);
    MPI_Request *r = malloc(sizeof *r);
    *req = NULL;
    if (!v || !r) {
        free(v);
        free(r);
        return hyla_error_set(HYLA_ERR_NOMEM, "MPI iallgatherv: out of memory");
    }
    int st = int_array(count, n, v, "iallgatherv");
    if (st == HYLA_OK)
        st = int_array(displ, n, v + n, "iallgatherv");
    if (st == HYLA_OK) { /* the counts are copied by MPI at the call (MPI 3.0: they may be freed after) */
        double t0 = hyla_now();
        int in_place = (const char *)recv + displ[c->rank] == (const char *)send;
        int rc = MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, v[c->rank], MPI_BYTE, recv, v, v + n, MPI_BYTE,
                                 mc(c), r);
        st = account(c, t0, count[c->rank] * (uint64_t)(n - 1), rc, "iallgatherv");
    }
    free(v);
    if (st == HYLA_OK)
        *req = r;
    else
        free(r);
    return st;
}

/* A started alltoallv: its request first (mpi_wait / mpi_test take it as an MPI_Request *), then
 * the int arrays MPI may read until it completes; one allocation, freed by the wait. */
typedef struct {
    MPI_Request req;
    int v[];
} ialltoallv_call;

static int mpi_ialltoallv(hyla_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                          const size_t *rcount, const size_t *rdispl, void **req)
{
    int n = c->size;
    ialltoallv_call *call = malloc(sizeof *call + (size_t)(4 * n) * sizeof(int));
    *req = NULL;
    if (!call)
        return hyla_error_set(HYLA_ERR_NOMEM, "MPI ialltoallv: out of memory");
    int *v = call->v;
    int st = alltoallv_ints(n, scount, sdispl, rcount, rdispl, v, "ialltoallv");
    if (st == HYLA_OK) {
        double t0 = hyla_now();
        int rc = MPI_Ialltoallv(send, v, v + n, MPI_BYTE, recv, v + 2 * n, v + 3 * n, MPI_BYTE, mc(c), &call->req);
        st = account(c, t0, alltoallv_sent(c, scount), rc, "ialltoallv");
    }
    if (st == HYLA_OK)
        *req = call;
    else
        free(call);
    return st;
}

static int mpi_wait(hyla_comm *c, void *req)
{
    if (!req)
        return HYLA_OK;
    double t0 = hyla_now();
    int rc = MPI_Wait((MPI_Request *)req, MPI_STATUS_IGNORE);
    free(req);
    return account(c, t0, 0, rc, "wait");
}

static int mpi_test(hyla_comm *c, void *req, int *done)
{
    *done = 1;
    if (!req)
        return HYLA_OK;
    double t0 = hyla_now();
    int rc = MPI_Test((MPI_Request *)req, done, MPI_STATUS_IGNORE);
    return account(c, t0, 0, rc, "test");
}

static int mpi_isend(hyla_comm *c, const void *buf, size_t bytes, int to, int tag, void **req)
{
    int n = 0;
    *req = NULL;
    HYLA_TRY(count_of(bytes, "isend", &n));
    MPI_Request *r = malloc(sizeof *r);
    if (!r)
        return hyla_error_set(HYLA_ERR_NOMEM, "MPI isend: out of memory");
    double t0 = hyla_now();
    int rc = MPI_Isend(buf, n, MPI_BYTE, to, tag, mc(c), r);
    int st = account(c, t0, bytes, rc, "isend");
    if (st == HYLA_OK)
        *req = r;
    else
        free(r);
    return st;
}

static int mpi_recv(hyla_comm *c, void *buf, size_t bytes, int from, int tag)
{
    int n = 0;
    HYLA_TRY(count_of(bytes, "recv", &n));
    double t0 = hyla_now();
    int rc = MPI_Recv(buf, n, MPI_BYTE, from, tag, mc(c), MPI_STATUS_IGNORE);
    return account(c, t0, 0, rc, "recv");
}

static int mpi_barrier(hyla_comm *c)
{
    double t0 = hyla_now();
    int rc = MPI_Barrier(mc(c));
    return account(c, t0, 0, rc, "barrier");
}

static void mpi_abort(hyla_comm *c, int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* not reached */
}

static int launched_by_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static void mpi_close(hyla_comm *c)
{
    MPI_Comm_free(&((mpi_impl *)c->impl)->comm);
    free(c);
}

static int mpi_split(hyla_comm *c, int color, int key, hyla_comm **out)
{
    hyla_comm *s = malloc(sizeof *s + sizeof(mpi_impl));
    if (!s)
        return hyla_error_set(HYLA_ERR_NOMEM, "MPI split: out of memory");
    *s = *c;
    mpi_impl *impl = (mpi_impl *)(s + 1);
    double t0 = hyla_now();
    int rc = MPI_Comm_split(mc(c), color, key, &impl->comm);
    int st = account(c, t0, 0, rc, "comm split");
    if (st != HYLA_OK) {
        free(s);
        return st;
    }
    MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(impl->comm, &s->rank);
    MPI_Comm_size(impl->comm, &s->size);
    s->impl = impl, s->close = mpi_close, s->bytes_sent = 0, s->seconds = 0.0;
    *out = s;
    return HYLA_OK;
}

hyla_comm *hyla_comm_mpi_open(int *argc, char ***argv)
{
    if (!launched_by_mpirun())
        return hyla_comm_self();
    static hyla_comm world;
    static mpi_impl world_impl;
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return NULL;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    world_impl.comm = MPI_COMM_WORLD;
    world = (hyla_comm){0,         1,             &world_impl,    mpi_alltoall,    mpi_allgather,
                        mpi_bcast, mpi_alltoallv, mpi_allgatherv, mpi_iallgatherv, mpi_ialltoallv,
                        mpi_wait,  mpi_test,      mpi_barrier,    mpi_abort,       mpi_split,
                        NULL,      mpi_isend,     mpi_recv,       0,               0.0};
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    return &world;
}

void hyla_comm_mpi_close(hyla_comm *c)
{
    if (c && c->impl)
        MPI_Finalize();
}
