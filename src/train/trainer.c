#include "train/trainer.h"

#include "engine/mtp_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pages.h"
#include "core/profile.h"
#include "core/zero.h"
#include "engine/routing.h"
#include "model/lora.h"

/* What the optimizer trains: the model's table and weights, or (LoRA) the adapter's. */
static const hyla_param_table *trained_table(const hyla_trainer *tr)
{
    return tr->model->lora ? &tr->model->lora->table : &tr->model->table;
}
static float *trained_weights(const hyla_trainer *tr) { return tr->model->lora ? tr->model->lora->w : tr->model->w; }

/* update_per_layer: AdamW on layers [layer0, layer1] with their gradients in the window. */
static int apply_layers(void *ctx, int layer0, int layer1, const float *window, size_t lo)
{
    hyla_trainer *tr = ctx;
    const hyla_param_table *t = &tr->model->table;
    if (tr->window_reducing) { /* across ranks: the window's sum in rank order (= micro-batch order) on every rank */
        double t0 = hyla_now();
        HYLA_TRY(hyla_grad_reducer_add(&tr->window_reducer, window, 1));
        HYLA_TRY(hyla_grad_reducer_gather(&tr->window_reducer, (float *)window));
        tr->reduce_seconds += hyla_now() - t0;
    }
    for (int i = 0; i < t->n_params; i++)
        if (t->params[i].layer >= layer0 && t->params[i].layer <= layer1)
            HYLA_TRY(hyla_adamw_update_param(&tr->opt, &t->params[i], tr->model->w, window + (t->params[i].offset - lo),
                                             &tr->step_sumsq));
    return HYLA_OK;
}

/* update_per_layer: AdamW on the embedding, final norm, lm_head and the MTP head (compact head gradients). */
static int apply_head(hyla_trainer *tr)
{
    const hyla_param_table *t = &tr->model->table;
    for (int i = 0; i < t->n_params; i++)
        if (t->params[i].layer < 0) /* the MTP head's too (the optimizer skips it unless the MTP loss trains it) */
            HYLA_TRY(hyla_adamw_update_param(&tr->opt, &t->params[i], tr->model->w,
                                             tr->grads + hyla_grad_head_index(&tr->ex, t->params[i].offset), &tr->step_sumsq));
    return HYLA_OK;
}

/* --overlap-reduce: the started unit's reduce-scatters finished and (per-layer updates) its pieces updated. */
static int finish_overlapped(hyla_trainer *tr)
{
    int l0, l1;
    HYLA_TRY(hyla_fsdp_reduce_finish(&tr->fsdp, &l0, &l1));
    return l0 >= 0 && tr->cfg.update_per_layer ? hyla_fsdp_update(&tr->fsdp, &tr->opt, l0, l1) : HYLA_OK;
}

/* Expert groups with overlapped reduce-scatters and per-layer updates: the previous unit's
 * finished and updated before the next unit's first group sum (fsdp.h, finish_unit). */
static int finish_unit(void *ctx)
{
    hyla_trainer *tr = ctx;
    double t0 = hyla_now();
    int st = finish_overlapped(tr);
    tr->reduce_seconds += hyla_now() - t0;
    return st;
}

/* FSDP: a unit's layer gradients are complete: reduce-scatter them into the pieces. */
static int reduce_layers(void *ctx, int layer0, int layer1, const float *window, size_t lo)
{
    hyla_trainer *tr = ctx;
    double t0 = hyla_now();
    HYLA_TRY(hyla_fsdp_experts_finish(&tr->fsdp)); /* (an expert group's in flight: the unit's sums complete) */
    if (tr->fsdp.overlap) { /* the previous unit's finished, this one's started, the next unit into the other window */
        HYLA_TRY(finish_overlapped(tr));
        HYLA_TRY(hyla_fsdp_reduce_start(&tr->fsdp, layer0, layer1, window, lo, tr->round_first));
        tr->updates.window = window == tr->grad_window ? tr->grad_window2 : tr->grad_window;
        tr->reduce_seconds += hyla_now() - t0;
        return HYLA_OK;
    }
    HYLA_TRY(hyla_fsdp_reduce_layers(&tr->fsdp, layer0, layer1, window, lo, tr->round_first));
    tr->reduce_seconds += hyla_now() - t0;
    return tr->cfg.update_per_layer ? hyla_fsdp_update(&tr->fsdp, &tr->opt, layer0, layer1) : HYLA_OK;
}

/* FSDP with overlapped reduce-scatters: the loss head is done, start the early head gradients'. */
static int head_ready(void *ctx)
{
    hyla_trainer *tr = ctx;
    double t0 = hyla_now();
    int st = hyla_fsdp_reduce_head_start(&tr->fsdp, tr->grads, tr->round_first);
    tr->reduce_seconds += hyla_now() - t0;
    return st;
}

static int alloc_gradients(hyla_trainer *tr)
{
    const hyla_param_table *t = trained_table(tr);
    size_t head = t->total_floats, window = 0;
    int two_windows = tr->sharded && !tr->model->lora && !tr->cfg.no_prefetch && tr->cfg.overlap_reduce; /* (hyla_fsdp.overlap) */
    int groups = tr->sharded && !tr->model->lora && tr->cfg.expert_groups > 1;
    if (tr->cfg.update_per_layer || (tr->sharded && !tr->model->lora)) { /* the head + one unit's window */
        head = hyla_grad_head_floats(t);
        window = hyla_executor_window_floats(&tr->ex);
        if (groups) { /* mappings: pages of expert rows are touched one group at a time and given back */
            tr->window_bytes = window * sizeof(float);
            tr->grad_window = hyla_pages_map_small(tr->window_bytes);
            if (two_windows)
                tr->grad_window2 = hyla_pages_map_small(tr->window_bytes);
        } else {
            tr->grad_window = aligned_alloc(64, hyla_align_up(window * sizeof(float)));
            if (two_windows) /* overlapped reduce-scatters: a unit's window stays while the next fills */
                tr->grad_window2 = aligned_alloc(64, hyla_align_up(window * sizeof(float)));
        }
        tr->updates = (hyla_layer_updates){NULL, tr->grad_window, tr->sharded ? reduce_layers : apply_layers, tr,
                                           two_windows ? head_ready : NULL};
    }
    tr->grads = hyla_pages_map(head * sizeof(float)); /* streamed every step: huge pages where there are */
    tr->updates.head = tr->grads;
    tr->head_floats = head;
    tr->grad_floats = head + (groups ? hyla_executor_window_grouped_floats(&tr->ex, tr->cfg.expert_groups)
                                     : window) * (tr->grad_window2 ? 2 : 1);
    if (!tr->grads || (window && !tr->grad_window) || (two_windows && !tr->grad_window2))
        return hyla_error_set(HYLA_ERR_NOMEM, "train: cannot allocate %zu gradient floats", head + window);
    memset(tr->grads, 0, (head ? head : 1) * sizeof(float)); /* fault the pages in at setup, not in step 1 */
    if (window && !groups)
        memset(tr->grad_window, 0, window * sizeof(float));
    if (tr->grad_window2 && !groups)
        memset(tr->grad_window2, 0, window * sizeof(float));
    return tr->cfg.update_per_layer || (tr->sharded && !tr->model->lora) ? hyla_executor_update_per_layer(&tr->ex, &tr->updates)
                                                                         : HYLA_OK;
}

int hyla_trainer_init(hyla_trainer *tr, hyla_model *model, const hyla_train_config *cfg)
{
    memset(tr, 0, sizeof *tr);
    tr->model = model;
    tr->cfg = *cfg;
    if (!tr->cfg.comm)
        tr->cfg.comm = hyla_comm_self();
    int64_t step_tokens, ranks = tr->cfg.comm->size;
    if (cfg->batch < 1 || cfg->seq < 2 || cfg->accum < 1)
        return hyla_error_set(HYLA_ERR_ARG, "train: need batch >= 1, seq >= 2, accum >= 1");
    if (__builtin_mul_overflow(cfg->batch * cfg->seq, cfg->accum * ranks, &step_tokens) || step_tokens > ((int64_t)1 << 40))
        return hyla_error_set(HYLA_ERR_ARG, "train: %lld ranks x accum %lld x batch %lld x seq %lld: more than 2^40 "
                              "tokens per step", (long long)ranks, (long long)cfg->accum, (long long)cfg->batch,
                              (long long)cfg->seq);
    if (cfg->update_per_layer && (cfg->accum != 1 || cfg->adamw.clip > 0))
        return hyla_error_set(HYLA_ERR_ARG, "per-layer updates need --accum 1 and --clip 0 (accumulation and global-norm "
                              "clipping need every gradient before the first update)");
    if (model->lora && cfg->update_per_layer)
        return hyla_error_set(HYLA_ERR_ARG, "per-layer updates do not apply to LoRA training (the adapter's gradients "
                              "are a small fraction of the model; they are updated once per step)");
    if (cfg->expert_groups > 1) {
        int64_t E = model->cfg.n_experts;
        if (!cfg->fsdp || ranks < 2)
            return hyla_error_set(HYLA_ERR_ARG, "--expert-groups %d: expert groups are how FSDP gathers an MoE layer; they "
                                  "need --shard fsdp under mpirun", cfg->expert_groups);
        if (E < 1)
            return hyla_error_set(HYLA_ERR_ARG, "--expert-groups %d: the model has no routed experts", cfg->expert_groups);
        if (E % cfg->expert_groups)
            return hyla_error_set(HYLA_ERR_ARG, "--expert-groups %d does not divide the model's %lld routed experts",
                                  cfg->expert_groups, (long long)E);
    }
    if (cfg->context_parallel > 1) {
        if (ranks % cfg->context_parallel)
            return hyla_error_set(HYLA_ERR_ARG, "--context-parallel %d does not divide the %lld ranks (groups of %d ranks "
                                  "share each sequence, a slice each)", cfg->context_parallel, (long long)ranks,
                                  cfg->context_parallel);
        if (cfg->seq < model->cfg.conv_kernel)
            return hyla_error_set(HYLA_ERR_ARG, "--context-parallel %d: a slice of %lld tokens is shorter than the conv "
                                  "window (%lld)", cfg->context_parallel, (long long)cfg->seq,
                                  (long long)model->cfg.conv_kernel);
    }
    if (cfg->fsdp && ranks < 2)
        return hyla_error_set(HYLA_ERR_ARG, "shard fsdp: needs more than one rank (mpirun -np N)");
    if (cfg->fsdp && model->lora && !model->matrices_in_w)
        return hyla_error_set(HYLA_ERR_ARG, "shard fsdp: the frozen base is sharded as fp32 pieces: drop --param-dtype "
                              "bf16 (bf16 compute, --act-dtype bf16, is fine)");
    int mtp = cfg->mtp_weight > 0 || cfg->mtp_only;
    if (mtp && model->cfg.n_mtp_layers < 1)
        return hyla_error_set(HYLA_ERR_ARG, "the MTP loss: the model has no MTP head (no mtp.* tensors; hyla init "
                              "--mtp-layers 1 makes one)");
    if (cfg->mtp_only && model->lora) { /* the head's adapters alone: some must exist */
        int any = 0;
        for (int i = 0; i < model->lora->table.n_params && !any; i++)
            any = model->lora->table.params[i].mtp != 0;
        if (!any)
            return hyla_error_set(HYLA_ERR_ARG, "--mtp-only with LoRA trains the head's adapters: name mtp.* modules in "
                                  "--lora-targets (e.g. mtp.fc,mtp.layers.0.self_attn.q_proj)");
    }
    if (!(cfg->mtp_weight >= 0 && cfg->mtp_weight <= 1e6))
        return hyla_error_set(HYLA_ERR_ARG, "--mtp-loss-weight must be in [0, 1e6]");
    tr->sharded = cfg->fsdp;
    if (!model->matrices_in_w && !model->lora) /* a LoRA run's frozen base may be bf16 only: it takes no updates */
        return hyla_error_set(HYLA_ERR_ARG, "train: the model holds bf16 weights only (--param-dtype bf16); training "
                              "keeps fp32 master weights: use --act-dtype bf16 alone (or train a LoRA adapter)");
    if (!cfg->fsdp) /* bf16 compute: the copy of the current weights (FSDP: of each part as it is gathered) */
        hyla_model_refresh_bf16(model);
    size_t n = tr->sharded && !model->lora ? hyla_params_shard_floats(&model->table, (int)ranks, tr->cfg.comm->rank)
                                           : trained_table(tr)->total_floats; /* the moments: whole (an adapter's:
                                                                                * replicated), or this rank's pieces */
    int st = hyla_adamw_init(&tr->opt, &cfg->adamw, n);
    if (!model->lora && !tr->sharded) /* bf16 compute: every update rewrites the copy of what it changed (a frozen base: never) */
        tr->opt.bf16_copy = model->w16;
    tr->opt.train_mtp = mtp;
    tr->opt.only_mtp = cfg->mtp_only;
    if (st == HYLA_OK)
        st = mtp ? hyla_executor_init_mtp(&tr->ex, model, &cfg->policy, cfg->unit, cfg->batch, cfg->seq)
                 : hyla_executor_init(&tr->ex, model, &cfg->policy, cfg->unit, cfg->batch, cfg->seq, HYLA_DELTA_CHUNKED, 0);
    if (st == HYLA_OK)
        st = alloc_gradients(tr);
    if (st == HYLA_OK && tr->sharded &&
        (st = hyla_fsdp_init(&tr->fsdp, tr->cfg.comm, model, &tr->ex, cfg->update_per_layer, !cfg->no_prefetch,
                             model->lora != NULL, cfg->overlap_reduce, cfg->expert_groups)) ==
            HYLA_OK) {
        tr->fsdp.ex = &tr->ex;
        tr->fsdp.finish_unit = finish_unit, tr->fsdp.finish_ctx = tr;
        st = hyla_fsdp_set_mtp(&tr->fsdp, mtp);
        tr->ex.weights = &tr->fsdp.source;
    }
    if (st == HYLA_OK && cfg->context_parallel > 1) { /* the ranks r C .. r C + C - 1 share their sequences */
        hyla_comm *group = NULL, *world = tr->cfg.comm;
        st = world->split(world, world->rank / cfg->context_parallel, world->rank % cfg->context_parallel, &group);
        if (st == HYLA_OK && (st = hyla_context_init(&tr->context, group, &model->cfg, cfg->batch, cfg->seq)) != HYLA_OK)
            group->close(group);
        if (st == HYLA_OK && !(tr->slice_past = malloc((size_t)cfg->batch * sizeof *tr->slice_past)))
            st = hyla_error_set(HYLA_ERR_NOMEM, "train: out of memory");
        for (int64_t b = 0; st == HYLA_OK && b < cfg->batch; b++)
            tr->slice_past[b] = (int64_t)group->rank * cfg->seq;
        if (st == HYLA_OK)
            tr->ex.context = &tr->context.link, tr->ex.context_past = tr->slice_past;
        else if (group && tr->context.comm)
            hyla_context_free(&tr->context), group->close(group);
    }
    /* replicated: the ordered sum, unless the one micro-batch's gradient is the step's */
    tr->reducing = (!tr->sharded || model->lora) && (ranks > 1 || cfg->accum > 1); /* (an adapter: replicated) */
    if (st == HYLA_OK && tr->reducing)
        st = hyla_grad_reducer_init(&tr->reducer, tr->cfg.comm, tr->head_floats);
    tr->window_reducing = !tr->sharded && cfg->update_per_layer && ranks > 1;
    if (st == HYLA_OK && tr->window_reducing)
        st = hyla_grad_reducer_init(&tr->window_reducer, tr->cfg.comm, hyla_executor_window_floats(&tr->ex));
    if (st == HYLA_OK && !(tr->loss_parts = calloc((size_t)(HYLA_STEP_LOSS_PARTS * ranks * cfg->accum), sizeof(double))))
        st = hyla_error_set(HYLA_ERR_NOMEM, "train: out of memory");
    if (st == HYLA_OK && tr->ex.host_bytes) {
        st = hyla_host_store_open(&tr->store, cfg->offload_store, cfg->offload_limit);
        if (st == HYLA_OK)
            st = hyla_executor_attach_store(&tr->ex, tr->store);
    }
    if (st != HYLA_OK)
        hyla_trainer_free(tr);
    return st;
}

void hyla_trainer_free(hyla_trainer *tr)
{
    if (tr->ex.tapes)
        hyla_executor_free(&tr->ex);
    hyla_adamw_free(&tr->opt);
    hyla_host_store_close(tr->store);
    hyla_pages_unmap(tr->grads, tr->head_floats * sizeof(float));
    if (tr->window_bytes) {
        hyla_pages_unmap(tr->grad_window, tr->window_bytes);
        if (tr->grad_window2)
            hyla_pages_unmap(tr->grad_window2, tr->window_bytes);
    } else {
        free(tr->grad_window);
        free(tr->grad_window2);
    }
    free(tr->replay_buf);
    free(tr->loss_parts);
    if (tr->reducing)
        hyla_grad_reducer_free(&tr->reducer);
    if (tr->window_reducing)
        hyla_grad_reducer_free(&tr->window_reducer);
    if (tr->sharded)
        hyla_fsdp_free(&tr->fsdp);
    if (tr->ex.context) {
        hyla_comm *group = tr->context.comm;
        hyla_context_free(&tr->context);
        group->close(group);
    }
    free(tr->slice_past);
    memset(tr, 0, sizeof *tr);
}

size_t hyla_trainer_gradient_bytes(const hyla_trainer *tr)
{
    size_t pieces = tr->sharded ? hyla_fsdp_bytes(&tr->fsdp) - hyla_align_up((tr->fsdp.shard.total_floats ? tr->fsdp.shard.total_floats : 1) * sizeof(float)) : 0;
    return tr->grad_floats * sizeof(float) + (tr->reducing ? hyla_grad_reducer_bytes(&tr->reducer) : 0) +
           (tr->window_reducing ? hyla_grad_reducer_bytes(&tr->window_reducer) : 0) + pieces;
}

size_t hyla_trainer_weight_bytes(const hyla_trainer *tr)
{
    if (!tr->sharded)
        return tr->model->table.total_floats * sizeof(float);
    return hyla_align_up(tr->fsdp.shard.total_floats * sizeof(float)) + tr->fsdp.gathered_peak;
}

size_t hyla_trainer_activation_bytes(const hyla_trainer *tr)
{
    size_t nH = (size_t)tr->ex.n * (size_t)tr->model->cfg.hidden * sizeof(float);
    return tr->ex.ckpt_bytes + tr->ex.work_bytes + tr->ex.xfer_bytes[0] + tr->ex.xfer_bytes[1] + 4 * hyla_align_up(nH) +
           (tr->ex.context ? hyla_context_bytes(&tr->context) : 0);
}

void hyla_trainer_set_context_past(hyla_trainer *tr, const int64_t *past) { tr->context_past = past; }
void hyla_trainer_set_context_next(hyla_trainer *tr, const int32_t *next) { tr->context_next = next; }

void hyla_trainer_set_segments(hyla_trainer *tr, const int64_t *seg_len, int64_t n_seg)
{
    tr->seg_len = seg_len;
    tr->n_seg = n_seg;
}

/* Packing: hand micro-batch a's documents (the next ones of tr->seg_len covering `per` tokens) to
 * the executor; *at advances over them. */
static int micro_batch_segments(hyla_trainer *tr, int64_t per, int64_t *at)
{
    if (!tr->seg_len)
        return hyla_executor_set_segments(&tr->ex, NULL, 0);
    int64_t first = *at, covered = 0;
    while (covered < per && *at < tr->n_seg)
        covered += tr->seg_len[(*at)++];
    if (covered != per)
        return hyla_error_set(HYLA_ERR_ARG, "packing: documents %lld..%lld cover %lld tokens, not a micro-batch's %lld",
                              (long long)first, (long long)*at, (long long)covered, (long long)per);
    return hyla_executor_set_segments(&tr->ex, tr->seg_len + first, *at - first);
}

/* Every rank's (ce sum, aux loss, MTP cross-entropy sum) of its micro-batches, summed in global
 * micro-batch order. */
static int step_losses(hyla_trainer *tr, double *ce_sum, double *aux_sum, int *have_aux, double *mtp_sum)
{
    int64_t A = tr->cfg.accum, N = tr->cfg.comm->size;
    double *mine = tr->loss_parts + HYLA_STEP_LOSS_PARTS * A * tr->cfg.comm->rank;
    if (N > 1) {
        double own[HYLA_STEP_LOSS_PARTS * A];
        memcpy(own, mine, sizeof own);
        HYLA_TRY(tr->cfg.comm->allgather(tr->cfg.comm, own, tr->loss_parts, sizeof own));
    }
    *ce_sum = *aux_sum = *mtp_sum = 0.0;
    *have_aux = 0;
    for (int64_t g = 0; g < N * A; g++) {
        const double *p = tr->loss_parts + HYLA_STEP_LOSS_PARTS * (A * (g % N) + g / N);
        *ce_sum += p[0];
        if (!isnan(p[1])) {
            *aux_sum += p[1];
            *have_aux = 1;
        }
        *mtp_sum += p[2];
    }
    return HYLA_OK;
}

int hyla_trainer_step(hyla_trainer *tr, const int32_t *tokens, const int32_t *labels, hyla_step_stats *stats)
{
    const hyla_config *cfg = &tr->model->cfg;
    hyla_comm *comm = tr->cfg.comm;
    int64_t B = tr->cfg.batch, T = tr->cfg.seq, N = comm->size, A = tr->cfg.accum, G = N * A, per = B * T;
    for (int64_t i = 0; i < G * per; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab)
            return hyla_error_set(HYLA_ERR_ARG, "token id %d at batch position %lld is out of range [0, %lld)", tokens[i],
                                  (long long)i, (long long)cfg->vocab);
    double t0 = hyla_now();
    if (tr->store)
        hyla_host_store_stats_reset(tr->store);
    hyla_comm_stats_reset(comm);
    if (tr->ex.context)
        hyla_comm_stats_reset(tr->context.comm);
    tr->fsdp.wait_seconds = 0;
    tr->fsdp.reduce_wait_seconds = 0;
    tr->reduce_seconds = 0;
    tr->fsdp.group_reduce_seconds = 0;
    tr->context.seconds = tr->context.chain_seconds = tr->context.chain_wait_seconds = 0;
    tr->context.chain_run_seconds[0] = tr->context.chain_run_seconds[1] = 0;
    double head_reduce = 0; /* the non-layer gradients' reduction after each micro-batch */
    double tz = HYLA_PROF_BEGIN();
    hyla_zero_floats(tr->grads, tr->head_floats);
    HYLA_PROF_END("grad_zero", tz);
    tr->opt.cfg.lr = hyla_lr_at(&tr->cfg.schedule, tr->opt.step);
    tr->step_sumsq = 0.0;
    if (tr->cfg.update_per_layer)
        hyla_adamw_begin(&tr->opt);
    int64_t labelled = G * B * (T - 1); /* next-token labels inside each sequence */
    if (labels) { /* given labels: those >= 0 are targets (and must be token ids) */
        labelled = 0;
        for (int64_t i = 0; i < G * per; i++) {
            if (labels[i] >= cfg->vocab)
                return hyla_error_set(HYLA_ERR_ARG, "label %d at batch position %lld is out of range [0, %lld)", labels[i],
                                      (long long)i, (long long)cfg->vocab);
            labelled += labels[i] >= 0;
        }
    }
    /* a step whose rows hold no target (e.g. only the prompt part of long chats) trains the aux loss only */
    float ce_scale = labelled ? (float)(1.0 / (double)labelled) : 0.0f;
    /* (slices: the aux loss is one per whole micro-batch, each rank's rows take all of its gradient) */
    int64_t whole = tr->cfg.context_parallel > 1 ? G / tr->cfg.context_parallel : G;
    float aux_scale = (float)(cfg->router_aux_loss_coef / (double)whole);
    int mtp = tr->cfg.mtp_weight > 0 || tr->cfg.mtp_only;
    int64_t mtp_targets = mtp ? hyla_mtp_target_count(labels, G * per, T, tr->seg_len, tr->n_seg) : 0;
    if (mtp && tr->ex.context) { /* slices: the targets of the rows whose next token is in the next slice */
        if (!tr->context_next)
            return hyla_error_set(HYLA_ERR_ARG, "the MTP loss with context parallelism needs each slice's next token "
                                  "(hyla_trainer_set_context_next)");
        for (int64_t i = 0; i < G * tr->cfg.batch; i++)
            mtp_targets += tr->context_next[2 * i] >= 0 && tr->context_next[2 * i + 1] >= 0;
    }
    double mtp_weight = tr->cfg.mtp_only ? 1.0 : tr->cfg.mtp_weight, mtp_sum;
    tr->ex.mtp_scale = mtp_targets ? (float)(mtp_weight / (double)mtp_targets) : 0.0f;
    if (tr->cfg.mtp_only) /* the head alone: no gradient of the main loss or the router's */
        ce_scale = aux_scale = 0.0f;
    int64_t seg_at = 0;
    for (int64_t g = 0; g < G; g++) { /* every rank walks every micro-batch's documents and routing rows */
        int sst = micro_batch_segments(tr, per, &seg_at);
        if (sst != HYLA_OK) {
            tr->seg_len = NULL;
            hyla_executor_set_segments(&tr->ex, NULL, 0);
            return sst;
        }
        if (tr->replay) { /* this micro-batch's rows of every MoE layer */
            const hyla_routing *r = tr->replay;
            for (int64_t l = 0; l < r->n_layers; l++)
                memcpy(tr->replay_buf + l * per * r->k, r->ids + (l * r->rows + tr->replay_row) * r->k,
                       (size_t)(per * r->k) * sizeof(int32_t));
            tr->replay_row += per;
            tr->ex.replay = tr->replay_buf;
        }
        if (g % N != comm->rank)
            continue;
        int64_t round = g / N;
        hyla_step_loss l;
        if (tr->model->lora) { /* adapter dropout on in this step's forward and recompute; micro-batches draw their own masks */
            tr->model->lora->training = 1;
            tr->model->lora->dropout_step = tr->opt.step * G + g;
        }
        if ((tr->reducing || tr->sharded) && round > 0)
            hyla_zero_floats(tr->grads, tr->head_floats);
        tr->round_first = tr->fsdp.round_first = round == 0;
        if (tr->ex.context) { /* (packed slices: this micro-batch's rows' continuing documents) */
            tr->ex.context_past = tr->context_past ? tr->context_past + g * tr->cfg.batch : tr->slice_past;
            tr->ex.context_next = tr->context_next ? tr->context_next + 2 * g * tr->cfg.batch : NULL;
        }
        int st = hyla_executor_step(&tr->ex, tokens + g * per, labels ? labels + g * per : NULL, tr->grads, ce_scale,
                                    aux_scale, &l);
        if (st == HYLA_OK && tr->ex.context)
            st = hyla_context_status(&tr->context);
        if (tr->model->lora)
            tr->model->lora->training = 0;
        if (st != HYLA_OK || g + N >= G) { /* segments apply to this step only */
            tr->seg_len = NULL;
            hyla_executor_set_segments(&tr->ex, NULL, 0);
        }
        HYLA_TRY(st);
        tr->loss_parts[HYLA_STEP_LOSS_PARTS * (A * comm->rank + round)] = l.ce_sum;
        tr->loss_parts[HYLA_STEP_LOSS_PARTS * (A * comm->rank + round) + 1] = l.aux_loss;
        tr->loss_parts[HYLA_STEP_LOSS_PARTS * (A * comm->rank + round) + 2] = l.mtp_sum;
        double tr0 = hyla_now();
        if (tr->reducing)
            HYLA_TRY(hyla_grad_reducer_add(&tr->reducer, tr->grads, round == 0));
        if (tr->sharded && !tr->fsdp.frozen) /* the layers' went during backward */
            HYLA_TRY(hyla_fsdp_reduce_head(&tr->fsdp, tr->grads, round == 0));
        tr->reduce_seconds += hyla_now() - tr0;
        head_reduce += hyla_now() - tr0; /* (blocking even with --overlap-reduce) */
        if (tr->sharded && tr->cfg.update_per_layer) /* accum 1: the only round */
            HYLA_TRY(hyla_fsdp_update(&tr->fsdp, &tr->opt, -1, -1));
    }
    if (tr->sharded && tr->fsdp.overlap) { /* the last unit's reduce-scatters */
        double tf = hyla_now();
        HYLA_TRY(hyla_fsdp_experts_finish(&tr->fsdp));
        HYLA_TRY(finish_overlapped(tr));
        tr->reduce_seconds += hyla_now() - tf;
    }
    if (tr->reducing) {
        double tg = hyla_now();
        HYLA_TRY(hyla_grad_reducer_gather(&tr->reducer, tr->grads));
        tr->reduce_seconds += hyla_now() - tg;
    }
    double ce_sum, aux_sum;
    int have_aux;
    HYLA_TRY(step_losses(tr, &ce_sum, &aux_sum, &have_aux, &mtp_sum));
    stats->ce = labelled ? ce_sum / (double)labelled : 0.0;
    stats->targets = labelled;
    stats->aux = have_aux ? aux_sum / (double)G : NAN;
    stats->loss = stats->ce + (have_aux ? cfg->router_aux_loss_coef * stats->aux : 0.0);
    stats->mtp = mtp && mtp_targets ? mtp_sum / (double)mtp_targets : NAN;
    stats->mtp_targets = mtp_targets;
    if (mtp && mtp_targets)
        stats->loss = tr->cfg.mtp_only ? stats->mtp : stats->loss + mtp_weight * stats->mtp;
    stats->lr = tr->opt.cfg.lr;
    int64_t step_no = tr->cfg.update_per_layer ? tr->opt.step : tr->opt.step + 1; /* per-layer: begun already */
    if (!isfinite(stats->loss)) /* before any update (per-layer updates: the gradients' checks came first) */
        return hyla_error_set(HYLA_ERR_NUMERIC, "step %lld: the loss is %s; the update was not applied (the run diverged: "
                              "a lower learning rate?)", (long long)step_no, isnan(stats->loss) ? "NaN" : "infinite");
    if (tr->cfg.update_per_layer && tr->sharded) { /* every piece was updated as it was summed */
        HYLA_TRY(hyla_fsdp_grad_norm(&tr->fsdp, &stats->grad_norm));
    } else if (tr->cfg.update_per_layer) { /* the layers were updated during backward */
        HYLA_TRY(apply_head(tr));
        stats->grad_norm = sqrt(tr->step_sumsq);
    } else if (tr->sharded && !tr->fsdp.frozen) { /* the pieces: hyla_adamw_step's arithmetic on each rank's part */
        HYLA_TRY(hyla_fsdp_grad_norm(&tr->fsdp, &stats->grad_norm));
        if (!isfinite(stats->grad_norm)) {
            HYLA_TRY(hyla_grad_check_finite(&tr->opt, &tr->fsdp.shard, tr->fsdp.grad));
            return hyla_error_set(HYLA_ERR_NUMERIC, "step %lld: gradient norm overflows; the update was not applied",
                                  (long long)tr->opt.step + 1);
        }
        HYLA_TRY(hyla_adamw_apply(&tr->opt, &tr->fsdp.shard, tr->fsdp.w, tr->fsdp.grad,
                                  hyla_clip_scale(&tr->opt.cfg, stats->grad_norm)));
    } else {
        double to = HYLA_PROF_BEGIN();
        HYLA_TRY(hyla_adamw_step(&tr->opt, trained_table(tr), trained_weights(tr), tr->grads, &stats->grad_norm));
        HYLA_PROF_END("optimizer", to);
    }
    stats->tokens = G * per;
    stats->seconds = hyla_now() - t0;
    stats->comm_bytes = comm->bytes_sent + (tr->ex.context ? tr->context.comm->bytes_sent : 0); /* (the link's group) */
    stats->comm_seconds = comm->seconds + (tr->ex.context ? tr->context.comm->seconds : 0);
    stats->gather_wait_seconds = tr->sharded ? tr->fsdp.wait_seconds : 0;
    tr->reduce_seconds += tr->fsdp.group_reduce_seconds; /* (blocking, inside the backward) */
    stats->reduce_seconds = tr->reduce_seconds;
    stats->context_seconds = tr->context.seconds, stats->context_chain_seconds = tr->context.chain_seconds;
    stats->context_chain_wait_seconds = tr->context.chain_wait_seconds;
    stats->context_chain_run_seconds[0] = tr->context.chain_run_seconds[0];
    stats->context_chain_run_seconds[1] = tr->context.chain_run_seconds[1];
    stats->reduce_wait_seconds = tr->sharded && tr->fsdp.overlap ? tr->fsdp.reduce_wait_seconds + head_reduce
                                                                 : tr->reduce_seconds;
    stats->offload_bytes = 0;
    stats->copy_seconds = stats->copy_wait_seconds = 0;
    if (tr->store) {
        hyla_host_store_stats io;
        hyla_host_store_stats_get(tr->store, &io);
        stats->offload_bytes = io.bytes_written;
        stats->copy_seconds = io.io_seconds;
        stats->copy_wait_seconds = io.wait_seconds;
    }
    return HYLA_OK;
}

int hyla_trainer_set_replay(hyla_trainer *tr, const hyla_routing *r, int64_t steps)
{
    int64_t per = tr->cfg.batch * tr->cfg.seq, need, G = tr->cfg.accum * tr->cfg.comm->size; /* steps: a flag, any size */
    if (__builtin_mul_overflow(steps, G, &need) || __builtin_mul_overflow(need, per, &need))
        return hyla_error_set(HYLA_ERR_ARG, "replay routing: %lld steps of %lld micro-batches x %lld tokens need more "
                              "than 2^63 rows", (long long)steps, (long long)G, (long long)per);
    if (r->rows < need)
        return hyla_error_set(HYLA_ERR_ARG, "replay routing has %lld rows but %lld steps of %lld micro-batches x %lld "
                              "tokens need %lld", (long long)r->rows, (long long)steps, (long long)G,
                              (long long)per, (long long)need);
    free(tr->replay_buf);
    tr->replay_buf = malloc((size_t)(r->n_layers * per * r->k) * sizeof(int32_t));
    if (!tr->replay_buf)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    tr->replay = r;
    tr->replay_row = 0;
    return HYLA_OK;
}
