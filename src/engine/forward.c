/* Inference forward (spec §3.3, §3.8): the executor's op lists with nothing kept. */
#include "engine/forward.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "engine/executor.h"

static int forward_impl(const hyla_model *m, const hyla_weight_source *weights, const int32_t *tokens,
                        const int32_t *labels, int64_t B, int64_t T, hyla_delta_mode mode, float *logits,
                        hyla_logits_sink sink, void *ctx, hyla_forward_out *out)
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
    HYLA_TRY(hyla_executor_init(&ex, m, &keep_nothing, HYLA_UNIT_LAYER, B, T, mode, HYLA_FORWARD_ALL));
    ex.weights = weights;
    hyla_step_loss loss;
    int st = sink ? hyla_executor_forward_streamed(&ex, tokens, labels, sink, ctx, &loss)
                  : hyla_executor_forward(&ex, tokens, labels, logits, &loss);
    hyla_executor_free(&ex);
    if (st)
        return st;
    out->ce_count = loss.ce_count;
    out->ce_loss = loss.ce_count > 0 ? loss.ce_sum / (double)loss.ce_count : NAN;
    out->aux_loss = loss.aux_loss;
    out->total_loss = isnan(loss.aux_loss) ? out->ce_loss : out->ce_loss + cfg->router_aux_loss_coef * loss.aux_loss;
    return HYLA_OK;
}

int hyla_forward(const hyla_model *m, const int32_t *tokens, const int32_t *labels, int64_t B, int64_t T,
                 hyla_delta_mode mode, float *logits, hyla_forward_out *out)
{
    return forward_impl(m, NULL, tokens, labels, B, T, mode, logits, NULL, NULL, out);
}

int hyla_forward_streamed(const hyla_model *m, const int32_t *tokens, const int32_t *labels, int64_t B, int64_t T,
                          hyla_delta_mode mode, hyla_logits_sink sink, void *ctx, hyla_forward_out *out)
{
    return forward_impl(m, NULL, tokens, labels, B, T, mode, NULL, sink, ctx, out);
}

typedef struct {
    float *logits; /* [vocab] */
    int64_t row, vocab;
} hyla_last_row;

static int keep_last_row(void *ctx, int64_t row0, int64_t rows, const float *logits)
{
    hyla_last_row *k = ctx;
    if (k->row >= row0 && k->row < row0 + rows)
        memcpy(k->logits, logits + (k->row - row0) * k->vocab, (size_t)k->vocab * sizeof(float));
    return 0;
}

int hyla_forward_last_row_from(const hyla_model *m, const hyla_weight_source *weights, const int32_t *tokens, int64_t T,
                               float *logits, hyla_forward_out *out)
{
    hyla_last_row k = {logits, T - 1, m->cfg.vocab};
    return forward_impl(m, weights, tokens, NULL, 1, T, HYLA_DELTA_CHUNKED, NULL, keep_last_row, &k, out);
}

int hyla_forward_last_row(const hyla_model *m, const int32_t *tokens, int64_t T, float *logits, hyla_forward_out *out)
{
    return hyla_forward_last_row_from(m, NULL, tokens, T, logits, out);
}
