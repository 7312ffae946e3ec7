#include "io/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/le.h"
#include "io/safetensors.h"

enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9 };

#define GGUF_MAX_DIMS 4

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
} byte_buf;

typedef struct {
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    hyla_ggml_type type;
    size_t offset, nbytes;
} tensor_info;

struct hyla_gguf_writer {
    byte_buf kv, infos;  /* encoded key-value pairs and tensor infos */
    uint64_t n_kv;
    tensor_info *tensors;
    size_t n_tensors, cap_tensors, data_bytes;
    int failed;          /* an add failed: the error is already set */
};

/* ---- encoding ------------------------------------------------------------------------------------ */

static void put(byte_buf *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u32(byte_buf *b, uint32_t v)
{
    unsigned char x[4];
    hyla_le_put32(x, v);
    put(b, x, 4);
}

static void put_u64(byte_buf *b, uint64_t v)
{
    unsigned char x[8];
    hyla_le_put64(x, v);
    put(b, x, 8);
}

static void put_str(byte_buf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

static void put_key(hyla_gguf_writer *w, const char *key, uint32_t type)
{
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, type);
    w->n_kv++;
}

hyla_gguf_writer *hyla_gguf_new(void) { return calloc(1, sizeof(hyla_gguf_writer)); }

void hyla_gguf_free(hyla_gguf_writer *w)
{
    if (!w)
        return;
    free(w->kv.p);
    free(w->infos.p);
    free(w->tensors);
    free(w);
}

void hyla_gguf_kv_str(hyla_gguf_writer *w, const char *key, const char *value)
{
    put_key(w, key, GGUF_STRING);
    put_str(&w->kv, value, strlen(value));
}

void hyla_gguf_kv_u32(hyla_gguf_writer *w, const char *key, uint32_t value)
{
    put_key(w, key, GGUF_U32);
    put_u32(&w->kv, value);
}

void hyla_gguf_kv_f32(hyla_gguf_writer *w, const char *key, float value)
{
    uint32_t u;
    memcpy(&u, &value, 4);
    put_key(w, key, GGUF_F32);
    put_u32(&w->kv, u);
}

void hyla_gguf_kv_bool(hyla_gguf_writer *w, const char *key, int value)
{
    unsigned char v = value != 0;
    put_key(w, key, GGUF_BOOL);
    put(&w->kv, &v, 1);
}

static void put_array_head(hyla_gguf_writer *w, const char *key, uint32_t elem_type, size_t n)
{
    put_key(w, key, GGUF_ARRAY);
    put_u32(&w->kv, elem_type);
    put_u64(&w->kv, n);
}

void hyla_gguf_kv_copy(hyla_gguf_writer *w, const hyla_gguf_kv *kv)
{
    put_key(w, kv->key, kv->type);
    if (kv->type == HYLA_GGUF_STRING) {
        put(&w->kv, kv->value, 8 + (size_t)hyla_le_get64(kv->value)); /* length, then the bytes */
        return;
    }
    if (kv->type != HYLA_GGUF_ARRAY) {
        put(&w->kv, kv->value, (size_t)hyla_gguf_value_size(kv->type));
        return;
    }
    put_u32(&w->kv, kv->elem_type);
    put_u64(&w->kv, kv->count);
    if (kv->elem_type != HYLA_GGUF_STRING) {
        put(&w->kv, kv->value, (size_t)kv->count * (size_t)hyla_gguf_value_size(kv->elem_type));
        return;
    }
    for (uint64_t i = 0; i < kv->count; i++) /* each element: its length, then its bytes */
        put(&w->kv, kv->strs[i], 8 + (size_t)hyla_le_get64(kv->strs[i]));
}

void hyla_gguf_kv_str_array(hyla_gguf_writer *w, const char *key, const char *const *values, const size_t *lens, size_t n)
{
    put_array_head(w, key, GGUF_STRING, n);
    for (size_t i = 0; i < n; i++)
        put_str(&w->kv, values[i], lens ? lens[i] : strlen(values[i]));
}

void hyla_gguf_kv_i32_array(hyla_gguf_writer *w, const char *key, const int32_t *values, size_t n)
{
    put_array_head(w, key, GGUF_I32, n);
    for (size_t i = 0; i < n; i++)
        put_u32(&w->kv, (uint32_t)values[i]);
}

void hyla_gguf_kv_bool_array(hyla_gguf_writer *w, const char *key, const unsigned char *values, size_t n)
{
    put_array_head(w, key, GGUF_BOOL, n);
    for (size_t i = 0; i < n; i++) {
        unsigned char v = values[i] != 0;
        put(&w->kv, &v, 1);
    }
}

static size_t align_up(size_t x) { return (x + HYLA_GGUF_ALIGNMENT - 1) / HYLA_GGUF_ALIGNMENT * HYLA_GGUF_ALIGNMENT; }

int hyla_gguf_add_tensor(hyla_gguf_writer *w, const char *name, int n_dims, const int64_t *ne, hyla_ggml_type type)
{
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        w->failed = 1;
        return hyla_error_set(HYLA_ERR_ARG, "gguf tensor %s: %d dimensions (1..%d allowed)", name, n_dims, GGUF_MAX_DIMS), -1;
    }
    size_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || (size_t)ne[d] > SIZE_MAX / 64 / n) {
            w->failed = 1;
            return hyla_error_set(HYLA_ERR_ARG, "gguf tensor %s: dimension %d is %lld", name, d, (long long)ne[d]), -1;
        }
        n *= (size_t)ne[d];
    }
    if (type != HYLA_GGML_F32 && type != HYLA_GGML_F16 && type != HYLA_GGML_BF16 && type != HYLA_GGML_Q8_0 &&
        type != HYLA_GGML_Q6_K && type != HYLA_GGML_Q4_K && type != HYLA_GGML_Q5_K && type != HYLA_GGML_Q3_K &&
        type != HYLA_GGML_Q2_K) {
        w->failed = 1;
        return hyla_error_set(HYLA_ERR_ARG, "gguf tensor %s: the writer does not quantize to %s", name,
                              hyla_ggml_type_name(type)), -1;
    }
    if (ne[0] % hyla_ggml_block_values(type)) {
        w->failed = 1;
        return hyla_error_set(HYLA_ERR_ARG, "gguf tensor %s: %s needs rows of a multiple of %lld values (got %lld)", name,
                              hyla_ggml_type_name(type), (long long)hyla_ggml_block_values(type), (long long)ne[0]), -1;
    }
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        tensor_info *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) {
            w->failed = 1;
            return hyla_error_set(HYLA_ERR_NOMEM, "gguf: out of memory"), -1;
        }
        w->tensors = t, w->cap_tensors = cap;
    }
    tensor_info *t = &w->tensors[w->n_tensors];
    t->n_dims = n_dims;
    memcpy(t->ne, ne, (size_t)n_dims * sizeof *ne);
    t->type = type;
    t->offset = w->data_bytes;
    t->nbytes = hyla_ggml_bytes(type, n);
    w->data_bytes = align_up(t->offset + t->nbytes);
    put_str(&w->infos, name, strlen(name));
    put_u32(&w->infos, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++)
        put_u64(&w->infos, (uint64_t)ne[d]);
    put_u32(&w->infos, (uint32_t)type);
    put_u64(&w->infos, t->offset);
    return (int)w->n_tensors++;
}

size_t hyla_gguf_tensor_count(const hyla_gguf_writer *w) { return w->n_tensors; }

int hyla_gguf_write(const hyla_gguf_writer *w, const char *path, hyla_gguf_fill_fn fill, void *ctx)
{
    if (w->failed)
        return HYLA_ERR_ARG;
    if (w->kv.oom || w->infos.oom)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory building the GGUF header", path);
    byte_buf head = {0};
    put(&head, "GGUF", 4);
    put_u32(&head, 3);
    put_u64(&head, w->n_tensors);
    put_u64(&head, w->n_kv);
    size_t max_bytes = 0;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].nbytes > max_bytes)
            max_bytes = w->tensors[i].nbytes;
    static const unsigned char zeros[HYLA_GGUF_ALIGNMENT];
    size_t header_bytes = head.len + w->kv.len + w->infos.len;
    unsigned char *buf = malloc(max_bytes ? max_bytes : 1);
    if (head.oom || !buf) {
        free(head.p);
        free(buf);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    }
    hyla_atomic_file f;
    int st = hyla_atomic_open(&f, path);
    if (st == HYLA_OK) {
        hyla_atomic_write(&f, head.p, head.len);
        hyla_atomic_write(&f, w->kv.p, w->kv.len);
        hyla_atomic_write(&f, w->infos.p, w->infos.len);
        st = hyla_atomic_write(&f, zeros, align_up(header_bytes) - header_bytes);
        size_t at = 0;
        for (size_t i = 0; st == HYLA_OK && i < w->n_tensors; i++) {
            const tensor_info *t = &w->tensors[i];
            st = hyla_atomic_write(&f, zeros, t->offset - at);
            if (st == HYLA_OK)
                st = fill(ctx, i, buf, t->nbytes);
            if (st == HYLA_OK)
                st = hyla_atomic_write(&f, buf, t->nbytes);
            at = t->offset + t->nbytes;
        }
        if (st == HYLA_OK)
            st = hyla_atomic_commit(&f);
        else
            hyla_atomic_abort(&f);
    }
    free(head.p);
    free(buf);
    return st;
}
