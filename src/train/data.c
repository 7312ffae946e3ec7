#include "train/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/le.h"


int hyla_data_open_tokens(hyla_data *d, const char *path, int64_t vocab)
{
    memset(d, 0, sizeof *d);
    char *raw;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &raw, &len));
    const unsigned char *b = (const unsigned char *)raw;
    int st = HYLA_OK;
    if (len < 24 || memcmp(b, "HYLATOK1", 8)) {
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: not a hyla token file (missing HYLATOK1 header)", path);
        goto done;
    }
    uint64_t n = hyla_le_get64(b + 16);
    if (n == 0 || n > (len - 24) / 4 || len != 24 + 4 * n) {
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: header says %llu tokens but the file holds %zu bytes of ids", path,
                            (unsigned long long)n, len - 24);
        goto done;
    }
    uint32_t file_vocab = hyla_le_get32(b + 8);
    if (file_vocab && file_vocab > vocab) {
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: made for vocabulary %u, larger than the model's %lld", path, file_vocab,
                            (long long)vocab);
        goto done;
    }
    d->tokens = malloc(n * sizeof *d->tokens);
    if (!d->tokens) {
        st = hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %llu tokens", path, (unsigned long long)n);
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint32_t id = hyla_le_get32(b + 24 + 4 * i);
        if (id >= (uint64_t)vocab) {
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: token %llu has id %u, out of range [0, %lld)", path,
                                (unsigned long long)i, id, (long long)vocab);
            goto done;
        }
        d->tokens[i] = (int32_t)id;
    }
    d->n_tokens = (int64_t)n;
    d->vocab = vocab;
    snprintf(d->source, sizeof d->source, "%s", path);
done:
    free(raw);
    if (st)
        hyla_data_close(d);
    return st;
}

int hyla_data_open_text(hyla_data *d, const char *path, int64_t vocab)
{
    memset(d, 0, sizeof *d);
    if (vocab < 256)
        return hyla_error_set(HYLA_ERR_ARG, "%s: byte-level tokenization needs a vocabulary of at least 256 (model has %lld)",
                              path, (long long)vocab);
    char *raw;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &raw, &len));
    if (len < 2) {
        free(raw);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: text file is empty", path);
    }
    d->tokens = malloc(len * sizeof *d->tokens);
    if (!d->tokens) {
        free(raw);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %zu tokens", path, len);
    }
    for (size_t i = 0; i < len; i++)
        d->tokens[i] = (unsigned char)raw[i];
    free(raw);
    d->n_tokens = (int64_t)len;
    d->vocab = vocab;
    snprintf(d->source, sizeof d->source, "%s", path);
    return HYLA_OK;
}

void hyla_data_open_synthetic(hyla_data *d, uint64_t seed, int64_t vocab)
{
    memset(d, 0, sizeof *d);
    d->synthetic = 1;
    d->seed = seed;
    d->vocab = vocab;
    snprintf(d->source, sizeof d->source, "synthetic");
}

void hyla_data_close(hyla_data *d)
{
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void hyla_data_next(hyla_data *d, int32_t *out, int64_t n_seq, int64_t T)
{
    for (int64_t s = 0; s < n_seq; s++) {
        int32_t *o = out + s * T;
        if (d->synthetic) { /* x_{i+1} = x_i + step (mod V): learnable from two tokens of context */
            uint64_t h = mix64(d->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)d->pos);
            int64_t x = (int64_t)(h % (uint64_t)d->vocab), step = 1 + (int64_t)((h >> 32) % 7);
            for (int64_t t = 0; t < T; t++)
                o[t] = (int32_t)((x + step * t) % d->vocab);
            d->pos++;
            continue;
        }
        for (int64_t t = 0; t < T; t++) {
            if (d->pos >= d->n_tokens)
                d->pos = 0;
            o[t] = d->tokens[d->pos++];
        }
    }
}

int hyla_data_write_tokens(const char *path, const int32_t *ids, int64_t n, int64_t vocab)
{
    size_t len = 24 + 4 * (size_t)n;
    unsigned char *b = malloc(len);
    if (!b)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    memcpy(b, "HYLATOK1", 8);
    hyla_le_put32(b + 8, (uint32_t)vocab);
    hyla_le_put32(b + 12, 0);
    hyla_le_put64(b + 16, (uint64_t)n);
    for (int64_t i = 0; i < n; i++)
        hyla_le_put32(b + 24 + 4 * i, (uint32_t)ids[i]);
    int st = hyla_write_file_atomic(path, b, len);
    free(b);
    return st;
}
