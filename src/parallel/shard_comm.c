/* FSDP's gather and ordered reduce-scatter of one tensor (see shard_comm.h). */
#include "parallel/shard_comm.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/shard.h"

int64_t hyla_shard_comm_floats(int ranks) { return HYLA_SHARD_STEP * (int64_t)ranks; }

/* Rank r's piece of an n-element tensor cut to elements [a, b) (possibly empty). */
static void piece_in(int64_t n, int ranks, int r, int64_t a, int64_t b, int64_t *lo, int64_t *len)
{
    int64_t plo, plen;
    hyla_shard_piece(n, ranks, r, &plo, &plen);
    int64_t x = plo > a ? plo : a, y = plo + plen < b ? plo + plen : b;
    *lo = x < y ? x : plo;
    *len = y > x ? y - x : 0;
}

/* Step s of every rank's piece of range [a, b): rank r's elements [lo + s*STEP, ...) and their count. */
static void step_of(int64_t n, int ranks, int r, int64_t a, int64_t b, int64_t s, int64_t *lo, int64_t *len)
{
    int64_t plo, plen;
    piece_in(n, ranks, r, a, b, &plo, &plen);
    int64_t at = s * HYLA_SHARD_STEP;
    *lo = plo + (at < plen ? at : plen);
    *len = plen - at > HYLA_SHARD_STEP ? HYLA_SHARD_STEP : plen - at > 0 ? plen - at : 0;
}

/* Steps of a range's exchange: enough for the longest rank's part of it. */
static int64_t steps_of(int64_t n, int ranks, int64_t a, int64_t b)
{
    int64_t c = hyla_shard_chunk(n, ranks), w = b - a < c ? b - a : c;
    return (w + HYLA_SHARD_STEP - 1) / HYLA_SHARD_STEP;
}

/* Step s of the gather of full[a..b): every rank's bytes and where they go. */
static void gather_counts(int64_t n, int N, int64_t a, int64_t b, int64_t s, size_t *count, size_t *displ)
{
    for (int r = 0; r < N; r++) {
        int64_t lo, len;
        step_of(n, N, r, a, b, s, &lo, &len);
        count[r] = (size_t)len * sizeof(float), displ[r] = (size_t)lo * sizeof(float);
    }
}

/* Room for one more request in r. */
static int request_slot(hyla_shard_requests *r)
{
    if (r->n < r->cap)
        return HYLA_OK;
    int cap = r->cap ? 2 * r->cap : 64;
    void **q = realloc(r->req, (size_t)cap * sizeof *q);
    if (!q)
        return hyla_error_set(HYLA_ERR_NOMEM, "fsdp: out of memory for %d requests", cap);
    r->req = q, r->cap = cap;
    return HYLA_OK;
}

int hyla_shard_gather_range(hyla_comm *c, int64_t n, int64_t a, int64_t b, float *full, hyla_shard_requests *r)
{
    int N = c->size;
    if (N == 1)
        return HYLA_OK;
    size_t count[N], displ[N];
    for (int64_t s = 0, S = steps_of(n, N, a, b); s < S; s++) {
        gather_counts(n, N, a, b, s, count, displ);
        const char *mine = (const char *)full + displ[c->rank];
        if (!r) {
            HYLA_TRY(c->allgatherv(c, mine, full, count, displ));
            continue;
        }
        HYLA_TRY(request_slot(r));
        HYLA_TRY(c->iallgatherv(c, mine, full, count, displ, &r->req[r->n]));
        r->n++;
    }
    return HYLA_OK;
}

int hyla_shard_gather(hyla_comm *c, int64_t n, float *full) { return hyla_shard_gather_range(c, n, 0, n, full, NULL); }

int hyla_shard_gather_start(hyla_comm *c, int64_t n, float *full, hyla_shard_requests *r)
{
    return hyla_shard_gather_range(c, n, 0, n, full, r);
}

int hyla_shard_wait(hyla_comm *c, hyla_shard_requests *r)
{
    int st = HYLA_OK;
    for (int i = 0; i < r->n; i++) {
        int one = c->wait(c, r->req[i]);
        st = st == HYLA_OK ? one : st;
    }
    r->n = 0;
    return st;
}

int hyla_shard_poll(hyla_comm *c, hyla_shard_requests *r)
{
    for (int i = 0; i < r->n; i++) {
        int done;
        HYLA_TRY(c->test(c, r->req[i], &done));
        if (!done)
            break; /* in order: the rest wait their turn */
    }
    return HYLA_OK;
}

void hyla_shard_requests_free(hyla_shard_requests *r)
{
    free(r->req);
    memset(r, 0, sizeof *r);
}

/* a (+)= the N ranks' parts (parts + r * stride, len floats each) in rank order (first: set). */
static void add_parts(float *a, const float *parts, int N, int64_t stride, int64_t len, int first)
{
    for (int r = 0; r < N; r++) { /* rank order */
        const float *p = parts + r * stride;
        if (first && r == 0)
            memcpy(a, p, (size_t)len * sizeof(float));
        else
            for (int64_t i = 0; i < len; i++)
                a[i] += p[i];
    }
}

/* Step s's exchange of a reduce-scatter of g[a..b): what goes to every rank from g, and where
 * every rank's copy of this rank's step (mlen floats) lands: from rank r at recv_at + r * stride
 * floats. */
static void scatter_counts(int64_t n, int N, int64_t a, int64_t b, int64_t s, int64_t recv_at, int64_t stride,
                           int64_t mlen, size_t *scount, size_t *sdispl, size_t *rcount, size_t *rdispl)
{
    for (int r = 0; r < N; r++) {
        int64_t lo, len;
        step_of(n, N, r, a, b, s, &lo, &len);
        scount[r] = (size_t)len * sizeof(float), sdispl[r] = (size_t)lo * sizeof(float);
        rcount[r] = (size_t)mlen * sizeof(float), rdispl[r] = (size_t)(recv_at + r * stride) * sizeof(float);
    }
}

int64_t hyla_shard_overlap_floats(int64_t n, int ranks, int rank) { return hyla_shard_overlap_range_floats(n, 0, n, ranks, rank); }

int64_t hyla_shard_overlap_range_floats(int64_t n, int64_t a, int64_t b, int ranks, int rank)
{
    int64_t lo, len;
    piece_in(n, ranks, rank, a, b, &lo, &len);
    return (int64_t)ranks * len;
}

int hyla_shard_reduce_scatter_range_start(hyla_comm *c, int64_t n, int64_t a, int64_t b, const float *g, float *stage,
                                          hyla_shard_requests *r)
{
    int N = c->size;
    size_t scount[N], sdispl[N], rcount[N], rdispl[N];
    for (int64_t s = 0, S = steps_of(n, N, a, b); s < S; s++) {
        int64_t mlo, mlen;
        step_of(n, N, c->rank, a, b, s, &mlo, &mlen);
        HYLA_TRY(request_slot(r));
        scatter_counts(n, N, a, b, s, (int64_t)N * s * HYLA_SHARD_STEP, mlen, mlen, scount, sdispl, rcount, rdispl);
        HYLA_TRY(c->ialltoallv(c, g, scount, sdispl, stage, rcount, rdispl, &r->req[r->n]));
        r->n++;
    }
    return HYLA_OK;
}

int hyla_shard_reduce_scatter_start(hyla_comm *c, int64_t n, const float *g, float *stage, hyla_shard_requests *r)
{
    return hyla_shard_reduce_scatter_range_start(c, n, 0, n, g, stage, r);
}

/* This rank's first element of range [a, b) in its piece's accumulator acc. */
static float *range_acc(hyla_comm *c, int64_t n, int64_t a, int64_t b, float *acc)
{
    int64_t plo, plen, mine, mine_len;
    hyla_shard_piece(n, c->size, c->rank, &plo, &plen);
    piece_in(n, c->size, c->rank, a, b, &mine, &mine_len);
    return acc + (mine - plo);
}

void hyla_shard_reduce_scatter_range_finish(hyla_comm *c, int64_t n, int64_t a, int64_t b, float *acc, int first,
                                            const float *stage)
{
    int N = c->size;
    float *at = range_acc(c, n, a, b, acc);
    for (int64_t s = 0, S = steps_of(n, N, a, b); s < S; s++) {
        int64_t mlo, mlen;
        step_of(n, N, c->rank, a, b, s, &mlo, &mlen);
        add_parts(at + s * HYLA_SHARD_STEP, stage + (int64_t)N * s * HYLA_SHARD_STEP, N, mlen, mlen, first);
    }
}

void hyla_shard_reduce_scatter_finish(hyla_comm *c, int64_t n, float *acc, int first, const float *stage)
{
    hyla_shard_reduce_scatter_range_finish(c, n, 0, n, acc, first, stage);
}

int hyla_shard_reduce_scatter_range(hyla_comm *c, int64_t n, int64_t a, int64_t b, const float *g, float *acc,
                                    int first, float *stage)
{
    int N = c->size;
    int64_t mine, mine_len;
    piece_in(n, N, c->rank, a, b, &mine, &mine_len);
    float *at = range_acc(c, n, a, b, acc);
    if (N == 1) {
        if (first)
            memcpy(at, g + mine, (size_t)mine_len * sizeof(float));
        else
            for (int64_t i = 0; i < mine_len; i++)
                at[i] += g[mine + i];
        return HYLA_OK;
    }
    size_t scount[N], sdispl[N], rcount[N], rdispl[N];
    for (int64_t s = 0, S = steps_of(n, N, a, b); s < S; s++) {
        int64_t mlo, mlen;
        step_of(n, N, c->rank, a, b, s, &mlo, &mlen);
        scatter_counts(n, N, a, b, s, 0, HYLA_SHARD_STEP, mlen, scount, sdispl, rcount, rdispl); /* one step's staging */
        HYLA_TRY(c->alltoallv(c, g, scount, sdispl, stage, rcount, rdispl));
        add_parts(at + s * HYLA_SHARD_STEP, stage, N, HYLA_SHARD_STEP, mlen, first);
    }
    return HYLA_OK;
}

int hyla_shard_reduce_scatter(hyla_comm *c, int64_t n, const float *g, float *acc, int first, float *stage)
{
    return hyla_shard_reduce_scatter_range(c, n, 0, n, g, acc, first, stage);
}
