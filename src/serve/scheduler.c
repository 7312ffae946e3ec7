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
            int rc = hyla_batch_prefill(&s->batch, k, r->prompt, r->n_prompt);
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

int serve_sched_start(serve_sched *s, const hyla_model *m, const hyla_tokenizer *tok, int64_t K, int64_t ctx)
{
    memset(s, 0, sizeof *s);
    s->m = m, s->tok = tok, s->K = K, s->ctx = ctx;
    HYLA_TRY(hyla_batch_init(&s->batch, m, K, ctx));
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
    free(s->slots);
    free(s->p);
    free(s->idx);
    free(s->next);
    s->slots = NULL, s->p = NULL, s->idx = NULL, s->next = NULL;
}
