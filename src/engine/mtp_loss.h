/* The MTP loss inside a training step (docs/mtp.md), internal to src/engine.
 *
 * Forward, after the trunk's units: the trunk's final-normed rows hn = RMSNorm1p(Y; final norm)
 * [n, H] (checkpoint arena, rounded to bf16 in bf16 compute as the lm_head's input is), the
 * head's input X = fc([RMSNorm1p(embed(u); norm_e) ; RMSNorm1p(hn; norm_h)]) with u the next
 * token of each row (of the same sequence or document; the row's own token at its end, where
 * the target is -100 and, attention being causal, nothing depends on the row), then the MTP
 * layer as its own remat unit. Targets: row i's is row i + 1's target when row i + 1 is in the
 * same sequence or document, else -100 (no target crosses a boundary; masked targets stay masked).
 *
 * Backward, before the trunk's head: mtp.norm + lm_head + cross-entropy (gradient scale
 * ex->mtp_scale), the MTP unit, fc and the two norms; the gradient reaching hn is left in
 * ex->dhidden for the trunk's head to add before the final norm's backward, and the embedding
 * rows of u get theirs. The MTP layer adds nothing to the router auxiliary loss. */
#ifndef HYLA_ENGINE_MTP_LOSS_H
#define HYLA_ENGINE_MTP_LOSS_H

#include <stdint.h>

#include "engine/executor.h"

void hyla_mtp_loss_forward(hyla_executor *ex, const int32_t *tokens);
int hyla_mtp_loss_backward(hyla_executor *ex, const int32_t *tokens, float *grads, hyla_step_loss *loss);

/* MTP targets of [rows] tokens tiled into sequences of seq_len[0..n_seq) rows (NULL: rows of T),
 * with targets labels [rows] (NULL: the next token inside each row of T): how many are >= 0. What
 * a trainer divides the MTP loss weight by. */
int64_t hyla_mtp_target_count(const int32_t *labels, int64_t rows, int64_t T, const int64_t *seq_len, int64_t n_seq);

#endif
