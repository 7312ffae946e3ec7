#include "engine/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/lora.h"

/* Largest parameter count of one decoder layer (what FSDP gathers at once). */
static int64_t largest_layer_params(const hyla_param_table *t)
{
    int64_t best = 0;
    for (int l = 0; l < t->cfg.n_layers; l++) {
        int64_t sum = 0;
        for (int i = 0; i < t->n_params; i++)
            if (t->params[i].layer == l)
                sum += t->params[i].numel;
        best = sum > best ? sum : best;
    }
    return best;
}

int hyla_plan_compute(const hyla_model *m, const hyla_plan_config *pc, hyla_plan *out)
{
    memset(out, 0, sizeof *out);
    if (pc->batch < 1 || pc->seq < 2 || pc->devices < 1)
        return hyla_error_set(HYLA_ERR_ARG, "plan: need batch >= 1, seq >= 2, devices >= 1");
    hyla_param_counts counts;
    hyla_params_count(&m->table, &counts);
    out->params = counts.total;
    int64_t adapter = 0;
    for (int i = 0; m->lora && i < m->lora->table.n_params; i++)
        adapter += m->lora->table.params[i].numel;
    out->trained_params = m->lora ? adapter : counts.total;
    if (m->lora && (pc->update_per_layer || (pc->fsdp && pc->devices > 1)))
        return hyla_error_set(HYLA_ERR_ARG, "plan: LoRA is planned for one device without per-layer updates");
    double shard = pc->fsdp ? (double)pc->devices : 1.0;
    out->adapter_bytes = 4.0 * (double)adapter; /* fp32 adapter weights */
    out->param_bytes = (double)counts.total * pc->param_bytes / shard + out->adapter_bytes;
    out->opt_bytes = 2.0 * (double)out->trained_params * pc->opt_bytes / shard;
    out->batch_bytes = 2.0 * (double)(pc->batch * pc->seq) * 4.0; /* token ids + labels, int32 */
    out->argument_bytes = out->param_bytes + out->opt_bytes + out->batch_bytes;

    if (pc->act_bytes != 4 && pc->act_bytes != 2)
        return hyla_error_set(HYLA_ERR_ARG, "plan: activations are f32 or bf16");
    /* the executor's own planning pass in the activation dtype: bf16 compute keeps bf16
     * checkpoints and plans the GEMMs' bf16 operands (nothing of the model but its config and
     * table is read) */
    hyla_model in_dtype = *m;
    in_dtype.compute_dtype = pc->act_bytes == 2 ? HYLA_DT_BF16 : HYLA_DT_F32;
    if (pc->act_bytes == 2 && !(pc->fsdp && pc->devices > 1)) /* the bf16 copy of the matrices, made once per step */
        for (int i = 0; i < m->table.n_params; i++)
            if (hyla_role_is_matrix(m->table.params[i].role))
                out->compute_copy_bytes += 2.0 * (double)m->table.params[i].numel;
    out->argument_bytes += out->compute_copy_bytes;
    hyla_executor ex;
    HYLA_TRY(hyla_executor_plan(&ex, &in_dtype, &pc->policy, pc->unit, pc->batch, pc->seq));
    size_t window = hyla_executor_window_floats(&ex);
    double scale = 1.0; /* the executor's bytes are the dtype's */
    out->checkpoint_bytes = (double)ex.ckpt_bytes * scale;
    out->work_bytes = (double)ex.work_bytes * scale;
    out->head_bytes = (double)ex.head_bytes * scale;
    out->staging_bytes = (double)(ex.xfer_bytes[0] + ex.xfer_bytes[1]) * scale;
    out->host_bytes = (double)ex.host_bytes * scale;
    out->carry_bytes = 4.0 * (double)(pc->batch * pc->seq * m->cfg.hidden) * 4.0; /* fp32 in every mode */
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        out->by_name[c] = (double)ex.kept_bytes_by_name[c] * scale;
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        out->host_by_name[c] = (double)ex.offloaded_bytes_by_name[c] * scale;
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
    hyla_executor_free(&ex);
    if (!out->timeline || !out->host_timeline || !out->staging_timeline) {
        hyla_plan_free(out);
        return hyla_error_set(HYLA_ERR_NOMEM, "plan: out of memory");
    }
    int64_t layer = largest_layer_params(&m->table);
    /* gradients live for the whole backward (sharded), plus one layer's full gradient before
     * it is reduce-scattered; FSDP gathers one layer's weights whole as a transient. With
     * per-layer updates only the non-layer parameters' gradients (sharded) and one remat unit's
     * layer gradients (whole, as the trainer allocates them) exist. */
    if (pc->update_per_layer)
        out->grad_bytes = (double)hyla_grad_head_floats(&m->table) * pc->grad_bytes / shard + (double)window * pc->grad_bytes;
    else
        out->grad_bytes = (double)out->trained_params * pc->grad_bytes / shard +
                          (pc->fsdp && pc->devices > 1 ? (double)layer * pc->grad_bytes : 0);
    out->gathered_bytes = pc->fsdp && pc->devices > 1 ? (double)layer * pc->param_bytes : 0;
    out->temp_bytes = out->checkpoint_bytes + out->work_bytes + out->staging_bytes + out->carry_bytes + out->grad_bytes +
                      out->gathered_bytes;
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
