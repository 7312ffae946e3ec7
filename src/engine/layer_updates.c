/* Per-layer updates: where decoder layers' gradients live in the table, and how big the window
 * holding one remat unit's layer gradients is (see hyla_layer_updates in executor.h). */
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "parallel/shard.h"
#include "parallel/shard_comm.h"
#include "engine/executor.h"

int hyla_layer_ranges(const hyla_param_table *t, size_t *lo, size_t *hi)
{
    int L = t->cfg.n_layers;
    for (int l = 0; l < L; l++)
        lo[l] = SIZE_MAX, hi[l] = 0;
    for (int i = 0; i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        if (p->layer < 0)
            continue;
        size_t end = p->offset + hyla_param_span(p);
        lo[p->layer] = p->offset < lo[p->layer] ? p->offset : lo[p->layer];
        hi[p->layer] = end > hi[p->layer] ? end : hi[p->layer];
    }
    for (int l = 0; l < L; l++) /* contiguous and in order: layer l ends where layer l + 1 begins */
        if (lo[l] == SIZE_MAX || (l + 1 < L && hi[l] != lo[l + 1]))
            return hyla_error_set(HYLA_ERR_MODEL, "parameter table: layer %d's parameters are not contiguous", l);
    for (int i = 0; i < t->n_params; i++) /* nothing else inside the layers' span */
        if (t->params[i].layer < 0 && t->params[i].offset >= lo[0] && t->params[i].offset < hi[L - 1])
            return hyla_error_set(HYLA_ERR_MODEL, "parameter table: a non-layer parameter sits between layers");
    return HYLA_OK;
}

size_t hyla_grad_head_floats(const hyla_param_table *t)
{
    size_t lo[HYLA_MAX_LAYERS], hi[HYLA_MAX_LAYERS];
    if (hyla_layer_ranges(t, lo, hi))
        return t->total_floats;
    /* everything outside the trunk's layers, the MTP head (last in the table) included: its gradients
     * are zero and it is skipped by the optimizer unless an MTP loss trains it */
    return t->total_floats - (hi[t->cfg.n_layers - 1] - lo[0]);
}

size_t hyla_executor_window_floats(const hyla_executor *ex)
{
    size_t lo[HYLA_MAX_LAYERS], hi[HYLA_MAX_LAYERS], best = 0;
    if (hyla_layer_ranges(&ex->m->table, lo, hi))
        return ex->m->table.total_floats;
    for (int u = 0; u < ex->n_trunk_units; u++) {
        size_t w = hi[ex->units[u].layer1] - lo[ex->units[u].layer0];
        best = w > best ? w : best;
    }
    return best;
}

size_t hyla_executor_window_grouped_floats(const hyla_executor *ex, int groups)
{
    const hyla_param_table *t = &ex->m->table;
    size_t lo[HYLA_MAX_LAYERS], hi[HYLA_MAX_LAYERS], best = 0;
    if (groups <= 1 || hyla_layer_ranges(t, lo, hi))
        return hyla_executor_window_floats(ex);
    for (int u = 0; u < ex->n_trunk_units; u++) {
        size_t w = hi[ex->units[u].layer1] - lo[ex->units[u].layer0], group = 0;
        for (int i = 0; i < t->n_params; i++) {
            const hyla_param *p = &t->params[i];
            if (p->layer < ex->units[u].layer0 || p->layer > ex->units[u].layer1 || !hyla_role_is_routed(p->role))
                continue;
            size_t g = (size_t)(p->numel / groups);
            w -= hyla_param_span(p);
            group = g > group ? g : group;
        }
        best = w + group > best ? w + group : best;
    }
    return best;
}

size_t hyla_grad_head_index(const hyla_executor *ex, size_t offset)
{
    size_t lo = ex->layer_lo[0], hi = ex->layer_hi[ex->m->cfg.n_layers - 1];
    return offset < lo ? offset : lo + (offset - hi);
}

int hyla_executor_update_per_layer(hyla_executor *ex, const hyla_layer_updates *u)
{
    ex->updates = NULL;
    if (!u)
        return HYLA_OK;
    int L = ex->m->cfg.n_layers;
    if (!ex->layer_lo) {
        ex->layer_lo = malloc((size_t)L * sizeof(size_t));
        ex->layer_hi = malloc((size_t)L * sizeof(size_t));
        if (!ex->layer_lo || !ex->layer_hi)
            return hyla_error_set(HYLA_ERR_NOMEM, "executor: out of memory");
    }
    HYLA_TRY(hyla_layer_ranges(&ex->m->table, ex->layer_lo, ex->layer_hi));
    ex->updates = u;
    return HYLA_OK;
}

/* ---- FSDP (train/fsdp.h): the gradient pieces, sized here for the trainer and hyla plan alike ---- */

/* rank `rank`'s piece length of parameter i */
static int64_t piece_len(const hyla_param_table *t, int i, int ranks, int rank)
{
    int64_t lo, len;
    hyla_shard_piece(t->params[i].numel, ranks, rank, &lo, &len);
    return len;
}

/* Shard floats of the non-layer parameters' pieces, and of the largest unit's. */
void hyla_fsdp_grad_sizes(const hyla_param_table *t, const hyla_executor *ex, int ranks, int rank, size_t *head,
                       size_t *unit)
{
    size_t per_layer[HYLA_MAX_LAYERS] = {0};
    *head = *unit = 0;
    for (int i = 0; i < t->n_params; i++) {
        size_t s = hyla_span_floats(piece_len(t, i, ranks, rank));
        if (t->params[i].layer < 0) /* the MTP head's too: the compact head spans it */
            *head += s;
        else
            per_layer[t->params[i].layer] += s;
    }
    for (int u = 0; u < ex->n_trunk_units; u++) {
        size_t sum = 0;
        for (int l = ex->units[u].layer0; l <= ex->units[u].layer1; l++)
            sum += per_layer[l];
        *unit = sum > *unit ? sum : *unit;
    }
}

size_t hyla_fsdp_overlap_floats(const hyla_param_table *t, const hyla_executor *ex, int ranks, int rank, int groups)
{
    size_t most = 0;
    for (int u = 0; u < ex->n_trunk_units; u++) {
        size_t sum = 0;
        for (int i = 0; i < t->n_params; i++)
            if (t->params[i].layer >= ex->units[u].layer0 && t->params[i].layer <= ex->units[u].layer1 &&
                !(groups > 1 && hyla_role_is_routed(t->params[i].role))) /* (groups: reduced by group) */
                sum += (size_t)hyla_shard_overlap_floats(t->params[i].numel, ranks, rank);
        most = sum > most ? sum : most;
    }
    return most;
}

int hyla_fsdp_head_early(const hyla_config *cfg, const hyla_param *p, int mtp)
{
    return p->layer < 0 && p->role != HYLA_P_EMBED && (mtp || !p->mtp); /* (tied: the lm_head is the embedding) */
}

size_t hyla_fsdp_head_stage_floats(const hyla_param_table *t, int ranks, int rank, int mtp)
{
    size_t sum = 0;
    for (int i = 0; i < t->n_params; i++)
        if (hyla_fsdp_head_early(&t->cfg, &t->params[i], mtp))
            sum += (size_t)hyla_shard_overlap_floats(t->params[i].numel, ranks, rank);
    return sum;
}

size_t hyla_fsdp_group_stage_floats(const hyla_param_table *t, int ranks, int rank, int groups)
{
    size_t most = 0;
    for (int i = 0; groups > 1 && i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        if (p->layer < 0 || !hyla_role_is_routed(p->role))
            continue;
        int64_t per = p->numel / groups;
        for (int g = 0; g < groups; g++) {
            size_t s = (size_t)hyla_shard_overlap_range_floats(p->numel, g * per, (g + 1) * per, ranks, rank);
            most = s > most ? s : most;
        }
    }
    return most;
}

size_t hyla_fsdp_grad_floats(const hyla_param_table *t, const hyla_executor *ex, int ranks, int rank, int per_layer)
{
    if (!per_layer)
        return hyla_params_shard_floats(t, ranks, rank);
    size_t head, unit;
    hyla_fsdp_grad_sizes(t, ex, ranks, rank, &head, &unit);
    return head + unit;
}

int hyla_fsdp_parts(const hyla_executor *ex, int (*parts)[2], int cap)
{
    int n = 0;
#define PART(a, b)                                                                                                     \
    do {                                                                                                               \
        if (n < cap)                                                                                                   \
            parts[n][0] = (a), parts[n][1] = (b);                                                                      \
        n++;                                                                                                           \
    } while (0)
    int trunk = ex->n_trunk_units, mtp = ex->n_units > trunk; /* the MTP loss: its units after the trunk's */
    PART(HYLA_WEIGHTS_EMBED, HYLA_WEIGHTS_EMBED);
    for (int u = 0; u < trunk; u++)
        for (int l = ex->units[u].layer0; l <= ex->units[u].layer1; l++)
            PART(l, l);
    if (mtp) { /* engine/mtp_loss.c: fc, the head's layer, its loss head, its backward, fc's backward */
        PART(HYLA_WEIGHTS_MTP_IN, HYLA_WEIGHTS_MTP_IN);
        for (int u = trunk; u < ex->n_units; u++)
            for (int l = ex->units[u].layer0; l <= ex->units[u].layer1; l++)
                PART(l, l);
        PART(HYLA_WEIGHTS_MTP_OUT, HYLA_WEIGHTS_MTP_OUT);
        for (int u = ex->n_units - 1; u >= trunk; u--)
            PART(ex->units[u].layer0, ex->units[u].layer1);
        PART(HYLA_WEIGHTS_MTP_IN, HYLA_WEIGHTS_MTP_IN);
    }
    PART(HYLA_WEIGHTS_HEAD, HYLA_WEIGHTS_HEAD);
    for (int u = trunk - 1; u >= 0; u--)
        PART(ex->units[u].layer0, ex->units[u].layer1);
#undef PART
    return n;
}

int hyla_fsdp_in_part(const hyla_config *cfg, const hyla_param *p, int layer0, int layer1)
{
    /* the layer p belongs to: a trunk layer, the MTP head's layer j as n_layers + j, else -1 */
    int64_t layer = p->layer >= 0 ? p->layer : p->mtp && p->role < HYLA_P_MTP_FC ? cfg->n_layers + p->mtp - 1 : -1;
    if (layer0 >= 0)
        return layer >= layer0 && layer <= layer1;
    if (layer >= 0)
        return 0;
    int lm_head = p->role == HYLA_P_LM_HEAD || (p->role == HYLA_P_EMBED && cfg->tie_word_embeddings);
    switch (layer0) {
    case HYLA_WEIGHTS_EMBED:
        return p->role == HYLA_P_EMBED;
    case HYLA_WEIGHTS_MTP_IN: /* [norm_e(embed(next)) ; norm_h(final_norm(h))] -> fc */
        return p->role == HYLA_P_FINAL_NORM || p->role == HYLA_P_EMBED || p->role == HYLA_P_MTP_FC ||
               p->role == HYLA_P_MTP_NORM_EMB || p->role == HYLA_P_MTP_NORM_HIDDEN;
    case HYLA_WEIGHTS_MTP_OUT:
        return p->role == HYLA_P_MTP_NORM || lm_head;
    default: /* the head: final norm and lm_head (tied: the embedding is the lm_head) */
        return p->role == HYLA_P_FINAL_NORM || lm_head;
    }
}
