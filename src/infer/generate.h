/* Prefill + decode generation with sampling (spec §4.3, §5).
 *
 * Prefill runs each prompt through the chunked delta rule on top of its (empty) caches;
 * decode feeds one token per sequence per step through the recurrent rule, all sequences of
 * the batch together, each at its own position. */
#ifndef HYLA_INFER_GENERATE_H
#define HYLA_INFER_GENERATE_H

#include <stdint.h>

#include "core/rng.h"
#include "model/infer_state.h"
#include "model/model.h"

typedef struct {
    double temperature;     /* 0 = greedy */
    int64_t top_k;          /* 0 = off */
    double top_p;           /* 1 = off */
    uint64_t seed;
    int64_t max_new;
    const int32_t *stop;    /* stop token ids */
    int n_stop;
    int64_t repeat_stop;    /* stop when the last N tokens repeat the N before them (0 = off) */
} hyla_sampling;

int hyla_sampling_check(const hyla_sampling *s, int64_t vocab);
/* The first index of the largest of x [V] (0 when x[0] is NaN): greedy's pick. */
int32_t hyla_argmax(const float *x, int64_t V);
/* The distribution hyla_sample_token draws from (temperature > 0): probs [V], zero outside the
 * top-k / top-p set, summing to 1; p and idx are scratch [V]. */
void hyla_sampling_probs(const float *logits, int64_t V, const hyla_sampling *s, float *probs, float *p, int32_t *idx);
/* A draw from the non-negative weights probs [V] (not all zero), in id order. */
int32_t hyla_sample_probs(const float *probs, int64_t V, hyla_rng *rng);
/* Pick a token from logits [V] (may be modified: scaled, masked). */
int32_t hyla_sample_token(float *logits, int64_t V, const hyla_sampling *s, hyla_rng *rng, float *scratch /*[V]*/,
                          int32_t *idx_scratch /*[V]*/);

/* Does generation stop after out[n - 1] (a stop token, or the last repeat_stop tokens repeating)? */
int hyla_sampling_stops(const hyla_sampling *s, const int32_t *out, int64_t n);
/* Prompt b [len]: non-empty, token ids in range, prompt + max_new within the model's positions. */
int hyla_generate_check_prompt(const hyla_config *cfg, const hyla_sampling *s, int64_t b, const int32_t *prompt,
                               int64_t len);

/* Called with each new token of sequence b as it is produced; return non-zero to stop everything. */
typedef int (*hyla_token_cb)(void *ctx, int64_t b, int32_t token);

typedef struct {
    double prefill_seconds, decode_seconds;
    int64_t prefill_tokens, decode_tokens;
    /* speculative decoding (infer/speculative.h): verify rounds, tokens drafted and accepted */
    int64_t draft_rounds, drafted, accepted;
} hyla_generate_stats;

/* Generate for B prompts (prompts[b] of lengths lens[b]); out[b] receives up to s->max_new tokens
 * (count in n_out[b]). Optional per-step logits of every decode step: see test use. */
int hyla_generate(const hyla_model *m, int64_t B, const int32_t *const *prompts, const int64_t *lens,
                  const hyla_sampling *s, int32_t **out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx,
                  hyla_generate_stats *stats);

/* Like hyla_generate for one prompt, also recording the experts chosen for every token fed
 * through the model (prompt and generated, the last generated token excepted) into *routing
 * (allocated; free with hyla_routing_free). */
struct hyla_routing_s;
int hyla_generate_recorded(const hyla_model *m, const int32_t *prompt, int64_t len, const hyla_sampling *s,
                           int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx, hyla_generate_stats *stats,
                           struct hyla_routing_s *routing);

/* Prefill: run prompt[len] through the chunked delta rule on top of sequence b's caches in `state`
 * (empty for a new sequence), filling them; last_logits[V] gets the logits after the last prompt
 * token. `rec` (may be NULL) records the prompt's routing at rows [0, len).
 * A prompt longer than HYLA_PREFILL_CHUNK tokens runs as pieces of that many (the last one
 * shorter), each continuing on the caches the previous one filled, so the working set is that of
 * HYLA_PREFILL_CHUNK tokens whatever the prompt's length; only the last piece computes logits, of
 * its last row. The piece boundaries are multiples of the delta rule's chunk (64) and of the
 * attention's key block (64), so the pieces compute what one call computes up to the GEMM's
 * kernel choice for another row count (tests/test_decode.c bounds it). */
#define HYLA_PREFILL_CHUNK 1024
struct hyla_routing_s;
int hyla_prefill_sequence(const hyla_model *m, hyla_infer_state *state, int64_t b, const int32_t *prompt, int64_t len,
                          float *last_logits, struct hyla_routing_s *rec);

/* The same; hidden [len, H] (or NULL) receives every prompt row's final-normed hidden state. */
int hyla_prefill_sequence_hidden(const hyla_model *m, hyla_infer_state *state, int64_t b, const int32_t *prompt,
                                 int64_t len, float *last_logits, struct hyla_routing_s *rec, float *hidden);

/* A one-sequence view (B = 1) of sequence b of a batched state; `layers` is caller storage
 * [n_layers]. */
void hyla_infer_state_view(hyla_infer_state *view, hyla_layer_state *layers, const hyla_infer_state *s,
                           const hyla_config *cfg, int64_t b);

#endif
