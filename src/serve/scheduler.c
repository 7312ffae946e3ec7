#include "serve/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void request_free(serve_request *r)
{
    free(r->prompt);
    for (int i = 0; i < r->n_stop_str; i++)
        free(r->stop_str[i]);
    free(r->text);
    free(r->tokens);
    free(r);
}

static void unref_locked(serve_request *r)
{
    if (--r->refs == 0)
        request_free(r);
}

void serve_request_unref(serve_sched *s, serve_request *r)
{
    pthread_mutex_lock(&s->mu);
    unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

void serve_sched_submit(serve_sched *s, serve_request *r)
{
    pthread_mutex_lock(&s->mu);
    r->refs++;
    hyla_rng_seed(&r->rng, r->sampling.seed);
    r->next = NULL;
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
}

void serve_sched_cancel(serve_sched *s, serve_request *r)
{
    pthread_mutex_lock(&s->mu);
    r->cancelled = 1;
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
}

/* The longest prefix of text[0, n) that does not end inside a UTF-8 sequence still arriving. */
static size_t utf8_settled(const char *text, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)text[n - back];
        if ((c & 0xc0) == 0x80)
            continue; /* continuation byte: look further back for its lead */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* Append token `tok`'s bytes (unless it is a stop id), apply stop ids / strings / max_new / the
 * context, and advance safe_len. Called with the mutex held. */
static void record_token(serve_sched *s, serve_request *r, int32_t tok, int64_t cached)
{
    if (r->n_gen == r->cap_gen) {
        int64_t cap = r->cap_gen ? 2 * r->cap_gen : 64;
        int32_t *t = realloc(r->tokens, (size_t)cap * sizeof *t);
        if (!t) {
            snprintf(r->error, sizeof r->error, "out of memory");
            r->done = 1;
            return;
        }
        r->tokens = t, r->cap_gen = cap;
    }
    r->tokens[r->n_gen++] = tok;
    for (int i = 0; i < r->sampling.n_stop; i++)
        if (tok == r->sampling.stop[i]) {
            r->done = 1, r->finish = "stop";
            break;
        }
    if (!r->done) {
        char *bytes = NULL;
        size_t n = 0;
        if (hyla_tokenizer_decode(s->tok, &tok, 1, &bytes, &n) == HYLA_OK) {
            if (r->text_len + n + 1 > r->text_cap) {
                size_t cap = (r->text_len + n + 1) * 2;
                char *t = realloc(r->text, cap);
                if (t)
                    r->text = t, r->text_cap = cap;
            }
            if (r->text_len + n + 1 <= r->text_cap) {
                size_t from = r->text_len;
                memcpy(r->text + r->text_len, bytes, n);
                r->text_len += n;
                r->text[r->text_len] = '\0';
                for (int i = 0; i < r->n_stop_str; i++) { /* a stop string ending in the new bytes */
                    size_t L = strlen(r->stop_str[i]), start = from >= L ? from - L + 1 : 0;
                    char *hit = L ? memmem(r->text + start, r->text_len - start, r->stop_str[i], L) : NULL;
                    if (hit) {
                        r->text_len = (size_t)(hit - r->text);
                        r->done = 1, r->finish = "stop";
                    }
                }
            }
        }
        free(bytes);
    }
    if (!r->done && (r->n_gen >= r->sampling.max_new || cached + 1 >= s->ctx))
        r->done = 1, r->finish = "length";
    size_t hold = 0;
    for (int i = 0; !r->done && i < r->n_stop_str; i++) { /* a stop string may still complete */
        size_t L = strlen(r->stop_str[i]);
        hold = L - 1 > hold ? L - 1 : hold;
    }
    size_t safe = r->done ? r->text_len : utf8_settled(r->text, r->text_len > hold ? r->text_len - hold : 0);
    if (safe > r->safe_len)
        r->safe_len = safe;
}

static void finish_slot(serve_sched *s, int64_t slot)
{
    serve_request *r = s->slots[slot];
    s->slots[slot] = NULL;
    hyla_batch_release(&s->batch, slot);
    if (!r->done)
        r->done = 1, r->finish = "stop";
    s->served++;
    s->tokens_out += r->n_gen;
    pthread_cond_broadcast(&s->progress);
    unref_locked(r);
}

static void fail_request(serve_sched *s, serve_request *r, int64_t slot)
{
    snprintf(r->error, sizeof r->error, "%s", hyla_error_message());
    if (slot >= 0)
        finish_slot(s, slot);
    else {
        r->done = 1;
        pthread_cond_broadcast(&s->progress);
        unref_locked(r);
    }
}

/* Prefill slot k with r's prompt (outside the mutex); speculative decoding also keeps the
 * prompt's hidden rows for the slot's head. */
static int admit(serve_sched *s, int64_t k, serve_request *r)
{
    float *hidden = NULL;
    if (s->draft) {
        s->started[k] = 0;
        free(s->prompt_hidden[k]);
        hidden = s->prompt_hidden[k] = malloc((size_t)(r->n_prompt * s->m->cfg.hidden) * sizeof(float));
        if (!hidden)
            return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    }
    return hyla_batch_prefill(&s->batch, k, r->prompt, r->n_prompt, hidden);
}

/* Slot k's first token (from its prefill's logits) and its head's read of the prompt. Called and
 * returns with the mutex held. */
static void draft_start(serve_sched *s, int64_t k)
{
    serve_request *r = s->slots[k];
    pthread_mutex_unlock(&s->mu);
    int32_t x = hyla_sample_token(hyla_batch_logits(&s->batch, k), s->m->cfg.vocab, &r->sampling, &r->rng, s->p, s->idx);
    pthread_mutex_lock(&s->mu);
    record_token(s, r, x, hyla_batch_len(&s->batch, k));
    pthread_cond_broadcast(&s->progress);
    int rc = HYLA_OK;
    if (!r->done) {
        pthread_mutex_unlock(&s->mu);
        rc = hyla_drafter_start(&s->drafters[k], r->prompt, r->n_prompt, s->prompt_hidden[k], x, &r->sampling, &r->rng,
                                r->n_gen);
        pthread_mutex_lock(&s->mu);
    }
    free(s->prompt_hidden[k]);
    s->prompt_hidden[k] = NULL;
    if (rc != HYLA_OK)
        fail_request(s, r, k);
    else if (r->done)
        finish_slot(s, k);
    else
        s->started[k] = 1;
}

/* One speculative round for every active slot: drafts, one verify, each slot's accepted tokens.
 * Called and returns with the mutex held. */
static void draft_round(serve_sched *s)
{
    int N = s->draft;
    for (int64_t k = 0; k < s->K; k++)
        if (s->slots[k] && !s->started[k])
            draft_start(s, k);
    int64_t active = 0;
    for (int64_t k = 0; k < s->K; k++) {
        serve_request *r = s->slots[k];
        if (!r)
            continue;
        pthread_mutex_unlock(&s->mu);
        int rc = hyla_drafter_draft(&s->drafters[k], &r->sampling, &r->rng, r->n_gen);
        hyla_drafter_rows(&s->drafters[k], s->rows + k * (N + 1));
        pthread_mutex_lock(&s->mu);
        if (rc != HYLA_OK)
            fail_request(s, r, k);
        else
            active++;
    }
    if (!active)
        return;
    pthread_mutex_unlock(&s->mu);
    int rc = hyla_batch_verify(&s->batch, s->rows);
    pthread_mutex_lock(&s->mu);
    for (int64_t k = 0; k < s->K; k++) {
        serve_request *r = s->slots[k];
        if (!r)
            continue;
        if (rc != HYLA_OK) {
            fail_request(s, r, k);
            continue;
        }
        int32_t toks[HYLA_MAX_DRAFT + 1];
        pthread_mutex_unlock(&s->mu);
        int acc = hyla_drafter_accept(&s->drafters[k], hyla_batch_row_logits(&s->batch, k), &r->sampling, &r->rng, toks);
        pthread_mutex_lock(&s->mu);
        int64_t L = hyla_batch_len(&s->batch, k) - (N + 1); /* x sat at position L */
        for (int j = 0; j <= acc && !r->done; j++)
            record_token(s, r, toks[j], L + 1 + j);
        r->draft_rounds++, r->drafted += N, r->accepted += acc;
        s->draft_rounds++, s->drafted += N, s->accepted += acc;
        pthread_cond_broadcast(&s->progress);
        if (r->done) {
            finish_slot(s, k);
            continue;
        }
        hyla_batch_keep(&s->batch, k, acc);
        pthread_mutex_unlock(&s->mu);
        int rc_k = hyla_drafter_advance(&s->drafters[k], hyla_batch_row_hidden(&s->batch, k), acc, toks, &r->sampling,
                                        &r->rng, r->n_gen);
        pthread_mutex_lock(&s->mu);
        if (rc_k != HYLA_OK)
            fail_request(s, r, k);
    }
}

static void *run(void *arg)
{
    serve_sched *s = arg;
    int64_t V = s->m->cfg.vocab;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        for (int64_t k = 0; k < s->K; k++) /* a cancelled request frees its slot now */
            if (s->slots[k] && s->slots[k]->cancelled)
                finish_slot(s, k);
        for (int64_t k = 0; k < s->K && s->head; k++) { /* admit queued requests into free slots */
            if (s->slots[k])
                continue;
            serve_request *r = s->head;
            s->head = r->next;
            if (!s->head)
                s->tail = NULL;
            if (r->cancelled) {
                unref_locked(r);
                k--;
                continue;
            }
            s->slots[k] = r;
            pthread_mutex_unlock(&s->mu);
            int rc = admit(s, k, r);
            pthread_mutex_lock(&s->mu);
            if (rc != HYLA_OK)
                fail_request(s, r, k);
        }
        int64_t active = 0;
        for (int64_t k = 0; k < s->K; k++)
            active += s->slots[k] != NULL;
        if (!active) {
            pthread_cond_wait(&s->progress, &s->mu);
            continue;
        }
        if (s->draft) {
            draft_round(s);
            continue;
        }
        /* sample each active slot's next token (settings and random stream of its own request) */
        for (int64_t k = 0; k < s->K; k++) {
            serve_request *r = s->slots[k];
            if (!r)
                continue;
            pthread_mutex_unlock(&s->mu);
            int32_t tok = hyla_sample_token(hyla_batch_logits(&s->batch, k), V, &r->sampling, &r->rng, s->p, s->idx);
            pthread_mutex_lock(&s->mu);
            record_token(s, r, tok, hyla_batch_len(&s->batch, k));
            s->next[k] = tok;
            pthread_cond_broadcast(&s->progress);
            if (r->done)
                finish_slot(s, k);
        }
        active = 0;
        for (int64_t k = 0; k < s->K; k++)
            active += s->slots[k] != NULL;
        if (!active)
            continue;
        pthread_mutex_unlock(&s->mu);
        int rc = hyla_batch_step(&s->batch, s->next);
        pthread_mutex_lock(&s->mu);
        if (rc != HYLA_OK)
            for (int64_t k = 0; k < s->K; k++)
                if (s->slots[k])
                    fail_request(s, s->slots[k], k);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int serve_sched_start(serve_sched *s, const hyla_model *m, const hyla_tokenizer *tok, int64_t K, int64_t ctx, int draft)
{
    memset(s, 0, sizeof *s);
    s->m = m, s->tok = tok, s->K = K, s->ctx = ctx, s->draft = draft;
    int64_t max_len = ctx + (draft ? draft + 1 : 0); /* a verify runs N rows past the last kept token */
    HYLA_TRY(hyla_batch_init(&s->batch, m, K, max_len, draft));
    if (draft) {
        s->drafters = calloc((size_t)K, sizeof *s->drafters);
        s->prompt_hidden = calloc((size_t)K, sizeof *s->prompt_hidden);
        s->started = calloc((size_t)K, 1);
        s->rows = calloc((size_t)(K * (draft + 1)), sizeof *s->rows);
        int rc = s->drafters && s->prompt_hidden && s->started && s->rows
                     ? HYLA_OK
                     : hyla_error_set(HYLA_ERR_NOMEM, "serve: out of memory");
        for (int64_t k = 0; k < K && rc == HYLA_OK; k++)
            rc = hyla_drafter_init(&s->drafters[k], m, draft, max_len);
        if (rc != HYLA_OK) {
            serve_sched_stop(s);
            return rc;
        }
    }
    s->slots = calloc((size_t)K, sizeof *s->slots);
    s->p = malloc((size_t)m->cfg.vocab * sizeof *s->p);
    s->idx = malloc((size_t)m->cfg.vocab * sizeof *s->idx);
    s->next = calloc((size_t)K, sizeof *s->next);
    if (!s->slots || !s->p || !s->idx || !s->next) {
        serve_sched_stop(s);
        return hyla_error_set(HYLA_ERR_NOMEM, "serve: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->progress, NULL);
    if (pthread_create(&s->thread, NULL, run, s) != 0) {
        serve_sched_stop(s);
        return hyla_error_set(HYLA_ERR_IO, "serve: cannot start the scheduler thread");
    }
    return HYLA_OK;
}

void serve_sched_stop(serve_sched *s)
{
    if (s->thread) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->progress);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->thread = 0;
    }
    hyla_batch_free(&s->batch);
    for (int64_t k = 0; s->drafters && k < s->K; k++)
        if (s->drafters[k].head.buf)
            hyla_drafter_free(&s->drafters[k]);
    for (int64_t k = 0; s->prompt_hidden && k < s->K; k++)
        free(s->prompt_hidden[k]);
    free(s->drafters);
    free(s->prompt_hidden);
    free(s->started);
    free(s->rows);
    s->drafters = NULL, s->prompt_hidden = NULL, s->started = NULL, s->rows = NULL;
    free(s->slots);
    free(s->p);
    free(s->idx);
    free(s->next);
    s->slots = NULL, s->p = NULL, s->idx = NULL, s->next = NULL;
}
