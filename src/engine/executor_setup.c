/* The executor's construction: units, the planning (dry) pass, arenas; plan-only executors; the
 * measurement buffers; teardown (see executor.h). The step itself is executor.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/executor.h"
#include "engine/executor_internal.h"
#include "engine/offload.h"
#include "model/layer_ops.h"

int hyla_remat_unit_parse(const char *text, hyla_remat_unit *out)
{
    static const char *const names[] = {"layer", "block", "part"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(text, names[i])) {
            *out = (hyla_remat_unit)i;
            return HYLA_OK;
        }
    return hyla_error_set(HYLA_ERR_ARG, "unknown remat unit '%s' (known: layer, block, part)", text);
}

const char *hyla_remat_unit_name(hyla_remat_unit u)
{
    return u == HYLA_UNIT_BLOCK ? "block" : u == HYLA_UNIT_PART ? "part" : "layer";
}

/* ---- units ------------------------------------------------------------------------------------ */

static int op_index(const hyla_executor *ex, int l, const hyla_layer_op *op)
{
    for (int i = 0; i < ex->n_ops[l]; i++)
        if (ex->ops[l][i] == op)
            return i;
    return -1;
}

void hyla_executor_build_units(hyla_executor *ex)
{
    const hyla_model *m = ex->m;
    ex->n_units = 0;
    if (ex->unit_kind == HYLA_UNIT_BLOCK && !ex->forward_only) {
        for (int b = 0; b < m->sched.n_blocks; b++) {
            const hyla_block *blk = &m->sched.blocks[b];
            int l1 = blk->first_layer + blk->n_layers - 1;
            ex->units[ex->n_units++] = (hyla_unit){blk->first_layer, l1, 0, ex->n_ops[l1]};
        }
        ex->n_trunk_units = ex->n_units;
        for (int l = m->cfg.n_layers; l < ex->n_layers; l++)
            ex->units[ex->n_units++] = (hyla_unit){l, l, 0, ex->n_ops[l]};
        return;
    }
    for (int l = 0; l < ex->n_layers; l++) {
        if (l == m->cfg.n_layers) /* the MTP head's layer: a unit of its own, after the trunk's */
            ex->n_trunk_units = ex->n_units;
        if (ex->unit_kind == HYLA_UNIT_PART && !ex->forward_only) {
            int split = op_index(ex, l, &hyla_op_post_norm); /* FFN part starts at the post norm */
            ex->units[ex->n_units++] = (hyla_unit){l, l, 0, split};
            ex->units[ex->n_units++] = (hyla_unit){l, l, split, ex->n_ops[l]};
        } else {
            ex->units[ex->n_units++] = (hyla_unit){l, l, 0, ex->n_ops[l]};
        }
    }
    if (ex->n_layers == m->cfg.n_layers)
        ex->n_trunk_units = ex->n_units;
}

/* ---- setup ------------------------------------------------------------------------------------- */

/* plan_only: stop after the planning pass (hyla_executor_plan); timeline: [cap] or NULL. */
static int executor_setup(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                          int64_t B, int64_t T, hyla_delta_mode mode, int forward_only, int plan_only,
                          size_t *timeline, int cap, int64_t head_rows, int64_t head_block, int mtp)
{
    memset(ex, 0, sizeof *ex);
    if (!head_rows) /* the default: hyla_head_rows' chunk, lm_head's gradient summed per chunk */
        head_rows = head_block = hyla_head_rows(B * T, m->cfg.vocab);
    if (head_block < HYLA_HEAD_ROWS || head_block % HYLA_HEAD_ROWS || head_rows % head_block)
        return hyla_error_set(HYLA_ERR_ARG, "executor: head rows %lld must be a multiple of a block of %lld, itself a multiple of %d",
                              (long long)head_rows, (long long)head_block, HYLA_HEAD_ROWS);
    ex->head_rows = head_rows;
    ex->head_block = head_block;
    ex->plan_only = plan_only;
    ex->timeline = timeline;
    ex->host_timeline = timeline ? timeline + cap : NULL; /* one allocation: [device | host | staging] */
    ex->staging_timeline = timeline ? timeline + 2 * (size_t)cap : NULL;
    ex->cap_timeline = cap;
    /* Tokens per micro-batch: a plan may describe up to 2^32 (every slot then stays below 2^61
     * bytes: widths are bounded by model/config.h); a step that runs also indexes its n * top-k
     * routed slots with int32. */
    int64_t n_tokens, n_slots, k = m->cfg.top_k > 0 ? m->cfg.top_k : 1;
    if (B < 1 || T < 1 || __builtin_mul_overflow(B, T, &n_tokens) || n_tokens > ((int64_t)1 << 32))
        return hyla_error_set(HYLA_ERR_ARG, "batch %lld x seq %lld: more than 2^32 tokens per micro-batch",
                              (long long)B, (long long)T);
    if (!plan_only && (__builtin_mul_overflow(n_tokens, k, &n_slots) || n_slots > INT32_MAX))
        return hyla_error_set(HYLA_ERR_ARG, "batch %lld x seq %lld x top-%lld: more than 2^31 - 1 routed slots per "
                              "micro-batch; use a smaller batch with --accum", (long long)B, (long long)T, (long long)k);
    ex->m = m;
    ex->policy = *policy;
    ex->unit_kind = unit;
    ex->delta_mode = mode;
    ex->B = B;
    ex->T = T;
    ex->n = B * T;
    ex->forward_only = forward_only;
    const hyla_config *cfg = &m->cfg;
    int n_moe = 0;
    ex->n_layers = (int)cfg->n_layers + (mtp ? 1 : 0);
    for (int l = 0; l < ex->n_layers; l++) {
        ex->n_ops[l] = hyla_layer_ops(cfg, l, ex->ops[l]);
        ex->moe_index[l] = cfg->layer_is_moe[l] && l < cfg->n_layers ? n_moe++ : -1; /* routing records: the trunk's */
    }
    hyla_executor_build_units(ex);

    int64_t nH = ex->n * cfg->hidden, E = cfg->n_experts > 0 ? cfg->n_experts : 1;
    size_t per_token = plan_only ? 1 : (size_t)ex->n; /* planning reads no positions or labels */
    ex->tapes = calloc((size_t)ex->n_layers, sizeof(hyla_tape));
    ex->fetched = calloc((size_t)ex->n_layers, sizeof(hyla_tape));
    ex->bf16_kept = calloc((size_t)ex->n_layers, sizeof *ex->bf16_kept);
    ex->host_off = malloc((size_t)ex->n_layers * HYLA_S__COUNT * sizeof(size_t));
    ex->offl_written = calloc((size_t)ex->n_layers * HYLA_S__COUNT, 1);
    ex->mtp_labels = mtp ? malloc(per_token * sizeof(int32_t)) : NULL;
    ex->pos = malloc(per_token * sizeof(int64_t));
    size_t per_seq = plan_only ? (size_t)B : (size_t)ex->n; /* sequences: up to one per token (packing) */
    ex->seq_row0 = malloc(per_seq * sizeof(int64_t));
    ex->seq_len = malloc(per_seq * sizeof(int64_t));
    ex->labels = malloc(per_token * sizeof(int32_t));
    ex->aux_counts = calloc((size_t)E, sizeof(double));
    ex->aux_psum = calloc((size_t)E, sizeof(double));
    ex->aux_dprob = calloc((size_t)E, sizeof(double));
    /* what a running executor holds beside its arenas (a plan-only one allocates less, counts the same) */
    ex->buffer_bytes = hyla_align_up((size_t)nH * sizeof(float)) * (forward_only ? 2 : 4) +
                       (size_t)ex->n * (3 * sizeof(int64_t) + sizeof(int32_t)) + 3 * (size_t)E * sizeof(double);
    for (int i = 0; i < 2 && !ex->plan_only; i++) {
        ex->carry[i] = aligned_alloc(64, hyla_align_up((size_t)nH * sizeof(float)));
        ex->dcarry[i] = forward_only ? NULL : aligned_alloc(64, hyla_align_up((size_t)nH * sizeof(float)));
    }
    if (ex->plan_only) /* placeholders: the planning pass never dereferences them */
        for (int i = 0; i < 2; i++)
            ex->carry[i] = (float *)(uintptr_t)(64 * (i + 1)), ex->dcarry[i] = (float *)(uintptr_t)(64 * (i + 3));
    if (!ex->tapes || !ex->fetched || !ex->host_off || !ex->offl_written || !ex->pos || !ex->seq_row0 || !ex->seq_len || !ex->labels || !ex->aux_counts || !ex->aux_psum || !ex->aux_dprob || !ex->carry[0] ||
        !ex->carry[1] || (!forward_only && (!ex->dcarry[0] || !ex->dcarry[1]))) {
        hyla_executor_free(ex);
        return hyla_error_set(HYLA_ERR_NOMEM, "executor: cannot allocate step buffers for %lld tokens", (long long)ex->n);
    }
    hyla_executor_rows_as_sequences(ex);

    /* Plan: the step's exact allocation sequence on dry arenas. */
    ex->dry = 1;
    hyla_arena_init_dry(&ex->ckpt, "checkpoint");
    hyla_arena_init_dry(&ex->work, "work");
    hyla_arena_init_dry(&ex->xfer[0], "offload staging 0");
    hyla_arena_init_dry(&ex->xfer[1], "offload staging 1");
    hyla_arena_init_dry(&ex->host, "host store");
    hyla_step_loss loss; /* a dry pass reads no tokens or labels */
    int st = hyla_executor_run_step(ex, NULL, forward_only ? NULL : (float *)ex->carry[0], NULL, 1.0f, 1.0f, &loss);
    HYLA_ASSERT(st == HYLA_OK); /* a dry pass touches no store */
    if (ex->ckpt.overflowed || ex->work.overflowed || ex->xfer[0].overflowed || ex->xfer[1].overflowed ||
        ex->host.overflowed) {
        hyla_executor_free(ex);
        return hyla_error_set(HYLA_ERR_ARG, "batch %lld x seq %lld: the step's activations exceed 2^60 bytes",
                              (long long)B, (long long)T);
    }
    if (ex->expert_seq_nomem) {
        hyla_executor_free(ex);
        return hyla_error_set(HYLA_ERR_NOMEM, "executor: out of memory");
    }
    ex->ckpt_bytes = ex->ckpt.high_water;
    ex->work_bytes = ex->work.high_water;
    ex->xfer_bytes[0] = ex->xfer[0].high_water;
    ex->xfer_bytes[1] = ex->xfer[1].high_water;
    ex->host_bytes = ex->host.high_water;
    if (ex->plan_only)
        return HYLA_OK;
    ex->dry = 0;
    st = hyla_arena_init(&ex->ckpt, "checkpoint", ex->ckpt_bytes);
    if (st == HYLA_OK)
        st = hyla_arena_init(&ex->work, "work", ex->work_bytes);
    for (int h = 0; h < 2 && st == HYLA_OK; h++)
        st = ex->xfer_bytes[h] ? hyla_arena_init(&ex->xfer[h], h ? "offload staging 1" : "offload staging 0", ex->xfer_bytes[h])
                               : HYLA_OK;
    if (st != HYLA_OK)
        hyla_executor_free(ex);
    return st;
}

int hyla_executor_init(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                       int64_t B, int64_t T, hyla_delta_mode mode, int forward_only)
{
    return executor_setup(ex, m, policy, unit, B, T, mode, forward_only, 0, NULL, 0, 0, 0, 0);
}

/* A training step's plan with its timeline (mtp: the MTP loss on). */
static int plan_training(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                         int64_t B, int64_t T, int mtp)
{
    enum { CAP = 1 << 16 };
    size_t *timeline = malloc(3 * CAP * sizeof *timeline);
    if (!timeline)
        return hyla_error_set(HYLA_ERR_NOMEM, "plan: out of memory");
    int st = executor_setup(ex, m, policy, unit, B, T, HYLA_DELTA_CHUNKED, 0, 1, timeline, CAP, 0, 0, mtp);
    if (st && ex->timeline) { /* failed before hyla_executor_free took it */
        free(ex->timeline);
        ex->timeline = NULL;
    }
    return st;
}

static int need_mtp_head(const hyla_model *m)
{
    if (m->cfg.n_mtp_layers < 1)
        return hyla_error_set(HYLA_ERR_ARG, "an MTP loss needs an MTP head: the model has no mtp.* tensors (hyla init "
                              "--mtp-layers 1 makes a model with one)");
    return HYLA_OK;
}

int hyla_executor_init_mtp(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                           int64_t B, int64_t T)
{
    HYLA_TRY(need_mtp_head(m));
    return executor_setup(ex, m, policy, unit, B, T, HYLA_DELTA_CHUNKED, 0, 0, NULL, 0, 0, 0, 1);
}

int hyla_executor_plan_mtp(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                           int64_t B, int64_t T)
{
    HYLA_TRY(need_mtp_head(m));
    return plan_training(ex, m, policy, unit, B, T, 1);
}

int hyla_executor_init_head_rows(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                                 int64_t B, int64_t T, int64_t head_rows, int64_t head_block)
{
    return executor_setup(ex, m, policy, unit, B, T, HYLA_DELTA_CHUNKED, 0, 0, NULL, 0, head_rows, head_block, 0);
}

int hyla_executor_measure(hyla_executor *ex)
{
    if (ex->measure_cap)
        return HYLA_OK;
    int cap = 4; /* ops per step: the planning pass's count is not kept, so count them: forward + backward */
    for (int l = 0; l < ex->n_layers; l++)
        cap += 3 * ex->n_ops[l];
    ex->measured_device = malloc((size_t)cap * sizeof(size_t));
    ex->measured_host = malloc((size_t)cap * sizeof(size_t));
    ex->measured_seconds = malloc((size_t)cap * sizeof(double));
    if (!ex->measured_device || !ex->measured_host || !ex->measured_seconds)
        return hyla_error_set(HYLA_ERR_NOMEM, "executor: cannot allocate the measurement buffers");
    ex->measure_cap = cap;
    return HYLA_OK;
}

int hyla_executor_attach_store(hyla_executor *ex, hyla_host_store *store)
{
    ex->store = store;
    return ex->host_bytes ? hyla_host_store_reserve(store, ex->host_bytes) : HYLA_OK;
}

int hyla_executor_plan(hyla_executor *ex, const hyla_model *m, const hyla_policy *policy, hyla_remat_unit unit,
                       int64_t B, int64_t T)
{
    return plan_training(ex, m, policy, unit, B, T, 0);
}

int hyla_executor_plan_infer(hyla_executor *ex, const hyla_model *m, int64_t B, int64_t T, hyla_delta_mode mode)
{
    hyla_policy nothing;
    HYLA_TRY(hyla_policy_parse(&nothing, "full"));
    return executor_setup(ex, m, &nothing, HYLA_UNIT_LAYER, B, T, mode, HYLA_FORWARD_LAST, 1, NULL, 0, 0, 0, 0);
}

size_t hyla_executor_resident_bytes(const hyla_executor *ex)
{
    return ex->ckpt_bytes + ex->work_bytes + ex->xfer_bytes[0] + ex->xfer_bytes[1] + ex->buffer_bytes;
}

void hyla_executor_free(hyla_executor *ex)
{
    if (ex->ckpt.base && !ex->plan_only)
        hyla_arena_free(&ex->ckpt);
    if (ex->work.base && !ex->plan_only)
        hyla_arena_free(&ex->work);
    for (int h = 0; h < 2; h++)
        if (ex->xfer[h].base && !ex->plan_only)
            hyla_arena_free(&ex->xfer[h]);
    free(ex->tapes);
    free(ex->fetched);
    free(ex->bf16_kept);
    free(ex->host_off);
    free(ex->offl_written);
    free(ex->pos);
    free(ex->seq_row0);
    free(ex->seq_len);
    free(ex->labels);
    free(ex->mtp_labels);
    free(ex->aux_counts);
    free(ex->aux_psum);
    free(ex->aux_dprob);
    for (int i = 0; i < 2 && !ex->plan_only; i++) {
        free(ex->carry[i]);
        free(ex->dcarry[i]);
    }
    free(ex->timeline);
    free(ex->expert_seq);
    free(ex->layer_lo);
    free(ex->layer_hi);
    free(ex->measured_device);
    free(ex->measured_host);
    free(ex->measured_seconds);
    memset(ex, 0, sizeof *ex);
}

