#include "train/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"
#include "io/fileio.h"
#include "io/le.h"


/* HYLATOK2: documents with a mask (data.h). */
static int open_documents(hyla_data *d, const char *path, const unsigned char *b, size_t len, int64_t vocab)
{
    if (len < 32)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: truncated HYLATOK2 header (%zu bytes)", path, len);
    uint64_t n = hyla_le_get64(b + 16), docs = hyla_le_get64(b + 24);
    /* 4 bytes of id + 1 of mask per token, 8 per document start: bound both by the file size first */
    if (n == 0 || n > len / 5 || docs == 0 || docs > len / 8 || len != 32 + 5 * n + 8 * (docs + 1))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: header says %llu tokens in %llu documents but the file holds %zu "
                              "bytes", path, (unsigned long long)n, (unsigned long long)docs, len);
    uint32_t file_vocab = hyla_le_get32(b + 8);
    if (file_vocab && file_vocab > vocab)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: made for vocabulary %u, larger than the model's %lld", path,
                              file_vocab, (long long)vocab);
    int32_t *ids = malloc(n * sizeof *ids);
    unsigned char *mask = malloc(n);
    int64_t *starts = malloc((docs + 1) * sizeof *starts);
    if (!ids || !mask || !starts) {
        free(ids), free(mask), free(starts);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %llu tokens", path, (unsigned long long)n);
    }
    const unsigned char *p = b + 32;
    for (uint64_t i = 0; i < n; i++)
        ids[i] = (int32_t)hyla_le_get32(p + 4 * i); /* range-checked by hyla_data_set_documents */
    p += 4 * n;
    for (uint64_t k = 0; k <= docs; k++)
        starts[k] = (int64_t)hyla_le_get64(p + 8 * k);
    p += 8 * (docs + 1);
    int st = HYLA_OK;
    for (uint64_t i = 0; st == HYLA_OK && i < n; i++) {
        mask[i] = p[i];
        if (p[i] > 1)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: mask of token %llu is %u (0 or 1 allowed)", path,
                                (unsigned long long)i, p[i]);
    }
    for (uint64_t k = 0; st == HYLA_OK && k <= docs; k++)
        if ((uint64_t)starts[k] > n || (k > 0 && starts[k] < starts[k - 1]) || (k == 0 && starts[0] != 0) ||
            (k == docs && (uint64_t)starts[k] != n))
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: document start %llu (%lld) is out of order or range", path,
                                (unsigned long long)k, (long long)starts[k]);
    if (st != HYLA_OK) {
        free(ids), free(mask), free(starts);
        return st;
    }
    return hyla_data_set_documents(d, ids, mask, (int64_t)n, starts, (int64_t)docs, vocab, path);
}

int hyla_data_open_tokens(hyla_data *d, const char *path, int64_t vocab)
{
    memset(d, 0, sizeof *d);
    char *raw;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &raw, &len));
    const unsigned char *b = (const unsigned char *)raw;
    int st = HYLA_OK;
    if (len >= 8 && !memcmp(b, "HYLATOK2", 8)) {
        st = open_documents(d, path, b, len, vocab);
        d->hash = hyla_hash64(raw, len);
        free(raw);
        return st;
    }
    d->hash = hyla_hash64(raw, len);
    if (len < 24 || memcmp(b, "HYLATOK1", 8)) {
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: not a hyla token file (missing HYLATOK1 / HYLATOK2 header)", path);
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
    d->hash = hyla_hash64(raw, len);
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
    free(d->mask);
    free(d->doc_start);
    free(d->rows);
    free(d->row_doc);
    free(d->seg_len);
    memset(d, 0, sizeof *d);
}

int hyla_data_set_documents(hyla_data *d, int32_t *tokens, unsigned char *mask, int64_t n_tokens, int64_t *doc_start,
                            int64_t n_docs, int64_t vocab, const char *source)
{
    memset(d, 0, sizeof *d);
    int64_t kept = 0, at = 0;
    int st = HYLA_OK;
    for (int64_t k = 0; k < n_docs && st == HYLA_OK; k++) { /* compact in place, dropping documents of < 2 tokens */
        int64_t s = doc_start[k], e = doc_start[k + 1];
        if (e - s < 2)
            continue;
        for (int64_t i = s; i < e; i++) {
            if (tokens[i] < 0 || tokens[i] >= vocab) {
                st = hyla_error_set(HYLA_ERR_FORMAT, "%s: document %lld: token id %d is out of range [0, %lld)", source,
                                    (long long)k, tokens[i], (long long)vocab);
                break;
            }
            d->n_targets += i > s && mask[i];
        }
        memmove(tokens + at, tokens + s, (size_t)(e - s) * sizeof *tokens);
        memmove(mask + at, mask + s, (size_t)(e - s));
        doc_start[kept++] = at;
        at += e - s;
    }
    doc_start[kept] = at;
    if (st == HYLA_OK && kept == 0)
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: no document has 2 or more tokens (nothing to train on)", source);
    if (st == HYLA_OK && d->n_targets == 0)
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: no token is a training target (every mask is 0: no assistant message?)",
                            source);
    if (st != HYLA_OK) {
        free(tokens), free(mask), free(doc_start);
        memset(d, 0, sizeof *d);
        return st;
    }
    d->tokens = tokens, d->mask = mask, d->doc_start = doc_start;
    d->n_tokens = at, d->n_docs = kept, d->vocab = vocab;
    d->rows_epoch = -1;
    snprintf(d->source, sizeof d->source, "%s", source);
    return HYLA_OK;
}

static int64_t doc_rows(int64_t n, int64_t T) { return (n - 1 + T - 2) / (T - 1); }

int64_t hyla_data_rows_per_epoch(const hyla_data *d, int64_t T)
{
    if (!d->mask)
        return d->synthetic ? 0 : d->n_tokens / T;
    if (d->rows && d->rows_T == T) /* the row table of this T counts them already */
        return d->n_rows;
    int64_t rows = 0;
    for (int64_t k = 0; k < d->n_docs; k++)
        rows += doc_rows(d->doc_start[k + 1] - d->doc_start[k], T);
    return rows;
}

int64_t hyla_data_epoch(const hyla_data *d, int64_t T)
{
    int64_t per = hyla_data_rows_per_epoch(d, T);
    return per > 0 ? (d->mask ? d->pos : d->pos / T) / per : 0;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The row table of `epoch` for row length T: documents in order, or permuted (seeded by seed and
 * epoch, Fisher-Yates over a splitmix stream), each document's rows in order. */
static int build_rows(hyla_data *d, int64_t T, int64_t epoch)
{
    int64_t n = hyla_data_rows_per_epoch(d, T);
    if (d->rows_T != T || !d->rows) {
        free(d->rows), free(d->row_doc);
        d->rows = malloc((size_t)n * sizeof *d->rows);
        d->row_doc = malloc((size_t)n * sizeof *d->row_doc);
        if (!d->rows || !d->row_doc)
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for %lld rows", d->source, (long long)n);
    }
    int64_t *order = malloc((size_t)d->n_docs * sizeof *order);
    if (!order)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", d->source);
    for (int64_t k = 0; k < d->n_docs; k++)
        order[k] = k;
    if (d->shuffle)
        for (int64_t k = d->n_docs - 1; k > 0; k--) {
            uint64_t h = mix64((d->seed ^ 0x5f0f2c3a1b4d6e79ULL) * 0x9e3779b97f4a7c15ULL + (uint64_t)epoch * 0x100000001b3ULL +
                               (uint64_t)k);
            int64_t j = (int64_t)(h % (uint64_t)(k + 1)), t = order[k];
            order[k] = order[j], order[j] = t;
        }
    int64_t r = 0;
    for (int64_t i = 0; i < d->n_docs; i++) {
        int64_t k = order[i], s = d->doc_start[k], len = d->doc_start[k + 1] - s;
        for (int64_t w = 0; w < doc_rows(len, T); w++, r++)
            d->rows[r] = s + w * (T - 1), d->row_doc[r] = k;
    }
    free(order);
    d->n_rows = n, d->rows_T = T, d->rows_epoch = epoch;
    return HYLA_OK;
}

/* The piece at the position (table of its epoch built): its first token and length (<= T). */
static int current_piece(hyla_data *d, int64_t T, int64_t *start, int64_t *len)
{
    int64_t epoch = d->pos / hyla_data_rows_per_epoch(d, T);
    if (d->rows_T != T || d->rows_epoch != epoch)
        HYLA_TRY(build_rows(d, T, epoch));
    int64_t r = d->pos % d->n_rows, s = d->rows[r], end = d->doc_start[d->row_doc[r] + 1];
    *start = s;
    *len = end - s < T ? end - s : T;
    return HYLA_OK;
}

/* width tokens of a row: the piece (len tokens from s) then padding (token 0, no label). */
static void fill_piece(const hyla_data *d, int32_t *o, int32_t *lab, int64_t s, int64_t len, int64_t width)
{
    for (int64_t t = 0; t < width; t++) {
        o[t] = t < len ? d->tokens[s + t] : 0;
        if (lab)
            lab[t] = t + 1 < len && d->mask[s + t + 1] ? d->tokens[s + t + 1] : -100;
    }
}

static int next_document_row(hyla_data *d, int32_t *o, int32_t *lab, int64_t T)
{
    int64_t s, len;
    HYLA_TRY(current_piece(d, T, &s, &len));
    fill_piece(d, o, lab, s, len, T);
    d->pos++;
    return HYLA_OK;
}

/* One packed row: pieces while they fit, then a padding piece; their lengths appended to seg_len. */
static int next_packed_row(hyla_data *d, int32_t *o, int32_t *lab, int64_t T)
{
    int64_t used = 0;
    while (used < T) {
        int64_t s = 0, len = 0;
        int epoch_end = used > 0 && d->pos % hyla_data_rows_per_epoch(d, T) == 0; /* rows do not span epochs */
        if (!epoch_end)
            HYLA_TRY(current_piece(d, T, &s, &len));
        if (used + len > T) /* does not fit: pad the rest of the row */
            len = 0;
        int64_t width = len ? len : T - used;
        fill_piece(d, o + used, lab ? lab + used : NULL, s, len, width);
        d->seg_len[d->n_seg++] = width;
        used += width;
        if (len)
            d->pos++;
    }
    return HYLA_OK;
}

int hyla_data_next(hyla_data *d, int32_t *out, int32_t *labels, int64_t n_seq, int64_t T)
{
    d->n_seg = 0;
    if (d->mask && d->pack && d->seg_cap < n_seq * T) { /* a row holds at most T pieces */
        free(d->seg_len);
        d->seg_cap = 0;
        if (!(d->seg_len = malloc((size_t)(n_seq * T) * sizeof *d->seg_len)))
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", d->source);
        d->seg_cap = n_seq * T;
    }
    for (int64_t s = 0; s < n_seq; s++) {
        if (d->mask && d->pack) {
            HYLA_TRY(next_packed_row(d, out + s * T, labels ? labels + s * T : NULL, T));
            continue;
        }
        if (d->mask) {
            HYLA_TRY(next_document_row(d, out + s * T, labels ? labels + s * T : NULL, T));
            continue;
        }
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
    return HYLA_OK;
}

/* A token file of `len` bytes: magic, vocab, 0, n, then (from `ids_at`) the n ids; the caller fills
 * the rest. NULL when out of memory. */
static unsigned char *token_file(const char *magic, size_t len, const int32_t *ids, int64_t n, int64_t vocab,
                                 size_t ids_at)
{
    unsigned char *b = malloc(len);
    if (!b)
        return NULL;
    memcpy(b, magic, 8);
    hyla_le_put32(b + 8, (uint32_t)vocab);
    hyla_le_put32(b + 12, 0);
    hyla_le_put64(b + 16, (uint64_t)n);
    for (int64_t i = 0; i < n; i++)
        hyla_le_put32(b + ids_at + 4 * i, (uint32_t)ids[i]);
    return b;
}

static int write_and_free(const char *path, unsigned char *b, size_t len)
{
    int st = b ? hyla_write_file_atomic(path, b, len) : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    free(b);
    return st;
}

int hyla_data_write_tokens(const char *path, const int32_t *ids, int64_t n, int64_t vocab)
{
    size_t len = 24 + 4 * (size_t)n;
    return write_and_free(path, token_file("HYLATOK1", len, ids, n, vocab, 24), len);
}

int hyla_data_write_documents(const char *path, const int32_t *ids, const unsigned char *mask, int64_t n,
                              const int64_t *doc_start, int64_t n_docs, int64_t vocab)
{
    size_t len = 32 + 5 * (size_t)n + 8 * (size_t)(n_docs + 1);
    unsigned char *b = token_file("HYLATOK2", len, ids, n, vocab, 32);
    if (!b)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    hyla_le_put64(b + 24, (uint64_t)n_docs);
    unsigned char *p = b + 32 + 4 * n;
    for (int64_t k = 0; k <= n_docs; k++)
        hyla_le_put64(p + 8 * k, (uint64_t)doc_start[k]);
    memcpy(p + 8 * (n_docs + 1), mask, (size_t)n);
    return write_and_free(path, b, len);
}
