/* The public API of include/hyla.h, over the internal model and forward. */
#include "hyla.h"

#include <stdlib.h>

#include "core/error.h"
#include "model/forward.h"
#include "model/model.h"

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

int hyla_save(const hyla_engine *e, const char *out_dir, size_t max_shard_bytes)
{
    return hyla_model_save(&e->model, out_dir, NULL, max_shard_bytes);
}
