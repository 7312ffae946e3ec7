/* One sequence's side of speculative decoding (infer/speculative.h has the round): the MTP head
 * that drafts, the drafts' distributions, and the acceptance rule. The trunk's verify and its
 * rollback belong to the caller (generate: one sequence; serve: every slot in one batch), so both
 * share this.
 *
 * A round, with x the latest token picked and not yet fed to the trunk:
 *   hyla_drafter_draft     d[1..N-1] from the head's own output (d[0] is ready from the last
 *                          catch-up); the verify's rows are then [x, d[0..N-1]] (hyla_drafter_rows)
 *   (caller)               the trunk over those N + 1 rows: logits [N + 1, V], hidden [N + 1, H]
 *   hyla_drafter_accept    k drafts accepted and k + 1 tokens out (greedy: while d[j] is the
 *                          trunk's argmax; sampling: speculative rejection sampling)
 *   hyla_drafter_advance   the head catches up on the accepted rows, which drafts the next
 *                          round's d[0], and x becomes the last token out
 *   (caller)               the trunk's caches back to the point after row k
 * Sampling draws come from the caller's random stream (a request's own in a server). */
#ifndef HYLA_INFER_DRAFTER_H
#define HYLA_INFER_DRAFTER_H

#include <stdint.h>

#include "core/rng.h"
#include "infer/generate.h"
#include "infer/mtp.h"

#define HYLA_MAX_DRAFT 8

/* Replaces the head's pick of the draft that would become output token `at` (tests use it to
 * drive every acceptance length). Greedy only. */
typedef int32_t (*hyla_draft_filter)(void *ctx, int64_t at, int32_t draft);

typedef struct {
    const hyla_model *m;
    int N;                          /* drafts per round */
    int64_t H, V, rows;             /* rows per head call: max(N + 1, HYLA_DRAFTER_PROMPT_ROWS) */
    hyla_mtp head;                  /* B = 1 */
    float *g;                       /* [H] the head's output hidden of its last row */
    float *head_out;                /* [rows, H] */
    float *head_logits;             /* [V] */
    float *q;                       /* [N, V] the drafts' distributions (sampling) */
    float *p, *scratch;             /* [V] sampling scratch */
    int32_t *idx;                   /* [V] */
    int32_t *pairs;                 /* [rows] the head's next tokens for a catch-up call */
    int32_t x;                      /* the latest token out, first row of the next verify */
    int32_t d[HYLA_MAX_DRAFT];      /* this round's drafts */
    hyla_draft_filter filter;
    void *filter_ctx;
} hyla_drafter;

#define HYLA_DRAFTER_PROMPT_ROWS 64 /* rows per head call while it catches up on a prompt */

/* A drafter of N (1..HYLA_MAX_DRAFT) drafts per round for sequences of max_len positions; an
 * error names the problem when the model has no MTP head. */
int hyla_drafter_init(hyla_drafter *dr, const hyla_model *m, int N, int64_t max_len);
void hyla_drafter_free(hyla_drafter *dr);

/* A new sequence: the head's caches restart, and it reads the prompt — entries (prompt[t + 1],
 * hidden[t]) for t < len - 1 and (x, hidden[len - 1]), hidden [len, H] the trunk's final-normed
 * rows of the prompt, x the first token picked after it — which drafts d[0]. `out_at`: the index
 * the first draft would take in the output (for the filter). */
int hyla_drafter_start(hyla_drafter *dr, const int32_t *prompt, int64_t len, const float *hidden, int32_t x,
                       const hyla_sampling *s, hyla_rng *rng, int64_t out_at);
/* The round's further drafts d[1..N-1]; out_at as above. */
int hyla_drafter_draft(hyla_drafter *dr, const hyla_sampling *s, hyla_rng *rng, int64_t out_at);
/* The verify's input rows [x, d[0..N-1]]: rows [N + 1]. */
void hyla_drafter_rows(const hyla_drafter *dr, int32_t *rows);
/* The trunk's verdict over those rows (logits [N + 1, V]): returns k, the drafts accepted, and
 * out[0..k] the tokens that follow x (d[0..k-1], then the trunk's own pick). */
int hyla_drafter_accept(hyla_drafter *dr, const float *logits, const hyla_sampling *s, hyla_rng *rng, int32_t *out);
/* Then, unless the sequence ends there: the head reads the accepted rows (entries (out[j],
 * hidden[j]) for j <= k, hidden the verify's rows [N + 1, H]), which drafts the next round's d[0],
 * and x becomes out[k]. */
int hyla_drafter_advance(hyla_drafter *dr, const float *hidden, int k, const int32_t *out, const hyla_sampling *s,
                         hyla_rng *rng, int64_t out_at);

#endif
