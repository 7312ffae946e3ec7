/* Ordered gradient reduction over ranks (see grad_reduce.h for the order and the layout). */
#include "parallel/grad_reduce.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/error.h"

/* The exchange layout of n floats over N ranks: floats per owner per window, and windows. */
static void layout(size_t n, size_t N, size_t *part, size_t *n_windows)
{
    size_t per = (n + N - 1) / N;
    *part = per < HYLA_REDUCE_PART ? (per ? per : 1) : HYLA_REDUCE_PART;
    *n_windows = (n + N * *part - 1) / (N * *part);
}

static size_t bytes_of(size_t N, size_t part, size_t n_windows)
{
    size_t shard = (n_windows ? n_windows : 1) * part;
    return hyla_align_up(shard * sizeof(float)) + (N > 1 ? 2 * hyla_align_up(N * part * sizeof(float)) : 0);
}

size_t hyla_grad_reduce_bytes(size_t n, int ranks)
{
    size_t part, nw;
    layout(n, (size_t)ranks, &part, &nw);
    return bytes_of((size_t)ranks, part, nw);
}

uint64_t hyla_grad_reduce_comm_bytes(size_t n, int ranks, int64_t rounds)
{
    size_t part, nw, N = (size_t)ranks;
    layout(n, N, &part, &nw);
    uint64_t window = (uint64_t)part * sizeof(float) * (N - 1); /* to the other ranks, per window */
    return (uint64_t)rounds * nw * window + nw * window;
}

uint64_t hyla_dp_step_comm_bytes(size_t n, int ranks, int64_t accum)
{
    return hyla_grad_reduce_comm_bytes(n, ranks, accum) + (uint64_t)(HYLA_STEP_LOSS_PARTS * accum) * sizeof(double) * (size_t)(ranks - 1);
}

int hyla_grad_reducer_init(hyla_grad_reducer *r, hyla_comm *comm, size_t n)
{
    memset(r, 0, sizeof *r);
    r->comm = comm;
    r->n = n;
    size_t N = (size_t)comm->size;
    layout(n, N, &r->part, &r->n_windows);
    size_t shard = (r->n_windows ? r->n_windows : 1) * r->part;
    r->acc = aligned_alloc(64, hyla_align_up(shard * sizeof(float)));
    if (N > 1) {
        r->pad = aligned_alloc(64, hyla_align_up(N * r->part * sizeof(float)));
        r->recv = aligned_alloc(64, hyla_align_up(N * r->part * sizeof(float)));
    }
    if (!r->acc || (N > 1 && (!r->pad || !r->recv))) {
        hyla_grad_reducer_free(r);
        return hyla_error_set(HYLA_ERR_NOMEM, "gradient reduction: cannot allocate a %zu-float shard", shard);
    }
    memset(r->acc, 0, shard * sizeof(float)); /* fault the pages in at setup */
    if (N > 1)
        memset(r->pad, 0, N * r->part * sizeof(float));
    return HYLA_OK;
}

void hyla_grad_reducer_free(hyla_grad_reducer *r)
{
    free(r->acc);
    free(r->pad);
    free(r->recv);
    memset(r, 0, sizeof *r);
}

size_t hyla_grad_reducer_bytes(const hyla_grad_reducer *r)
{
    return bytes_of(r->comm ? (size_t)r->comm->size : 1, r->part, r->n_windows);
}

/* acc (+)= parts[0] + parts[1] + ... in rank order, elementwise */
static void add_in_order(float *acc, const float *parts, size_t N, size_t stride, size_t len, int first)
{
    size_t q = 0;
    if (first) {
        memcpy(acc, parts, len * sizeof *acc);
        q = 1;
    }
    for (; q < N; q++) {
        const float *p = parts + q * stride;
        for (size_t i = 0; i < len; i++)
            acc[i] += p[i];
    }
}

int hyla_grad_reducer_add(hyla_grad_reducer *r, const float *g, int first)
{
    size_t N = (size_t)r->comm->size, W = N * r->part;
    if (N == 1) {
        add_in_order(r->acc, g, 1, 0, r->n, first);
        return HYLA_OK;
    }
    for (size_t w = 0; w < r->n_windows; w++) {
        size_t lo = w * W, len = r->n - lo < W ? r->n - lo : W;
        const float *send = g + lo;
        if (len < W) { /* the tail: zero-padded (the padding's sums are never read) */
            memcpy(r->pad, send, len * sizeof(float));
            send = r->pad;
        }
        HYLA_TRY(r->comm->alltoall(r->comm, send, r->recv, r->part * sizeof(float)));
        add_in_order(r->acc + w * r->part, r->recv, N, r->part, r->part, first);
    }
    return HYLA_OK;
}

int hyla_grad_reducer_gather(hyla_grad_reducer *r, float *out)
{
    size_t N = (size_t)r->comm->size, W = N * r->part;
    if (N == 1) {
        memcpy(out, r->acc, r->n * sizeof(float));
        return HYLA_OK;
    }
    for (size_t w = 0; w < r->n_windows; w++) {
        size_t lo = w * W, len = r->n - lo < W ? r->n - lo : W;
        float *dst = len < W ? r->recv : out + lo;
        HYLA_TRY(r->comm->allgather(r->comm, r->acc + w * r->part, dst, r->part * sizeof(float)));
        if (len < W)
            memcpy(out + lo, r->recv, len * sizeof(float));
    }
    return HYLA_OK;
}
