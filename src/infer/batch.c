#include "infer/batch.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "infer/generate.h"

int hyla_batch_init(hyla_batch *b, const hyla_model *m, int64_t K, int64_t max_len, int draft)
{
    memset(b, 0, sizeof *b);
    b->m = m, b->K = K, b->max_len = max_len, b->N = draft;
    HYLA_TRY(hyla_infer_state_init(&b->state, &m->cfg, K, max_len));
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    int rc = hyla_executor_init(&b->dec, m, &nothing, HYLA_UNIT_LAYER, K, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
    b->logits = malloc((size_t)(K * m->cfg.vocab) * sizeof *b->logits);
    b->tokens = calloc((size_t)K, sizeof *b->tokens);
    b->active = calloc((size_t)K, 1);
    if (rc == HYLA_OK && draft > 0) {
        int64_t rows = K * (draft + 1);
        rc = hyla_executor_init(&b->verify, m, &nothing, HYLA_UNIT_LAYER, K, draft + 1, HYLA_DELTA_RECURRENT,
                                HYLA_FORWARD_ROWS);
        b->rows_logits = malloc((size_t)(rows * m->cfg.vocab) * sizeof(float));
        b->rows_hidden = malloc((size_t)(rows * m->cfg.hidden) * sizeof(float));
        b->kept = malloc((size_t)(rows * hyla_infer_state_recurrent_floats(&m->cfg) + 1) * sizeof(float));
        b->rows = calloc((size_t)rows, sizeof *b->rows);
        if (rc == HYLA_OK && (!b->rows_logits || !b->rows_hidden || !b->kept || !b->rows))
            rc = hyla_error_set(HYLA_ERR_NOMEM, "batch of %lld sequences: out of memory", (long long)K);
    }
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
    if (b->verify.tapes)
        hyla_executor_free(&b->verify);
    free(b->rows_logits);
    free(b->rows_hidden);
    free(b->kept);
    free(b->rows);
    if (b->state.layers)
        hyla_infer_state_free(&b->state);
    free(b->logits);
    free(b->tokens);
    free(b->active);
    memset(b, 0, sizeof *b);
}

int hyla_batch_prefill(hyla_batch *b, int64_t slot, const int32_t *prompt, int64_t len, float *hidden)
{
    if (len < 1 || len >= b->max_len)
        return hyla_error_set(HYLA_ERR_ARG, "prompt of %lld tokens does not fit a context of %lld", (long long)len,
                              (long long)b->max_len);
    hyla_infer_state_reset(&b->state, &b->m->cfg, slot);
    HYLA_TRY(hyla_prefill_sequence_hidden(b->m, &b->state, slot, prompt, len, hyla_batch_logits(b, slot), NULL, hidden));
    b->active[slot] = 1;
    return HYLA_OK;
}

void hyla_batch_release(hyla_batch *b, int64_t slot) { b->active[slot] = 0; }

/* Each slot's T input rows: an active slot's from `in`, an idle slot's zeros (a throwaway
 * computation; its cache restarts before it could fill). */
static int step_rows(hyla_batch *b, const int32_t *in, int64_t T, int32_t *rows)
{
    for (int64_t s = 0; s < b->K; s++) {
        if (b->active[s]) {
            if (b->state.len[s] + T > b->max_len)
                return hyla_error_set(HYLA_ERR_ARG, "slot %lld: the context of %lld tokens is full", (long long)s,
                                      (long long)b->max_len);
            memcpy(rows + s * T, in + s * T, (size_t)T * sizeof *rows);
        } else {
            if (b->state.len[s] + T > b->max_len)
                hyla_infer_state_reset(&b->state, &b->m->cfg, s);
            memset(rows + s * T, 0, (size_t)T * sizeof *rows);
        }
    }
    return HYLA_OK;
}

int hyla_batch_step(hyla_batch *b, const int32_t *next)
{
    HYLA_TRY(step_rows(b, next, 1, b->tokens));
    return hyla_executor_infer(&b->dec, b->tokens, &b->state, b->logits);
}

int hyla_batch_verify(hyla_batch *b, const int32_t *rows)
{
    HYLA_ASSERT(b->N > 0);
    HYLA_TRY(step_rows(b, rows, b->N + 1, b->rows));
    b->verify.hidden_out = b->rows_hidden;
    b->state.row_keep = b->kept, b->state.row_keep_cap = b->N + 1; /* rollback points after each row */
    int rc = hyla_executor_infer(&b->verify, b->rows, &b->state, b->rows_logits);
    b->state.row_keep = NULL;
    return rc;
}

void hyla_batch_keep(hyla_batch *b, int64_t slot, int k)
{
    if (k == b->N) /* every row kept: the state is already there */
        return;
    const hyla_config *cfg = &b->m->cfg;
    int64_t R = hyla_infer_state_recurrent_floats(cfg);
    hyla_infer_state_restore_recurrent(&b->state, cfg, slot, b->kept + (slot * (b->N + 1) + k) * R);
    b->state.len[slot] -= b->N - k;
}
