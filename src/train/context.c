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

/* The point-to-point messages (not collectives: a rank waits only for the one it receives from, so
 * the chain pipelines over the Gated DeltaNet layers between two attention layers' gathers): each
 * kind its own tag and send buffer, its previous send completed before the buffer is reused. */
enum { SEND_CHAIN_FWD, SEND_CHAIN_BWD, SEND_SHIFT_FWD, SEND_SHIFT_BWD };

static void send_to(hyla_context *cx, int kind, const float *data, size_t floats, int to)
{
    hyla_comm *c = cx->comm;
    HYLA_ASSERT(floats <= cx->out_floats[kind]);
    if (cx->status != HYLA_OK)
        return;
    note(cx, c->wait(c, cx->out_req[kind]));
    cx->out_req[kind] = NULL;
    memcpy(cx->out[kind], data, floats * sizeof(float));
    if (cx->status == HYLA_OK)
        note(cx, c->isend(c, cx->out[kind], floats * sizeof(float), to, 1 + kind, &cx->out_req[kind]));
}

static void recv_from(hyla_context *cx, int kind, float *dst, size_t floats, int from)
{
    if (cx->status == HYLA_OK)
        note(cx, cx->comm->recv(cx->comm, dst, floats * sizeof(float), from, 1 + kind));
}

/* Each rank's `floats` to rank + step (if there is one); rank - step's into recv (zeros if none). */
static void shift(hyla_context *cx, int step, const float *send, float *recv, size_t floats)
{
    int N = cx->comm->size, to = cx->comm->rank + step, from = cx->comm->rank - step;
    double t0 = hyla_now();
    if (to >= 0 && to < N)
        send_to(cx, step > 0 ? SEND_SHIFT_FWD : SEND_SHIFT_BWD, send, floats, to);
    if (from >= 0 && from < N)
        recv_from(cx, step > 0 ? SEND_SHIFT_FWD : SEND_SHIFT_BWD, recv, floats, from);
    else
        memset(recv, 0, floats * sizeof(float));
    cx->seconds += hyla_now() - t0;
}

static void shift_fwd(void *ctx, const float *mine, float *prev, size_t floats) { shift(ctx, 1, mine, prev, floats); }
static void shift_bwd(void *ctx, const float *to_prev, float *from_next, size_t floats)
{
    shift(ctx, -1, to_prev, from_next, floats);
}

/* The state from the rank before (waiting for it: the chain's bubble), run, the state on. */
static void chain(hyla_context *cx, int step, float *state, size_t floats, void (*run)(void *arg), void *arg)
{
    int N = cx->comm->size, from = cx->comm->rank - step, to = cx->comm->rank + step;
    int kind = step > 0 ? SEND_CHAIN_FWD : SEND_CHAIN_BWD;
    double t0 = hyla_now();
    if (from >= 0 && from < N)
        recv_from(cx, kind, state, floats, from);
    double waited = hyla_now() - t0;
    run(arg);
    double t1 = hyla_now();
    cx->chain_wait_seconds += waited, cx->chain_run_seconds[step > 0 ? 0 : 1] += t1 - t0 - waited;
    if (to >= 0 && to < N)
        send_to(cx, kind, state, floats, to);
    double sent = hyla_now() - t1;
    cx->seconds += waited + sent, cx->chain_seconds += waited + sent;
}

static void chain_fwd(void *ctx, float *state, size_t floats, void (*run)(void *arg), void *arg)
{
    chain(ctx, 1, state, floats, run, arg);
}
static void chain_bwd(void *ctx, float *state, size_t floats, void (*run)(void *arg), void *arg)
{
    chain(ctx, -1, state, floats, run, arg);
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
    hyla_context_sizes(cfg, n_seq, T, comm->size, cx->buf_floats, cx->out_floats, &cx->stage_floats, &kept);
    cx->kept_floats = kept;
    cx->bytes = hyla_context_link_bytes(cfg, n_seq, T, comm->size); /* (what the allocations below take) */
    int64_t linear = 0;
    for (int l = 0; l < HYLA_MAX_LAYERS; l++)
        cx->kept_at[l] = l < cfg->n_layers && cfg->layer_kind[l] == HYLA_LAYER_LINEAR ? linear++ : -1;
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= (cx->buf[i] = aligned_alloc(64, hyla_align_up((cx->buf_floats[i] ? cx->buf_floats[i] : 1) * sizeof(float)))) != NULL;
    ok &= (cx->stage = aligned_alloc(64, hyla_align_up((cx->stage_floats ? cx->stage_floats : 1) * sizeof(float)))) != NULL;
    ok &= (cx->kept = aligned_alloc(64, hyla_align_up((size_t)(linear ? linear : 1) * kept * sizeof(float)))) != NULL;
    for (int i = 0; i < 4; i++)
        ok &= (cx->out[i] = aligned_alloc(64, hyla_align_up((cx->out_floats[i] ? cx->out_floats[i] : 1) * sizeof(float)))) != NULL;
    ok &= (cx->aux = aligned_alloc(64, hyla_align_up((size_t)comm->size * (size_t)(2 * cx->E + 1) * sizeof(double)))) != NULL;
    if (!ok) {
        hyla_context_free(cx);
        return hyla_error_set(HYLA_ERR_NOMEM, "context parallelism: cannot allocate the link's buffers");
    }
    for (int i = 0; i < 4; i++) /* fault the pages in at setup */
        memset(cx->buf[i], 0, cx->buf_floats[i] * sizeof(float));
    memset(cx->stage, 0, cx->stage_floats * sizeof(float));
    memset(cx->kept, 0, (size_t)linear * kept * sizeof(float));
    for (int i = 0; i < 4; i++)
        memset(cx->out[i], 0, cx->out_floats[i] * sizeof(float));
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
    for (int i = 0; i < 4; i++) {
        if (cx->out_req[i]) /* (a send still in flight: completed first) */
            cx->comm->wait(cx->comm, cx->out_req[i]);
        free(cx->out[i]);
    }
    free(cx->aux);
    memset(cx, 0, sizeof *cx);
}

size_t hyla_context_bytes(const hyla_context *cx) { return cx->bytes; }

int hyla_context_status(hyla_context *cx)
{
    int st = cx->status;
    cx->status = HYLA_OK;
    return st;
}
