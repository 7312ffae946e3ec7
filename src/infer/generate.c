#include "infer/generate.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "engine/routing.h"
#include "engine/executor.h"

int hyla_sampling_check(const hyla_sampling *s, int64_t vocab)
{
    if (!(s->temperature >= 0) || !isfinite(s->temperature))
        return hyla_error_set(HYLA_ERR_ARG, "temperature must be >= 0 (got %g)", s->temperature);
    if (s->top_k < 0)
        return hyla_error_set(HYLA_ERR_ARG, "top-k must be >= 0 (got %lld)", (long long)s->top_k);
    if (!(s->top_p > 0 && s->top_p <= 1))
        return hyla_error_set(HYLA_ERR_ARG, "top-p must be in (0, 1] (got %g)", s->top_p);
    if (s->max_new < 1)
        return hyla_error_set(HYLA_ERR_ARG, "max-new must be >= 1 (got %lld)", (long long)s->max_new);
    for (int i = 0; i < s->n_stop; i++)
        if (s->stop[i] < 0 || s->stop[i] >= vocab)
            return hyla_error_set(HYLA_ERR_ARG, "stop token %d is out of range [0, %lld)", s->stop[i], (long long)vocab);
    return HYLA_OK;
}

/* The first index of the largest of x[lo, hi) (NaNs never win, as with x[v] > x[best]; x[lo] not NaN):
 * the maximum by a vectorised reduction, then its first index; the scalar loop only when a NaN
 * made the reduction's value one that no element equals. */
static int64_t argmax_range(const float *x, int64_t lo, int64_t hi)
{
    float m = x[lo];
#pragma omp simd reduction(max : m)
    for (int64_t v = lo + 1; v < hi; v++)
        m = x[v] > m ? x[v] : m;
    for (int64_t v = lo; v < hi; v++)
        if (x[v] == m)
            return v;
    int64_t best = lo;
    for (int64_t v = lo + 1; v < hi; v++)
        if (x[v] > x[best])
            best = v;
    return best;
}

/* A NaN at 0 stays. Over a vocabulary's logits (248,320 for Qwen3.5: 1 MB, ~0.1 ms on one thread
 * a decoded token) the threads take a range each; the earliest range whose maximum is the largest
 * (or equals it) gives the first index, the serial loop's. */
#define ARGMAX_MAX_THREADS 64
int32_t hyla_argmax(const float *x, int64_t V)
{
    if (x[0] != x[0])
        return 0;
    int64_t at[ARGMAX_MAX_THREADS];
    int used = 1;
    at[0] = 0;
    int threads = omp_get_max_threads() < ARGMAX_MAX_THREADS ? omp_get_max_threads() : ARGMAX_MAX_THREADS;
#pragma omp parallel HYLA_PAR_IF(V) num_threads(threads)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t lo = V * t / nt, hi = V * (t + 1) / nt;
        while (lo < hi && x[lo] != x[lo]) /* a range's first value must be a number (x[0] is) */
            lo++;
        at[t] = lo < hi ? argmax_range(x, lo, hi) : -1;
        if (t == 0)
            used = nt;
    }
    int64_t best = at[0];
    for (int t = 1; t < used; t++)
        if (at[t] >= 0 && x[at[t]] > x[best])
            best = at[t];
    return (int32_t)best;
}

static const float *sort_base;
static int cmp_desc(const void *a, const void *b)
{
    float x = sort_base[*(const int32_t *)a], y = sort_base[*(const int32_t *)b];
    return x < y ? 1 : x > y ? -1 : (*(const int32_t *)a - *(const int32_t *)b);
}

/* exp((logits - max) / T) into p, ids sorted by it (descending, ties to the lower id) in idx; the
 * kept prefix (top-k, then the smallest one whose mass reaches top-p) and its mass. */
static void truncate_sorted(const float *logits, int64_t V, const hyla_sampling *s, float *p, int32_t *idx,
                            int64_t *keep_out, double *total_out)
{
    float mx = logits[hyla_argmax(logits, V)];
    for (int64_t v = 0; v < V; v++) {
        p[v] = expf((float)((logits[v] - mx) / s->temperature));
        idx[v] = (int32_t)v;
    }
    sort_base = p;
    qsort(idx, (size_t)V, sizeof *idx, cmp_desc); /* descending probability, ties to the lower id */
    int64_t keep = (s->top_k > 0 && s->top_k < V) ? s->top_k : V;
    double total = 0;
    for (int64_t i = 0; i < keep; i++)
        total += p[idx[i]];
    if (s->top_p < 1.0) { /* smallest prefix whose mass reaches top_p */
        double acc = 0;
        for (int64_t i = 0; i < keep; i++) {
            acc += p[idx[i]];
            if (acc >= s->top_p * total) {
                keep = i + 1;
                break;
            }
        }
        total = acc;
    }
    *keep_out = keep;
    *total_out = total;
}

int32_t hyla_sample_token(float *logits, int64_t V, const hyla_sampling *s, hyla_rng *rng, float *p, int32_t *idx)
{
    if (s->temperature == 0.0)
        return hyla_argmax(logits, V);
    int64_t keep;
    double total;
    truncate_sorted(logits, V, s, p, idx, &keep, &total);
    double r = hyla_rng_uniform(rng) * total, acc = 0;
    for (int64_t i = 0; i < keep; i++) {
        acc += p[idx[i]];
        if (r < acc)
            return idx[i];
    }
    return idx[keep - 1];
}

void hyla_sampling_probs(const float *logits, int64_t V, const hyla_sampling *s, float *probs, float *p, int32_t *idx)
{
    int64_t keep;
    double total;
    truncate_sorted(logits, V, s, p, idx, &keep, &total);
    memset(probs, 0, (size_t)V * sizeof *probs);
    for (int64_t i = 0; i < keep; i++)
        probs[idx[i]] = (float)(p[idx[i]] / total);
}

int32_t hyla_sample_probs(const float *probs, int64_t V, hyla_rng *rng)
{
    double total = 0;
    for (int64_t v = 0; v < V; v++)
        total += probs[v];
    double r = hyla_rng_uniform(rng) * total, acc = 0;
    int32_t last = 0;
    for (int64_t v = 0; v < V; v++) {
        if (probs[v] <= 0)
            continue;
        acc += probs[v];
        last = (int32_t)v;
        if (r < acc)
            return (int32_t)v;
    }
    return last;
}

void hyla_infer_state_view(hyla_infer_state *view, hyla_layer_state *layers, const hyla_infer_state *s,
                           const hyla_config *cfg, int64_t b)
{
    int64_t K = cfg->conv_kernel, cd = hyla_cfg_conv_dim(cfg);
    int64_t ssm = cfg->lin_v_heads * cfg->lin_k_dim * cfg->lin_v_dim, kv = s->max_len * cfg->n_kv_heads * cfg->head_dim;
    for (int l = 0; l < s->n_layers; l++) {
        const hyla_layer_state *L = &s->layers[l];
        layers[l].conv = L->conv ? L->conv + b * K * cd : NULL;
        layers[l].ssm = L->ssm ? L->ssm + b * ssm : NULL;
        layers[l].keys = L->keys ? L->keys + b * kv : NULL;
        layers[l].values = L->values ? L->values + b * kv : NULL;
    }
    *view = *s;
    view->B = 1;
    view->len = s->len + b;
    view->layers = layers;
    view->owned = 0;
    view->row_keep = s->row_keep ? s->row_keep + b * s->row_keep_cap * hyla_infer_state_recurrent_floats(cfg) : NULL;
}

int hyla_generate_check_prompt(const hyla_config *cfg, const hyla_sampling *s, int64_t b, const int32_t *prompt,
                               int64_t len)
{
    if (len < 1)
        return hyla_error_set(HYLA_ERR_ARG, "prompt %lld is empty", (long long)b);
    for (int64_t i = 0; i < len; i++)
        if (prompt[i] < 0 || prompt[i] >= cfg->vocab)
            return hyla_error_set(HYLA_ERR_ARG, "prompt %lld: token id %d at position %lld is out of range [0, %lld)",
                                  (long long)b, prompt[i], (long long)i, (long long)cfg->vocab);
    if (cfg->max_position_embeddings > 0 && len + s->max_new > cfg->max_position_embeddings)
        return hyla_error_set(HYLA_ERR_ARG, "prompt plus %lld new tokens (%lld) exceeds the model's %lld positions",
                              (long long)s->max_new, (long long)(len + s->max_new), (long long)cfg->max_position_embeddings);
    return HYLA_OK;
}

int hyla_sampling_stops(const hyla_sampling *s, const int32_t *out, int64_t n)
{
    for (int i = 0; i < s->n_stop; i++)
        if (out[n - 1] == s->stop[i])
            return 1;
    int64_t r = s->repeat_stop;
    if (r > 0 && n >= 2 * r && !memcmp(out + n - r, out + n - 2 * r, (size_t)r * sizeof *out))
        return 1;
    return 0;
}

/* Copy a call's recorded routing [L][rows_in_call][k] into the file layout at row `at`. */
static void store_routing(hyla_routing *r, const int32_t *call, int64_t rows, int64_t at)
{
    for (int64_t l = 0; l < r->n_layers; l++)
        memcpy(r->ids + (l * r->rows + at) * r->k, call + l * rows * r->k, (size_t)(rows * r->k) * sizeof(int32_t));
}

/* Pieces [i0, i1) of C tokens each (the last may be shorter: n) through one executor: its setup
 * (the planning pass, the arenas) once for all of them. Logits after the prompt's last token only. */
static int prefill_pieces(const hyla_model *m, hyla_infer_state *view, const int32_t *prompt, int64_t len, int64_t C,
                          int64_t i0, int64_t i1, int64_t n, float *last_logits, hyla_routing *rec, int32_t *call,
                          float *hidden)
{
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor ex;
    HYLA_TRY(hyla_executor_init(&ex, m, &nothing, HYLA_UNIT_LAYER, 1, n, HYLA_DELTA_CHUNKED, HYLA_FORWARD_LAST));
    ex.record = call;
    int rc = HYLA_OK;
    for (int64_t i = i0; rc == HYLA_OK && i < i1; i++) {
        ex.hidden_out = hidden ? hidden + i * C * m->cfg.hidden : NULL;
        rc = hyla_executor_infer(&ex, prompt + i * C, view, i * C + n == len ? last_logits : NULL);
        if (rc == HYLA_OK && rec)
            store_routing(rec, call, n, i * C);
    }
    hyla_executor_free(&ex);
    return rc;
}

int hyla_prefill_sequence(const hyla_model *m, hyla_infer_state *state, int64_t b, const int32_t *prompt, int64_t len,
                          float *last_logits, hyla_routing *rec)
{
    return hyla_prefill_sequence_hidden(m, state, b, prompt, len, last_logits, rec, NULL);
}

int hyla_prefill_sequence_hidden(const hyla_model *m, hyla_infer_state *state, int64_t b, const int32_t *prompt,
                                 int64_t len, float *last_logits, hyla_routing *rec, float *hidden)
{
    hyla_layer_state layers[HYLA_MAX_LAYERS];
    hyla_infer_state view;
    hyla_infer_state_view(&view, layers, state, &m->cfg, b);
    int64_t C = len < HYLA_PREFILL_CHUNK ? len : HYLA_PREFILL_CHUNK, full = len / C, tail = len - full * C;
    int32_t *call = rec ? malloc((size_t)(rec->n_layers * C * rec->k) * sizeof *call) : NULL;
    if (rec && !call)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    int rc = prefill_pieces(m, &view, prompt, len, C, 0, full, C, last_logits, rec, call, hidden);
    if (rc == HYLA_OK && tail) /* the shorter last piece: its executor after the first is freed */
        rc = prefill_pieces(m, &view, prompt, len, C, full, full + 1, tail, last_logits, rec, call, hidden);
    free(call);
    return rc;
}

static int generate_impl(const hyla_model *m, int64_t B, const int32_t *const *prompts, const int64_t *lens,
                         const hyla_sampling *s, int32_t **out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx,
                         hyla_generate_stats *stats, hyla_routing *rec);

int hyla_generate(const hyla_model *m, int64_t B, const int32_t *const *prompts, const int64_t *lens,
                  const hyla_sampling *s, int32_t **out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx,
                  hyla_generate_stats *stats)
{
    return generate_impl(m, B, prompts, lens, s, out, n_out, cb, cb_ctx, stats, NULL);
}

int hyla_generate_recorded(const hyla_model *m, const int32_t *prompt, int64_t len, const hyla_sampling *s,
                           int32_t *out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx, hyla_generate_stats *stats,
                           hyla_routing *routing)
{
    int64_t L = hyla_moe_layer_count(&m->cfg), k = m->cfg.top_k, cap = len + s->max_new;
    memset(routing, 0, sizeof *routing);
    if (L == 0)
        return hyla_error_set(HYLA_ERR_ARG, "--record-routing: the model has no MoE layers");
    routing->n_layers = L, routing->k = k, routing->rows = cap;
    routing->ids = malloc((size_t)(L * cap * k) * sizeof(int32_t));
    if (!routing->ids)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    const int32_t *prompts[1] = {prompt};
    int32_t *outs[1] = {out};
    int rc = generate_impl(m, 1, prompts, &len, s, outs, n_out, cb, cb_ctx, stats, routing);
    if (rc)
        hyla_routing_free(routing);
    return rc;
}

static int generate_impl(const hyla_model *m, int64_t B, const int32_t *const *prompts, const int64_t *lens,
                         const hyla_sampling *s, int32_t **out, int64_t *n_out, hyla_token_cb cb, void *cb_ctx,
                         hyla_generate_stats *stats, hyla_routing *rec)
{
    const hyla_config *cfg = &m->cfg;
    int64_t V = cfg->vocab, max_len = 0;
    HYLA_TRY(hyla_sampling_check(s, V));
    for (int64_t b = 0; b < B; b++) {
        HYLA_TRY(hyla_generate_check_prompt(cfg, s, b, prompts[b], lens[b]));
        if (lens[b] + s->max_new > max_len)
            max_len = lens[b] + s->max_new;
    }
    hyla_infer_state state;
    HYLA_TRY(hyla_infer_state_init_pages(&state, cfg, B, max_len, 1)); /* filled to max_len unless a stop comes first */
    float *logits = malloc((size_t)(B * V) * sizeof *logits), *p = malloc((size_t)V * sizeof *p);
    int32_t *idx = malloc((size_t)V * sizeof *idx), *step_tokens = malloc((size_t)B * sizeof *step_tokens);
    unsigned char *done = calloc((size_t)B, 1);
    hyla_rng rng;
    hyla_rng_seed(&rng, s->seed);
    memset(stats, 0, sizeof *stats);
    int rc = (logits && p && idx && step_tokens && done) ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    double t0 = hyla_now();
    for (int64_t b = 0; rc == HYLA_OK && b < B; b++) {
        rc = hyla_prefill_sequence(m, &state, b, prompts[b], lens[b], logits + b * V, rec);
        stats->prefill_tokens += lens[b];
        n_out[b] = 0;
    }
    stats->prefill_seconds = hyla_now() - t0;
    hyla_executor dec;
    memset(&dec, 0, sizeof dec);
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    if (rc == HYLA_OK && s->max_new > 1)
        rc = hyla_executor_init(&dec, m, &nothing, HYLA_UNIT_LAYER, B, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
    t0 = hyla_now();
    for (int64_t step = 0; rc == HYLA_OK && step < s->max_new; step++) {
        int64_t active = 0;
        for (int64_t b = 0; b < B; b++) {
            step_tokens[b] = out[b][n_out[b] > 0 ? n_out[b] - 1 : 0];
            if (done[b])
                continue;
            int32_t tok = hyla_sample_token(logits + b * V, V, s, &rng, p, idx);
            out[b][n_out[b]++] = tok;
            step_tokens[b] = tok;
            if (cb && cb(cb_ctx, b, tok))
                done[b] = 1, rc = 1;
            if (hyla_sampling_stops(s, out[b], n_out[b]))
                done[b] = 1;
            active += !done[b];
        }
        if (rc == 1) {
            rc = HYLA_OK;
            break;
        }
        if (!active || step + 1 == s->max_new)
            break;
        int32_t step_rec[HYLA_MAX_LAYERS * 64];
        HYLA_ASSERT(cfg->top_k <= 64);
        if (rec)
            dec.record = step_rec; /* B = 1: [L][1][k] */
        rc = hyla_executor_infer(&dec, step_tokens, &state, logits); /* finished sequences idle along */
        if (rec && rc == HYLA_OK)
            store_routing(rec, step_rec, 1, lens[0] + step);
        stats->decode_tokens += active;
    }
    stats->decode_seconds = hyla_now() - t0;
    if (rec) { /* keep the rows actually fed: the prompt and every generated token but the last */
        int64_t rows = lens[0] + (n_out[0] > 1 ? n_out[0] - 1 : 0);
        for (int64_t l = 1; l < rec->n_layers; l++)
            memmove(rec->ids + l * rows * rec->k, rec->ids + l * rec->rows * rec->k, (size_t)(rows * rec->k) * sizeof(int32_t));
        rec->rows = rows;
    }
    if (dec.tapes)
        hyla_executor_free(&dec);
    hyla_infer_state_free(&state);
    free(logits);
    free(p);
    free(idx);
    free(step_tokens);
    free(done);
    return rc;
}
