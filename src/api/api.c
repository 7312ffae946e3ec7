/* The public API of include/hyla.h: the top floor, over the model, the engine and inference. */
#include "hyla.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "infer/generate.h"
#include "io/fileio.h"
#include "io/gguf_read.h"
#include "io/tokenizer.h"
#include "engine/forward.h"
#include "model/model.h"
#include "model/infer_state.h"
#include "engine/executor.h"

struct hyla_engine {
    hyla_model model;
    hyla_tokenizer *tok; /* DIR/tokenizer.json, or NULL */
};

static int open_engine(const char *model_dir, int bf16, hyla_engine **out)
{
    *out = NULL;
    hyla_engine *e = malloc(sizeof *e);
    if (!e)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    e->tok = NULL;
    int gguf = hyla_is_gguf_path(model_dir); /* a GGUF file: its tensors in place, its vocabulary */
    int st = gguf && bf16 ? hyla_error_set(HYLA_ERR_ARG, "%s: hyla_open_bf16: a GGUF model computes with its "
                                           "tensors' stored types (use hyla_open)", model_dir)
           : gguf ? hyla_model_load_gguf(&e->model, model_dir)
           : bf16 ? hyla_model_load_bf16(&e->model, model_dir) : hyla_model_load(&e->model, model_dir);
    if (st) {
        free(e);
        return st;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    if (gguf ? (st = hyla_tokenizer_load_gguf(&e->tok, model_dir)) != HYLA_OK
             : hyla_file_exists(path) && (st = hyla_tokenizer_load(&e->tok, path)) != HYLA_OK) {
        hyla_close(e);
        return st;
    }
    *out = e;
    return HYLA_OK;
}

int hyla_open(const char *model_dir, hyla_engine **out) { return open_engine(model_dir, 0, out); }
int hyla_open_bf16(const char *model_dir, hyla_engine **out) { return open_engine(model_dir, 1, out); }

void hyla_close(hyla_engine *e)
{
    if (!e)
        return;
    hyla_model_free(&e->model);
    if (e->tok)
        hyla_tokenizer_free(e->tok);
    free(e);
}

const char *hyla_last_error(void) { return hyla_error_message(); }
int64_t hyla_vocab_size(const hyla_engine *e) { return e->model.cfg.vocab; }
int64_t hyla_num_layers(const hyla_engine *e) { return e->model.cfg.n_layers; }

int hyla_forward_tokens(hyla_engine *e, const int32_t *tokens, int64_t B, int64_t T, float *logits,
                        double *ce_loss, double *aux_loss)
{
    hyla_forward_out out;
    HYLA_TRY(hyla_forward(&e->model, tokens, NULL, B, T, HYLA_DELTA_CHUNKED, logits, &out));
    if (ce_loss)
        *ce_loss = out.ce_loss;
    if (aux_loss)
        *aux_loss = out.aux_loss;
    return HYLA_OK;
}

size_t hyla_cache_floats(const hyla_engine *e, int layer, hyla_cache_part part, int64_t max_len)
{
    const hyla_config *c = &e->model.cfg;
    if (layer < 0 || layer >= c->n_layers)
        return 0;
    int linear = c->layer_kind[layer] == HYLA_LAYER_LINEAR;
    switch (part) {
    case HYLA_CACHE_CONV: return linear ? (size_t)(c->conv_kernel * hyla_cfg_conv_dim(c)) : 0;
    case HYLA_CACHE_SSM: return linear ? (size_t)(c->lin_v_heads * c->lin_k_dim * c->lin_v_dim) : 0;
    case HYLA_CACHE_KEYS:
    case HYLA_CACHE_VALUES: return linear ? 0 : (size_t)(max_len * c->n_kv_heads * c->head_dim);
    }
    return 0;
}

int hyla_step(hyla_engine *e, const int32_t *tokens, int64_t B, int64_t T, hyla_layer_cache *layers, int64_t *len,
              int64_t max_len, float *logits)
{
    const hyla_model *m = &e->model;
    for (int64_t i = 0; i < B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)
            return hyla_error_set(HYLA_ERR_ARG, "token id %d at position %lld is out of range [0, %lld)", tokens[i],
                                  (long long)i, (long long)m->cfg.vocab);
    hyla_infer_state st = {.B = B, .max_len = max_len, .len = len, .n_layers = (int)m->cfg.n_layers,
                           .layers = (hyla_layer_state *)layers}; /* the caller's buffers */
    hyla_policy nothing;
    HYLA_TRY(hyla_policy_parse(&nothing, "full"));
    hyla_executor ex;
    HYLA_TRY(hyla_executor_init(&ex, m, &nothing, HYLA_UNIT_LAYER, B, T, T == 1 ? HYLA_DELTA_RECURRENT : HYLA_DELTA_CHUNKED,
                                HYLA_FORWARD_LAST));
    int rc = hyla_executor_infer(&ex, tokens, &st, logits);
    hyla_executor_free(&ex);
    return rc;
}

int hyla_save(const hyla_engine *e, const char *out_dir, size_t max_shard_bytes)
{
    return hyla_model_save(&e->model, out_dir, NULL, max_shard_bytes);
}

int hyla_has_tokenizer(const hyla_engine *e) { return e->tok != NULL; }

int hyla_tokenize(const hyla_engine *e, const char *text, size_t len, int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!e->tok)
        return hyla_error_set(HYLA_ERR_ARG, "tokenize: the model directory has no tokenizer.json");
    size_t count = 0;
    HYLA_TRY(hyla_tokenizer_encode(e->tok, text, len, ids, &count));
    *n = (int64_t)count;
    return HYLA_OK;
}

int hyla_detokenize(const hyla_engine *e, const int32_t *ids, int64_t n, char **text, size_t *len)
{
    *text = NULL;
    if (!e->tok)
        return hyla_error_set(HYLA_ERR_ARG, "detokenize: the model directory has no tokenizer.json");
    if (n < 0)
        return hyla_error_set(HYLA_ERR_ARG, "detokenize: negative count %lld", (long long)n);
    return hyla_tokenizer_decode(e->tok, ids, (size_t)n, text, len);
}

int hyla_generate_tokens(hyla_engine *e, const int32_t *prompt, int64_t n_prompt, const hyla_sampling_settings *s,
                         int32_t *out, int64_t *n_out)
{
    *n_out = 0;
    if (!s || !prompt || n_prompt < 1)
        return hyla_error_set(HYLA_ERR_ARG, "generate: need a prompt of at least one token and sampling settings");
    hyla_sampling smp = {s->temperature, s->top_k, s->top_p, s->seed, s->max_new, NULL, 0, 0}; /* checked there */
    const int32_t *prompts[1] = {prompt};
    hyla_generate_stats st;
    return hyla_generate(&e->model, 1, prompts, &n_prompt, &smp, &out, n_out, NULL, NULL, &st);
}

void hyla_free(void *p) { free(p); }

const char *hyla_version(void) { return HYLA_VERSION_STRING; }
