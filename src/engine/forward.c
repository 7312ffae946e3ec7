/* Inference forward (spec §3.3, §3.8): the executor's op lists with nothing kept. */
#include "engine/forward.h"

#include <math.h>

#include "core/error.h"
#include "engine/executor.h"

int hyla_forward(const hyla_model *m, const int32_t *tokens, const int32_t *labels, int64_t B, int64_t T,
                 hyla_delta_mode mode, float *logits, hyla_forward_out *out)
{
    const hyla_config *cfg = &m->cfg;
    if (B < 1 || T < 1)
        return hyla_error_set(HYLA_ERR_ARG, "forward: need at least one token (got B=%lld, T=%lld)", (long long)B, (long long)T);
    for (int64_t i = 0; i < B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab)
            return hyla_error_set(HYLA_ERR_ARG, "token id %d at position %lld is out of range [0, %lld)", tokens[i],
                                  (long long)i, (long long)cfg->vocab);
    hyla_policy keep_nothing;
    HYLA_TRY(hyla_policy_parse(&keep_nothing, "full"));
    hyla_executor ex;
    HYLA_TRY(hyla_executor_init(&ex, m, &keep_nothing, HYLA_UNIT_LAYER, B, T, mode, 1));
    hyla_step_loss loss;
    int st = hyla_executor_forward(&ex, tokens, labels, logits, &loss);
    hyla_executor_free(&ex);
    if (st)
        return st;
    out->ce_count = loss.ce_count;
    out->ce_loss = loss.ce_count > 0 ? loss.ce_sum / (double)loss.ce_count : NAN;
    out->aux_loss = loss.aux_loss;
    out->total_loss = isnan(loss.aux_loss) ? out->ce_loss : out->ce_loss + cfg->router_aux_loss_coef * loss.aux_loss;
    return HYLA_OK;
}
