/* Speculative decoding with the model's MTP head: greedy, or sampling with rejection.
 *
 * A round, with L tokens in the trunk's caches and x (the trunk's latest pick) not yet fed:
 *   1. draft d_1..d_N: the MTP head's picks, d_1 from its last true entry, each later one from
 *      the head's own output hidden state (the head run recurrently);
 *   2. verify: one trunk forward over [x, d_1..d_N] (N + 1 rows on top of the caches, one
 *      attention pass; the recurrent delta rule, the kernel plain decode runs: for N + 1 <= 9
 *      rows it reads each layer's 1 MB state N + 1 times, which is small beside the weights the
 *      rows share, and it keeps the verify's delta-rule arithmetic that of plain decoding) gives
 *      the trunk's picks p_0..p_N;
 *   3. greedy: accept the longest prefix with d_j == p_{j-1} (k tokens), then p_k: k + 1 new
 *      tokens. Sampling (temperature > 0; top-k / top-p applied to both distributions): the drafts
 *      are drawn from the head's distribution q, draft j is kept with probability
 *      min(1, p(d_j) / q(d_j)) under the trunk's p, the first rejected one is replaced by a draw
 *      from max(p - q, 0), and after N acceptances one more token is drawn from p: the output is
 *      distributed as the trunk's own sampling's (standard speculative sampling);
 *   4. roll back what the rejected rows left: the KV caches are truncated (their length); the
 *      verify keeps every linear layer's conv window and delta-rule state after each of its rows
 *      (hyla_infer_state.row_keep: (N + 1) x 18 MB at the Qwen3.5-0.8B shape, copied while each
 *      head's state is in cache), and the point after the last accepted row is put back, which
 *      costs one 18 MB copy instead of re-running the accepted rows through the trunk (a second
 *      read of every weight; the earlier form of this round); the head's draft entries are
 *      dropped and its true entries for the accepted rows appended (that run also drafts the
 *      next round's d_1).
 * Greedy output equals plain greedy decoding's up to the rounding of the two paths (the verify's
 * products run over N + 1 rows, plain decode's over one; tests/test_speculative.c counts where a
 * near-tie makes them differ). */
#ifndef HYLA_INFER_SPECULATIVE_H
#define HYLA_INFER_SPECULATIVE_H

#include <stdint.h>

#include "infer/drafter.h"
#include "infer/generate.h"

/* Generation for one prompt drafting `draft` tokens per round (1..HYLA_MAX_DRAFT), greedy or
 * sampled as s says. out[s->max_new]; stats gain draft_rounds / drafted / accepted. */
int hyla_generate_draft(const hyla_model *m, const int32_t *prompt, int64_t len, const hyla_sampling *s, int draft,
                        int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx, hyla_generate_stats *stats);

/* The same, each draft passed through filter(ctx, at, d) first (infer/drafter.h). Greedy only. */
int hyla_generate_draft_filtered(const hyla_model *m, const int32_t *prompt, int64_t len, const hyla_sampling *s,
                                 int draft, int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx,
                                 hyla_generate_stats *stats, hyla_draft_filter filter, void *filter_ctx);

#endif
