/* Continuous batching: K sequence slots decoding together, one token per slot per step, for a
 * server. A slot is filled by a prefill (its caches restart empty), decodes as part of every
 * step, and is freed when its request ends; a freed slot is refilled while the others go on.
 *
 *   state   K slots of per-layer caches (model/infer_state.h) of max_len tokens each
 *   logits  [K, V] after each slot's latest token (prefill or step)
 * Idle slots ride along in a step (their rows are computed and ignored) and are reset before their
 * cache could fill. Not thread-safe: one thread drives a batch. */
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
} hyla_batch;

int hyla_batch_init(hyla_batch *b, const hyla_model *m, int64_t K, int64_t max_len);
void hyla_batch_free(hyla_batch *b);
/* Fill `slot` with a new sequence: caches reset, prompt prefilled; the slot becomes active. */
int hyla_batch_prefill(hyla_batch *b, int64_t slot, const int32_t *prompt, int64_t len);
/* Free `slot`. */
void hyla_batch_release(hyla_batch *b, int64_t slot);
/* One decode step: active slot s is fed next[s]; idle slots are ignored. */
int hyla_batch_step(hyla_batch *b, const int32_t *next);
/* Tokens cached for `slot`. */
static inline int64_t hyla_batch_len(const hyla_batch *b, int64_t slot) { return b->state.len[slot]; }
static inline float *hyla_batch_logits(const hyla_batch *b, int64_t slot) { return b->logits + slot * b->m->cfg.vocab; }

#endif
