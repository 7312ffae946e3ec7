/* Continuous batching: K sequence slots decoding together, one token per slot per step, for a
 * server. A slot is filled by a prefill (its caches restart empty), decodes as part of every
 * step, and is freed when its request ends; a freed slot is refilled while the others go on.
 *
 *   state   K slots of per-layer caches (model/infer_state.h) of max_len tokens each
 *   logits  [K, V] after each slot's latest token (prefill or step)
 * Idle slots ride along in a step (their rows are computed and ignored) and are reset before their
 * cache could fill. Not thread-safe: one thread drives a batch.
 *
 * Speculative decoding (draft N > 0, infer/drafter.h): a step is a verify of N + 1 rows per slot
 * [x, d_1..d_N] (the recurrent delta rule, every row's logits and final-normed hidden rows), each
 * slot keeping its recurrent state after every row; hyla_batch_keep then cuts each slot back to
 * its accepted rows. */
#ifndef HYLA_INFER_BATCH_H
#define HYLA_INFER_BATCH_H

#include <stdint.h>

#include "engine/executor.h"
#include "model/infer_state.h"
#include "model/model.h"

typedef struct {
    const hyla_model *m;
    int64_t K, max_len;
    hyla_infer_state state;
    hyla_executor dec;        /* B = K, T = 1, recurrent delta rule */
    float *logits;            /* [K, V] */
    int32_t *tokens;          /* [K] the step's input tokens */
    unsigned char *active;    /* [K] */
    /* speculative decoding (N > 0) */
    int N;
    hyla_executor verify;     /* B = K, T = N + 1, every row's logits and hidden */
    float *rows_logits;       /* [K, N + 1, V] */
    float *rows_hidden;       /* [K, N + 1, H] */
    float *kept;              /* [K, N + 1, R] each slot's recurrent state after each verified row */
    int32_t *rows;            /* [K, N + 1] */
} hyla_batch;

/* draft: N for speculative decoding (the verify's N + 1 rows fit max_len), 0 for plain steps. */
int hyla_batch_init(hyla_batch *b, const hyla_model *m, int64_t K, int64_t max_len, int draft);
void hyla_batch_free(hyla_batch *b);
/* Fill `slot` with a new sequence: caches reset, prompt prefilled; the slot becomes active.
 * hidden [len, H] receives the prompt's final-normed rows (the MTP head's input), or NULL. */
int hyla_batch_prefill(hyla_batch *b, int64_t slot, const int32_t *prompt, int64_t len, float *hidden);
/* Free `slot`. */
void hyla_batch_release(hyla_batch *b, int64_t slot);
/* One decode step: active slot s is fed next[s]; idle slots are ignored. */
int hyla_batch_step(hyla_batch *b, const int32_t *next);
/* Speculative: verify rows [K, N + 1] (active slots' [x, drafts]; idle slots' are ignored):
 * rows_logits and rows_hidden receive every row's, and every slot advances by N + 1 ... */
int hyla_batch_verify(hyla_batch *b, const int32_t *rows);
/* ... until cut back: `slot` keeps its first k + 1 verified rows (caches and recurrent state). */
void hyla_batch_keep(hyla_batch *b, int64_t slot, int k);
/* Tokens cached for `slot`. */
static inline int64_t hyla_batch_len(const hyla_batch *b, int64_t slot) { return b->state.len[slot]; }
static inline float *hyla_batch_logits(const hyla_batch *b, int64_t slot) { return b->logits + slot * b->m->cfg.vocab; }
static inline const float *hyla_batch_row_logits(const hyla_batch *b, int64_t slot)
{
    return b->rows_logits + slot * (b->N + 1) * b->m->cfg.vocab;
}
static inline const float *hyla_batch_row_hidden(const hyla_batch *b, int64_t slot)
{
    return b->rows_hidden + slot * (b->N + 1) * b->m->cfg.hidden;
}

#endif
