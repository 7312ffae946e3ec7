/* Context parallelism's link over a communicator (context.h). */
#include "train/context.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/error.h"
#include "core/profile.h"

static void note(hyla_context *cx, int st)
{
    if (st != HYLA_OK && cx->status == HYLA_OK)
        cx->status = st;
}

/* One point-to-point hop as an alltoallv of the whole communicator: `from` sends `floats` of
 * state to `to`, whose state they replace; every other pair moves nothing. */
static void hop(hyla_context *cx, int from, int to, float *state, size_t floats)
{
    hyla_comm *c = cx->comm;
    int N = c->size;
    size_t zero[N], sc[N], rc[N];
    memset(zero, 0, sizeof zero), memset(sc, 0, sizeof sc), memset(rc, 0, sizeof rc);
    HYLA_ASSERT(floats <= cx->kept_floats);
    if (c->rank == from)
        sc[to] = floats * sizeof(float);
    if (c->rank == to)
        rc[from] = floats * sizeof(float);
    double t0 = hyla_now();
    if (cx->status == HYLA_OK)
        note(cx, c->alltoallv(c, state, sc, zero, cx->hop, rc, zero));
    cx->seconds += hyla_now() - t0, cx->chain_seconds += hyla_now() - t0;
    if (c->rank == to)
        memcpy(state, cx->hop, floats * sizeof(float));
}

/* Every rank sends to rank + step (if there is one) and receives from rank - step (zeros if none). */
static void shift(hyla_context *cx, int step, const float *send, float *recv, size_t floats)
{
    hyla_comm *c = cx->comm;
    int N = c->size, to = c->rank + step, from = c->rank - step;
    size_t zero[N], sc[N], rc[N];
    memset(zero, 0, sizeof zero), memset(sc, 0, sizeof sc), memset(rc, 0, sizeof rc);
    if (to >= 0 && to < N)
        sc[to] = floats * sizeof(float);
    if (from >= 0 && from < N)
        rc[from] = floats * sizeof(float);
    else
        memset(recv, 0, floats * sizeof(float));
    double t0 = hyla_now();
    if (cx->status == HYLA_OK)
        note(cx, c->alltoallv(c, send, sc, zero, recv, rc, zero));
    cx->seconds += hyla_now() - t0;
}

static void shift_fwd(void *ctx, const float *mine, float *prev, size_t floats) { shift(ctx, 1, mine, prev, floats); }
static void shift_bwd(void *ctx, const float *to_prev, float *from_next, size_t floats)
{
    shift(ctx, -1, to_prev, from_next, floats);
}

static void chain_fwd(void *ctx, float *state, size_t floats, void (*run)(void *arg), void *arg)
{
    hyla_context *cx = ctx;
    for (int h = 0; h < cx->comm->size; h++) {
        if (h == cx->comm->rank)
            run(arg);
        if (h + 1 < cx->comm->size)
            hop(cx, h, h + 1, state, floats);
    }
}

static void chain_bwd(void *ctx, float *state, size_t floats, void (*run)(void *arg), void *arg)
{
    hyla_context *cx = ctx;
    for (int h = cx->comm->size - 1; h >= 0; h--) {
        if (h == cx->comm->rank)
            run(arg);
        if (h > 0)
            hop(cx, h, h - 1, state, floats);
    }
}

static void allgather(void *ctx, const float *mine, float *all, size_t floats)
{
    hyla_context *cx = ctx;
    double t0 = hyla_now();
    if (cx->status == HYLA_OK)
        note(cx, cx->comm->allgather(cx->comm, mine, all, floats * sizeof(float)));
    cx->seconds += hyla_now() - t0;
}

static void reduce(void *ctx, const float *parts, float *mine, size_t floats)
{
    hyla_context *cx = ctx;
    HYLA_ASSERT(floats * (size_t)cx->comm->size <= cx->stage_floats);
    double t0 = hyla_now();
    if (cx->status == HYLA_OK)
        note(cx, cx->comm->alltoall(cx->comm, parts, cx->stage, floats * sizeof(float)));
    cx->seconds += hyla_now() - t0;
    memcpy(mine, cx->stage, floats * sizeof(float));
    for (int r = 1; r < cx->comm->size; r++) /* rank order */
        for (size_t i = 0; i < floats; i++)
            mine[i] += cx->stage[(size_t)r * floats + i];
}

static float *layer_state(void *ctx, int layer)
{
    hyla_context *cx = ctx;
    HYLA_ASSERT(layer >= 0 && layer < HYLA_MAX_LAYERS && cx->kept_at[layer] >= 0);
    return cx->kept + (size_t)cx->kept_at[layer] * cx->kept_floats;
}

static float *buffer(void *ctx, int i, size_t floats)
{
    hyla_context *cx = ctx;
    HYLA_ASSERT(i >= 0 && i < 4 && floats <= cx->buf_floats[i]);
    return cx->buf[i];
}

static void reduce_aux(void *ctx, double *counts, double *psum, int64_t E, int64_t *rows)
{
    hyla_context *cx = ctx;
    int N = cx->comm->size;
    size_t w = (size_t)(2 * E + 1);
    double *mine = cx->aux + (size_t)cx->comm->rank * w;
    memcpy(mine, counts, (size_t)E * sizeof(double));
    memcpy(mine + E, psum, (size_t)E * sizeof(double));
    mine[2 * E] = (double)*rows;
    double own[w];
    memcpy(own, mine, w * sizeof(double));
    double t0 = hyla_now();
    if (cx->status == HYLA_OK)
        note(cx, cx->comm->allgather(cx->comm, own, cx->aux, w * sizeof(double)));
    cx->seconds += hyla_now() - t0;
    for (int64_t e = 0; e < E; e++) { /* rank order */
        counts[e] = cx->aux[e], psum[e] = cx->aux[E + e];
        for (int r = 1; r < N; r++)
            counts[e] += cx->aux[(size_t)r * w + (size_t)e], psum[e] += cx->aux[(size_t)r * w + (size_t)(E + e)];
    }
    int64_t total = 0;
    for (int r = 0; r < N; r++)
        total += (int64_t)cx->aux[(size_t)r * w + (size_t)(2 * E)];
    *rows = total;
}

int hyla_context_init(hyla_context *cx, hyla_comm *comm, const hyla_config *cfg, int64_t n_seq, int64_t T)
{
    memset(cx, 0, sizeof *cx);
    cx->comm = comm;
    cx->E = cfg->n_experts;
    size_t kept;
    hyla_context_sizes(cfg, n_seq, T, comm->size, cx->buf_floats, &cx->stage_floats, &kept);
    cx->kept_floats = kept;
    int64_t linear = 0;
    for (int l = 0; l < HYLA_MAX_LAYERS; l++)
        cx->kept_at[l] = l < cfg->n_layers && cfg->layer_kind[l] == HYLA_LAYER_LINEAR ? linear++ : -1;
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= (cx->buf[i] = aligned_alloc(64, hyla_align_up((cx->buf_floats[i] ? cx->buf_floats[i] : 1) * sizeof(float)))) != NULL;
    ok &= (cx->stage = aligned_alloc(64, hyla_align_up((cx->stage_floats ? cx->stage_floats : 1) * sizeof(float)))) != NULL;
    ok &= (cx->kept = aligned_alloc(64, hyla_align_up((size_t)(linear ? linear : 1) * kept * sizeof(float)))) != NULL;
    ok &= (cx->hop = aligned_alloc(64, hyla_align_up((kept ? kept : 1) * sizeof(float)))) != NULL;
    ok &= (cx->aux = aligned_alloc(64, hyla_align_up((size_t)comm->size * (size_t)(2 * cx->E + 1) * sizeof(double)))) != NULL;
    if (!ok) {
        hyla_context_free(cx);
        return hyla_error_set(HYLA_ERR_NOMEM, "context parallelism: cannot allocate the link's buffers");
    }
    for (int i = 0; i < 4; i++) /* fault the pages in at setup */
        memset(cx->buf[i], 0, cx->buf_floats[i] * sizeof(float));
    memset(cx->stage, 0, cx->stage_floats * sizeof(float));
    memset(cx->kept, 0, (size_t)linear * kept * sizeof(float));
    memset(cx->hop, 0, kept * sizeof(float));
    cx->link = (hyla_context_link){comm->rank, comm->size, shift_fwd, shift_bwd, chain_fwd, chain_bwd, allgather, reduce,
                                   layer_state, buffer, reduce_aux, cx};
    return HYLA_OK;
}

void hyla_context_free(hyla_context *cx)
{
    for (int i = 0; i < 4; i++)
        free(cx->buf[i]);
    free(cx->stage);
    free(cx->kept);
    free(cx->hop);
    free(cx->aux);
    memset(cx, 0, sizeof *cx);
}

size_t hyla_context_bytes(const hyla_context *cx)
{
    size_t b = 0;
    int64_t linear = 0;
    for (int l = 0; l < HYLA_MAX_LAYERS; l++)
        linear += cx->kept_at[l] >= 0;
    for (int i = 0; i < 4; i++)
        b += hyla_align_up((cx->buf_floats[i] ? cx->buf_floats[i] : 1) * sizeof(float));
    b += hyla_align_up((cx->stage_floats ? cx->stage_floats : 1) * sizeof(float));
    b += hyla_align_up((size_t)(linear ? linear : 1) * cx->kept_floats * sizeof(float));
    b += hyla_align_up((cx->kept_floats ? cx->kept_floats : 1) * sizeof(float));
    b += hyla_align_up((size_t)cx->comm->size * (size_t)(2 * cx->E + 1) * sizeof(double));
    return b;
}

int hyla_context_status(hyla_context *cx)
{
    int st = cx->status;
    cx->status = HYLA_OK;
    return st;
}
