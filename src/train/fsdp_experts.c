/* FSDP's expert groups (fsdp.h, --expert-groups G): an MoE layer's routed expert tensors are not
 * part of its layer's gather. The experts ops take each tensor G groups at a time
 * (model/layer_ops.h, hyla_expert_source): a group's rows are gathered into the arena (range
 * gathers, parallel/shard_comm.h) just before its experts run and released after; with the
 * prefetch the next group's gather runs while this group computes. In backward the group's weight
 * gradient rows are complete when its experts are done: they are reduce-scattered into the
 * pieces at once (the same ordered sum as the layer's, on a range) and zeroed in the window
 * (pages given back), so the window holds one group's expert gradients at a time. With
 * --overlap-reduce the group's reduce-scatter is started then and finished when the next group's
 * backward ends (or its unit's gradients are reduced): two groups' rows in the windows, one
 * group's staging. The MTP head's
 * layer gathers its experts alike; its gradients live in the compact head, reduced after the
 * micro-batch as before. */
#include <limits.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "parallel/shard_comm.h"
#include "train/fsdp.h"

/* Tensor `role` of executor layer `layer` (the MTP head's as n_layers + j): its index and the
 * element range of experts [e0, e1). */
static int group_range(const hyla_fsdp *f, int layer, hyla_role role, int64_t e0, int64_t e1, int64_t *a, int64_t *b)
{
    int i = hyla_param_find(&f->m->table, role, layer);
    int64_t per_expert = f->m->table.params[i].numel / f->m->cfg.n_experts;
    *a = e0 * per_expert, *b = e1 * per_expert;
    return i;
}

static size_t group_bytes(const hyla_fsdp *f, int64_t a, int64_t b)
{
    return (size_t)(b - a) * (sizeof(float) + (f->m->w16 ? sizeof(uint16_t) : 0)); /* (routed tensors are matrices) */
}

/* This rank's piece of the range into the arena, then every rank's (started into r, or whole). */
static int gather_group(hyla_fsdp *f, int i, int64_t a, int64_t b, hyla_shard_requests *r)
{
    const hyla_param *p = &f->m->table.params[i];
    int64_t lo = f->piece_elem0[i], hi = lo + f->shard.params[i].numel;
    int64_t x = lo > a ? lo : a, y = hi < b ? hi : b;
    if (y > x)
        memcpy(f->m->w + p->offset + x, f->w + f->shard.params[i].offset + (x - lo), (size_t)(y - x) * sizeof(float));
    HYLA_TRY(hyla_shard_gather_range(f->comm, p->numel, a, b, f->m->w + p->offset, r));
    f->gathered += group_bytes(f, a, b);
    if (!f->outside)
        f->gathered_peak = f->gathered > f->gathered_peak ? f->gathered : f->gathered_peak;
    return HYLA_OK;
}

static void fail(hyla_fsdp *f, int st)
{
    if (st != HYLA_OK && f->expert_status == HYLA_OK)
        f->expert_status = st;
}

/* The group acquired after experts [e0, e1) of (layer, role): the next group of the tensor, or the
 * first of the micro-batch's next experts call if that is in the same layer (the same part: the
 * planned two groups in flight), in the order the executor's planning pass recorded. */
static int prefetch_next(hyla_fsdp *f, int layer, hyla_role role, int64_t e0, int64_t e1)
{
    int64_t E = f->m->cfg.n_experts, na, nb;
    int i;
    if (e1 < E) {
        i = group_range(f, layer, role, e1, e1 + (e1 - e0), &na, &nb);
        f->grp_e0 = e1;
    } else {
        const hyla_executor *ex = f->ex;
        int k = f->grp_seq_next;
        if (k >= ex->n_expert_seq || ex->expert_seq[k][0] != layer)
            return HYLA_OK;
        role = ex->expert_seq[k][1] == 1 ? HYLA_P_MOE_GATE_UP : HYLA_P_MOE_DOWN;
        i = group_range(f, layer, role, 0, e1 - e0, &na, &nb);
        f->grp_e0 = 0;
    }
    f->grp_layer = layer, f->grp_role = (int)role;
    return gather_group(f, i, na, nb, &f->grp_reqs);
}

static void acquire_group(void *ctx, int layer, hyla_role role, int64_t e0, int64_t e1)
{
    hyla_fsdp *f = ctx;
    if (f->expert_status != HYLA_OK)
        return; /* the step is failing: its result is discarded */
    if (e0 == 0) { /* a new experts call: the next expected in the micro-batch's order, or off it */
        int k = f->grp_seq_next, which = role == HYLA_P_MOE_GATE_UP ? 1 : 2;
        int expected = f->ex && k < f->ex->n_expert_seq && f->ex->expert_seq[k][0] == layer && f->ex->expert_seq[k][1] == which;
        f->grp_seq_next = expected ? k + 1 : INT_MAX; /* (off: no prefetch across calls until the next micro-batch) */
    }
    int64_t a, b;
    int i = group_range(f, layer, role, e0, e1, &a, &b);
    double t0 = hyla_now();
    int st;
    if (f->grp_layer == layer && f->grp_role == (int)role && f->grp_e0 == e0) { /* prefetched: what is left of it */
        st = hyla_shard_wait(f->comm, &f->grp_reqs);
        f->grp_layer = -1;
    } else if ((st = hyla_fsdp_experts_drain(f)) == HYLA_OK) { /* (an unexpected order: nothing may stay in flight) */
        st = gather_group(f, i, a, b, NULL);
    }
    if (st == HYLA_OK && f->m->w16 && f->m->matrices_in_w) /* bf16 compute: the group's rows of the copy */
        hyla_model_refresh_bf16_range(f->m, i, a, b);
    f->wait_seconds += hyla_now() - t0;
    if (st == HYLA_OK && f->prefetch && !f->outside)
        st = prefetch_next(f, layer, role, e0, e1);
    fail(f, st);
}

/* Rows [a, b) of parameter i out of the arena (and the gathered count). */
static void release_rows(hyla_fsdp *f, int i, int64_t a, int64_t b)
{
    const hyla_param *p = &f->m->table.params[i];
    f->gathered -= group_bytes(f, a, b);
    hyla_model_release_pages(f->m->w + p->offset + a, (size_t)(b - a) * sizeof(float));
    if (f->m->w16)
        hyla_model_release_pages(f->m->w16 + p->offset + a, (size_t)(b - a) * sizeof(uint16_t));
}

/* The executor layer whose table range starts the current window (its unit's first layer). */
static int window_layer(const hyla_fsdp *f)
{
    for (int l = 0; l < f->m->cfg.n_layers; l++)
        if (f->ex->layer_lo[l] == f->ex->window_lo)
            return l;
    return 0;
}

static void release_group(void *ctx, int layer, hyla_role role, int64_t e0, int64_t e1, int grads)
{
    hyla_fsdp *f = ctx;
    int64_t a, b;
    int i = group_range(f, layer, role, e0, e1, &a, &b);
    const hyla_param *p = &f->m->table.params[i];
    if (grads && !f->frozen && layer < f->m->cfg.n_layers && f->expert_status == HYLA_OK) {
        /* the group's gradient rows, in the unit's window: summed into the pieces, then zero again */
        float *g = f->ex->updates->window + (p->offset - f->ex->window_lo);
        double t0 = hyla_now();
        if (f->per_layer && f->overlap && f->rs_layer0 >= 0 && f->finish_unit) /* (its pieces' place is this unit's) */
            fail(f, f->finish_unit(f->finish_ctx));
        if (f->per_layer)
            f->unit_lo = f->layer_lo[window_layer(f)];
        if (f->overlap) { /* the previous group's finished, this one's started */
            fail(f, hyla_fsdp_experts_finish(f));
            fail(f, hyla_shard_reduce_scatter_range_start(f->comm, p->numel, a, b, g, f->grp_stage, &f->grp_rs_reqs));
            f->grp_rs_i = i, f->grp_rs_a = a, f->grp_rs_b = b, f->grp_rs_window = g, f->grp_rs_first = f->round_first;
        } else {
            fail(f, hyla_shard_reduce_scatter_range(f->comm, p->numel, a, b, g, hyla_fsdp_piece_grad(f, i),
                                                    f->round_first, f->stage));
            f->group_reduce_seconds += hyla_now() - t0;
            hyla_model_zero_pages(g + a, (size_t)(b - a) * sizeof(float));
        }
    }
    release_rows(f, i, a, b);
}

static int experts_status(void *ctx)
{
    hyla_fsdp *f = ctx;
    int st = f->expert_status;
    f->expert_status = HYLA_OK;
    return st;
}

void hyla_fsdp_experts_init(hyla_fsdp *f, int groups)
{
    f->groups = groups > 1 ? groups : 1;
    f->grp_layer = f->grp_rs_i = -1;
    f->experts = (hyla_expert_source){f->groups, acquire_group, release_group, f->source.poll, f};
    if (f->groups > 1) {
        f->source.experts = &f->experts;
        f->source.experts_status = experts_status;
    }
}

int hyla_fsdp_experts_drain(hyla_fsdp *f)
{
    int st = hyla_shard_wait(f->comm, &f->grp_reqs);
    if (f->grp_layer >= 0) { /* a prefetched group nobody asked for: given back */
        int64_t a, b, per = f->m->cfg.n_experts / f->groups;
        int i = group_range(f, f->grp_layer, (hyla_role)f->grp_role, f->grp_e0, f->grp_e0 + per, &a, &b);
        release_rows(f, i, a, b);
        f->grp_layer = -1;
    }
    return st;
}

int hyla_fsdp_experts_finish(hyla_fsdp *f)
{
    if (f->grp_rs_i < 0)
        return HYLA_OK;
    int i = f->grp_rs_i;
    f->grp_rs_i = -1;
    const hyla_param *p = &f->m->table.params[i];
    double t0 = hyla_now();
    HYLA_TRY(hyla_shard_wait(f->comm, &f->grp_rs_reqs));
    f->group_reduce_seconds += hyla_now() - t0; /* (overlapped: only the wait) */
    f->reduce_wait_seconds += hyla_now() - t0;
    hyla_shard_reduce_scatter_range_finish(f->comm, p->numel, f->grp_rs_a, f->grp_rs_b, hyla_fsdp_piece_grad(f, i),
                                           f->grp_rs_first, f->grp_stage);
    hyla_model_zero_pages(f->grp_rs_window + f->grp_rs_a, (size_t)(f->grp_rs_b - f->grp_rs_a) * sizeof(float));
    return HYLA_OK;
}
