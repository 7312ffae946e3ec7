/* hyla serve: an OpenAI-compatible HTTP server (libmicrohttpd, one thread per connection) in
 * front of the continuous-batching scheduler (serve/scheduler.h).
 *
 * Endpoints: GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions
 * (messages rendered in the ChatML format of the Qwen chat templates; generation stops at
 * <|im_end|>), with max_tokens, temperature, top_p, top_k, seed, stop (up to 8 strings and token
 * ids), stream (server-sent events ending in "data: [DONE]") and usage counts. Each choice also
 * carries "token_ids" (the generated ids, a hyla extension); with --draft the usage also has
 * "draft" {n, rounds, drafted, accepted} (hyla's), and /health the server's totals. Errors are OpenAI-style JSON bodies
 * {"error": {"message", "type", "param", "code"}} with a 4xx status; the server keeps serving. */
#ifndef HYLA_SERVE_SERVE_H
#define HYLA_SERVE_SERVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *model_dir;
    const char *host;        /* IPv4 address to bind (default 127.0.0.1) */
    int port;                /* 0: any free port (printed) */
    int64_t parallel;        /* K: sequences decoding together */
    int64_t ctx;             /* tokens per sequence (prompt + completion) */
    const char *api_key;     /* NULL: no key */
    size_t max_body;         /* bytes; larger request bodies get 413 */
    const char *model_name;  /* NULL: the directory's base name */
    const char *adapter;     /* a LoRA adapter merged at load (model/adapter.h), or NULL */
    int bf16_compute, bf16_weights; /* precision (hyla_model_load_inference) */
    int draft;               /* speculative decoding: N drafts per round with the MTP head, 0 = off */
} serve_options;

/* Load the model, listen, serve until SIGINT / SIGTERM. Returns 0, or non-zero with the error set. */
int serve_run(const serve_options *o);

#endif
