/* The memory of one generation, from the config alone (nothing allocated): what `hyla generate`
 * holds resident beyond the process itself. Prefill's head computes the last row's logits only
 * (HYLA_FORWARD_LAST), so no term grows with prompt x vocab. */
#ifndef HYLA_INFER_INFER_PLAN_H
#define HYLA_INFER_INFER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct {
    size_t weights;   /* the weight arenas as loaded (fp32; or bf16 matrices + fp32 vectors) */
    size_t caches;    /* conv windows, delta-rule states, K/V for B x (prompt + max_new) */
    size_t sampling;  /* logits [B, V], probabilities [V], sort indices [V], the output ids */
    size_t prefill;   /* the prefill executor over one piece of at most HYLA_PREFILL_CHUNK prompt tokens
                       * (arenas, carries, bookkeeping) */
    size_t prefill_head; /* of which the head: the last row's norm (and bf16 scratch) */
    size_t decode;    /* the decode executor over B x 1 tokens */
    size_t peak;      /* weights + caches + sampling + max(prefill, decode): one executor lives at a time */
} hyla_infer_plan;

/* m: config and parameter table (weights not needed). weights_bf16: matrices held as bf16 only
 * (--param-dtype bf16); compute_bf16 with fp32 weights adds the bf16 copy of the matrices. */
int hyla_infer_plan_make(const hyla_model *m, int weights_bf16, int compute_bf16, int64_t B, int64_t prompt,
                         int64_t max_new, hyla_infer_plan *out);

#endif
