#include "engine/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/exact_sum.h"
#include "parallel/grad_reduce.h"
#include "parallel/shard.h"
#include "parallel/shard_comm.h"
#include "model/lora.h"

/* Floats of rank r's piece of parameter i. */
static int64_t piece_of(const hyla_param_table *t, int i, int ranks, int r)
{
    int64_t lo, len;
    hyla_shard_piece(t->params[i].numel, ranks, r, &lo, &len);
    return len;
}

/* The FSDP step as the trainer executes it (train/fsdp.h), for device pc->rank (rank 0's pieces
 * are the largest): weight, gradient and moment pieces; the compact head and one unit's window of
 * gradients; the reduce-scatter staging and the norm's partial sums; the gathered high-water:
 * the largest part acquired (hyla_fsdp_parts: the embedding, each layer forward, the head, each
 * unit backward) plus, with the prefetch, the next one (a part acquired twice in a row is
 * gathered once); and the bytes rank 0 sends per step: each gather sends its piece to the N - 1
 * others, each reduce-scatter sends the others their pieces, plus the norm's partial sum and the
 * loss parts. Expert groups (groups > 1, train/fsdp_experts.c): the routed expert tensors are in
 * no part; while an experts op runs, one group of its tensor's rows is gathered (two with the
 * prefetch: the next group's gather in flight) on top of its layer's part (and the next part in
 * flight), and the window holds one group's gradient rows (the largest tensor's); every experts op
 * call (forward, recompute, backward: counted by the executor's planning pass) gathers its tensor
 * once more. */
static void plan_fsdp(const hyla_model *m, const hyla_plan_config *pc, const hyla_executor *ex, int64_t groups,
                      hyla_plan *out)
{
    const hyla_param_table *t = &m->table;
    int N = (int)pc->devices;
    int64_t A = pc->accum > 1 ? pc->accum : 1;
    int bf16 = pc->act_bytes == 2; /* a gathered matrix also holds its bf16 compute copy */
    int R = (int)pc->rank; /* the device planned (0: the largest pieces) */
    double pieces = (double)hyla_params_shard_floats(t, N, R), scatter_floats = 0;
    int n_parts = hyla_fsdp_parts(ex, NULL, 0);
    int(*parts)[2] = malloc((size_t)n_parts * sizeof *parts);
    double *bytes = calloc((size_t)n_parts, sizeof *bytes), *floats = calloc((size_t)n_parts, sizeof *floats);
    double *sent = calloc((size_t)n_parts, sizeof *sent);
    if (!parts || !bytes || !floats || !sent) { /* a few hundred entries; treated as nothing gathered */
        free(parts), free(bytes), free(floats), free(sent);
        return;
    }
    hyla_fsdp_parts(ex, parts, n_parts);
    double expert_gathers = 0; /* expert groups: floats this rank sends per micro-batch */
    double *grouped = calloc((size_t)n_parts, sizeof *grouped); /* ... while part k computes */
    if (!grouped) {
        free(parts), free(bytes), free(floats), free(sent);
        return;
    }
    for (int i = 0; i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        double span = (double)hyla_param_span(p);
        double per_float = pc->param_bytes + (bf16 && hyla_role_is_matrix(p->role) ? 2.0 : 0.0);
        int routed = groups > 1 && hyla_role_is_routed(p->role);
        double in_flight = routed ? (double)(p->numel / groups) * per_float * (pc->no_prefetch ? 1.0 : 2.0) : 0.0;
        for (int k = 0; k < n_parts; k++)
            if (hyla_fsdp_in_part(&m->cfg, p, parts[k][0], parts[k][1])) {
                if (routed)
                    grouped[k] = in_flight > grouped[k] ? in_flight : grouped[k];
                else
                    bytes[k] += span * per_float, floats[k] += span, sent[k] += (double)piece_of(t, i, N, R);
            }
        if (routed && p->layer >= 0 && expert_gathers == 0) /* (every routed tensor of a role has one shape) */
            for (int k = 0; k < ex->n_expert_seq; k++) {
                int j = hyla_param_find(t, ex->expert_seq[k][1] == 2 ? HYLA_P_MOE_DOWN : HYLA_P_MOE_GATE_UP, p->layer);
                expert_gathers += (double)piece_of(t, j, N, R);
            }
        if (!p->mtp || pc->mtp) /* (the MTP head without the MTP loss: frozen, not reduced) */
            scatter_floats += (double)(p->numel - piece_of(t, i, N, R));
    }
    double most = 0, window = 0, gather_floats = expert_gathers;
    int backward = 0; /* past the head: the units' backward parts */
    for (int k = 0; k < n_parts; k++) {
        int again = k > 0 && parts[k][0] == parts[k - 1][0] && parts[k][1] == parts[k - 1][1];
        int next_new = k + 1 < n_parts && !(parts[k + 1][0] == parts[k][0] && parts[k + 1][1] == parts[k][1]);
        double live = bytes[k] + (!pc->no_prefetch && next_new ? bytes[k + 1] : 0.0) + grouped[k];
        most = live > most ? live : most;
        if (!again)
            gather_floats += sent[k];
        if (backward) /* a unit's backward: its layers' gradients, whole (hyla_executor_window_floats) */
            window = floats[k] > window ? floats[k] : window;
        backward |= parts[k][0] == HYLA_WEIGHTS_HEAD;
    }
    free(parts), free(bytes), free(floats), free(sent), free(grouped);
    if (groups > 1) /* the window: one group's expert rows at a time */
        window = (double)hyla_executor_window_grouped_floats(ex, (int)groups);
    out->param_bytes = pieces * pc->param_bytes;
    out->opt_bytes = 2.0 * pieces * pc->opt_bytes;
    out->argument_bytes = out->param_bytes + out->opt_bytes + out->batch_bytes;
    out->gathered_bytes = most;
    if (m->lora) { /* the base frozen as pieces (gathered, never reduced); the adapter replicated, its
                    * gradient summed by the ordered reducer (train/trainer.c) */
        double n = (double)m->lora->table.total_floats;
        out->param_bytes += out->adapter_bytes;
        out->opt_bytes = 2.0 * n * pc->opt_bytes;
        out->argument_bytes = out->param_bytes + out->opt_bytes + out->batch_bytes;
        out->grad_bytes = n * pc->grad_bytes;
        out->reduce_bytes = (double)hyla_grad_reduce_bytes(m->lora->table.total_floats, N);
        out->comm_bytes = (double)(N - 1) * 4.0 * (double)A * gather_floats +
                          (double)hyla_dp_step_comm_bytes(m->lora->table.total_floats, N, A);
        return;
    }
    out->grad_bytes = ((double)hyla_grad_head_floats(t) + window +
                       (double)hyla_fsdp_grad_floats(t, ex, N, R, pc->update_per_layer)) * pc->grad_bytes;
    out->reduce_bytes = (double)hyla_align_up((size_t)hyla_shard_comm_floats(N) * sizeof(float)) +
                        (double)N * (double)sizeof(hyla_exact_sum); /* staging; every rank's norm partial sum */
    if (pc->overlap_reduce && !pc->no_prefetch && !m->lora) { /* overlapped reduce-scatters: a second window, the
                                         * in-flight unit's staging, the early head gradients' (train/fsdp.h) */
        out->grad_bytes += window * pc->grad_bytes;
        size_t stage = hyla_fsdp_overlap_floats(t, ex, N, R, (int)groups);
        size_t group_stage = hyla_fsdp_group_stage_floats(t, N, R, (int)groups); /* one expert group's in flight */
        size_t head_stage = hyla_fsdp_head_stage_floats(t, N, R, pc->mtp); /* the early head gradients' */
        out->reduce_bytes += (double)hyla_align_up((stage ? stage : 1) * sizeof(float)) +
                             (group_stage ? (double)hyla_align_up(group_stage * sizeof(float)) : 0.0) +
                             (double)hyla_align_up((head_stage ? head_stage : 1) * sizeof(float));
    }
    out->comm_bytes = (double)(N - 1) * (4.0 * (double)A * gather_floats + (double)sizeof(hyla_exact_sum) +
                                      (double)(HYLA_STEP_LOSS_PARTS * sizeof(double)) * (double)A) +
                      4.0 * (double)A * scatter_floats; /* a reduce-scatter sends each other rank its own piece */
}

/* Bytes device R sends per micro-batch for the link's messages (train/context.c): the conv
 * window to the next rank per forward and recompute call, again and the first taps' partial dx
 * to the previous one per backward call; the chain's state on to the next rank per forward call
 * (the recompute passes nothing), back per backward call; attention's keys and values gathered
 * per forward and recompute call, gathered again and their gradients' blocks exchanged per
 * backward call; the router statistics once. */
static double context_comm(const hyla_config *cfg, const int64_t calls[3][3], int64_t B, int64_t Tl, int64_t C,
                           int64_t R)
{
    double cd = (double)hyla_cfg_conv_dim(cfg), K = (double)cfg->conv_kernel, f = sizeof(float);
    double sz = (double)(cfg->lin_v_heads * cfg->lin_k_dim * cfg->lin_v_dim);
    double keys = (double)(Tl * cfg->n_kv_heads * cfg->head_dim) * f * (double)(C - 1); /* one allgather / alltoall */
    int next = R + 1 < C, prev = R > 0;
    double b = (double)B, bytes = 0.0;
    bytes += (double)(calls[0][0] + calls[0][1]) * b * (next ? K * cd * f : 0.0);
    bytes += (double)calls[0][2] * b * ((next ? K * cd * f : 0.0) + (prev ? (K - 1.0) * cd * f : 0.0));
    bytes += (double)calls[1][0] * (next ? b * sz * f : 0.0) + (double)calls[1][2] * (prev ? b * sz * f : 0.0);
    bytes += (double)(calls[2][0] + calls[2][1]) * b * 2.0 * keys + (double)calls[2][2] * b * 4.0 * keys;
    if (cfg->n_experts > 0)
        bytes += (double)(2 * cfg->n_experts + 1) * sizeof(double) * (double)(C - 1);
    return bytes;
}

int hyla_plan_compute(const hyla_model *m, const hyla_plan_config *pc, hyla_plan *out)
{
    memset(out, 0, sizeof *out);
    if (pc->context_parallel > 1) { /* the step of one slice, and the link beside it */
        int64_t C = pc->context_parallel;
        if (pc->devices % C)
            return hyla_error_set(HYLA_ERR_ARG, "plan: --context-parallel %lld must divide --devices %lld (groups of C "
                                  "devices share a sequence)", (long long)C, (long long)pc->devices);
        if (pc->seq % C || pc->seq / C < m->cfg.conv_kernel || pc->seq / C < 2)
            return hyla_error_set(HYLA_ERR_ARG, "plan: --context-parallel %lld: --seq %lld must divide into slices of at "
                                  "least the conv window (%lld)", (long long)C, (long long)pc->seq,
                                  (long long)m->cfg.conv_kernel);
        hyla_plan_config slice = *pc;
        slice.seq = pc->seq / C, slice.context_parallel = 0;
        HYLA_TRY(hyla_plan_compute(m, &slice, out));
        int64_t A = pc->accum > 1 ? pc->accum : 1;
        out->context_bytes = (double)hyla_context_link_bytes(&m->cfg, pc->batch, slice.seq, (int)C);
        out->context_comm_bytes = (double)A * context_comm(&m->cfg, (const int64_t(*)[3])out->context_calls, pc->batch,
                                                           slice.seq, C, pc->rank % C);
        out->comm_bytes += out->context_comm_bytes;
        out->temp_bytes += out->context_bytes;
        out->peak_bytes += out->context_bytes;
        return HYLA_OK;
    }
    if (pc->batch < 1 || pc->seq < 2 || pc->devices < 1)
        return hyla_error_set(HYLA_ERR_ARG, "plan: need batch >= 1, seq >= 2, devices >= 1");
    if (pc->rank < 0 || pc->rank >= pc->devices)
        return hyla_error_set(HYLA_ERR_ARG, "plan: --rank %lld is not one of the %lld devices", (long long)pc->rank,
                              (long long)pc->devices);
    hyla_param_counts counts;
    hyla_params_count(&m->table, &counts);
    out->params = counts.total;
    int64_t adapter = 0;
    for (int i = 0; m->lora && i < m->lora->table.n_params; i++)
        adapter += m->lora->table.params[i].numel;
    out->trained_params = m->lora ? adapter : counts.total;
    if (m->lora && pc->update_per_layer)
        return hyla_error_set(HYLA_ERR_ARG, "plan: LoRA is planned without per-layer updates");
    if (m->lora && pc->fsdp && pc->devices > 1 && pc->param_bytes == 2)
        return hyla_error_set(HYLA_ERR_ARG, "plan: LoRA with shard fsdp keeps the frozen base as fp32 pieces (no "
                              "--param-dtype bf16)");
    int64_t groups = pc->expert_groups > 1 ? pc->expert_groups : 1;
    int sharded = pc->fsdp && pc->devices > 1;
    if (groups > 1 && !sharded)
        return hyla_error_set(HYLA_ERR_ARG, "plan: --expert-groups %lld: expert groups are how FSDP gathers an MoE "
                              "layer; they need --shard fsdp over more than one device", (long long)groups);
    if (groups > 1 && m->cfg.n_experts < 1)
        return hyla_error_set(HYLA_ERR_ARG, "plan: --expert-groups %lld: the model has no routed experts",
                              (long long)groups);
    if (groups > 1 && m->cfg.n_experts % groups)
        return hyla_error_set(HYLA_ERR_ARG, "plan: --expert-groups %lld does not divide the model's %lld routed "
                              "experts", (long long)groups, (long long)m->cfg.n_experts);
    double shard = pc->fsdp ? (double)pc->devices : 1.0;
    out->adapter_bytes = 4.0 * (double)adapter; /* fp32 adapter weights */
    /* the arenas as allocated: the table's floats (each parameter padded to 16) */
    double trained_floats = (double)(m->lora ? m->lora->table.total_floats : m->table.total_floats);
    out->param_bytes = (double)m->table.total_floats * pc->param_bytes / shard + out->adapter_bytes;
    int frozen_bf16 = m->lora && pc->param_bytes == 2; /* LoRA over a bf16 base: matrices bf16 only, the rest fp32 */
    if (frozen_bf16) {
        out->param_bytes = out->adapter_bytes;
        for (int i = 0; i < m->table.n_params; i++) {
            const hyla_param *p = &m->table.params[i];
            out->param_bytes += hyla_role_is_matrix(p->role) ? 2.0 * (double)p->numel : 4.0 * (double)hyla_param_span(p);
        }
    }
    out->opt_bytes = 2.0 * trained_floats * pc->opt_bytes / shard;
    out->batch_bytes = 2.0 * (double)(pc->batch * pc->seq) * 4.0; /* token ids + labels, int32 */
    out->argument_bytes = out->param_bytes + out->opt_bytes + out->batch_bytes;

    if (pc->act_bytes != 4 && pc->act_bytes != 2)
        return hyla_error_set(HYLA_ERR_ARG, "plan: activations are f32 or bf16");
    /* the executor's own planning pass in the activation dtype: bf16 compute keeps bf16
     * checkpoints and plans the GEMMs' bf16 operands (nothing of the model but its config and
     * table is read) */
    hyla_model in_dtype = *m;
    in_dtype.compute_dtype = pc->act_bytes == 2 ? HYLA_DT_BF16 : HYLA_DT_F32;
    if (pc->act_bytes == 2 && !(pc->fsdp && pc->devices > 1) && !frozen_bf16) /* the bf16 copy of the matrices, made once per step */
        for (int i = 0; i < m->table.n_params; i++)
            if (hyla_role_is_matrix(m->table.params[i].role))
                out->compute_copy_bytes += 2.0 * (double)m->table.params[i].numel;
    out->argument_bytes += out->compute_copy_bytes;
    hyla_executor ex;
    HYLA_TRY(pc->mtp ? hyla_executor_plan_mtp(&ex, &in_dtype, &pc->policy, pc->unit, pc->batch, pc->seq)
                     : hyla_executor_plan(&ex, &in_dtype, &pc->policy, pc->unit, pc->batch, pc->seq));

    size_t window = hyla_executor_window_floats(&ex);
    int window_sums = 0; /* per-layer updates: windows completed per step (a unit that ends its layers) */
    for (int u = 0; u < ex.n_trunk_units; u++)
        window_sums += ex.units[u].op0 == 0;
    double scale = 1.0; /* the executor's bytes are the dtype's */
    out->checkpoint_bytes = (double)ex.ckpt_bytes * scale;
    out->work_bytes = (double)ex.work_bytes * scale;
    out->head_bytes = (double)ex.head_bytes * scale;
    out->head_rows = ex.head_rows;
    out->staging_bytes = (double)(ex.xfer_bytes[0] + ex.xfer_bytes[1]) * scale;
    out->host_bytes = (double)ex.host_bytes * scale;
    out->carry_bytes = 4.0 * (double)(pc->batch * pc->seq * m->cfg.hidden) * 4.0; /* fp32 in every mode */
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        out->by_name[c] = (double)ex.kept_bytes_by_name[c] * scale;
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        out->host_by_name[c] = (double)ex.offloaded_bytes_by_name[c] * scale;
    for (int c = 0; c <= HYLA_CK__COUNT; c++) {
        out->fp32_only_by_name[c] = (double)ex.fp32_only_bytes_by_name[c];
        out->fp32_only_bytes += out->fp32_only_by_name[c];
    }
    out->bf16_tensors = (int64_t)ex.bf16_stored_tensors;
    for (int k = 0; k < 2; k++) {
        out->by_kind[k] = (double)ex.kept_bytes_by_kind[k] * scale;
        out->host_by_kind[k] = (double)ex.offloaded_bytes_by_kind[k] * scale;
    }
    out->n_timeline = ex.n_timeline;
    out->n_forward = ex.timeline_forward;
    out->timeline = malloc((size_t)(ex.n_timeline ? ex.n_timeline : 1) * sizeof *out->timeline);
    out->host_timeline = malloc((size_t)(ex.n_timeline ? ex.n_timeline : 1) * sizeof *out->host_timeline);
    out->staging_timeline = malloc((size_t)(ex.n_timeline ? ex.n_timeline : 1) * sizeof *out->staging_timeline);
    for (int i = 0; out->timeline && out->host_timeline && out->staging_timeline && i < ex.n_timeline; i++) {
        out->timeline[i] = (double)ex.timeline[i] * scale;
        out->host_timeline[i] = (double)ex.host_timeline[i] * scale;
        out->staging_timeline[i] = (double)ex.staging_timeline[i] * scale;
    }
    memcpy(out->context_calls, ex.context_calls, sizeof out->context_calls);
    hyla_plan fsdp = *out; /* sharded: the trainer's own layout (train/fsdp.h) */
    if (sharded)
        plan_fsdp(m, pc, &ex, groups, &fsdp);
    hyla_executor_free(&ex);
    if (!out->timeline || !out->host_timeline || !out->staging_timeline) {
        hyla_plan_free(out);
        return hyla_error_set(HYLA_ERR_NOMEM, "plan: out of memory");
    }
    out->experts_per_group = m->cfg.n_experts / groups;
    /* one device: the trained table's gradients (as the trainer allocates them), or with per-layer
     * updates the non-layer parameters' and one remat unit's layer gradients */
    if (pc->update_per_layer)
        out->grad_bytes = (double)hyla_grad_head_floats(&m->table) * pc->grad_bytes + (double)window * pc->grad_bytes;
    else
        out->grad_bytes = (double)(m->lora ? m->lora->table.total_floats : m->table.total_floats) * pc->grad_bytes;
    int64_t accum = pc->accum > 1 ? pc->accum : 1;
    int replicated = !pc->fsdp || pc->devices == 1;
    if (replicated && !pc->update_per_layer && (pc->devices > 1 || accum > 1)) { /* the trainer's reducer */
        size_t n = m->lora ? m->lora->table.total_floats : m->table.total_floats; /* the trained table */
        out->reduce_bytes = (double)hyla_grad_reduce_bytes(n, (int)pc->devices);
        if (pc->devices > 1)
            out->comm_bytes = (double)hyla_dp_step_comm_bytes(n, (int)pc->devices, accum);
    }
    if (replicated && pc->update_per_layer && pc->devices > 1) { /* the compact head's reducer, and each unit's
                                                                   * window summed before its update */
        int N = (int)pc->devices;
        size_t head = hyla_grad_head_floats(&m->table);
        out->reduce_bytes = (double)hyla_grad_reduce_bytes(head, N) + (double)hyla_grad_reduce_bytes(window, N);
        out->comm_bytes = (double)hyla_dp_step_comm_bytes(head, N, 1) +
                          (double)window_sums * (double)hyla_grad_reduce_comm_bytes(window, N, 1);
    }
    if (sharded) {
        out->param_bytes = fsdp.param_bytes, out->opt_bytes = fsdp.opt_bytes, out->argument_bytes = fsdp.argument_bytes;
        out->grad_bytes = fsdp.grad_bytes, out->reduce_bytes = fsdp.reduce_bytes;
        out->gathered_bytes = fsdp.gathered_bytes, out->comm_bytes = fsdp.comm_bytes;
    }
    out->temp_bytes = out->checkpoint_bytes + out->work_bytes + out->staging_bytes + out->carry_bytes + out->grad_bytes +
                      out->gathered_bytes + out->reduce_bytes;
    out->peak_bytes = out->argument_bytes + out->temp_bytes;
    return HYLA_OK;
}

void hyla_plan_free(hyla_plan *p)
{
    free(p->timeline);
    free(p->host_timeline);
    free(p->staging_timeline);
    memset(p, 0, sizeof *p);
}
