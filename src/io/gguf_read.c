/* GGUF reading (gguf_read.h): parse with every length checked against the bytes left. */
#include "io/gguf_read.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/le.h"

#define MAX_NAME 65536      /* bytes of a key or tensor name */
#define MAX_ALIGNMENT (1u << 20)

struct hyla_gguf_file {
    char *path;
    const unsigned char *bytes;
    size_t len;
    int mapped;
    uint32_t version;
    hyla_gguf_kv *kv;
    size_t n_kv;
    hyla_gguf_tensor *tensors;
    size_t n_tensors;
    size_t data_offset;        /* where the data block starts: the header, key-values and tensor infos before it */
};

typedef struct {
    const unsigned char *p, *end;
    const char *label;
} cursor;

static int need(cursor *c, uint64_t n, const char *what)
{
    if ((uint64_t)(c->end - c->p) < n)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: truncated: %s needs %llu bytes, %zu left", c->label, what,
                              (unsigned long long)n, (size_t)(c->end - c->p));
    return HYLA_OK;
}

static int get_u32(cursor *c, uint32_t *v, const char *what)
{
    HYLA_TRY(need(c, 4, what));
    *v = hyla_le_get32(c->p);
    c->p += 4;
    return HYLA_OK;
}

static int get_u64(cursor *c, uint64_t *v, const char *what)
{
    HYLA_TRY(need(c, 8, what));
    *v = hyla_le_get64(c->p);
    c->p += 8;
    return HYLA_OK;
}

/* A string: its bytes are skipped, *s points at them. */
static int get_str(cursor *c, const unsigned char **s, uint64_t *n, const char *what)
{
    HYLA_TRY(get_u64(c, n, what));
    HYLA_TRY(need(c, *n, what));
    *s = c->p;
    c->p += *n;
    return HYLA_OK;
}

int hyla_gguf_value_size(uint32_t t)
{
    switch (t) {
    case HYLA_GGUF_U8: case HYLA_GGUF_I8: case HYLA_GGUF_BOOL: return 1;
    case HYLA_GGUF_U16: case HYLA_GGUF_I16: return 2;
    case HYLA_GGUF_U32: case HYLA_GGUF_I32: case HYLA_GGUF_F32: return 4;
    case HYLA_GGUF_U64: case HYLA_GGUF_I64: case HYLA_GGUF_F64: return 8;
    default: return 0;
    }
}

static int parse_value(hyla_gguf_file *f, cursor *c, hyla_gguf_kv *kv)
{
    kv->count = 1;
    kv->value = c->p;
    int sz = hyla_gguf_value_size(kv->type);
    if (sz) {
        HYLA_TRY(need(c, (uint64_t)sz, kv->key));
        c->p += sz;
        return HYLA_OK;
    }
    if (kv->type == HYLA_GGUF_STRING) {
        const unsigned char *s;
        uint64_t n;
        return get_str(c, &s, &n, kv->key);
    }
    if (kv->type != HYLA_GGUF_ARRAY)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: key %s has unknown value type %u", f->path, kv->key, kv->type);
    HYLA_TRY(get_u32(c, &kv->elem_type, kv->key));
    HYLA_TRY(get_u64(c, &kv->count, kv->key));
    kv->value = c->p;
    sz = hyla_gguf_value_size(kv->elem_type);
    if (sz) {
        if (kv->count > (uint64_t)(c->end - c->p) / (uint64_t)sz)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: key %s: an array of %llu values does not fit in the file",
                                  f->path, kv->key, (unsigned long long)kv->count);
        c->p += kv->count * (uint64_t)sz;
        return HYLA_OK;
    }
    if (kv->elem_type != HYLA_GGUF_STRING)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: key %s: arrays of value type %u are not read", f->path, kv->key,
                              kv->elem_type);
    if (kv->count > (uint64_t)(c->end - c->p) / 8) /* each string has at least its length field */
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: key %s: an array of %llu strings does not fit in the file",
                              f->path, kv->key, (unsigned long long)kv->count);
    if (!(kv->strs = malloc((size_t)kv->count * sizeof *kv->strs + 1)))
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for key %s", f->path, kv->key);
    for (uint64_t i = 0; i < kv->count; i++) {
        const unsigned char *s;
        uint64_t n;
        kv->strs[i] = c->p;
        HYLA_TRY(get_str(c, &s, &n, kv->key));
    }
    return HYLA_OK;
}

/* A key or tensor name, copied NUL-terminated (freed with the file). */
static int get_name(hyla_gguf_file *f, cursor *c, const char **out, const char *what)
{
    const unsigned char *s;
    uint64_t n;
    HYLA_TRY(get_str(c, &s, &n, what));
    if (n == 0 || n > MAX_NAME || memchr(s, 0, (size_t)n))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s of %llu bytes (1..%d, no NUL)", f->path, what,
                              (unsigned long long)n, MAX_NAME);
    char *copy = malloc((size_t)n + 1);
    if (!copy)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", f->path);
    memcpy(copy, s, (size_t)n);
    copy[n] = '\0';
    *out = copy;
    return HYLA_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Names sorted; a duplicate is an error. */
static int check_unique(const hyla_gguf_file *f, const char **names, size_t n, const char *what)
{
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i]))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s %s appears twice", f->path, what, names[i]);
    return HYLA_OK;
}

static int parse_tensor_info(hyla_gguf_file *f, cursor *c, hyla_gguf_tensor *t)
{
    uint32_t nd, type;
    HYLA_TRY(get_u32(c, &nd, t->name));
    if (nd < 1 || nd > 4)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s has %u dimensions (1..4)", f->path, t->name, nd);
    t->n_dims = (int)nd;
    uint64_t elems = 1;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t v;
        HYLA_TRY(get_u64(c, &v, t->name));
        if (v < 1 || v > ((uint64_t)1 << 50) / elems)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s: dimension %d is %llu (the product must be 1..2^50)",
                                  f->path, t->name, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        elems *= v;
    }
    HYLA_TRY(get_u32(c, &type, t->name));
    HYLA_TRY(get_u64(c, &t->offset, t->name));
    if (!hyla_ggml_type_supported(type))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s has ggml type %u, which hyla does not read (F32, F16, "
                              "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                              f->path, t->name, type);
    t->type = (hyla_ggml_type)type;
    int64_t bv = hyla_ggml_block_values(t->type);
    if (t->ne[0] % bv)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s: rows of %lld values are not whole %s blocks of %lld",
                              f->path, t->name, (long long)t->ne[0], hyla_ggml_type_name(t->type), (long long)bv);
    t->nbytes = hyla_ggml_bytes(t->type, (size_t)elems);
    return HYLA_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    const hyla_gguf_tensor *x = *(const hyla_gguf_tensor *const *)a, *y = *(const hyla_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Alignment, offsets inside the data block, no overlap. */
static int place_tensors(hyla_gguf_file *f, cursor *c)
{
    int64_t align = 32;
    const hyla_gguf_kv *a = hyla_gguf_find_kv(f, "general.alignment");
    if (a) {
        HYLA_TRY(hyla_gguf_get_int(f, "general.alignment", 1, &align));
        if (align < 1 || align > MAX_ALIGNMENT || (align & (align - 1)))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: general.alignment is %lld (a power of two up to %u)", f->path,
                                  (long long)align, MAX_ALIGNMENT);
    }
    size_t header = (size_t)(c->p - f->bytes);
    size_t data = (header + (size_t)align - 1) / (size_t)align * (size_t)align;
    if (f->n_tensors && data > f->len)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: truncated: the data block would start at byte %zu of %zu", f->path,
                              data, f->len);
    size_t avail = data <= f->len ? f->len - data : 0;
    f->data_offset = data;
    hyla_gguf_tensor **order = malloc((f->n_tensors + 1) * sizeof *order);
    if (!order)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", f->path);
    int st = HYLA_OK;
    for (size_t i = 0; i < f->n_tensors && st == HYLA_OK; i++) {
        hyla_gguf_tensor *t = &f->tensors[i];
        order[i] = t;
        if (t->offset % (uint64_t)align)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s: offset %llu is not a multiple of the alignment %lld",
                                f->path, t->name, (unsigned long long)t->offset, (long long)align);
        else if (t->offset > avail || t->nbytes > avail - t->offset)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s: bytes [%llu, %llu) of the data block lie past the "
                                "end of the file (%zu data bytes)", f->path, t->name, (unsigned long long)t->offset,
                                (unsigned long long)(t->offset + t->nbytes), avail);
        else
            t->data = f->bytes + data + t->offset;
    }
    if (st == HYLA_OK && f->n_tensors > 1) {
        qsort(order, f->n_tensors, sizeof *order, cmp_offset);
        for (size_t i = 1; i < f->n_tensors && st == HYLA_OK; i++)
            if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
                st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensors %s and %s overlap in the data block", f->path,
                                    order[i - 1]->name, order[i]->name);
    }
    free(order);
    return st;
}

static int parse(hyla_gguf_file *f)
{
    cursor c = {f->bytes, f->bytes + f->len, f->path};
    uint32_t magic;
    uint64_t n_tensors, n_kv;
    if (f->len < 4 || memcmp(f->bytes, "GGUF", 4))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: not a GGUF file (no \"GGUF\" magic)", f->path);
    HYLA_TRY(get_u32(&c, &magic, "the magic"));
    HYLA_TRY(get_u32(&c, &f->version, "the version"));
    if (f->version != 2 && f->version != 3)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: GGUF version %u (hyla reads 2 and 3)", f->path, f->version);
    HYLA_TRY(get_u64(&c, &n_tensors, "the tensor count"));
    HYLA_TRY(get_u64(&c, &n_kv, "the key-value count"));
    size_t left = (size_t)(c.end - c.p);
    /* a key-value takes >= 13 bytes (name length, one name byte, type, a 1-byte value), a tensor
     * info >= 29 (name length, one byte, n_dims, one dim, type, offset) */
    if (n_kv > left / 13 || n_tensors > left / 29)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %llu tensors and %llu key-values cannot fit in %zu bytes", f->path,
                              (unsigned long long)n_tensors, (unsigned long long)n_kv, left);
    f->n_kv = (size_t)n_kv;
    f->n_tensors = (size_t)n_tensors;
    if (!(f->kv = calloc(f->n_kv + 1, sizeof *f->kv)) || !(f->tensors = calloc(f->n_tensors + 1, sizeof *f->tensors)))
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for the header", f->path);
    for (size_t i = 0; i < f->n_kv; i++) {
        hyla_gguf_kv *kv = &f->kv[i];
        HYLA_TRY(get_name(f, &c, &kv->key, "a key"));
        HYLA_TRY(get_u32(&c, &kv->type, kv->key));
        HYLA_TRY(parse_value(f, &c, kv));
    }
    for (size_t i = 0; i < f->n_tensors; i++) {
        HYLA_TRY(get_name(f, &c, &f->tensors[i].name, "a tensor name"));
        HYLA_TRY(parse_tensor_info(f, &c, &f->tensors[i]));
    }
    const char **names = malloc((f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors) * sizeof *names + 1);
    if (!names)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n_kv; i++)
        names[i] = f->kv[i].key;
    int st = check_unique(f, names, f->n_kv, "key");
    for (size_t i = 0; st == HYLA_OK && i < f->n_tensors; i++)
        names[i] = f->tensors[i].name;
    if (st == HYLA_OK)
        st = check_unique(f, names, f->n_tensors, "tensor");
    free(names);
    return st != HYLA_OK ? st : place_tensors(f, &c);
}

int hyla_gguf_parse(hyla_gguf_file **out, const void *bytes, size_t len, const char *label)
{
    *out = NULL;
    hyla_gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(label ? label : "(gguf)"))) {
        free(f);
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    }
    f->bytes = bytes;
    f->len = len;
    int st = parse(f);
    if (st != HYLA_OK) {
        hyla_gguf_close(f);
        return st;
    }
    *out = f;
    return HYLA_OK;
}

int hyla_is_gguf_path(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".gguf");
}

int hyla_gguf_open(hyla_gguf_file **out, const char *path)
{
    *out = NULL;
    int fd;
    size_t size;
    HYLA_TRY(hyla_open_regular(path, &fd, &size));
    if (size < 24) {
        close(fd);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %zu bytes, too short for a GGUF header", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot mmap: %s", path, strerror(map_errno));
    /* advice: pages the file brings in from now on come as 2 MB folios mapped by one TLB entry
     * each where the file system and THP allow (decode streams every weight once per token; on
     * 4 KB pages the reads cost a TLB walk each 4 KB). Pages already cached keep their size. */
    madvise(map, size, MADV_HUGEPAGE);
    int st = hyla_gguf_parse(out, map, size, path);
    if (st != HYLA_OK) {
        munmap(map, size);
        return st;
    }
    (*out)->mapped = 1;
    return HYLA_OK;
}

void hyla_gguf_close(hyla_gguf_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; f->kv && i < f->n_kv; i++) {
        free(f->kv[i].strs);
        free((char *)f->kv[i].key);
    }
    for (size_t i = 0; f->tensors && i < f->n_tensors; i++)
        free((char *)f->tensors[i].name);
    if (f->mapped)
        munmap((void *)f->bytes, f->len);
    free(f->kv);
    free(f->tensors);
    free(f->path);
    free(f);
}

const char *hyla_gguf_path(const hyla_gguf_file *f) { return f->path; }

size_t hyla_gguf_metadata_bytes(const hyla_gguf_file *f)
{
    size_t bytes = f->data_offset + (f->n_kv + f->n_tensors) * 64; /* the mapped header, the parsed tables */
    for (size_t i = 0; i < f->n_kv; i++)
        bytes += f->kv[i].strs ? (size_t)f->kv[i].count * sizeof *f->kv[i].strs : 0;
    return bytes;
}
uint32_t hyla_gguf_version(const hyla_gguf_file *f) { return f->version; }
size_t hyla_gguf_n_kv(const hyla_gguf_file *f) { return f->n_kv; }
const hyla_gguf_kv *hyla_gguf_kv_at(const hyla_gguf_file *f, size_t i) { return i < f->n_kv ? &f->kv[i] : NULL; }
size_t hyla_gguf_n_tensors(const hyla_gguf_file *f) { return f->n_tensors; }
const hyla_gguf_tensor *hyla_gguf_tensor_at(const hyla_gguf_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const hyla_gguf_kv *hyla_gguf_find_kv(const hyla_gguf_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_kv; i++)
        if (!strcmp(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

const hyla_gguf_tensor *hyla_gguf_find_tensor(const hyla_gguf_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* ---- typed values ------------------------------------------------------------------------------- */

/* An integer of type t at p; 0 if t is not an integer type (*ok = 0). */
static int64_t int_at(uint32_t t, const unsigned char *p, int *ok)
{
    *ok = 1;
    switch (t) {
    case HYLA_GGUF_U8: case HYLA_GGUF_BOOL: return p[0];
    case HYLA_GGUF_I8: return (signed char)p[0];
    case HYLA_GGUF_U16: return (uint16_t)(p[0] | p[1] << 8);
    case HYLA_GGUF_I16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case HYLA_GGUF_U32: return hyla_le_get32(p);
    case HYLA_GGUF_I32: return (int32_t)hyla_le_get32(p);
    case HYLA_GGUF_I64: return (int64_t)hyla_le_get64(p);
    case HYLA_GGUF_U64: {
        uint64_t v = hyla_le_get64(p);
        if (v > INT64_MAX)
            *ok = 0;
        return (int64_t)v;
    }
    default: *ok = 0; return 0;
    }
}

static const hyla_gguf_kv *find_scalar(const hyla_gguf_file *f, const char *key, int required, int *st)
{
    const hyla_gguf_kv *kv = hyla_gguf_find_kv(f, key);
    *st = HYLA_OK;
    if (!kv && required)
        *st = hyla_error_set(HYLA_ERR_FORMAT, "%s: metadata key %s is missing", f->path, key);
    return kv;
}

int hyla_gguf_get_int(const hyla_gguf_file *f, const char *key, int required, int64_t *out)
{
    int st, ok;
    const hyla_gguf_kv *kv = find_scalar(f, key, required, &st);
    if (!kv)
        return st;
    int64_t v = int_at(kv->type, kv->value, &ok);
    if (!ok || kv->type == HYLA_GGUF_BOOL)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: metadata key %s is not an integer (value type %u)", f->path, key,
                              kv->type);
    *out = v;
    return HYLA_OK;
}

int hyla_gguf_get_f64(const hyla_gguf_file *f, const char *key, int required, double *out)
{
    int st, ok;
    const hyla_gguf_kv *kv = find_scalar(f, key, required, &st);
    if (!kv)
        return st;
    if (kv->type == HYLA_GGUF_F32) {
        uint32_t u = hyla_le_get32(kv->value);
        float v;
        memcpy(&v, &u, 4);
        *out = v;
    } else if (kv->type == HYLA_GGUF_F64) {
        uint64_t u = hyla_le_get64(kv->value);
        memcpy(out, &u, 8);
    } else {
        int64_t v = int_at(kv->type, kv->value, &ok);
        if (!ok || kv->type == HYLA_GGUF_BOOL)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: metadata key %s is not a number (value type %u)", f->path, key,
                                  kv->type);
        *out = (double)v;
    }
    return HYLA_OK;
}

int hyla_gguf_get_bool(const hyla_gguf_file *f, const char *key, int required, int *out)
{
    int st;
    const hyla_gguf_kv *kv = find_scalar(f, key, required, &st);
    if (!kv)
        return st;
    if (kv->type != HYLA_GGUF_BOOL)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: metadata key %s is not a bool (value type %u)", f->path, key,
                              kv->type);
    *out = kv->value[0] != 0;
    return HYLA_OK;
}

int hyla_gguf_get_str(const hyla_gguf_file *f, const char *key, int required, const char **s, size_t *len)
{
    int st;
    const hyla_gguf_kv *kv = find_scalar(f, key, required, &st);
    if (!kv)
        return st;
    if (kv->type != HYLA_GGUF_STRING)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: metadata key %s is not a string (value type %u)", f->path, key,
                              kv->type);
    *len = (size_t)hyla_le_get64(kv->value);
    *s = (const char *)kv->value + 8;
    return HYLA_OK;
}

int64_t hyla_gguf_arr_int(const hyla_gguf_kv *kv, uint64_t i)
{
    int ok;
    int sz = hyla_gguf_value_size(kv->elem_type);
    if (kv->type != HYLA_GGUF_ARRAY || i >= kv->count || !sz)
        return 0;
    int64_t v = int_at(kv->elem_type, kv->value + i * (uint64_t)sz, &ok);
    return ok ? v : 0;
}

const char *hyla_gguf_arr_str(const hyla_gguf_kv *kv, uint64_t i, size_t *len)
{
    if (kv->type != HYLA_GGUF_ARRAY || !kv->strs || i >= kv->count) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)hyla_le_get64(kv->strs[i]);
    return (const char *)kv->strs[i] + 8;
}
