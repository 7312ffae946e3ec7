/* hyla serve's HTTP side: routing, authentication, request parsing and validation, OpenAI-style
 * responses and server-sent event streams. The decoding itself is serve/scheduler.c. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "io/chat.h"
#include "io/fileio.h"
#include "io/gguf_read.h"
#include "io/tokenizer.h"
#include "model/adapter.h"
#include "model/model.h"
#include "serve/scheduler.h"
#include "serve/serve.h"

typedef struct {
    const serve_options *o;
    const char *model_name;
    hyla_model *m;
    hyla_tokenizer *tok;
    serve_sched sched;
    int32_t im_start, im_end;  /* chat tokens, -1 if the tokenizer has none */
    pthread_mutex_t id_mu;
    uint64_t next_id;
} server;

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
    serve_request *req;        /* a generation in flight */
    int chat;
    char id[48];
    long created;
    /* stream state */
    size_t sent;               /* text bytes sent */
    int role_sent, finished;
    char *out;                 /* formatted events not yet handed to MHD */
    size_t out_len, out_off;
} conn;

static server *g_server; /* for the stream reader and completion callbacks (one server per process) */

/* ---- JSON helpers ---------------------------------------------------------------------------- */

/* text[0, n) with every ill-formed UTF-8 sequence replaced by U+FFFD (JSON must be valid UTF-8). */
static char *utf8_clean(const char *text, size_t n)
{
    char *out = malloc(3 * n + 1), *o = out;
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t need = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        int ok = need > 0 && i + need <= n;
        for (size_t k = 1; ok && k < need; k++)
            ok = (s[i + k] & 0xc0) == 0x80;
        if (ok && need >= 3) { /* no overlongs, surrogates or code points above U+10FFFF */
            unsigned c1 = s[i + 1];
            ok = !((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f));
        }
        if (ok && c != 0) {
            memcpy(o, s + i, need);
            o += need, i += need;
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3, i += 1;
        }
    }
    *o = '\0';
    return out;
}

static void add_text(cJSON *obj, const char *key, const char *text, size_t n)
{
    char *clean = utf8_clean(text ? text : "", text ? n : 0);
    cJSON_AddStringToObject(obj, key, clean ? clean : "");
    free(clean);
}

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *body, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    enum MHD_Result ret = send_body(c, text ? status : 500, text ? text : "{}", "application/json");
    free(text);
    return ret;
}

static cJSON *error_object(const char *message, const char *type, const char *param, const char *code)
{
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    param ? (void)cJSON_AddStringToObject(e, "param", param) : (void)cJSON_AddNullToObject(e, "param");
    code ? (void)cJSON_AddStringToObject(e, "code", code) : (void)cJSON_AddNullToObject(e, "code");
    return root;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *code,
                                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *code,
                                  const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    return send_json(c, status, error_object(msg, type, param, code));
}

/* ---- request parsing --------------------------------------------------------------------------- */

typedef struct {
    unsigned status;
    const char *param, *code;
    char message[400];
} parse_error;

#define BAD(e, st, p, ...)                                                                                             \
    do {                                                                                                               \
        (e)->status = (st), (e)->param = (p), (e)->code = NULL;                                                        \
        snprintf((e)->message, sizeof (e)->message, __VA_ARGS__);                                                      \
        return -1;                                                                                                     \
    } while (0)

static int number_field(const cJSON *root, const char *key, double lo, double hi, double dflt, double *out, parse_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = dflt;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        BAD(e, 400, key, "'%s' must be a number in [%g, %g]", key, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int int_field(const cJSON *root, const char *key, double lo, double hi, double dflt, int64_t *out, parse_error *e)
{
    double d;
    if (number_field(root, key, lo, hi, dflt, &d, e))
        return -1;
    if (d != (double)(int64_t)d)
        BAD(e, 400, key, "'%s' must be an integer", key);
    *out = (int64_t)d;
    return 0;
}

/* Append text to a growing buffer. */
static int buf_add(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *p = realloc(*buf, c);
        if (!p)
            return -1;
        *buf = p, *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int parse_stop(serve_request *r, const cJSON *stop, int64_t V, parse_error *e)
{
    if (!stop || cJSON_IsNull(stop))
        return 0;
    const cJSON *one[1] = {stop};
    int n = cJSON_IsArray(stop) ? cJSON_GetArraySize(stop) : 1;
    if (n > SERVE_MAX_STOP)
        BAD(e, 400, "stop", "at most %d stop sequences", SERVE_MAX_STOP);
    const cJSON *it = cJSON_IsArray(stop) ? stop->child : one[0];
    for (int i = 0; i < n; i++, it = cJSON_IsArray(stop) ? it->next : NULL) {
        if (cJSON_IsString(it) && it->valuestring[0]) {
            if (!(r->stop_str[r->n_stop_str++] = strdup(it->valuestring)))
                BAD(e, 500, NULL, "out of memory");
        } else if (cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < (double)V &&
                   it->valuedouble == (double)(int32_t)it->valuedouble) {
            r->stop_ids[r->sampling.n_stop++] = (int32_t)it->valuedouble;
        } else
            BAD(e, 400, "stop", "stop entries must be non-empty strings or token ids in [0, %lld)", (long long)V);
    }
    return 0;
}

/* Build a request from a parsed body (chat or completion). */
static int parse_generation(server *sv, const cJSON *root, int chat, serve_request **out, int *stream, parse_error *e)
{
    int64_t V = sv->m->cfg.vocab;
    if (!cJSON_IsObject(root))
        BAD(e, 400, NULL, "the request body must be a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model) && (!cJSON_IsString(model) || strcmp(model->valuestring, sv->model_name))) {
        e->status = 404, e->param = "model", e->code = "model_not_found";
        snprintf(e->message, sizeof e->message, "The model '%s' does not exist; this server serves '%s'",
                 cJSON_IsString(model) ? model->valuestring : "(not a string)", sv->model_name);
        return -1;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (st && !cJSON_IsBool(st) && !cJSON_IsNull(st))
        BAD(e, 400, "stream", "'stream' must be true or false");
    *stream = cJSON_IsTrue(st);
    serve_request *r = calloc(1, sizeof *r);
    if (!r)
        BAD(e, 500, NULL, "out of memory");
    r->refs = 1;
    r->sampling.stop = r->stop_ids;
    *out = r;
    double temperature, top_p;
    int64_t top_k, seed, max_tokens;
    int64_t ctx = sv->o->ctx;
    if (number_field(root, "temperature", 0, 2, 1.0, &temperature, e) || number_field(root, "top_p", 1e-9, 1, 1.0, &top_p, e) ||
        int_field(root, "top_k", -1, 1e9, 0, &top_k, e) || int_field(root, "seed", -9.2e18, 9.2e18, 0, &seed, e) ||
        int_field(root, "max_tokens", 1, 1e9, chat ? 256 : 16, &max_tokens, e) ||
        (cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens") &&
         int_field(root, "max_completion_tokens", 1, 1e9, max_tokens, &max_tokens, e)))
        return -1;
    r->sampling.temperature = temperature, r->sampling.top_p = top_p, r->sampling.top_k = top_k < 0 ? 0 : top_k;
    r->sampling.seed = (uint64_t)seed, r->sampling.max_new = max_tokens;
    if (parse_stop(r, cJSON_GetObjectItemCaseSensitive(root, "stop"), V, e))
        return -1;
    char *text = NULL;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, chat ? "messages" : "prompt");
    if (chat) { /* ChatML (io/chat.h), ending in the assistant header; the reply stops at <|im_end|> */
        if (sv->im_start < 0 || sv->im_end < 0)
            BAD(e, 400, "messages", "this model's tokenizer has no <|im_start|> / <|im_end|>: use /v1/completions");
        hyla_chat conv;
        size_t n_ids = 0;
        int rc = hyla_chat_parse(&conv, prompt, "request");
        if (rc == HYLA_OK) {
            rc = hyla_chat_encode(sv->tok, &conv, 1, &r->prompt, NULL, &n_ids);
            hyla_chat_free(&conv);
        }
        if (rc != HYLA_OK)
            BAD(e, rc == HYLA_ERR_NOMEM ? 500 : 400, "messages", "%s", hyla_error_message());
        r->n_prompt = (int64_t)n_ids;
        r->stop_ids[r->sampling.n_stop++] = sv->im_end;
    } else if (cJSON_IsString(prompt)) {
        if (!(text = strdup(prompt->valuestring)))
            BAD(e, 500, NULL, "out of memory");
    } else if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) > 0 && cJSON_IsNumber(prompt->child)) {
        int n = cJSON_GetArraySize(prompt), i = 0;
        if (n >= ctx)
            BAD(e, 400, "prompt", "the prompt has %d tokens; the context is %lld", n, (long long)ctx);
        if (!(r->prompt = malloc((size_t)n * sizeof *r->prompt)))
            BAD(e, 500, NULL, "out of memory");
        const cJSON *it;
        cJSON_ArrayForEach(it, prompt) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (double)V ||
                it->valuedouble != (double)(int32_t)it->valuedouble)
                BAD(e, 400, "prompt", "prompt[%d] is not a token id in [0, %lld)", i, (long long)V);
            r->prompt[i++] = (int32_t)it->valuedouble;
        }
        r->n_prompt = n;
    } else
        BAD(e, 400, "prompt", "'prompt' must be a non-empty string or an array of token ids");
    if (text) {
        size_t n_ids;
        int rc = hyla_tokenizer_encode(sv->tok, text, strlen(text), &r->prompt, &n_ids);
        free(text);
        if (rc != HYLA_OK)
            BAD(e, 400, chat ? "messages" : "prompt", "%s", hyla_error_message());
        r->n_prompt = (int64_t)n_ids;
        if (n_ids == 0)
            BAD(e, 400, "prompt", "the prompt is empty");
    }
    if (r->n_prompt + r->sampling.max_new > ctx) {
        e->status = 400, e->param = "max_tokens", e->code = "context_length_exceeded";
        snprintf(e->message, sizeof e->message, "This model's context is %lld tokens; the prompt has %lld and "
                 "max_tokens asks for %lld more", (long long)ctx, (long long)r->n_prompt, (long long)r->sampling.max_new);
        return -1;
    }
    return 0;
}

/* ---- responses ---------------------------------------------------------------------------------- */

static cJSON *response_head(const conn *cn, const char *object)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", cn->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)cn->created);
    cJSON_AddStringToObject(root, "model", g_server->model_name);
    return root;
}

static void add_usage(cJSON *root, const serve_request *r)
{
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(r->n_prompt + r->n_gen));
    if (g_server->o->draft) { /* speculative decoding's counts (a hyla extension) */
        cJSON *d = cJSON_AddObjectToObject(u, "draft");
        cJSON_AddNumberToObject(d, "n", g_server->o->draft);
        cJSON_AddNumberToObject(d, "rounds", (double)r->draft_rounds);
        cJSON_AddNumberToObject(d, "drafted", (double)r->drafted);
        cJSON_AddNumberToObject(d, "accepted", (double)r->accepted);
    }
}

/* The whole answer (called with the scheduler mutex held, r->done set). */
static cJSON *full_response(const conn *cn, const serve_request *r)
{
    cJSON *root = response_head(cn, cn->chat ? "chat.completion" : "text_completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(choice, "index", 0);
    if (cn->chat) {
        cJSON *msg = cJSON_AddObjectToObject(choice, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        add_text(msg, "content", r->text, r->text_len);
    } else
        add_text(choice, "text", r->text, r->text_len);
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddStringToObject(choice, "finish_reason", r->finish ? r->finish : "stop");
    cJSON_AddItemToObject(choice, "token_ids", cJSON_CreateIntArray((const int *)r->tokens, (int)r->n_gen));
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToArray(choices, choice);
    add_usage(root, r);
    return root;
}

/* One server-sent event with text [from, to) and, when final, the finish reason and usage. */
static char *stream_event(conn *cn, const serve_request *r, size_t from, size_t to, int final)
{
    cJSON *root = response_head(cn, cn->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(choice, "index", 0);
    if (cn->chat) {
        cJSON *delta = cJSON_AddObjectToObject(choice, "delta");
        if (!cn->role_sent)
            cJSON_AddStringToObject(delta, "role", "assistant");
        if (to > from)
            add_text(delta, "content", r->text + from, to - from);
        cn->role_sent = 1;
    } else {
        add_text(choice, "text", r->text + from, to - from);
        cJSON_AddNullToObject(choice, "logprobs");
    }
    if (final)
        cJSON_AddStringToObject(choice, "finish_reason", r->finish ? r->finish : "stop");
    else
        cJSON_AddNullToObject(choice, "finish_reason");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToArray(choices, choice);
    if (final)
        add_usage(root, r);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return json;
}

static int out_add(conn *cn, const char *s)
{
    size_t n = strlen(s);
    char *p = realloc(cn->out, cn->out_len + n + 1);
    if (!p)
        return -1;
    memcpy(p + cn->out_len, s, n + 1);
    cn->out = p, cn->out_len += n;
    return 0;
}

static int out_event(conn *cn, char *json)
{
    int rc = !json || out_add(cn, "data: ") || out_add(cn, json) || out_add(cn, "\n\n");
    free(json);
    return rc ? -1 : 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn *cn = cls;
    serve_sched *s = &g_server->sched;
    (void)pos;
    if (cn->out_off == cn->out_len) {
        cn->out_len = cn->out_off = 0;
        if (cn->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        serve_request *r = cn->req;
        pthread_mutex_lock(&s->mu);
        while (!r->done && r->safe_len == cn->sent && !s->stopping)
            pthread_cond_wait(&s->progress, &s->mu);
        int rc = 0;
        if (!r->done && s->stopping)
            snprintf(r->error, sizeof r->error, "the server is shutting down");
        if (r->error[0]) {
            rc = out_event(cn, cJSON_PrintUnformatted(error_object(r->error, "server_error", NULL, NULL)));
            cn->finished = 1;
        } else if (r->safe_len > cn->sent || (!cn->role_sent && cn->chat)) {
            rc = out_event(cn, stream_event(cn, r, cn->sent, r->safe_len, 0));
            cn->sent = r->safe_len;
        }
        if (!rc && !cn->finished && r->done && cn->sent == r->safe_len) {
            rc = out_event(cn, stream_event(cn, r, cn->sent, cn->sent, 1));
            cn->finished = 1;
        }
        pthread_mutex_unlock(&s->mu);
        if (!rc && cn->finished)
            rc = out_add(cn, "data: [DONE]\n\n");
        if (rc)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = cn->out_len - cn->out_off < max ? cn->out_len - cn->out_off : max;
    memcpy(buf, cn->out + cn->out_off, n);
    cn->out_off += n;
    return (ssize_t)n;
}

/* ---- routing ------------------------------------------------------------------------------------- */

static enum MHD_Result generate(server *sv, struct MHD_Connection *c, conn *cn, int chat)
{
    if (cn->too_big)
        return send_error(c, 413, NULL, "request_too_large", "the request body is larger than %zu bytes", sv->o->max_body);
    cJSON *root = cJSON_ParseWithLength(cn->body ? cn->body : "", cn->len);
    if (!root)
        return send_error(c, 400, NULL, "invalid_json", "the request body is not valid JSON");
    parse_error e = {0};
    serve_request *r = NULL;
    int stream = 0;
    int bad = parse_generation(sv, root, chat, &r, &stream, &e);
    cJSON_Delete(root);
    if (bad) {
        if (r)
            serve_request_unref(&sv->sched, r);
        return send_json(c, e.status, error_object(e.message, e.status >= 500 ? "server_error" : "invalid_request_error",
                                                   e.param, e.code));
    }
    pthread_mutex_lock(&sv->id_mu);
    uint64_t id = ++sv->next_id;
    pthread_mutex_unlock(&sv->id_mu);
    snprintf(cn->id, sizeof cn->id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)id);
    cn->created = (long)time(NULL);
    cn->chat = chat;
    cn->req = r;
    serve_sched_submit(&sv->sched, r);
    if (stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, cn, NULL);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    serve_sched *s = &sv->sched;
    pthread_mutex_lock(&s->mu);
    while (!r->done && !s->stopping)
        pthread_cond_wait(&s->progress, &s->mu);
    if (!r->done)
        snprintf(r->error, sizeof r->error, "the server is shutting down");
    cJSON *answer = r->error[0] ? error_object(r->error, "server_error", NULL, NULL) : full_response(cn, r);
    pthread_mutex_unlock(&s->mu);
    return send_json(c, r->error[0] ? 500 : 200, answer);
}

static int authorised(const server *sv, struct MHD_Connection *c)
{
    if (!sv->o->api_key)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, sv->o->api_key);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    server *sv = cls;
    (void)version;
    conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn)))
            return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) { /* the body arrives in pieces; keep at most max_body bytes */
        if (!cn->too_big && cn->len + *upload_size <= sv->o->max_body)
            cn->too_big = buf_add(&cn->body, &cn->len, &cn->cap, upload, *upload_size) != 0;
        else
            cn->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->req) /* already answered (a stream in flight) */
        return MHD_YES;
    if (!authorised(sv, c))
        return send_error(c, 401, NULL, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get)
            return send_error(c, 405, NULL, "method_not_allowed", "use GET %s", url);
        int64_t busy = 0, queued = 0;
        pthread_mutex_lock(&sv->sched.mu);
        for (int64_t k = 0; k < sv->sched.K; k++)
            busy += sv->sched.slots[k] != NULL;
        for (const serve_request *q = sv->sched.head; q; q = q->next)
            queued++;
        int64_t served = sv->sched.served, rounds = sv->sched.draft_rounds, drafted = sv->sched.drafted,
                accepted = sv->sched.accepted;
        pthread_mutex_unlock(&sv->sched.mu);
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "status", "ok");
        cJSON_AddNumberToObject(root, "slots", (double)sv->sched.K);
        cJSON_AddNumberToObject(root, "slots_busy", (double)busy);
        cJSON_AddNumberToObject(root, "queued", (double)queued);
        cJSON_AddNumberToObject(root, "served", (double)served);
        if (sv->o->draft) {
            cJSON *d = cJSON_AddObjectToObject(root, "draft");
            cJSON_AddNumberToObject(d, "n", sv->o->draft);
            cJSON_AddNumberToObject(d, "rounds", (double)rounds);
            cJSON_AddNumberToObject(d, "drafted", (double)drafted);
            cJSON_AddNumberToObject(d, "accepted", (double)accepted);
            cJSON_AddNumberToObject(d, "acceptance", drafted ? (double)accepted / (double)drafted : 0.0);
            cJSON_AddNumberToObject(d, "mean_accepted_length", rounds ? (double)accepted / (double)rounds : 0.0);
        }
        return send_json(c, 200, root);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get)
            return send_error(c, 405, NULL, "method_not_allowed", "use GET %s", url);
        cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "object", "list");
        cJSON_AddStringToObject(m, "id", sv->model_name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "hyla");
        cJSON_AddNumberToObject(m, "max_model_len", (double)sv->o->ctx);
        cJSON_AddItemToArray(data, m);
        return send_json(c, 200, root);
    }
    int chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions"))
        return post ? generate(sv, c, cn, chat) : send_error(c, 405, NULL, "method_not_allowed", "use POST %s", url);
    return send_error(c, 404, NULL, "not_found", "no route %s %s", method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    server *sv = cls;
    conn *cn = *con_cls;
    (void)c, (void)toe;
    if (!cn)
        return;
    if (cn->req) { /* a client gone mid-stream frees its slot; a finished request only drops our reference */
        serve_sched_cancel(&sv->sched, cn->req);
        serve_request_unref(&sv->sched, cn->req);
    }
    free(cn->body);
    free(cn->out);
    free(cn);
    *con_cls = NULL;
}

/* ---- the server ------------------------------------------------------------------------------------ */

int serve_run(const serve_options *o)
{
    /* SIGINT / SIGTERM are taken by sigwait below: block them before any thread exists */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a signal */
    server sv = {.o = o, .im_start = -1, .im_end = -1};
    g_server = &sv;
    pthread_mutex_init(&sv.id_mu, NULL);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    const char *host = !strcmp(o->host, "localhost") ? "127.0.0.1" : o->host;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return hyla_error_set(HYLA_ERR_ARG, "--host '%s' is not an IPv4 address", o->host);
    hyla_model m;
    hyla_adapter_info ai;
    HYLA_TRY(hyla_model_load_inference(&m, o->model_dir, o->adapter, &ai, o->bf16_compute, o->bf16_weights));
    sv.m = &m;
    char path[4096];
    int rc = hyla_path_join(path, sizeof path, o->model_dir, "tokenizer.json");
    if (hyla_is_gguf_path(o->model_dir)) /* its vocabulary: tokenizer.ggml.* */
        rc = hyla_tokenizer_load_gguf(&sv.tok, o->model_dir);
    else {
        if (rc == HYLA_OK && !hyla_file_exists(path))
            rc = hyla_error_set(HYLA_ERR_ARG, "%s is missing: the server needs the model's tokenizer", path);
        if (rc == HYLA_OK)
            rc = hyla_tokenizer_load(&sv.tok, path);
    }
    if (rc == HYLA_OK && (int64_t)hyla_tokenizer_vocab_size(sv.tok) > m.cfg.vocab)
        rc = hyla_error_set(HYLA_ERR_ARG, "%s has more tokens than the model's vocab_size %lld", path, (long long)m.cfg.vocab);
    if (rc != HYLA_OK) {
        hyla_model_free(&m);
        return rc;
    }
    sv.im_start = hyla_tokenizer_token_id(sv.tok, "<|im_start|>");
    sv.im_end = hyla_tokenizer_token_id(sv.tok, "<|im_end|>");
    const char *base = strrchr(o->model_dir, '/');
    sv.model_name = o->model_name ? o->model_name : base && base[1] ? base + 1 : o->model_dir;
    rc = serve_sched_start(&sv.sched, &m, sv.tok, o->parallel, o->ctx, o->draft);
    struct MHD_Daemon *d = NULL;
    if (rc == HYLA_OK) {
        d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
                             NULL, handle, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, &sv, MHD_OPTION_CONNECTION_LIMIT, 512u,
                             MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
        if (!d)
            rc = hyla_error_set(HYLA_ERR_IO, "cannot listen on %s:%d (in use, or not an address of this machine)", o->host,
                                o->port);
    }
    if (rc == HYLA_OK) {
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        printf("hyla serve: %s on http://%s:%u (%lld parallel sequences, context %lld tokens)%s\n", sv.model_name, o->host,
               info ? info->port : (unsigned)o->port, (long long)o->parallel, (long long)o->ctx,
               o->api_key ? ", API key required" : "");
        fflush(stdout);
        int sig;
        sigwait(&set, &sig);
        pthread_mutex_lock(&sv.sched.mu); /* wake every waiting connection, then close them */
        sv.sched.stopping = 1;
        pthread_cond_broadcast(&sv.sched.progress);
        pthread_mutex_unlock(&sv.sched.mu);
        MHD_stop_daemon(d);
        printf("hyla serve: stopped after %lld requests, %lld tokens generated\n", (long long)sv.sched.served,
               (long long)sv.sched.tokens_out);
        if (o->draft)
            printf("hyla serve: draft %d: %lld rounds, %lld of %lld drafts accepted (%.1f%%), %.2f accepted per round\n",
                   o->draft, (long long)sv.sched.draft_rounds, (long long)sv.sched.accepted, (long long)sv.sched.drafted,
                   sv.sched.drafted ? 100.0 * (double)sv.sched.accepted / (double)sv.sched.drafted : 0.0,
                   sv.sched.draft_rounds ? (double)sv.sched.accepted / (double)sv.sched.draft_rounds : 0.0);
    }
    serve_sched_stop(&sv.sched);
    hyla_tokenizer_free(sv.tok);
    hyla_model_free(&m);
    return rc;
}
