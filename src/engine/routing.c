#include "engine/routing.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/le.h"

int hyla_moe_layer_count(const hyla_config *cfg)
{
    int n = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        n += cfg->layer_is_moe[l];
    return n;
}


int hyla_routing_write(const char *path, const hyla_routing *r)
{
    size_t count = (size_t)(r->n_layers * r->rows * r->k), len = 24 + 4 * count;
    unsigned char *b = malloc(len);
    if (!b)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    memcpy(b, "HYLAROU1", 8);
    hyla_le_put32(b + 8, (uint32_t)r->n_layers);
    hyla_le_put32(b + 12, (uint32_t)r->k);
    hyla_le_put64(b + 16, (uint64_t)r->rows);
    for (size_t i = 0; i < count; i++)
        hyla_le_put32(b + 24 + 4 * i, (uint32_t)r->ids[i]);
    int rc = hyla_write_file_atomic(path, b, len);
    free(b);
    return rc;
}

int hyla_routing_read(const char *path, const hyla_config *cfg, hyla_routing *r)
{
    memset(r, 0, sizeof *r);
    char *raw;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &raw, &len));
    const unsigned char *b = (const unsigned char *)raw;
    int rc = HYLA_OK;
    if (len < 24 || memcmp(b, "HYLAROU1", 8)) {
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: not a routing file (missing HYLAROU1 header)", path);
        goto done;
    }
    r->n_layers = hyla_le_get32(b + 8);
    r->k = hyla_le_get32(b + 12);
    int want_layers = hyla_moe_layer_count(cfg);
    if (r->n_layers != want_layers || r->k != cfg->top_k) {
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: routing for %lld MoE layers x top-%lld, but the model has %d x top-%lld",
                            path, (long long)r->n_layers, (long long)r->k, want_layers, (long long)cfg->top_k);
        goto done;
    }
    /* rows comes from the file: bound it by the bytes present before any product is formed
     * (layers and k are the model's, both >= 1 and small, see model/config.h) */
    uint64_t rows = hyla_le_get64(b + 16), per_row = 4 * (uint64_t)r->n_layers * (uint64_t)r->k;
    if (r->n_layers < 1) {
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: the model has no MoE layers to replay", path);
        goto done;
    }
    if (rows < 1 || rows > (len - 24) / per_row || len - 24 != rows * per_row) {
        rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: header says %llu rows but the file holds %zu bytes of ids", path,
                            (unsigned long long)rows, len - 24);
        goto done;
    }
    size_t count = (size_t)(rows * per_row / 4);
    r->rows = (int64_t)rows;
    r->ids = malloc(count * sizeof *r->ids);
    if (!r->ids) {
        rc = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t i = 0; i < count && rc == HYLA_OK; i++) {
        int32_t id = (int32_t)hyla_le_get32(b + 24 + 4 * i);
        int64_t layer = (int64_t)(i / (size_t)(r->rows * r->k)), row = (int64_t)(i / (size_t)r->k) % r->rows;
        if (id < -1 || id >= cfg->n_experts)
            rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: MoE layer %lld, row %lld: expert id %d is out of range [-1, %lld)",
                                path, (long long)layer, (long long)row, id, (long long)cfg->n_experts);
        for (size_t j = i - i % (size_t)r->k; rc == HYLA_OK && id >= 0 && j < i; j++)
            if (r->ids[j] == id)
                rc = hyla_error_set(HYLA_ERR_FORMAT, "%s: MoE layer %lld, row %lld: expert %d chosen twice", path,
                                    (long long)layer, (long long)row, id);
        r->ids[i] = id;
    }
done:
    free(raw);
    if (rc)
        hyla_routing_free(r);
    return rc;
}

void hyla_routing_free(hyla_routing *r)
{
    free(r->ids);
    memset(r, 0, sizeof *r);
}
