/* One sequence's drafting and acceptance for speculative decoding (see drafter.h). */
#include "infer/drafter.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int hyla_drafter_init(hyla_drafter *dr, const hyla_model *m, int N, int64_t max_len)
{
    memset(dr, 0, sizeof *dr);
    if (N < 1 || N > HYLA_MAX_DRAFT)
        return hyla_error_set(HYLA_ERR_ARG, "--draft %d: must be in 1..%d", N, HYLA_MAX_DRAFT);
    if (m->cfg.n_mtp_layers < 1)
        return hyla_error_set(HYLA_ERR_ARG, "--draft: the model has no MTP head (no mtp.* tensors)");
    dr->m = m, dr->N = N, dr->H = m->cfg.hidden, dr->V = m->cfg.vocab;
    dr->rows = HYLA_DRAFTER_PROMPT_ROWS > N + 1 ? HYLA_DRAFTER_PROMPT_ROWS : N + 1;
    HYLA_TRY(hyla_mtp_init(&dr->head, m, 1, dr->rows, max_len));
    dr->g = malloc((size_t)dr->H * sizeof(float));
    dr->head_out = malloc((size_t)(dr->rows * dr->H) * sizeof(float));
    dr->head_logits = malloc((size_t)dr->V * sizeof(float));
    dr->q = malloc((size_t)(N * dr->V) * sizeof(float));
    dr->p = malloc((size_t)dr->V * sizeof(float));
    dr->scratch = malloc((size_t)dr->V * sizeof(float));
    dr->idx = malloc((size_t)dr->V * sizeof(int32_t));
    dr->pairs = malloc((size_t)dr->rows * sizeof(int32_t));
    if (!dr->g || !dr->head_out || !dr->head_logits || !dr->q || !dr->p || !dr->scratch || !dr->idx || !dr->pairs) {
        hyla_drafter_free(dr);
        return hyla_error_set(HYLA_ERR_NOMEM, "speculative decoding: out of memory");
    }
    return HYLA_OK;
}

void hyla_drafter_free(hyla_drafter *dr)
{
    if (dr->head.buf)
        hyla_mtp_free(&dr->head);
    free(dr->g);
    free(dr->head_out);
    free(dr->head_logits);
    free(dr->q);
    free(dr->p);
    free(dr->scratch);
    free(dr->idx);
    free(dr->pairs);
    memset(dr, 0, sizeof *dr);
}

/* Greedy: the argmax. Sampling: a draw from the sampling distribution of logits, left in dist [V]. */
static int32_t pick(hyla_drafter *dr, const float *logits, const hyla_sampling *s, hyla_rng *rng, float *dist)
{
    if (s->temperature == 0)
        return hyla_argmax(logits, dr->V);
    hyla_sampling_probs(logits, dr->V, s, dist, dr->scratch, dr->idx);
    return hyla_sample_probs(dist, dr->V, rng);
}

static int32_t filtered(hyla_drafter *dr, int64_t at, int32_t d)
{
    return dr->filter ? dr->filter(dr->filter_ctx, at, d) : d;
}

/* Feed the head rows (tokens[i], hidden[i]) in calls of at most dr->rows; its pick after the last
 * row becomes d[0], and that row's output hidden is left in dr->g. */
static int catch_up(hyla_drafter *dr, const int32_t *tokens, const float *hidden, int64_t rows, const hyla_sampling *s,
                    hyla_rng *rng, int64_t out_at)
{
    for (int64_t r0 = 0; r0 < rows; r0 += dr->rows) {
        int64_t n = rows - r0 < dr->rows ? rows - r0 : dr->rows;
        HYLA_TRY(hyla_mtp_run(&dr->head, tokens + r0, hidden + r0 * dr->H, n, dr->head_out, dr->head_logits, 1));
        memcpy(dr->g, dr->head_out + (n - 1) * dr->H, (size_t)dr->H * sizeof(float));
    }
    dr->d[0] = filtered(dr, out_at, pick(dr, dr->head_logits, s, rng, dr->q));
    return HYLA_OK;
}

int hyla_drafter_start(hyla_drafter *dr, const int32_t *prompt, int64_t len, const float *hidden, int32_t x,
                       const hyla_sampling *s, hyla_rng *rng, int64_t out_at)
{
    dr->head.state.len[0] = 0; /* a new sequence: the head's cache restarts */
    dr->x = x;
    for (int64_t r0 = 0; r0 < len; r0 += dr->rows) { /* the pairs (prompt[t + 1] or x, h_t) a piece at a time */
        int64_t n = len - r0 < dr->rows ? len - r0 : dr->rows;
        for (int64_t i = 0; i < n; i++)
            dr->pairs[i] = r0 + i + 1 < len ? prompt[r0 + i + 1] : x;
        if (r0 + n < len)
            HYLA_TRY(hyla_mtp_run(&dr->head, dr->pairs, hidden + r0 * dr->H, n, dr->head_out, NULL, 1));
        else
            return catch_up(dr, dr->pairs, hidden + r0 * dr->H, n, s, rng, out_at);
    }
    return HYLA_OK;
}

int hyla_drafter_draft(hyla_drafter *dr, const hyla_sampling *s, hyla_rng *rng, int64_t out_at)
{
    int64_t head_len = dr->head.state.len[0];
    for (int j = 1; j < dr->N; j++) { /* each further draft from the head's own output */
        HYLA_TRY(hyla_mtp_run(&dr->head, &dr->d[j - 1], dr->g, 1, dr->head_out, dr->head_logits, 1));
        memcpy(dr->g, dr->head_out, (size_t)dr->H * sizeof(float));
        dr->d[j] = filtered(dr, out_at + j, pick(dr, dr->head_logits, s, rng, dr->q + j * dr->V));
    }
    dr->head.state.len[0] = head_len; /* draft entries: never part of the head's cache */
    return HYLA_OK;
}

void hyla_drafter_rows(const hyla_drafter *dr, int32_t *rows)
{
    rows[0] = dr->x;
    memcpy(rows + 1, dr->d, (size_t)dr->N * sizeof *rows);
}

/* Speculative sampling over the verify's logits [N + 1, V] and the drafts' q: draft j is accepted
 * with probability min(1, p_j(d_j) / q_j(d_j)); the first rejected one is replaced by a draw from
 * max(p_j - q_j, 0) (normalised), or after N acceptances one more token is drawn from p_N. The
 * emitted tokens are then distributed exactly as the trunk's own sampling would give them. */
static int accept_sampled(hyla_drafter *dr, const float *logits, const hyla_sampling *s, hyla_rng *rng, int32_t *out)
{
    int N = dr->N;
    int64_t V = dr->V;
    for (int j = 0; j < N; j++) {
        hyla_sampling_probs(logits + j * V, V, s, dr->p, dr->scratch, dr->idx);
        const float *q = dr->q + j * V;
        double pj = dr->p[dr->d[j]], qj = q[dr->d[j]];
        if (hyla_rng_uniform(rng) * qj < pj) {
            out[j] = dr->d[j];
            continue;
        }
        double mass = 0;
        for (int64_t v = 0; v < V; v++) { /* the residual, in place */
            float r = dr->p[v] - q[v];
            dr->p[v] = r > 0 ? r : 0;
            mass += dr->p[v];
        }
        if (mass <= 0) /* p == q up to rounding: the residual is empty; p itself */
            hyla_sampling_probs(logits + j * V, V, s, dr->p, dr->scratch, dr->idx);
        out[j] = hyla_sample_probs(dr->p, V, rng);
        return j;
    }
    hyla_sampling_probs(logits + N * V, V, s, dr->p, dr->scratch, dr->idx);
    out[N] = hyla_sample_probs(dr->p, V, rng);
    return N;
}

int hyla_drafter_accept(hyla_drafter *dr, const float *logits, const hyla_sampling *s, hyla_rng *rng, int32_t *out)
{
    if (s->temperature != 0)
        return accept_sampled(dr, logits, s, rng, out);
    int k = 0; /* greedy: accept while the draft is the trunk's argmax */
    while (k < dr->N && dr->d[k] == hyla_argmax(logits + k * dr->V, dr->V))
        out[k] = dr->d[k], k++;
    out[k] = hyla_argmax(logits + k * dr->V, dr->V);
    return k;
}

int hyla_drafter_advance(hyla_drafter *dr, const float *hidden, int k, const int32_t *out, const hyla_sampling *s,
                         hyla_rng *rng, int64_t out_at)
{
    /* the head's true entries for the accepted rows: (out[j], the trunk's hidden row j), j <= k */
    dr->x = out[k];
    return catch_up(dr, out, hidden, k + 1, s, rng, out_at);
}
