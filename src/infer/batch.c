#include "infer/batch.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "infer/generate.h"

int hyla_batch_init(hyla_batch *b, const hyla_model *m, int64_t K, int64_t max_len)
{
    memset(b, 0, sizeof *b);
    b->m = m, b->K = K, b->max_len = max_len;
    HYLA_TRY(hyla_infer_state_init(&b->state, &m->cfg, K, max_len));
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    int rc = hyla_executor_init(&b->dec, m, &nothing, HYLA_UNIT_LAYER, K, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
    b->logits = malloc((size_t)(K * m->cfg.vocab) * sizeof *b->logits);
    b->tokens = calloc((size_t)K, sizeof *b->tokens);
    b->active = calloc((size_t)K, 1);
    if (rc == HYLA_OK && (!b->logits || !b->tokens || !b->active))
        rc = hyla_error_set(HYLA_ERR_NOMEM, "batch of %lld sequences: out of memory", (long long)K);
    if (rc != HYLA_OK)
        hyla_batch_free(b);
    return rc;
}

void hyla_batch_free(hyla_batch *b)
{
    if (b->dec.tapes)
        hyla_executor_free(&b->dec);
    if (b->state.layers)
        hyla_infer_state_free(&b->state);
    free(b->logits);
    free(b->tokens);
    free(b->active);
    memset(b, 0, sizeof *b);
}

int hyla_batch_prefill(hyla_batch *b, int64_t slot, const int32_t *prompt, int64_t len)
{
    if (len < 1 || len >= b->max_len)
        return hyla_error_set(HYLA_ERR_ARG, "prompt of %lld tokens does not fit a context of %lld", (long long)len,
                              (long long)b->max_len);
    hyla_infer_state_reset(&b->state, &b->m->cfg, slot);
    HYLA_TRY(hyla_prefill_sequence(b->m, &b->state, slot, prompt, len, hyla_batch_logits(b, slot), NULL));
    b->active[slot] = 1;
    return HYLA_OK;
}

void hyla_batch_release(hyla_batch *b, int64_t slot) { b->active[slot] = 0; }

int hyla_batch_step(hyla_batch *b, const int32_t *next)
{
    for (int64_t s = 0; s < b->K; s++) {
        if (b->active[s]) {
            if (b->state.len[s] + 1 > b->max_len)
                return hyla_error_set(HYLA_ERR_ARG, "slot %lld: the context of %lld tokens is full", (long long)s,
                                      (long long)b->max_len);
            b->tokens[s] = next[s];
        } else { /* an idle slot computes a throwaway token; keep its cache from filling */
            if (b->state.len[s] + 1 > b->max_len)
                hyla_infer_state_reset(&b->state, &b->m->cfg, s);
            b->tokens[s] = 0;
        }
    }
    return hyla_executor_infer(&b->dec, b->tokens, &b->state, b->logits);
}
