/* The public API of include/hyla.h, over the internal model and forward. */
#include "hyla.h"

#include <stdlib.h>

#include "core/error.h"
#include "engine/forward.h"
#include "model/model.h"
#include "model/infer_state.h"
#include "engine/executor.h"

struct hyla_engine {
    hyla_model model;
};

int hyla_open(const char *model_dir, hyla_engine **out)
{
    *out = NULL;
    hyla_engine *e = malloc(sizeof *e);
    if (!e)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    int st = hyla_model_load(&e->model, model_dir);
    if (st) {
        free(e);
        return st;
    }
    *out = e;
    return HYLA_OK;
}

void hyla_close(hyla_engine *e)
{
    if (!e)
        return;
    hyla_model_free(&e->model);
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
    hyla_infer_state st = {B, max_len, len, (int)m->cfg.n_layers, (hyla_layer_state *)layers, 0};
    hyla_policy nothing;
    HYLA_TRY(hyla_policy_parse(&nothing, "full"));
    hyla_executor ex;
    HYLA_TRY(hyla_executor_init(&ex, m, &nothing, HYLA_UNIT_LAYER, B, T, T == 1 ? HYLA_DELTA_RECURRENT : HYLA_DELTA_CHUNKED, 1));
    int rc = hyla_executor_infer(&ex, tokens, &st, logits);
    hyla_executor_free(&ex);
    return rc;
}

int hyla_save(const hyla_engine *e, const char *out_dir, size_t max_shard_bytes)
{
    return hyla_model_save(&e->model, out_dir, NULL, max_shard_bytes);
}
