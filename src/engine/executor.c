/* The nested block executor: one step's forward, recompute and backward over the remat units (see
 * executor.h); its construction, planning and teardown are in executor_setup.c. */
#include "engine/executor.h"
#include "model/lora.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/profile.h"
#include "core/quant.h"
#include "model/infer_state.h"
#include "ops/ops.h"
#include "engine/loss_head.h"
#include "engine/mtp_loss.h"
#include "engine/executor_internal.h"
#include "engine/offload.h"

static int unit_starts_at(const hyla_executor *ex, int layer, int op)
{
    for (int u = 0; u < ex->n_units; u++)
        if (ex->units[u].layer0 == layer && ex->units[u].op0 == op)
            return 1;
    return 0;
}

/* Where slot s of layer l lives after its forward: HYLA_KEEP_DEVICE (checkpoint arena),
 * HYLA_KEEP_OFFLOAD (host store) or HYLA_KEEP_REMAT (dropped). */
static hyla_keep slot_tier(const hyla_executor *ex, int l, hyla_slot s)
{
    if (ex->forward_only)
        return HYLA_KEEP_REMAT;
    const hyla_policy *p = &ex->policy;
    if (s == HYLA_S_X) {
        hyla_keep w = p->where[HYLA_CK_DECODER_LAYER_INPUT];
        if (w == HYLA_KEEP_OFFLOAD)
            return w;
        return unit_starts_at(ex, l, 0) || w == HYLA_KEEP_DEVICE || p->keep_internal ? HYLA_KEEP_DEVICE : HYLA_KEEP_REMAT;
    }
    if (s == HYLA_S_H && ex->unit_kind == HYLA_UNIT_PART)
        return HYLA_KEEP_DEVICE; /* boundary between the mixer and FFN units */
    if (s == HYLA_S_Y)
        return HYLA_KEEP_REMAT; /* Y is the next layer's X (or, for the last layer, kept by the loss head) */
    hyla_ckpt_name c = hyla_slot_ckpt(s);
    return c == HYLA_CK_INTERNAL ? (p->keep_internal ? HYLA_KEEP_DEVICE : HYLA_KEEP_REMAT) : p->where[c];
}

int hyla_executor_keeps(const hyla_executor *ex, int l, hyla_slot s) { return slot_tier(ex, l, s) == HYLA_KEEP_DEVICE; }

/* ---- allocation helpers ------------------------------------------------------------------------ */

float *hyla_executor_alloc(hyla_executor *ex, hyla_arena *a, int64_t floats, int zero)
{
    float *p = hyla_arena_floats(a, (size_t)floats);
    if (zero && !ex->dry)
        memset(p, 0, (size_t)floats * sizeof *p);
    return p;
}

static hyla_op_ctx op_ctx(const hyla_executor *ex, int l, float *grads, int recompute)
{
    hyla_op_ctx c;
    memset(&c, 0, sizeof c);
    c.m = ex->m;
    c.grads = grads;
    c.layer = l;
    c.B = ex->B;
    c.T = ex->T;
    c.n = ex->n;
    c.pos = ex->pos;
    c.n_seq = ex->n_seq;
    c.seq_row0 = ex->seq_row0;
    c.seq_len = ex->seq_len;
    c.delta_mode = ex->delta_mode;
    c.aux_counts = ex->aux_counts;
    c.aux_psum = ex->aux_psum;
    c.aux_dprob = ex->aux_dprob;
    c.recompute = recompute;
    c.lora = ex->m->lora;
    c.experts = ex->weights && !ex->dry ? ex->weights->experts : NULL;
    c.context = ex->dry ? NULL : ex->context;
    c.context_past = ex->context_past;
    if (ex->m->lora) { /* base frozen: the step's gradients are the adapter's */
        c.lora_grads = grads;
        c.grads = NULL;
    } else if (grads && ex->updates && l >= ex->m->cfg.n_layers) { /* the MTP layer's: in the compact head */
        c.grads = ex->updates->head;
        c.grad_base = ex->layer_hi[ex->m->cfg.n_layers - 1] - ex->layer_lo[0]; /* hyla_grad_head_index */
    } else if (grads && ex->updates) { /* this unit's layers' gradients live in the window */
        c.grads = ex->updates->window;
        c.grad_base = ex->window_lo;
    }
    if (l >= ex->m->cfg.n_layers) { /* the MTP head's layer: no router statistics, replay or record */
        c.aux_counts = NULL, c.aux_psum = NULL, c.aux_dprob = NULL;
    } else if (ex->m->cfg.layer_is_moe[l]) {
        size_t slice = (size_t)ex->moe_index[l] * (size_t)(ex->n * ex->m->cfg.top_k);
        c.replay = ex->replay ? ex->replay + slice : NULL;
        c.record = ex->record && !recompute ? ex->record + slice : NULL;
    }
    if (ex->state) {
        c.state = &ex->state->layers[l];
        c.past = ex->state->len;
        c.max_len = ex->state->max_len;
        if (ex->state->row_keep && l < ex->m->cfg.n_layers && ex->m->cfg.layer_kind[l] == HYLA_LAYER_LINEAR) {
            c.keep_row = hyla_infer_state_recurrent_floats(&ex->m->cfg);
            c.keep_seq = ex->state->row_keep_cap * c.keep_row;
            c.keep = ex->state->row_keep + hyla_infer_state_recurrent_offset(&ex->m->cfg, l);
        }
    }
    return c;
}

static int64_t aux_rows_dummy;

static void sample_timeline(hyla_executor *ex)
{
    if (!ex->dry && ex->measure_cap && ex->n_measured < ex->measure_cap) {
        int i = ex->n_measured++;
        ex->measured_device[i] = ex->ckpt.used + ex->work.used + ex->xfer[0].used + ex->xfer[1].used;
        ex->measured_host[i] = ex->host.used;
        ex->measured_seconds[i] = hyla_now() - ex->measure_t0;
    }
    if (!ex->dry || !ex->timeline || ex->n_timeline == ex->cap_timeline)
        return;
    ex->host_timeline[ex->n_timeline] = ex->host.used;
    ex->staging_timeline[ex->n_timeline] = ex->xfer[0].used + ex->xfer[1].used;
    ex->timeline[ex->n_timeline++] = ex->ckpt.used + ex->work.used + ex->xfer[0].used + ex->xfer[1].used;
}

int hyla_executor_bf16_compute(const hyla_executor *ex) { return ex->m->compute_dtype == HYLA_DT_BF16; }

/* An op's scratch: its own floats, then (ops with projections) the LoRA path's (a model with an
 * adapter) and the projections' bf16 operands (bf16 compute). */
static int64_t lora_scratch(const hyla_executor *ex, const hyla_layer_op *op)
{
    return op->lora && ex->m->lora ? hyla_lora_scratch_floats(ex->m->lora, ex->n) : 0;
}
static int64_t bf16_scratch(const hyla_executor *ex, const hyla_layer_op *op)
{
    if (op->lora && ex->m->qw) /* a GGUF model's products: gathered x, dequantized weight rows */
        return hyla_quant_scratch_floats(&ex->m->cfg, ex->n);
    return op->lora && hyla_executor_bf16_compute(ex) ? hyla_bf16_scratch_floats(&ex->m->cfg, ex->n) : 0;
}
static float *op_scratch(hyla_executor *ex, const hyla_layer_op *op, int64_t own)
{
    return hyla_executor_alloc(ex, &ex->work, own + lora_scratch(ex, op) + bf16_scratch(ex, op), 0);
}
static void point_scratch(const hyla_executor *ex, const hyla_layer_op *op, hyla_op_ctx *c, float *scratch, int64_t own)
{
    c->lora_scratch = scratch + own;
    c->bf16_scratch = scratch + own + lora_scratch(ex, op);
}

/* bf16 compute: the op's outputs that are bf16 activations now hold bf16 values (a recompute
 * rounds the same fp32 results the same way, so every policy sees the same tensors). */
static void round_outputs(const hyla_executor *ex, int l, const hyla_layer_op *op)
{
    for (int i = 0; i < op->n_out; i++)
        if (hyla_slot_is_bf16(op->out[i]))
            hyla_bf16_round(ex->tapes[l].p[op->out[i]], hyla_slot_floats(&ex->m->cfg, l, op->out[i], ex->n));
}

int hyla_executor_stores_bf16(const hyla_executor *ex, hyla_slot s) { return hyla_executor_bf16_compute(ex) && hyla_slot_is_bf16(s); }

void hyla_executor_count_dtype(hyla_executor *ex, hyla_slot s, size_t bytes)
{
    if (!hyla_executor_bf16_compute(ex))
        return;
    if (hyla_slot_is_bf16(s))
        ex->bf16_stored_tensors++;
    else
        ex->fp32_only_bytes_by_name[hyla_slot_ckpt(s)] += bytes;
}

/* A kept slot stored packed: its bf16 home in the checkpoint arena. */
static void reserve_bf16_home(hyla_executor *ex, int l, hyla_slot s, int64_t floats)
{
    ex->bf16_kept[l].p[s] = (uint16_t *)(void *)hyla_executor_alloc(ex, &ex->ckpt, (floats + 1) / 2, 0);
}

/* The fp32 form of packed slot s of layer l, in the work arena (released with it). */
static void widen_kept(hyla_executor *ex, int l, hyla_slot s)
{
    int64_t floats = hyla_slot_floats(&ex->m->cfg, l, s, ex->n);
    ex->tapes[l].p[s] = hyla_executor_alloc(ex, &ex->work, floats, 0);
    if (!ex->dry)
        hyla_bf16_unpack(ex->tapes[l].p[s], ex->bf16_kept[l].p[s], floats);
}

/* After an op's forward: copy its packed outputs to their bf16 homes (exact: they hold bf16
 * values). Y_l is X_{l+1}. */
static void store_bf16_outputs(hyla_executor *ex, int l, const hyla_layer_op *op)
{
    for (int i = 0; i < op->n_out; i++) {
        hyla_slot s = op->out[i];
        int dl = s == HYLA_S_Y ? l + 1 : l;
        hyla_slot ds = s == HYLA_S_Y ? HYLA_S_X : s;
        if (dl < ex->m->cfg.n_layers && ex->bf16_kept[dl].p[ds]) /* (the MTP layer's Y is no X) */
            hyla_bf16_pack(ex->bf16_kept[dl].p[ds], ex->tapes[l].p[s], hyla_slot_floats(&ex->m->cfg, dl, ds, ex->n));
    }
}

/* FSDP: layers [l0, l1] (or HYLA_WEIGHTS_*) in the arena for the ops that follow */
void hyla_executor_acquire_weights(hyla_executor *ex, int l0, int l1)
{
    if (!ex->weights || ex->dry)
        return;
    int st = ex->weights->acquire(ex->weights->ctx, l0, l1);
    if (st != HYLA_OK && ex->weights_status == HYLA_OK)
        ex->weights_status = st;
}
void hyla_executor_release_weights(hyla_executor *ex, int l0, int l1)
{
    if (ex->weights && !ex->dry)
        ex->weights->release(ex->weights->ctx, l0, l1);
}
/* The step's weight-source status: the first failed acquire, else the expert groups'. */
static int weights_result(hyla_executor *ex)
{
    int st = ex->weights && ex->weights->experts && !ex->dry ? ex->weights->experts_status(ex->weights->ctx) : HYLA_OK;
    return ex->weights_status != HYLA_OK ? ex->weights_status : st;
}
static void poll_weights(const hyla_executor *ex)
{
    if (ex->weights && !ex->dry)
        ex->weights->poll(ex->weights->ctx);
}

/* Planning pass: an experts op call of layer l (op->experts: its tensor), counted and recorded in
 * order; and the calls of the ops that pass across slices, by phase (0 forward, 1 recompute, 2 backward). */
static void note_op_call(hyla_executor *ex, int l, const hyla_layer_op *op, int phase)
{
    if (ex->dry && op->context)
        ex->context_calls[op->context - 1][phase]++;
    if (!ex->dry || !op->experts)
        return;
    if (ex->n_expert_seq == ex->cap_expert_seq) {
        int cap = ex->cap_expert_seq ? 2 * ex->cap_expert_seq : 64;
        int(*seq)[2] = realloc(ex->expert_seq, (size_t)cap * sizeof *seq);
        if (!seq) {
            ex->expert_seq_nomem = 1;
            return;
        }
        ex->expert_seq = seq, ex->cap_expert_seq = cap;
    }
    ex->expert_seq[ex->n_expert_seq][0] = l, ex->expert_seq[ex->n_expert_seq][1] = op->experts;
    ex->n_expert_seq++;
}

static void run_fwd(hyla_executor *ex, int l, const hyla_layer_op *op, int recompute, int64_t *aux_rows)
{
    size_t mark = hyla_arena_mark(&ex->work);
    int64_t own = op->fwd_scratch(&ex->m->cfg, ex->n, ex->T);
    float *scratch = op_scratch(ex, op, own);
    if (!ex->dry) {
        hyla_op_ctx c = op_ctx(ex, l, NULL, recompute);
        point_scratch(ex, op, &c, scratch, own);
        c.aux_rows = aux_rows ? aux_rows : &aux_rows_dummy;
        double t0 = HYLA_PROF_BEGIN();
        op->fwd(&c, &ex->tapes[l], scratch);
        poll_weights(ex);
        if (hyla_executor_bf16_compute(ex)) {
            round_outputs(ex, l, op);
            if (!recompute)
                store_bf16_outputs(ex, l, op);
        }
        HYLA_PROF_END(recompute ? "recompute" : op->name, t0);
    }
    note_op_call(ex, l, op, recompute ? 1 : 0);
    for (int i = 0; i < op->n_out && !recompute; i++)
        hyla_offload_write(ex, l, op->out[i]);
    sample_timeline(ex);
    hyla_arena_reset_to(&ex->work, mark);
}

/* Planning pass: account a kept checkpoint of layer l by name and layer kind (bf16-packed ones
 * at two bytes per value). */
static void count_kept(hyla_executor *ex, int l, hyla_slot s, int64_t floats)
{
    if (!ex->dry)
        return;
    size_t bytes = hyla_align_up((size_t)floats * (ex->bf16_kept[l].p[s] ? sizeof(uint16_t) : sizeof(float)));
    hyla_executor_count_dtype(ex, s, bytes);
    ex->kept_bytes_by_name[hyla_slot_ckpt(s)] += bytes;
    ex->kept_bytes_by_kind[ex->m->cfg.layer_kind[l] == HYLA_LAYER_FULL] += bytes;
}

/* Where layer l's input X lives during the forward (produced by layer l - 1, or the embedding):
 * offloaded (staged in half `half`), kept (in the checkpoint arena, or as bf16 with its fp32 form
 * in the carry buffer while layer l runs), or only in the carry buffer. */
static float *place_layer_input(hyla_executor *ex, int l, int half)
{
    int64_t floats = ex->n * ex->m->cfg.hidden;
    if (slot_tier(ex, l, HYLA_S_X) == HYLA_KEEP_OFFLOAD)
        return hyla_offload_stage(ex, l, HYLA_S_X, floats, half);
    if (!hyla_executor_keeps(ex, l, HYLA_S_X))
        return ex->carry[l & 1];
    float *p = ex->carry[l & 1];
    if (hyla_executor_stores_bf16(ex, HYLA_S_X))
        reserve_bf16_home(ex, l, HYLA_S_X, floats);
    else
        p = hyla_executor_alloc(ex, &ex->ckpt, floats, 0);
    count_kept(ex, l, HYLA_S_X, floats);
    return p;
}

/* After a layer's forward segment, the slots whose buffers go with the segment's work: those not
 * kept, and the fp32 forms of those kept as bf16. */
static int segment_forgets(const hyla_executor *ex, int l, int s)
{
    return !hyla_executor_keeps(ex, l, (hyla_slot)s) || ex->bf16_kept[l].p[s];
}

/* Allocate op outputs that are missing. In forward: kept -> ckpt, else work; Y_l is X_{l+1}. */
static void alloc_outputs(hyla_executor *ex, int l, const hyla_layer_op *op, int in_backward)
{
    const hyla_config *cfg = &ex->m->cfg;
    for (int i = 0; i < op->n_out; i++) {
        hyla_slot s = op->out[i];
        hyla_tape *t = &ex->tapes[l];
        if (t->p[s])
            continue;
        int64_t floats = hyla_slot_floats(cfg, l, s, ex->n); /* (Y's size is X's of layer l + 1: [n, H]) */
        if (s == HYLA_S_Y && l + 1 < cfg->n_layers) {
            hyla_tape *next = &ex->tapes[l + 1];
            if (!next->p[HYLA_S_X]) {
                next->p[HYLA_S_X] = in_backward ? hyla_executor_alloc(ex, &ex->work, floats, 0) : place_layer_input(ex, l + 1, l & 1);
            }
            t->p[s] = next->p[HYLA_S_X];
        } else if (s == HYLA_S_Y) { /* final hidden, read by the loss head */
            t->p[s] = ex->forward_only ? ex->carry[(l + 1) & 1] : hyla_executor_alloc(ex, &ex->ckpt, floats, 0);
        } else if (!in_backward && slot_tier(ex, l, s) == HYLA_KEEP_OFFLOAD) {
            t->p[s] = hyla_offload_stage(ex, l, s, floats, l & 1);
        } else {
            int keep = !in_backward && hyla_executor_keeps(ex, l, s), as_bf16 = keep && hyla_executor_stores_bf16(ex, s);
            if (as_bf16)
                reserve_bf16_home(ex, l, s, floats);
            t->p[s] = hyla_executor_alloc(ex, keep && !as_bf16 ? &ex->ckpt : &ex->work, floats, 0);
            if (keep)
                count_kept(ex, l, s, floats);
        }
    }
}

/* Forget the non-kept slots of layer l after its forward segment (their memory is released). */
static void drop_transients(hyla_executor *ex, int l)
{
    hyla_tape *t = &ex->tapes[l];
    for (int s = 0; s < HYLA_S__COUNT; s++) /* a non-kept X lives in a carry buffer that layer l+1 reuses; a
                                                * packed slot's fp32 form goes with the layer's work */
        if (t->p[s] && s != HYLA_S_Y && segment_forgets(ex, l, s))
            t->p[s] = NULL;
    if (l + 1 >= ex->m->cfg.n_layers)
        return; /* final hidden (the trunk's, the MTP layer's) stays for its loss head */
    t->p[HYLA_S_Y] = NULL;
}

#define FOR_UNIT_OPS(ex, u, l, i)                                                       \
    for (int l = (u)->layer0; l <= (u)->layer1; l++)                                    \
        for (int i = (l == (u)->layer0 ? (u)->op0 : 0); i < (l == (u)->layer1 ? (u)->op1 : (ex)->n_ops[l]); i++)

/* ---- forward ----------------------------------------------------------------------------------- */

static void embed_rows(hyla_executor *ex, const int32_t *tokens)
{
    const hyla_config *cfg = &ex->m->cfg;
    hyla_tape *t0 = &ex->tapes[0];
    int64_t H = cfg->hidden;
    t0->p[HYLA_S_X] = place_layer_input(ex, 0, 1); /* staging: half 1, that of "layer -1" */
    if (!ex->dry)
        hyla_model_embed_rows(ex->m, tokens, ex->n, t0->p[HYLA_S_X]);
    if (!ex->dry && ex->bf16_kept[0].p[HYLA_S_X]) /* embedding rows of the bf16 copy: bf16 values */
        hyla_bf16_pack(ex->bf16_kept[0].p[HYLA_S_X], t0->p[HYLA_S_X], ex->n * H);
    hyla_offload_write(ex, -1, HYLA_S_Y); /* X_0, "layer -1"'s output */
}

/* checkpoint-arena and host-store marks at each unit's start (the forward pushes, the backward pops) */
static size_t unit_marks[HYLA_MAX_UNITS], host_marks[HYLA_MAX_UNITS];

static void forward_units(hyla_executor *ex, int u0, int u1, int64_t *aux_rows)
{
    for (int u = u0; u < u1; u++) {
        const hyla_unit *un = &ex->units[u];
        unit_marks[u] = hyla_arena_mark(&ex->ckpt);
        host_marks[u] = hyla_arena_mark(&ex->host);
        for (int l = un->layer0; l <= un->layer1; l++) {
            size_t wmark = hyla_arena_mark(&ex->work);
            int i0 = l == un->layer0 ? un->op0 : 0, i1 = l == un->layer1 ? un->op1 : ex->n_ops[l];
            if (i0 == 0 && !ex->forward_only) /* layer l stages into half l & 1, last used by layer l - 2 */
                hyla_offload_reuse_half(ex, l & 1, ex->write_ticket[l & 1]);
            hyla_executor_acquire_weights(ex, l, l);
            for (int i = i0; i < i1; i++) {
                const hyla_layer_op *op = ex->ops[l][i];
                for (int k = 0; k < op->n_in; k++) /* a packed input from the layer's previous segment */
                    if (!ex->tapes[l].p[op->in[k]] && ex->bf16_kept[l].p[op->in[k]])
                        widen_kept(ex, l, op->in[k]);
                alloc_outputs(ex, l, op, 0);
                run_fwd(ex, l, op, 0, aux_rows);
            }
            hyla_executor_release_weights(ex, l, l);
            hyla_arena_reset_to(&ex->work, wmark);
            if (i1 == ex->n_ops[l])
                drop_transients(ex, l);
            else /* mixer part done: only the kept slots survive into the FFN part (packed: as bf16) */
                for (int s = 0; s < HYLA_S__COUNT; s++)
                    if (ex->tapes[l].p[s] && s != HYLA_S_X && segment_forgets(ex, l, s))
                        ex->tapes[l].p[s] = NULL;
        }
    }
}

/* ---- backward ---------------------------------------------------------------------------------- */

typedef struct {
    unsigned char needed[HYLA_S__COUNT];
} slot_flags;

/* Which forward ops of unit u must run again: those with a needed output that was not kept. */
static void plan_recompute(const hyla_executor *ex, const hyla_unit *un, slot_flags *need /*[layers]*/,
                           unsigned char run[][HYLA_MAX_LAYER_OPS])
{
    int L0 = un->layer0;
    FOR_UNIT_OPS(ex, un, l, i) {
        const hyla_layer_op *op = ex->ops[l][i];
        for (int r = 0; r < op->n_reads; r++)
            need[l - L0].needed[op->reads[r]] = 1;
    }
    for (int l = un->layer1; l >= un->layer0; l--) {
        int i0 = l == un->layer0 ? un->op0 : 0, i1 = l == un->layer1 ? un->op1 : ex->n_ops[l];
        for (int i = i1 - 1; i >= i0; i--) {
            const hyla_layer_op *op = ex->ops[l][i];
            int must = 0;
            for (int o = 0; o < op->n_out; o++) {
                hyla_slot s = op->out[o];
                int avail = ex->tapes[l].p[s] != NULL;
                int needed = need[l - L0].needed[s];
                if (s == HYLA_S_Y && l < un->layer1) /* Y_l is X_{l+1} */
                    needed = need[l + 1 - L0].needed[HYLA_S_X], avail = ex->tapes[l + 1].p[HYLA_S_X] != NULL;
                must |= needed && !avail;
            }
            run[l - L0][i] = (unsigned char)must;
            if (must)
                for (int k = 0; k < op->n_in; k++)
                    need[l - L0].needed[op->in[k]] = 1;
        }
        /* X_l of an inner layer that was not kept comes from Y_{l-1}: handled above via Y. */
    }
}

static float *dslot(hyla_executor *ex, hyla_tape *dt, const hyla_unit *un, int l, hyla_slot s, int cur)
{
    hyla_tape *d = &dt[l - un->layer0];
    if (d->p[s])
        return d->p[s];
    int64_t floats = hyla_slot_floats(&ex->m->cfg, l, s, ex->n);
    int out_is_y = un->op1 == ex->n_ops[un->layer1];
    if (l == un->layer1 && ((out_is_y && s == HYLA_S_Y) || (!out_is_y && s == HYLA_S_H) )) {
        d->p[s] = ex->dcarry[cur]; /* incoming gradient */
    } else if (l == un->layer0 && ((un->op0 == 0 && s == HYLA_S_X) || (un->op0 != 0 && s == HYLA_S_H))) {
        d->p[s] = ex->dcarry[1 - cur]; /* outgoing gradient */
        if (!ex->dry)
            memset(d->p[s], 0, (size_t)floats * sizeof(float));
    } else if (s == HYLA_S_Y) {
        d->p[s] = dslot(ex, dt, un, l + 1, HYLA_S_X, cur); /* dY_l = dX_{l+1} */
    } else {
        d->p[s] = hyla_executor_alloc(ex, &ex->work, floats, 1);
    }
    return d->p[s];
}

/* The profile section of an op's backward: "NAME.bwd" (one stable string per op name, made the
 * first time; the profile is opt-in and single-threaded, see core/profile.h). */
static const char *backward_section(const hyla_layer_op *op)
{
    enum { CAP = 64 };
    static const char *names[CAP];
    static char sections[CAP][48];
    static int n;
    if (!hyla_prof.enabled)
        return "backward";
    for (int i = 0; i < n; i++)
        if (names[i] == op->name)
            return sections[i];
    if (n == CAP)
        return "backward";
    names[n] = op->name;
    snprintf(sections[n], sizeof sections[n], "%s.bwd", op->name);
    return sections[n++];
}

static void backward_unit(hyla_executor *ex, int u, float *grads, int cur)
{
    const hyla_unit *un = &ex->units[u];
    int nl = un->layer1 - un->layer0 + 1;
    slot_flags need[HYLA_MAX_LAYERS > 64 ? 64 : HYLA_MAX_LAYERS];
    static unsigned char run[64][HYLA_MAX_LAYER_OPS];
    HYLA_ASSERT(nl <= 64);
    memset(need, 0, sizeof(slot_flags) * (size_t)nl);
    memset(run, 0, sizeof run);
    FOR_UNIT_OPS(ex, un, l, i) { /* packed checkpoints the unit's ops touch: back to fp32 */
        const hyla_layer_op *op = ex->ops[l][i];
        for (int k = 0; k < op->n_in + op->n_out; k++) {
            hyla_slot s = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
            if (s != HYLA_S_Y && !ex->tapes[l].p[s] && ex->bf16_kept[l].p[s])
                widen_kept(ex, l, s);
        }
    }
    plan_recompute(ex, un, need, run);
    FOR_UNIT_OPS(ex, un, l, i) {
        if (!run[l - un->layer0][i])
            continue;
        alloc_outputs(ex, l, ex->ops[l][i], 1);
        run_fwd(ex, l, ex->ops[l][i], 1, NULL);
    }
    hyla_tape dt[64];
    memset(dt, 0, sizeof(hyla_tape) * (size_t)nl);
    for (int l = un->layer1; l >= un->layer0; l--) {
        int i0 = l == un->layer0 ? un->op0 : 0, i1 = l == un->layer1 ? un->op1 : ex->n_ops[l];
        for (int i = i1 - 1; i >= i0; i--) {
            const hyla_layer_op *op = ex->ops[l][i];
            for (int k = 0; k < op->n_out; k++)
                if (hyla_slot_has_grad(op->out[k]))
                    dslot(ex, dt, un, l, op->out[k], cur);
            for (int k = 0; k < op->n_in; k++)
                if (hyla_slot_has_grad(op->in[k]))
                    dslot(ex, dt, un, l, op->in[k], cur);
            size_t mark = hyla_arena_mark(&ex->work);
            int64_t own = op->bwd_scratch(&ex->m->cfg, ex->n, ex->T);
            float *scratch = op_scratch(ex, op, own);
            note_op_call(ex, l, op, 2);
            if (!ex->dry) {
                hyla_op_ctx c = op_ctx(ex, l, grads, 1);
                point_scratch(ex, op, &c, scratch, own);
                c.aux_rows = &aux_rows_dummy;
                double t0 = HYLA_PROF_BEGIN();
                op->bwd(&c, &ex->tapes[l], &dt[l - un->layer0], scratch);
                HYLA_PROF_END(backward_section(op), t0);
                poll_weights(ex);
            }
            sample_timeline(ex);
            hyla_arena_reset_to(&ex->work, mark);
        }
    }
}

static void embed_backward(hyla_executor *ex, const int32_t *tokens, float *grads, const float *dx)
{
    int64_t H = ex->m->cfg.hidden;
    float *dE = hyla_executor_param_grad(ex, grads, HYLA_P_EMBED);
    for (int64_t i = 0; i < ex->n; i++) { /* sequential: rows with the same token add in order */
        float *row = dE + (int64_t)tokens[i] * H;
        for (int64_t j = 0; j < H; j++)
            row[j] += dx[i * H + j];
    }
}

/* ---- the step ---------------------------------------------------------------------------------- */

static void set_labels(hyla_executor *ex, const int32_t *tokens, const int32_t *labels)
{
    for (int64_t b = 0; b < ex->B; b++)
        for (int64_t t = 0; t < ex->T; t++) {
            int64_t i = b * ex->T + t;
            ex->labels[i] = labels ? labels[i] : (t + 1 < ex->T ? tokens[i + 1] : -100);
        }
    for (int64_t s = 0; s < ex->n_seq; s++) { /* positions restart with every sequence (document) */
        int64_t r0 = ex->seq_row0[s], first = 0; /* (a slice: a continuing document's positions go on) */
        if (ex->context && r0 % ex->T == 0)
            first = ex->context_past[r0 / ex->T];
        for (int64_t t = 0; t < ex->seq_len[s]; t++)
            ex->pos[r0 + t] = first + t;
    }
}

void hyla_executor_rows_as_sequences(hyla_executor *ex)
{
    ex->n_seq = ex->B;
    ex->packed = 0;
    for (int64_t b = 0; b < ex->B; b++)
        ex->seq_row0[b] = b * ex->T, ex->seq_len[b] = ex->T;
}

int hyla_executor_set_segments(hyla_executor *ex, const int64_t *seg_len, int64_t n_seg)
{
    if (!seg_len) {
        hyla_executor_rows_as_sequences(ex);
        return HYLA_OK;
    }
    if (n_seg < ex->B || n_seg > ex->n)
        return hyla_error_set(HYLA_ERR_ARG, "packing: %lld documents cannot tile %lld rows of %lld tokens",
                              (long long)n_seg, (long long)ex->B, (long long)ex->T);
    int64_t at = 0;
    for (int64_t s = 0; s < n_seg; s++) {
        int64_t len = seg_len[s], in_row = at % ex->T;
        if (len < 1 || in_row + len > ex->T) {
            hyla_executor_rows_as_sequences(ex);
            return hyla_error_set(HYLA_ERR_ARG, "packing: document %lld (%lld tokens at row %lld, column %lld) does not "
                                  "fit its row of %lld tokens", (long long)s, (long long)len, (long long)(at / ex->T),
                                  (long long)in_row, (long long)ex->T);
        }
        ex->seq_row0[s] = at, ex->seq_len[s] = len;
        at += len;
    }
    if (at != ex->n) {
        hyla_executor_rows_as_sequences(ex);
        return hyla_error_set(HYLA_ERR_ARG, "packing: the documents cover %lld of the %lld tokens", (long long)at,
                              (long long)ex->n);
    }
    ex->n_seq = n_seg;
    ex->packed = 1;
    return HYLA_OK;
}

static void reset_state(hyla_executor *ex)
{
    size_t L = (size_t)ex->n_layers;
    memset(ex->tapes, 0, sizeof(hyla_tape) * L);
    memset(ex->bf16_kept, 0, sizeof *ex->bf16_kept * L);
    hyla_offload_reset(ex);
    int64_t E = ex->m->cfg.n_experts > 0 ? ex->m->cfg.n_experts : 1;
    memset(ex->aux_counts, 0, (size_t)E * sizeof(double));
    memset(ex->aux_psum, 0, (size_t)E * sizeof(double));
    hyla_arena_reset_to(&ex->ckpt, 0);
    hyla_arena_reset_to(&ex->work, 0);
}

/* After unit u's backward: forget what its ops produced (and an inner layer's X, which is the
 * previous layer's Y), and an offloaded input X whose staging half is about to be reused. */
static void forget_unit(hyla_executor *ex, int u)
{
    const hyla_unit *un = &ex->units[u];
    for (int l = un->layer0; l <= un->layer1; l++) /* unpacked forms lived in the unit's work */
        for (int s = 0; s < HYLA_S__COUNT; s++)
            if (ex->bf16_kept[l].p[s])
                ex->tapes[l].p[s] = NULL;
    FOR_UNIT_OPS(ex, un, l, i)
        for (int o = 0; o < ex->ops[l][i]->n_out; o++)
            ex->tapes[l].p[ex->ops[l][i]->out[o]] = NULL;
    for (int l = un->layer0 + 1; l <= un->layer1; l++)
        ex->tapes[l].p[HYLA_S_X] = NULL;
    if (un->op0 == 0) /* its input too (it may sit in an offload staging half about to be reused) */
        ex->tapes[un->layer0].p[HYLA_S_X] = NULL;
}

/* A unit's gradient window zeroed before its backward; with expert groups the routed experts'
 * rows by giving their pages back (read as zeros: they are touched a group at a time, and the
 * source zeroes each group's again after reducing it). */
static void zero_window(hyla_executor *ex, int layer0, int layer1)
{
    float *w = ex->updates->window;
    if (!(ex->weights && ex->weights->experts && ex->weights->experts->groups > 1)) {
        memset(w, 0, (ex->layer_hi[layer1] - ex->window_lo) * sizeof(float));
        return;
    }
    const hyla_param_table *t = &ex->m->table;
    for (int i = 0; i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        if (p->layer < layer0 || p->layer > layer1)
            continue;
        if (hyla_role_is_routed(p->role))
            hyla_model_zero_pages(w + (p->offset - ex->window_lo), hyla_param_span(p) * sizeof(float));
        else
            memset(w + (p->offset - ex->window_lo), 0, hyla_param_span(p) * sizeof(float));
    }
}

int hyla_executor_backward_unit(hyla_executor *ex, int u, float *grads, int cur)
{
    if (hyla_offload_activate_unit(ex, u) != HYLA_OK)
        return 1;
    const hyla_unit *un = &ex->units[u];
    int trunk = u < ex->n_trunk_units; /* per-layer updates are the trunk layers' (the MTP loss excludes them) */
    if (trunk && ex->updates && !ex->dry && un->op1 == ex->n_ops[un->layer1]) { /* first unit touching its layers */
        ex->window_lo = ex->layer_lo[un->layer0];
        zero_window(ex, un->layer0, un->layer1);
    }
    size_t wmark = hyla_arena_mark(&ex->work);
    hyla_executor_acquire_weights(ex, un->layer0, un->layer1); /* its recompute and backward */
    backward_unit(ex, u, grads, cur);
    hyla_executor_release_weights(ex, un->layer0, un->layer1);
    hyla_arena_reset_to(&ex->work, wmark);
    hyla_arena_reset_to(&ex->ckpt, unit_marks[u]);
    hyla_arena_reset_to(&ex->host, host_marks[u]);
    forget_unit(ex, u);
    hyla_offload_prefetch_unit(ex, u - 2);
    if (trunk && ex->updates && !ex->dry && un->op0 == 0) { /* its layers' gradients are complete */
        int st = ex->updates->apply(ex->updates->ctx, un->layer0, un->layer1, ex->updates->window, ex->window_lo);
        if (st != HYLA_OK) {
            if (ex->store)
                hyla_host_store_drain(ex->store);
            return st;
        }
    }
    return HYLA_OK;
}

void hyla_executor_forward_units(hyla_executor *ex, int u0, int u1)
{
    int64_t none = 0;
    forward_units(ex, u0, u1, &none);
}

float *hyla_executor_layer_input(hyla_executor *ex, int l, int half) { return place_layer_input(ex, l, half); }

int hyla_executor_run_step(hyla_executor *ex, const int32_t *tokens, float *grads, float *logits, float ce_scale,
                    float aux_scale, hyla_step_loss *loss)
{
    const hyla_config *cfg = &ex->m->cfg;
    int64_t aux_rows = 0;
    int mtp = ex->n_layers > cfg->n_layers;
    if (ex->host_bytes && !ex->dry && !ex->store)
        return hyla_error_set(HYLA_ERR_ARG, "policy '%s' offloads %zu bytes per step but no host store is attached",
                              ex->policy.name, ex->host_bytes);
    reset_state(ex);
    ex->n_measured = 0;
    ex->measure_t0 = hyla_now();
    ex->weights_status = HYLA_OK;
    hyla_executor_acquire_weights(ex, HYLA_WEIGHTS_EMBED, HYLA_WEIGHTS_EMBED);
    embed_rows(ex, tokens);
    hyla_executor_release_weights(ex, HYLA_WEIGHTS_EMBED, HYLA_WEIGHTS_EMBED);
    forward_units(ex, 0, ex->n_trunk_units, &aux_rows);
    if (mtp) /* the MTP head's input from the trunk's final rows, and its layer */
        hyla_mtp_loss_forward(ex, tokens);
    int64_t E = cfg->n_experts;
    if (ex->context && !ex->dry && E > 0) /* slices: the statistics of the whole sequences */
        ex->context->reduce_aux(ex->context->ctx, ex->aux_counts, ex->aux_psum, E, &aux_rows);
    loss->aux_loss = (!ex->dry && aux_rows > 0) ? hyla_aux_loss_finish(ex->aux_counts, ex->aux_psum, aux_rows, E) : NAN;
    if (!ex->dry && aux_rows > 0)
        for (int64_t e = 0; e < E; e++) /* d aux / d p[row,e] = E count_e / rows^2 (spec §8.8) */
            ex->aux_dprob[e] = (double)aux_scale * (double)E * ex->aux_counts[e] / ((double)aux_rows * (double)aux_rows);
    if (grads)
        hyla_offload_begin_backward(ex);
    size_t head_mark = hyla_arena_mark(&ex->work);
    loss->mtp_sum = 0.0;
    loss->mtp_count = 0;
    if (mtp) { /* its loss and backward first: their gradient reaches the trunk's final norm in the head below */
        int st = hyla_mtp_loss_backward(ex, tokens, grads, loss);
        if (st != HYLA_OK)
            return st;
    }
    hyla_executor_acquire_weights(ex, HYLA_WEIGHTS_HEAD, HYLA_WEIGHTS_HEAD);
    hyla_loss_head(ex, grads, logits, ce_scale, loss);
    hyla_executor_release_weights(ex, HYLA_WEIGHTS_HEAD, HYLA_WEIGHTS_HEAD);
    if (grads && ex->updates && ex->updates->head_ready && !ex->dry) {
        int st = ex->updates->head_ready(ex->updates->ctx);
        if (st != HYLA_OK)
            return st;
    }
    ex->dhidden = NULL;
    hyla_arena_reset_to(&ex->work, head_mark);
    if (ex->dry)
        ex->timeline_forward = ex->n_timeline;
    if (!grads)
        return weights_result(ex);
    int cur = 0;
    for (int u = ex->n_trunk_units - 1; u >= 0 && ex->io_status == HYLA_OK; u--) {
        int st = hyla_executor_backward_unit(ex, u, grads, cur);
        if (st == 1)
            break; /* its checkpoints did not come back: stopped before using them */
        if (st != HYLA_OK)
            return st;
        cur = 1 - cur;
    }
    if (ex->store && !ex->dry)
        hyla_host_store_drain(ex->store); /* nothing may still write into the arenas */
    if (ex->io_status != HYLA_OK)
        return ex->io_status; /* its message was set by the failed wait */
    if (!ex->dry && !ex->m->lora) /* the embedding is frozen under an adapter */
        embed_backward(ex, tokens, grads, ex->dcarry[cur]);
    return weights_result(ex);
}

int hyla_executor_step(hyla_executor *ex, const int32_t *tokens, const int32_t *labels, float *grads, float ce_scale,
                       float aux_scale, hyla_step_loss *loss)
{
    HYLA_ASSERT(!ex->forward_only);
    set_labels(ex, tokens, labels);
    return hyla_executor_run_step(ex, tokens, grads, NULL, ce_scale, aux_scale, loss);
}

int hyla_executor_infer(hyla_executor *ex, const int32_t *tokens, struct hyla_infer_state_s *state, float *logits)
{
    HYLA_ASSERT((ex->forward_only == HYLA_FORWARD_LAST || ex->forward_only == HYLA_FORWARD_ROWS) && state->B == ex->B && state->n_layers == ex->m->cfg.n_layers &&
                !ex->packed && (!state->row_keep || ex->T <= state->row_keep_cap));
    for (int64_t b = 0; b < ex->B; b++)
        if (state->len[b] + ex->T > state->max_len)
            return hyla_error_set(HYLA_ERR_ARG, "sequence %lld: %lld cached + %lld new tokens exceed the cache of %lld",
                                  (long long)b, (long long)state->len[b], (long long)ex->T, (long long)state->max_len);
    set_labels(ex, tokens, NULL);
    for (int64_t b = 0; b < ex->B; b++)
        for (int64_t t = 0; t < ex->T; t++)
            ex->pos[b * ex->T + t] = state->len[b] + t;
    ex->state = state;
    hyla_step_loss loss;
    int st = hyla_executor_run_step(ex, tokens, NULL, logits, 0.0f, 0.0f, &loss);
    ex->state = NULL;
    HYLA_TRY(st);
    for (int64_t b = 0; b < ex->B; b++)
        state->len[b] += ex->T;
    return HYLA_OK;
}

int hyla_executor_forward(hyla_executor *ex, const int32_t *tokens, const int32_t *labels, float *logits,
                          hyla_step_loss *loss)
{
    HYLA_ASSERT(ex->forward_only == HYLA_FORWARD_ALL);
    set_labels(ex, tokens, labels);
    return hyla_executor_run_step(ex, tokens, NULL, logits, 0.0f, 0.0f, loss);
}

int hyla_executor_forward_streamed(hyla_executor *ex, const int32_t *tokens, const int32_t *labels,
                                   hyla_logits_sink sink, void *ctx, hyla_step_loss *loss)
{
    ex->sink = sink;
    ex->sink_ctx = ctx;
    ex->sink_status = HYLA_OK;
    int st = hyla_executor_forward(ex, tokens, labels, NULL, loss);
    ex->sink = NULL;
    ex->sink_ctx = NULL;
    return st != HYLA_OK ? st : ex->sink_status;
}

