/* Speculative greedy decoding with the MTP head (see speculative.h for the round). */
#include "infer/speculative.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "engine/executor.h"
#include "infer/drafter.h"

typedef struct {
    int N;
    hyla_infer_state state;         /* the trunk's caches, B = 1 */
    hyla_drafter dr;
    hyla_executor verify;           /* T = N + 1, every row's logits and hidden */
    float *logits;                  /* [N + 1, V] */
    float *hidden;                  /* [N + 1, H] the verify's final-normed rows */
    float *kept;                    /* [N + 1, R] the trunk's recurrent state after each verified row */
} spec;

static void spec_free(spec *sp)
{
    if (sp->verify.tapes)
        hyla_executor_free(&sp->verify);
    if (sp->dr.head.buf)
        hyla_drafter_free(&sp->dr);
    if (sp->state.layers)
        hyla_infer_state_free(&sp->state);
    free(sp->logits);
    free(sp->hidden);
    free(sp->kept);
}

static int spec_init(spec *sp, const hyla_model *m, int N, int64_t max_len)
{
    memset(sp, 0, sizeof *sp);
    sp->N = N;
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    HYLA_TRY(hyla_drafter_init(&sp->dr, m, N, max_len));
    int rc = hyla_infer_state_init_pages(&sp->state, &m->cfg, 1, max_len, 1);
    if (rc == HYLA_OK)
        rc = hyla_executor_init(&sp->verify, m, &nothing, HYLA_UNIT_LAYER, 1, N + 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_ROWS);
    sp->logits = malloc((size_t)((N + 1) * m->cfg.vocab) * sizeof(float));
    sp->hidden = malloc((size_t)((N + 1) * m->cfg.hidden) * sizeof(float));
    sp->kept = malloc((size_t)((N + 1) * hyla_infer_state_recurrent_floats(&m->cfg) + 1) * sizeof(float));
    if (rc == HYLA_OK && (!sp->logits || !sp->hidden || !sp->kept))
        rc = hyla_error_set(HYLA_ERR_NOMEM, "speculative decoding: out of memory");
    if (rc != HYLA_OK)
        spec_free(sp);
    return rc;
}

/* Emit one token: 1 when generation ends (callback, stop, max_new). */
static int emit(const hyla_sampling *s, int32_t tok, int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx)
{
    out[(*n_out)++] = tok;
    if (cb && cb(cb_ctx, 0, tok))
        return 1;
    return hyla_sampling_stops(s, out, *n_out) || *n_out >= s->max_new;
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
    HYLA_TRY(spec_init(&sp, m, N, max_len));
    sp.dr.filter = filter, sp.dr.filter_ctx = filter_ctx;
    hyla_rng rng;
    hyla_rng_seed(&rng, s->seed);
    int64_t V = cfg->vocab, R = hyla_infer_state_recurrent_floats(cfg);
    float *prompt_hidden = malloc((size_t)(len * cfg->hidden) * sizeof(float));
    int rc = prompt_hidden ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "speculative decoding: out of memory");
    double t0 = hyla_now();
    if (rc == HYLA_OK)
        rc = hyla_prefill_sequence_hidden(m, &sp.state, 0, prompt, len, sp.logits, NULL, prompt_hidden);
    stats->prefill_tokens = len;
    stats->prefill_seconds = hyla_now() - t0;
    t0 = hyla_now();
    int done = 0;
    if (rc == HYLA_OK) {
        int32_t x = s->temperature == 0 ? hyla_argmax(sp.logits, V) : hyla_sample_token(sp.logits, V, s, &rng, sp.dr.p, sp.dr.idx);
        done = emit(s, x, out, n_out, cb, cb_ctx);
        if (!done)
            rc = hyla_drafter_start(&sp.dr, prompt, len, prompt_hidden, x, s, &rng, *n_out);
    }
    free(prompt_hidden);
    while (rc == HYLA_OK && !done) {
        int64_t L = sp.state.len[0];
        if ((rc = hyla_drafter_draft(&sp.dr, s, &rng, *n_out)) != HYLA_OK)
            break;
        int32_t rows[HYLA_MAX_DRAFT + 1], toks[HYLA_MAX_DRAFT + 1];
        hyla_drafter_rows(&sp.dr, rows);
        sp.verify.hidden_out = sp.hidden;
        sp.state.row_keep = sp.kept, sp.state.row_keep_cap = N + 1; /* rollback points after each row */
        rc = hyla_executor_infer(&sp.verify, rows, &sp.state, sp.logits);
        sp.state.row_keep = NULL;
        if (rc != HYLA_OK)
            break;
        int k = hyla_drafter_accept(&sp.dr, sp.logits, s, &rng, toks);
        stats->draft_rounds++;
        stats->drafted += N;
        stats->accepted += k;
        for (int j = 0; j <= k && !done; j++)
            done = emit(s, toks[j], out, n_out, cb, cb_ctx);
        if (done)
            break;
        if (k < N) { /* the rejected rows changed the state: back to the point after row k; the caches end there */
            hyla_infer_state_restore_recurrent(&sp.state, cfg, 0, sp.kept + k * R);
            sp.state.len[0] = L + k + 1;
        }
        rc = hyla_drafter_advance(&sp.dr, sp.hidden, k, toks, s, &rng, *n_out);
    }
    stats->decode_tokens = *n_out > 1 ? *n_out - 1 : 0;
    stats->decode_seconds = hyla_now() - t0;
    spec_free(&sp);
    return rc;
}
