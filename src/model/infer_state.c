#include "model/infer_state.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/error.h"
#include "core/pages.h"

static int64_t conv_floats(const hyla_config *c) { return c->conv_kernel * hyla_cfg_conv_dim(c); }
static int64_t ssm_floats(const hyla_config *c) { return c->lin_v_heads * c->lin_k_dim * c->lin_v_dim; }
static int64_t kv_floats(const hyla_config *c, int64_t max_len) { return max_len * c->n_kv_heads * c->head_dim; }

size_t hyla_infer_state_bytes(const hyla_config *cfg, int64_t B, int64_t max_len)
{
    size_t total = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        total += (size_t)B * sizeof(float) *
                 (size_t)(cfg->layer_kind[l] == HYLA_LAYER_LINEAR ? conv_floats(cfg) + ssm_floats(cfg) : 2 * kv_floats(cfg, max_len));
    return total;
}

/* One mapping for every layer's buffers, the recurrent states (conv, ssm: every byte written from
 * the first token on) first, then the KV caches (touched only as far as the sequences reach). */
int hyla_infer_state_init_pages(hyla_infer_state *s, const hyla_config *cfg, int64_t B, int64_t max_len, int huge_kv)
{
    memset(s, 0, sizeof *s);
    if (B < 1 || max_len < 1)
        return hyla_error_set(HYLA_ERR_ARG, "inference state: need B >= 1 and max_len >= 1");
    s->B = B;
    s->max_len = max_len;
    s->n_layers = (int)cfg->n_layers;
    s->owned = 1;
    s->len = calloc((size_t)B, sizeof *s->len);
    s->layers = calloc((size_t)cfg->n_layers, sizeof *s->layers);
    size_t recurrent = 0, kv = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        if (cfg->layer_kind[l] == HYLA_LAYER_LINEAR)
            recurrent += hyla_align_up((size_t)(B * conv_floats(cfg)) * sizeof(float)) +
                         hyla_align_up((size_t)(B * ssm_floats(cfg)) * sizeof(float));
        else
            kv += 2 * hyla_align_up((size_t)(B * kv_floats(cfg, max_len)) * sizeof(float));
    s->map_bytes = recurrent + kv;
    s->map = s->len && s->layers ? hyla_pages_map_small(s->map_bytes) : NULL;
    if (!s->map) {
        hyla_infer_state_free(s);
        return hyla_error_set(HYLA_ERR_NOMEM, "inference state: cannot allocate %zu bytes",
                              hyla_infer_state_bytes(cfg, B, max_len));
    }
    /* huge pages where every byte is used (2.26 ms of a 0.8B decode step reads and writes the
     * 18 MB of delta-rule states), and for the caches when the caller fills them to max_len */
    hyla_pages_advise_huge(s->map, huge_kv ? s->map_bytes : recurrent);
    unsigned char *at = s->map, *kv_at = at + recurrent;
    for (int l = 0; l < cfg->n_layers; l++) {
        hyla_layer_state *L = &s->layers[l];
        if (cfg->layer_kind[l] == HYLA_LAYER_LINEAR) {
            L->conv = (float *)at, at += hyla_align_up((size_t)(B * conv_floats(cfg)) * sizeof(float));
            L->ssm = (float *)at, at += hyla_align_up((size_t)(B * ssm_floats(cfg)) * sizeof(float));
        } else {
            size_t bytes = hyla_align_up((size_t)(B * kv_floats(cfg, max_len)) * sizeof(float));
            L->keys = (float *)kv_at, kv_at += bytes;
            L->values = (float *)kv_at, kv_at += bytes;
        }
    }
    return HYLA_OK;
}

int hyla_infer_state_init(hyla_infer_state *s, const hyla_config *cfg, int64_t B, int64_t max_len)
{
    return hyla_infer_state_init_pages(s, cfg, B, max_len, 0);
}

void hyla_infer_state_free(hyla_infer_state *s)
{
    if (s->owned) {
        hyla_pages_unmap(s->map, s->map_bytes);
        free(s->layers);
        free(s->len);
    }
    memset(s, 0, sizeof *s);
}

void hyla_infer_state_reset(hyla_infer_state *s, const hyla_config *cfg, int64_t b)
{
    s->len[b] = 0;
    for (int l = 0; l < s->n_layers; l++) {
        hyla_layer_state *L = &s->layers[l];
        if (L->conv)
            memset(L->conv + b * conv_floats(cfg), 0, (size_t)conv_floats(cfg) * sizeof(float));
        if (L->ssm)
            memset(L->ssm + b * ssm_floats(cfg), 0, (size_t)ssm_floats(cfg) * sizeof(float));
    }
}

int64_t hyla_infer_state_recurrent_floats(const hyla_config *cfg)
{
    int64_t n = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        n += cfg->layer_kind[l] == HYLA_LAYER_LINEAR ? conv_floats(cfg) + ssm_floats(cfg) : 0;
    return n;
}

int64_t hyla_infer_state_recurrent_offset(const hyla_config *cfg, int l)
{
    int64_t n = 0;
    for (int i = 0; i < l; i++)
        n += cfg->layer_kind[i] == HYLA_LAYER_LINEAR ? conv_floats(cfg) + ssm_floats(cfg) : 0;
    return n;
}

/* save: state -> buf; else buf -> state */
static void copy_recurrent(hyla_infer_state *s, const hyla_config *cfg, int64_t b, float *buf, int save)
{
    int64_t cf = conv_floats(cfg), sf = ssm_floats(cfg);
    for (int l = 0; l < s->n_layers; l++) {
        hyla_layer_state *L = &s->layers[l];
        if (!L->conv)
            continue;
        float *conv = L->conv + b * cf, *ssm = L->ssm + b * sf;
        memcpy(save ? buf : conv, save ? conv : buf, (size_t)cf * sizeof(float));
        buf += cf;
        memcpy(save ? buf : ssm, save ? ssm : buf, (size_t)sf * sizeof(float));
        buf += sf;
    }
}

void hyla_infer_state_save_recurrent(const hyla_infer_state *s, const hyla_config *cfg, int64_t b, float *buf)
{
    copy_recurrent((hyla_infer_state *)s, cfg, b, buf, 1);
}

void hyla_infer_state_restore_recurrent(hyla_infer_state *s, const hyla_config *cfg, int64_t b, const float *buf)
{
    copy_recurrent(s, cfg, b, (float *)buf, 0);
}
