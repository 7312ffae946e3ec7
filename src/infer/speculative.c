/* Speculative greedy decoding with the MTP head (see speculative.h for the round). */
#include "infer/speculative.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "engine/executor.h"
#include "infer/mtp.h"

/* Rows the MTP head takes per call while it catches up on a prompt. */
#define MTP_PROMPT_ROWS 64

typedef struct {
    const hyla_model *m;
    int N;                          /* drafts per round */
    int64_t H, V;
    hyla_infer_state state;         /* the trunk's caches, B = 1 */
    hyla_mtp head;
    hyla_executor verify;           /* T = N + 1, every row's logits and hidden */
    float *logits;                  /* [N + 1, V] */
    float *hidden;                  /* [max(N + 1, MTP_PROMPT_ROWS), H] trunk hidden rows */
    float *g;                       /* [H] the head's output hidden of its last row */
    float *head_out;                /* [rows, H] the head's output hidden rows of one call */
    int64_t rows;                   /* rows per head call: max(N + 1, MTP_PROMPT_ROWS) */
    float *kept;                    /* [N + 1, R] the trunk's recurrent state after each verified row */
    /* sampling (temperature > 0): the drafts' distributions q [N, V], the trunk's p [V], scratch */
    const hyla_sampling *s;
    hyla_rng rng;
    float *q, *p, *scratch;
    int32_t *idx;
} spec;

static void spec_free(spec *sp)
{
    if (sp->verify.tapes)
        hyla_executor_free(&sp->verify);
    if (sp->head.buf)
        hyla_mtp_free(&sp->head);
    if (sp->state.layers)
        hyla_infer_state_free(&sp->state);
    free(sp->logits);
    free(sp->hidden);
    free(sp->head_out);
    free(sp->g);
    free(sp->kept);
    free(sp->q);
    free(sp->p);
    free(sp->scratch);
    free(sp->idx);
}

static int spec_init(spec *sp, const hyla_model *m, int N, int64_t max_len, const hyla_sampling *s)
{
    memset(sp, 0, sizeof *sp);
    sp->m = m, sp->N = N, sp->H = m->cfg.hidden, sp->V = m->cfg.vocab, sp->s = s;
    hyla_rng_seed(&sp->rng, s->seed);
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    sp->rows = MTP_PROMPT_ROWS > N + 1 ? MTP_PROMPT_ROWS : N + 1;
    HYLA_TRY(hyla_mtp_init(&sp->head, m, 1, sp->rows, max_len));
    int rc = hyla_infer_state_init_pages(&sp->state, &m->cfg, 1, max_len, 1);
    if (rc == HYLA_OK)
        rc = hyla_executor_init(&sp->verify, m, &nothing, HYLA_UNIT_LAYER, 1, N + 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_ROWS);
    sp->logits = malloc((size_t)((N + 1) * sp->V) * sizeof(float));
    sp->hidden = malloc((size_t)(sp->rows * sp->H) * sizeof(float));
    sp->head_out = malloc((size_t)(sp->rows * sp->H) * sizeof(float));
    sp->g = malloc((size_t)sp->H * sizeof(float));
    sp->kept = malloc((size_t)((N + 1) * hyla_infer_state_recurrent_floats(&m->cfg) + 1) * sizeof(float));
    sp->q = malloc((size_t)(N * sp->V) * sizeof(float));
    sp->p = malloc((size_t)sp->V * sizeof(float));
    sp->scratch = malloc((size_t)sp->V * sizeof(float));
    sp->idx = malloc((size_t)sp->V * sizeof(int32_t));
    if (rc == HYLA_OK && (!sp->logits || !sp->hidden || !sp->head_out || !sp->g || !sp->kept || !sp->q || !sp->p || !sp->scratch || !sp->idx))
        rc = hyla_error_set(HYLA_ERR_NOMEM, "speculative decoding: out of memory");
    if (rc != HYLA_OK)
        spec_free(sp);
    return rc;
}

/* Greedy: the argmax. Sampling: a draw from the sampling distribution of logits, left in dist [V]. */
static int32_t pick(spec *sp, const float *logits, float *dist)
{
    if (sp->s->temperature == 0)
        return hyla_argmax(logits, sp->V);
    hyla_sampling_probs(logits, sp->V, sp->s, dist, sp->scratch, sp->idx);
    return hyla_sample_probs(dist, sp->V, &sp->rng);
}

/* Feed the head rows (tokens[i], hidden[i]) in calls of at most MTP_PROMPT_ROWS; returns its
 * pick after the last row (the next draft) and leaves that row's output hidden in sp->g. */
static int head_catch_up(spec *sp, const int32_t *tokens, const float *hidden, int64_t rows, int32_t *draft)
{
    float *last = sp->logits; /* [V]: the verify's rows are consumed by now */
    for (int64_t r0 = 0; r0 < rows; r0 += MTP_PROMPT_ROWS) {
        int64_t n = rows - r0 < MTP_PROMPT_ROWS ? rows - r0 : MTP_PROMPT_ROWS;
        HYLA_TRY(hyla_mtp_run(&sp->head, tokens + r0, hidden + r0 * sp->H, n, sp->head_out, last, 1));
        memcpy(sp->g, sp->head_out + (n - 1) * sp->H, (size_t)sp->H * sizeof(float));
    }
    *draft = pick(sp, last, sp->q);
    return HYLA_OK;
}

/* Emit one token: 1 when generation ends (callback, stop, max_new). */
static int emit(const hyla_sampling *s, int32_t tok, int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx)
{
    out[(*n_out)++] = tok;
    if (cb && cb(cb_ctx, 0, tok))
        return 1;
    return hyla_sampling_stops(s, out, *n_out) || *n_out >= s->max_new;
}

/* Speculative sampling over the verify's logits [N + 1, V] (in sp->logits) and the drafts' q:
 * draft j is accepted with probability min(1, p_j(d_j) / q_j(d_j)); the first rejected one is
 * replaced by a draw from max(p_j - q_j, 0) (normalised), or after N acceptances one more token
 * is drawn from p_N. The emitted tokens are then distributed exactly as the trunk's own sampling
 * would give them. Returns k, the drafts accepted; p[k] is the token that follows them. */
static int accept_sampled(spec *sp, const int32_t *d, int32_t *p)
{
    int N = sp->N;
    int64_t V = sp->V;
    for (int j = 0; j < N; j++) {
        hyla_sampling_probs(sp->logits + j * V, V, sp->s, sp->p, sp->scratch, sp->idx);
        const float *q = sp->q + j * V;
        double pj = sp->p[d[j]], qj = q[d[j]];
        if (hyla_rng_uniform(&sp->rng) * qj < pj)
            continue;
        double mass = 0;
        for (int64_t v = 0; v < V; v++) { /* the residual, in place */
            float r = sp->p[v] - q[v];
            sp->p[v] = r > 0 ? r : 0;
            mass += sp->p[v];
        }
        if (mass <= 0) /* p == q up to rounding: the residual is empty; p itself */
            hyla_sampling_probs(sp->logits + j * V, V, sp->s, sp->p, sp->scratch, sp->idx);
        p[j] = hyla_sample_probs(sp->p, V, &sp->rng);
        return j;
    }
    hyla_sampling_probs(sp->logits + N * V, V, sp->s, sp->p, sp->scratch, sp->idx);
    p[N] = hyla_sample_probs(sp->p, V, &sp->rng);
    return N;
}

int hyla_generate_draft(const hyla_model *m, const int32_t *prompt, int64_t len, const hyla_sampling *s, int draft,
                        int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx, hyla_generate_stats *stats)
{
    return hyla_generate_draft_filtered(m, prompt, len, s, draft, out, n_out, cb, cb_ctx, stats, NULL, NULL);
}

int hyla_generate_draft_filtered(const hyla_model *m, const int32_t *prompt, int64_t len, const hyla_sampling *s,
                                 int draft, int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx,
                                 hyla_generate_stats *stats, hyla_draft_filter filter, void *filter_ctx)
{
    const hyla_config *cfg = &m->cfg;
    memset(stats, 0, sizeof *stats);
    *n_out = 0;
    if (draft < 1 || draft > HYLA_MAX_DRAFT)
        return hyla_error_set(HYLA_ERR_ARG, "--draft %d: must be in 1..%d", draft, HYLA_MAX_DRAFT);
    if (s->temperature != 0 && filter)
        return hyla_error_set(HYLA_ERR_ARG, "draft filter: greedy decoding only");
    if (cfg->n_mtp_layers < 1)
        return hyla_error_set(HYLA_ERR_ARG, "--draft: the model has no MTP head (no mtp.* tensors)");
    HYLA_TRY(hyla_sampling_check(s, cfg->vocab));
    HYLA_TRY(hyla_generate_check_prompt(cfg, s, 0, prompt, len));
    if (s->max_new < 1)
        return HYLA_OK;
    int N = draft;
    int64_t max_len = len + s->max_new + N + 1; /* a verify may run N rows past the last kept token */
    spec sp;
    HYLA_TRY(spec_init(&sp, m, N, max_len, s));
    int64_t H = sp.H, V = sp.V;
    float *prompt_hidden = malloc((size_t)(len * H) * sizeof(float));
    int32_t *pairs = malloc((size_t)(len > N + 1 ? len : N + 1) * sizeof(int32_t));
    int rc = prompt_hidden && pairs ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "speculative decoding: out of memory");
    double t0 = hyla_now();
    if (rc == HYLA_OK)
        rc = hyla_prefill_sequence_hidden(m, &sp.state, 0, prompt, len, sp.logits, NULL, prompt_hidden);
    stats->prefill_tokens = len;
    stats->prefill_seconds = hyla_now() - t0;
    t0 = hyla_now();
    int done = 0;
    int32_t x = 0, d[HYLA_MAX_DRAFT + 1];
    if (rc == HYLA_OK) {
        x = pick(&sp, sp.logits, sp.p);
        done = emit(s, x, out, n_out, cb, cb_ctx);
    }
    if (rc == HYLA_OK && !done) { /* the head's entries for the prompt: (prompt[t + 1] or x, h_t) */
        memcpy(pairs, prompt + 1, (size_t)(len - 1) * sizeof *pairs);
        pairs[len - 1] = x;
        rc = head_catch_up(&sp, pairs, prompt_hidden, len, &d[0]);
    }
    while (rc == HYLA_OK && !done) {
        int64_t L = sp.state.len[0], head_len = sp.head.state.len[0];
        if (filter)
            d[0] = filter(filter_ctx, *n_out, d[0]);
        for (int j = 1; j < N && rc == HYLA_OK; j++) { /* further drafts from the head's own output */
            rc = hyla_mtp_run(&sp.head, &d[j - 1], sp.g, 1, sp.head_out, sp.logits, 1);
            memcpy(sp.g, sp.head_out, (size_t)H * sizeof(float));
            d[j] = pick(&sp, sp.logits, sp.q + j * V);
            if (filter)
                d[j] = filter(filter_ctx, *n_out + j, d[j]);
        }
        if (rc != HYLA_OK)
            break;
        sp.head.state.len[0] = head_len; /* draft entries: never part of the cache */
        int32_t rows[HYLA_MAX_DRAFT + 1];
        rows[0] = x;
        memcpy(rows + 1, d, (size_t)N * sizeof *rows);
        sp.verify.hidden_out = sp.hidden;
        sp.state.row_keep = sp.kept, sp.state.row_keep_cap = N + 1; /* rollback points after each row */
        rc = hyla_executor_infer(&sp.verify, rows, &sp.state, sp.logits);
        sp.state.row_keep = NULL;
        if (rc != HYLA_OK)
            break;
        int k = 0;
        int32_t p[HYLA_MAX_DRAFT + 1];
        if (s->temperature == 0) { /* greedy: accept while the draft is the trunk's argmax */
            for (int j = 0; j <= N; j++)
                p[j] = hyla_argmax(sp.logits + j * V, V);
            while (k < N && d[k] == p[k])
                k++;
        } else
            k = accept_sampled(&sp, d, p);
        stats->draft_rounds++;
        stats->drafted += N;
        stats->accepted += k;
        for (int j = 0; j < k && !done; j++)
            done = emit(s, d[j], out, n_out, cb, cb_ctx);
        if (!done)
            done = emit(s, p[k], out, n_out, cb, cb_ctx);
        if (done)
            break;
        if (k < N) { /* the rejected rows changed the state: back to the point after row k; the caches end there */
            hyla_infer_state_restore_recurrent(&sp.state, cfg, 0, sp.kept + k * hyla_infer_state_recurrent_floats(cfg));
            sp.state.len[0] = L + k + 1;
        }
        /* the head's true entries for positions L .. L + k: (d_1..d_k, p_k) with the trunk's hidden rows */
        memcpy(pairs, d, (size_t)k * sizeof *pairs);
        pairs[k] = p[k];
        rc = head_catch_up(&sp, pairs, sp.hidden, k + 1, &d[0]);
        x = p[k];
    }
    stats->decode_tokens = *n_out > 1 ? *n_out - 1 : 0;
    stats->decode_seconds = hyla_now() - t0;
    free(prompt_hidden);
    free(pairs);
    spec_free(&sp);
    return rc;
}
