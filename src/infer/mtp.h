/* The multi-token-prediction head at inference (docs/mtp.md): drafts for speculative decoding.
 *
 * For a pair (next token u, hidden h) at position p — u the token after position p, h the
 * trunk's final-normed hidden state at p (or, drafting further, the head's own output at p - 1):
 *   x = fc([RMSNorm1p(embed(u); pre_fc_norm_embedding) ; RMSNorm1p(h; pre_fc_norm_hidden)])
 *   MTP layer j (a full-attention decoder layer with its own KV cache, RoPE position p)
 *   g = RMSNorm1p(y; mtp.norm)          the head's output hidden (what drafting feeds back)
 *   logits = lm_head(g)                  the distribution of the token after u
 * One MTP layer is used (layer 0, as vLLM's step 0 does for every draft step).
 *
 * The head keeps a KV cache per sequence (state, B sequences of max_len positions); entry p is
 * the pair at position p, so a sequence of L trunk tokens has at most L - 1 true entries. */
#ifndef HYLA_INFER_MTP_H
#define HYLA_INFER_MTP_H

#include <stdint.h>

#include "model/infer_state.h"
#include "model/model.h"

typedef struct {
    const hyla_model *m;
    int64_t B, max_rows;       /* sequences, rows per sequence per call at most */
    hyla_infer_state state;    /* the MTP layer's KV caches: n_layers = 1 */
    float *buf;                /* one allocation: the tape slots and scratch of max_rows x B rows */
    size_t buf_floats;
} hyla_mtp;

/* A head for B sequences of max_len positions, calls of up to max_rows rows per sequence. An
 * error names the problem when the model has no MTP layers. */
int hyla_mtp_init(hyla_mtp *h, const hyla_model *m, int64_t B, int64_t max_rows, int64_t max_len);
void hyla_mtp_free(hyla_mtp *h);

/* T rows per sequence: tokens [B, T] (the next tokens u), hidden [B, T, H] (h); appended to each
 * sequence's cache at positions len[b] .. len[b] + T - 1. out_hidden [B, T, H] (g, or NULL);
 * logits [B, V] of each sequence's last row (last_only) or [B, T, V] of every row. */
int hyla_mtp_run(hyla_mtp *h, const int32_t *tokens, const float *hidden, int64_t T, float *out_hidden,
                 float *logits, int last_only);

/* The head over a whole sequence, as training sees it: the trunk's final-normed hidden rows of
 * tokens[T] (hidden [T, H] receives them, or NULL), then the head's logits for positions
 * t = 0 .. T - 2 (inputs (tokens[t + 1], h_t): the distribution of token t + 2), handed to
 * emit(ctx, row0, rows, logits [rows, V]) a piece at a time in row order (no [T, V] buffer). */
int hyla_mtp_sequence_logits(const hyla_model *m, const int32_t *tokens, int64_t T, float *hidden,
                             int (*emit)(void *ctx, int64_t row0, int64_t rows, const float *logits), void *ctx);

#endif
