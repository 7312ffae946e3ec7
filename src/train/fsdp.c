/* FSDP: weight pieces, gathers on demand, ordered reduce-scatters, the sharded norm (fsdp.h). */
#include "train/fsdp.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/error.h"
#include "core/profile.h"
#include "parallel/shard.h"
#include "parallel/shard_comm.h"

int hyla_fsdp_grouped(const hyla_fsdp *f, const hyla_param *p) { return f->groups > 1 && hyla_role_is_routed(p->role); }

/* (expert groups: the routed experts are not in any part; the experts ops take them by group) */
static int in_part(const hyla_fsdp *f, const hyla_param *p, int l0, int l1)
{
    return !hyla_fsdp_grouped(f, p) && hyla_fsdp_in_part(&f->m->cfg, p, l0, l1);
}

/* Bytes parameter p takes gathered: its fp32 span, and with bf16 compute its bf16 copy (matrices). */
static size_t gathered_bytes_of(const hyla_fsdp *f, const hyla_param *p)
{
    size_t b = hyla_param_span(p) * sizeof(float);
    return b + (f->m->w16 && hyla_role_is_matrix(p->role) ? hyla_param_span(p) * sizeof(uint16_t) : 0);
}

/* Parameter i's gather: this rank's piece into the arena, then every rank's (started, or whole
 * with r NULL); step: a step's gather (counted in the gathered high-water), else a checkpoint's or
 * an evaluation's. */
static int gather_param(hyla_fsdp *f, int i, int step, hyla_shard_requests *r)
{
    const hyla_param *p = &f->m->table.params[i];
    const hyla_param *q = &f->shard.params[i];
    memcpy(f->m->w + p->offset + f->piece_elem0[i], f->w + q->offset, (size_t)q->numel * sizeof(float));
    HYLA_TRY(r ? hyla_shard_gather_start(f->comm, p->numel, f->m->w + p->offset, r)
               : hyla_shard_gather(f->comm, p->numel, f->m->w + p->offset));
    f->gathered += gathered_bytes_of(f, p);
    if (step)
        f->gathered_peak = f->gathered > f->gathered_peak ? f->gathered : f->gathered_peak;
    return HYLA_OK;
}

/* The part's gathers complete: bf16 compute's copies of its matrices, as AdamW would round them. */
static void gathered(hyla_fsdp *f, int l0, int l1)
{
    for (int i = 0; f->m->w16 && i < f->m->table.n_params; i++)
        if (in_part(f, &f->m->table.params[i], l0, l1))
            hyla_model_refresh_bf16_param(f->m, i);
}

static int gather_part(hyla_fsdp *f, int l0, int l1, hyla_shard_requests *r)
{
    for (int i = 0; i < f->m->table.n_params; i++)
        if (in_part(f, &f->m->table.params[i], l0, l1))
            HYLA_TRY(gather_param(f, i, !f->outside, r));
    return HYLA_OK;
}

static int same_part(const hyla_fsdp *f, int a, int b)
{
    return a >= 0 && b >= 0 && a < f->n_parts && b < f->n_parts && f->parts[a][0] == f->parts[b][0] &&
           f->parts[a][1] == f->parts[b][1];
}

static int acquire(void *ctx, int l0, int l1)
{
    hyla_fsdp *f = ctx;
    int k = l0 == HYLA_WEIGHTS_EMBED ? 0 : f->next; /* a micro-batch starts with the embedding */
    if (l0 == HYLA_WEIGHTS_EMBED)
        f->grp_seq_next = 0; /* (and its experts calls from the first) */
    int expected = k < f->n_parts && f->parts[k][0] == l0 && f->parts[k][1] == l1;
    double t0 = hyla_now();
    if (f->kept >= 0 && expected && same_part(f, f->kept, k)) { /* still gathered */
        f->kept = -1;
    } else if (f->inflight == k && expected) { /* prefetched: what is left of it */
        HYLA_TRY(hyla_shard_wait(f->comm, &f->reqs));
        f->inflight = -1;
        gathered(f, l0, l1);
    } else {
        HYLA_TRY(hyla_shard_wait(f->comm, &f->reqs)); /* (an unexpected order: nothing may stay in flight) */
        f->inflight = -1;
        HYLA_TRY(gather_part(f, l0, l1, NULL));
        gathered(f, l0, l1);
    }
    f->wait_seconds += hyla_now() - t0;
    f->next = expected ? k + 1 : f->n_parts; /* off the sequence: no more prefetching this micro-batch */
    int n = f->next;
    if (f->prefetch && !f->outside && n < f->n_parts && !same_part(f, n, k)) {
        HYLA_TRY(gather_part(f, f->parts[n][0], f->parts[n][1], &f->reqs));
        f->inflight = n;
    }
    return HYLA_OK;
}

static void poll(void *ctx)
{
    hyla_fsdp *f = ctx;
    if (f->inflight >= 0)
        hyla_shard_poll(f->comm, &f->reqs); /* an error shows again at the wait */
    if (f->rs_layer0 >= 0)
        hyla_shard_poll(f->comm, &f->rs_reqs);
    if (f->grp_layer >= 0) /* expert groups: the next group's gather, a group's reduce-scatter */
        hyla_shard_poll(f->comm, &f->grp_reqs);
    if (f->grp_rs_i >= 0)
        hyla_shard_poll(f->comm, &f->grp_rs_reqs);
    if (f->head_started)
        hyla_shard_poll(f->comm, &f->head_reqs);
}

static void release(void *ctx, int l0, int l1)
{
    hyla_fsdp *f = ctx;
    if (!f->outside && same_part(f, f->next - 1, f->next)) { /* acquired again next: stays */
        f->kept = f->next - 1;
        return;
    }
    /* acquired next in a step's order (its gather may be in flight already); outside a step the
     * order is not the parts list's: everything goes */
    int n = !f->outside && f->next < f->n_parts ? f->next : -1;
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (in_part(f, p, l0, l1)) {
            f->gathered -= gathered_bytes_of(f, p);
            if (n >= 0 && in_part(f, p, f->parts[n][0], f->parts[n][1]))
                continue; /* in the next part too (the MTP head's input stage, then the head): stays */
            hyla_model_release_pages(f->m->w + p->offset, hyla_param_span(p) * sizeof(float));
            if (f->m->w16 && hyla_role_is_matrix(p->role))
                hyla_model_release_pages(f->m->w16 + p->offset, hyla_param_span(p) * sizeof(uint16_t));
        }
    }
}

/* Each layer's range of the shard arrays: its pieces follow the table's order, so they are
 * contiguous (a layer whose pieces on this rank are all empty has an empty range where it would
 * start). Empty pieces may share an offset with a neighbour; nothing reads them. */
static void shard_layer_ranges(hyla_fsdp *f)
{
    int L = f->m->cfg.n_layers;
    for (int l = 0; l < L; l++)
        f->layer_lo[l] = SIZE_MAX, f->layer_hi[l] = 0;
    for (int i = 0; i < f->shard.n_params; i++) {
        const hyla_param *q = &f->shard.params[i];
        if (q->layer < 0)
            continue;
        size_t end = q->offset + hyla_param_span(q);
        f->layer_lo[q->layer] = q->offset < f->layer_lo[q->layer] ? q->offset : f->layer_lo[q->layer];
        f->layer_hi[q->layer] = end > f->layer_hi[q->layer] ? end : f->layer_hi[q->layer];
    }
}

float *hyla_fsdp_piece_grad(const hyla_fsdp *f, int i)
{
    const hyla_param *p = &f->m->table.params[i];
    size_t off = f->shard.params[i].offset;
    if (f->shard.params[i].numel == 0)
        return f->grad; /* nothing of it here: never read or written */
    if (!f->per_layer)
        return f->grad + off;
    if (p->layer >= 0) /* the current unit's window, after the head */
        return f->grad + f->head_pieces + (off - f->unit_lo);
    int L = f->m->cfg.n_layers; /* the head: compact, as the table's (before and after the layers) */
    return f->grad + (off < f->layer_lo[0] ? off : off - (f->layer_hi[L - 1] - f->layer_lo[0]));
}

int hyla_fsdp_init(hyla_fsdp *f, hyla_comm *comm, hyla_model *m, const hyla_executor *ex, int per_layer, int prefetch,
                   int frozen, int overlap, int expert_groups)
{
    memset(f, 0, sizeof *f);
    f->comm = comm;
    f->m = m;
    f->frozen = frozen;
    f->per_layer = per_layer;
    f->prefetch = prefetch;
    f->inflight = f->kept = -1;
    f->rs_layer0 = f->rs_layer1 = -1;
    f->overlap = overlap && prefetch && !frozen;
    f->groups = expert_groups > 1 ? expert_groups : 1;
    const hyla_param_table *t = &m->table;
    int n = t->n_params, N = comm->size;
    f->shard = *t; /* borrowed: config, layout, index; owned: params */
    f->shard.n_hf = 0, f->shard.hf = NULL;
    f->shard.params = malloc((size_t)n * sizeof *f->shard.params);
    f->piece_elem0 = malloc((size_t)n * sizeof *f->piece_elem0);
    f->layer_lo = malloc((size_t)t->cfg.n_layers * sizeof *f->layer_lo);
    f->layer_hi = malloc((size_t)t->cfg.n_layers * sizeof *f->layer_hi);
    f->n_parts = hyla_fsdp_parts(ex, NULL, 0);
    f->parts = malloc((size_t)f->n_parts * sizeof *f->parts);
    if (f->parts)
        hyla_fsdp_parts(ex, f->parts, f->n_parts);
    if (!f->shard.params || !f->piece_elem0 || !f->layer_lo || !f->layer_hi || !f->parts) {
        hyla_fsdp_free(f);
        return hyla_error_set(HYLA_ERR_NOMEM, "fsdp: out of memory");
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t lo, len;
        hyla_shard_piece(t->params[i].numel, N, comm->rank, &lo, &len);
        f->shard.params[i] = t->params[i];
        f->shard.params[i].offset = at;
        f->shard.params[i].numel = len;
        f->piece_elem0[i] = lo;
        at += hyla_span_floats(len);
    }
    f->shard.total_floats = at;
    int st = HYLA_OK;
    shard_layer_ranges(f);
    size_t unit_pieces;
    hyla_fsdp_grad_sizes(t, ex, N, comm->rank, &f->head_pieces, &unit_pieces);
    size_t grad_floats = f->grad_floats = frozen ? 0 : hyla_fsdp_grad_floats(t, ex, N, comm->rank, per_layer);
    f->w = aligned_alloc(64, hyla_align_up((at ? at : 1) * sizeof(float)));
    if (f->overlap) {
        f->rs_stage_floats = hyla_fsdp_overlap_floats(t, ex, N, comm->rank, f->groups);
        f->rs_stage = aligned_alloc(64, hyla_align_up((f->rs_stage_floats ? f->rs_stage_floats : 1) * sizeof(float)));
        f->grp_stage_floats = hyla_fsdp_group_stage_floats(t, N, comm->rank, f->groups);
        if (f->grp_stage_floats)
            f->grp_stage = aligned_alloc(64, hyla_align_up(f->grp_stage_floats * sizeof(float)));
    }
    if (!frozen) { /* (frozen: no gradient of these weights is formed, nothing is reduce-scattered) */
        f->grad = aligned_alloc(64, hyla_align_up((grad_floats ? grad_floats : 1) * sizeof(float)));
        f->stage = aligned_alloc(64, hyla_align_up((size_t)hyla_shard_comm_floats(N) * sizeof(float)));
        f->sums = calloc((size_t)N, sizeof *f->sums);
    }
    if (st == HYLA_OK && (!f->w || (!frozen && (!f->grad || !f->stage || !f->sums)) || (f->overlap && (!f->rs_stage || (f->grp_stage_floats && !f->grp_stage)))))
        st = hyla_error_set(HYLA_ERR_NOMEM, "fsdp: cannot allocate this rank's %zu-float pieces", at);
    if (st != HYLA_OK) {
        hyla_fsdp_free(f);
        return st;
    }
    hyla_exact_sum_init(&f->sumsq);
    if (f->overlap) /* fault the pages in at setup */
        memset(f->rs_stage, 0, f->rs_stage_floats * sizeof(float));
    if (f->grp_stage)
        memset(f->grp_stage, 0, f->grp_stage_floats * sizeof(float));
    if (!frozen) {
        memset(f->grad, 0, grad_floats * sizeof(float));
        memset(f->stage, 0, (size_t)hyla_shard_comm_floats(N) * sizeof(float));
    }
    if (!m->source_set && !m->pieces) /* (opened deferred: the pieces are read later, one tensor at a time) */
        hyla_fsdp_take_pieces(f, m->w, f->w);
    hyla_fsdp_release_all(f);
    f->source = (hyla_weight_source){acquire, release, poll, f, NULL, NULL};
    hyla_fsdp_experts_init(f, expert_groups);
    return HYLA_OK;
}

void hyla_fsdp_free(hyla_fsdp *f)
{
    free(f->shard.params);
    free(f->piece_elem0);
    free(f->layer_lo);
    free(f->layer_hi);
    free(f->w);
    free(f->grad);
    free(f->stage);
    free(f->sums);
    free(f->parts);
    hyla_shard_requests *in_flight[] = {&f->reqs, &f->rs_reqs, &f->grp_reqs, &f->grp_rs_reqs, &f->head_reqs};
    for (size_t i = 0; i < sizeof in_flight / sizeof *in_flight; i++) { /* (completed before their buffers go) */
        if (in_flight[i]->n)
            hyla_shard_wait(f->comm, in_flight[i]);
        hyla_shard_requests_free(in_flight[i]);
    }
    free(f->rs_stage);
    free(f->grp_stage);
    free(f->head_stage);
    memset(f, 0, sizeof *f);
}

size_t hyla_fsdp_bytes(const hyla_fsdp *f)
{
    size_t pieces = hyla_align_up((f->shard.total_floats ? f->shard.total_floats : 1) * sizeof(float));
    if (f->frozen)
        return pieces;
    size_t overlap = f->overlap ? hyla_align_up((f->rs_stage_floats ? f->rs_stage_floats : 1) * sizeof(float)) : 0;
    overlap += f->grp_stage ? hyla_align_up(f->grp_stage_floats * sizeof(float)) : 0;
    overlap += f->head_stage ? hyla_align_up((f->head_stage_floats ? f->head_stage_floats : 1) * sizeof(float)) : 0;
    return overlap + pieces + hyla_align_up((f->grad_floats ? f->grad_floats : 1) * sizeof(float)) + hyla_align_up((size_t)hyla_shard_comm_floats(f->comm->size) * sizeof(float)) +
           (size_t)f->comm->size * sizeof(hyla_exact_sum);
}

int hyla_fsdp_reduce_layers(hyla_fsdp *f, int layer0, int layer1, const float *window, size_t lo, int first)
{
    f->unit_lo = f->layer_lo[layer0];
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (p->layer >= layer0 && p->layer <= layer1 && !hyla_fsdp_grouped(f, p)) /* (groups: reduced already) */
            HYLA_TRY(hyla_shard_reduce_scatter(f->comm, p->numel, window + (p->offset - lo), hyla_fsdp_piece_grad(f, i), first,
                                               f->stage));
    }
    return HYLA_OK;
}

int hyla_fsdp_reduce_start(hyla_fsdp *f, int layer0, int layer1, const float *window, size_t lo, int first)
{
    HYLA_ASSERT(f->rs_layer0 < 0);
    float *stage = f->rs_stage;
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (p->layer >= layer0 && p->layer <= layer1 && !hyla_fsdp_grouped(f, p)) {
            HYLA_TRY(hyla_shard_reduce_scatter_start(f->comm, p->numel, window + (p->offset - lo), stage, &f->rs_reqs));
            stage += hyla_shard_overlap_floats(p->numel, f->comm->size, f->comm->rank);
        }
    }
    f->rs_layer0 = layer0, f->rs_layer1 = layer1, f->rs_first = first;
    return HYLA_OK;
}

int hyla_fsdp_reduce_finish(hyla_fsdp *f, int *layer0, int *layer1)
{
    *layer0 = *layer1 = -1;
    if (f->rs_layer0 < 0)
        return HYLA_OK;
    double t0 = hyla_now();
    HYLA_TRY(hyla_shard_wait(f->comm, &f->rs_reqs));
    f->reduce_wait_seconds += hyla_now() - t0;
    f->unit_lo = f->layer_lo[f->rs_layer0];
    const float *stage = f->rs_stage;
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (p->layer >= f->rs_layer0 && p->layer <= f->rs_layer1 && !hyla_fsdp_grouped(f, p)) {
            hyla_shard_reduce_scatter_finish(f->comm, p->numel, hyla_fsdp_piece_grad(f, i), f->rs_first, stage);
            stage += hyla_shard_overlap_floats(p->numel, f->comm->size, f->comm->rank);
        }
    }
    *layer0 = f->rs_layer0, *layer1 = f->rs_layer1;
    f->rs_layer0 = f->rs_layer1 = -1;
    return HYLA_OK;
}

int hyla_fsdp_set_mtp(hyla_fsdp *f, int mtp)
{
    f->mtp = mtp;
    if (!f->overlap)
        return HYLA_OK;
    f->head_stage_floats = hyla_fsdp_head_stage_floats(&f->m->table, f->comm->size, f->comm->rank, mtp);
    free(f->head_stage);
    f->head_stage = aligned_alloc(64, hyla_align_up((f->head_stage_floats ? f->head_stage_floats : 1) * sizeof(float)));
    if (!f->head_stage)
        return hyla_error_set(HYLA_ERR_NOMEM, "fsdp: cannot allocate %zu floats of head staging", f->head_stage_floats);
    memset(f->head_stage, 0, f->head_stage_floats * sizeof(float)); /* fault the pages in at setup */
    return HYLA_OK;
}

int hyla_fsdp_reduce_head_start(hyla_fsdp *f, const float *head, int first)
{
    float *stage = f->head_stage;
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (hyla_fsdp_head_early(&f->m->cfg, p, f->mtp)) {
            HYLA_TRY(hyla_shard_reduce_scatter_start(f->comm, p->numel, head + hyla_grad_head_index(f->ex, p->offset),
                                                     stage, &f->head_reqs));
            stage += hyla_shard_overlap_floats(p->numel, f->comm->size, f->comm->rank);
        }
    }
    f->head_started = 1, f->head_first = first;
    return HYLA_OK;
}

int hyla_fsdp_reduce_head(hyla_fsdp *f, const float *head, int first)
{
    if (f->head_started) { /* the early ones: finished, their sums in rank order */
        HYLA_TRY(hyla_shard_wait(f->comm, &f->head_reqs)); /* (the trainer times this call as a wait) */
        const float *stage = f->head_stage;
        for (int i = 0; i < f->m->table.n_params; i++) {
            const hyla_param *p = &f->m->table.params[i];
            if (hyla_fsdp_head_early(&f->m->cfg, p, f->mtp)) {
                hyla_shard_reduce_scatter_finish(f->comm, p->numel, hyla_fsdp_piece_grad(f, i), f->head_first, stage);
                stage += hyla_shard_overlap_floats(p->numel, f->comm->size, f->comm->rank);
            }
        }
    }
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (f->head_started && hyla_fsdp_head_early(&f->m->cfg, p, f->mtp))
            continue;
        if (p->layer < 0 && (f->mtp || !p->mtp)) /* (the MTP head without the MTP loss: frozen, no gradient) */
            HYLA_TRY(hyla_shard_reduce_scatter(f->comm, p->numel, head + hyla_grad_head_index(f->ex, p->offset),
                                               hyla_fsdp_piece_grad(f, i), first, f->stage));
    }
    f->head_started = 0;
    return HYLA_OK;
}

int hyla_fsdp_update(hyla_fsdp *f, hyla_adamw *opt, int layer0, int layer1)
{
    for (int i = 0; i < f->shard.n_params; i++) {
        const hyla_param *p = &f->shard.params[i];
        if (layer0 < 0 ? p->layer >= 0 : p->layer < layer0 || p->layer > layer1)
            continue; /* (the head's: the MTP head's too, which the optimizer skips when frozen) */
        const float *g = hyla_fsdp_piece_grad(f, i);
        hyla_grad_sumsq_add(&f->sumsq, g, p->numel); /* the norm, as whole-step updates sum it */
        double unused = 0.0;
        HYLA_TRY(hyla_adamw_update_param(opt, p, f->w, g, &unused));
    }
    return HYLA_OK;
}

int hyla_fsdp_grad_norm(hyla_fsdp *f, double *norm)
{
    hyla_exact_sum mine, *all = f->sums;
    hyla_exact_sum_init(&mine);
    if (f->per_layer) { /* summed while the pieces were updated */
        mine = f->sumsq;
        hyla_exact_sum_init(&f->sumsq);
    }
    for (int i = 0; !f->per_layer && i < f->shard.n_params; i++) /* each piece starts at a block boundary */
        hyla_grad_sumsq_add(&mine, hyla_fsdp_piece_grad(f, i), f->shard.params[i].numel);
    hyla_exact_sum_normalize(&mine);
    HYLA_TRY(f->comm->allgather(f->comm, &mine, all, sizeof mine));
    for (int r = 1; r < f->comm->size; r++) /* exact: any order gives the same sum */
        hyla_exact_sum_merge(&all[0], &all[r]);
    *norm = sqrt(hyla_exact_sum_value(&all[0]));
    return HYLA_OK;
}

/* ---- a checkpoint's save, part by part ---------------------------------------------------- */

enum { SAVE_NONE = INT32_MIN, SAVE_END = -1000 }; /* no part in; the message that ends serving */

static int in_save_part(const hyla_param *p, int layer) { return layer >= 0 ? p->layer == layer : p->layer < 0; }

/* Vector v's part `layer` in place of the one it held (every rank, the same sequence). */
static int save_gather(hyla_fsdp *f, int v, int layer)
{
    float *full = f->save_full[v];
    for (int i = 0; f->save_part[v] != SAVE_NONE && i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (in_save_part(p, f->save_part[v]))
            hyla_model_release_pages(full + p->offset, hyla_param_span(p) * sizeof(float));
    }
    f->save_part[v] = layer;
    for (int i = 0; i < f->m->table.n_params; i++) {
        const hyla_param *p = &f->m->table.params[i];
        if (!in_save_part(p, layer))
            continue;
        memcpy(full + p->offset + f->piece_elem0[i], f->save_pieces[v] + f->shard.params[i].offset,
               (size_t)f->shard.params[i].numel * sizeof(float));
        HYLA_TRY(hyla_shard_gather(f->comm, p->numel, full + p->offset));
    }
    return HYLA_OK;
}

void hyla_fsdp_save_begin(hyla_fsdp *f, float *m_full, float *v_full, const float *m_pieces, const float *v_pieces)
{
    f->save_full[HYLA_FETCH_W] = f->m->w, f->save_pieces[HYLA_FETCH_W] = f->w;
    f->save_full[HYLA_FETCH_M] = m_full, f->save_pieces[HYLA_FETCH_M] = m_pieces;
    f->save_full[HYLA_FETCH_V] = v_full, f->save_pieces[HYLA_FETCH_V] = v_pieces;
    for (int v = 0; v < 3; v++)
        f->save_part[v] = SAVE_NONE;
}

int hyla_fsdp_fetch(void *ctx, int vector, int layer)
{
    hyla_fsdp *f = ctx;
    if (f->save_part[vector] == layer)
        return HYLA_OK;
    int32_t msg[2] = {vector, layer};
    HYLA_TRY(f->comm->bcast(f->comm, msg, sizeof msg, 0));
    return save_gather(f, vector, layer);
}

int hyla_fsdp_serve(hyla_fsdp *f)
{
    for (;;) {
        int32_t msg[2];
        HYLA_TRY(f->comm->bcast(f->comm, msg, sizeof msg, 0));
        if (msg[0] == SAVE_END)
            return HYLA_OK;
        if (msg[0] < 0 || msg[0] > 2 || msg[1] < -1 || msg[1] >= f->m->cfg.n_layers)
            return hyla_error_set(HYLA_ERR_ARG, "fsdp save: rank 0 asked for part (%d, %d)", msg[0], msg[1]);
        HYLA_TRY(save_gather(f, msg[0], msg[1]));
    }
}

int hyla_fsdp_save_end(hyla_fsdp *f)
{
    int32_t msg[2] = {SAVE_END, 0};
    return f->comm->bcast(f->comm, msg, sizeof msg, 0);
}

void hyla_fsdp_save_finish(hyla_fsdp *f)
{
    hyla_fsdp_release_all(f);
    memset(f->save_full, 0, sizeof f->save_full);
}

int hyla_fsdp_outside_step(hyla_fsdp *f, int on)
{
    HYLA_TRY(hyla_shard_wait(f->comm, &f->reqs)); /* (none in flight between steps) */
    HYLA_TRY(hyla_fsdp_experts_drain(f));
    f->inflight = f->kept = -1;
    f->next = f->n_parts;
    f->outside = on;
    if (!on)
        hyla_fsdp_release_all(f);
    return HYLA_OK;
}

int hyla_fsdp_gather_all(hyla_fsdp *f)
{
    HYLA_TRY(hyla_shard_wait(f->comm, &f->reqs)); /* (none in flight between steps) */
    HYLA_TRY(hyla_fsdp_experts_drain(f));
    f->inflight = f->kept = -1;
    for (int i = 0; i < f->m->table.n_params; i++)
        HYLA_TRY(gather_param(f, i, 0, NULL));
    hyla_model_refresh_bf16(f->m); /* every matrix's bf16 copy */
    return HYLA_OK;
}

void hyla_fsdp_release_all(hyla_fsdp *f)
{
    hyla_model_release_pages(f->m->w, f->m->w_bytes); /* the arenas are page-aligned mappings of their own */
    if (f->m->w16)
        hyla_model_release_pages(f->m->w16, f->m->w16_bytes);
    f->gathered = 0;
}

void hyla_fsdp_take_param(hyla_fsdp *f, int i)
{
    const hyla_param *p = &f->m->table.params[i];
    memcpy(f->w + f->shard.params[i].offset, f->m->w + p->offset + f->piece_elem0[i],
           (size_t)f->shard.params[i].numel * sizeof(float));
    hyla_model_release_pages(f->m->w + p->offset, hyla_param_span(p) * sizeof(float));
}

void hyla_fsdp_take_pieces(const hyla_fsdp *f, const float *full, float *pieces)
{
    for (int i = 0; i < f->shard.n_params; i++)
        memcpy(pieces + f->shard.params[i].offset, full + f->m->table.params[i].offset + f->piece_elem0[i],
               (size_t)f->shard.params[i].numel * sizeof(float));
}
