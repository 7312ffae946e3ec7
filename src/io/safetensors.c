/* safetensors reader and writer; see safetensors.h for the contracts.
 *
 * Reader validation, per file (every error names the file and, where there is one, the tensor):
 *   - size >= 8; header length N with 8 + N <= size and N <= HYLA_ST_MAX_HEADER;
 *   - the header is one JSON object followed only by whitespace;
 *   - "__metadata__" (at most once) is an object of strings and is otherwise ignored;
 *   - every other entry is an object with "dtype" (F32/BF16/F16; other safetensors dtypes are
 *     "unsupported", anything else "unknown"), "shape" (array of <= 8 non-negative integers)
 *     and "data_offsets" ([begin, end], begin <= end <= data size,
 *     end - begin == product(shape) * dtype size, computed with overflow checks);
 *   - no two non-empty tensors overlap; names are unique across the whole set.
 * Gaps between tensors are allowed. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/bf16.h"
#include "core/error.h"
#include "io/fileio.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hyla's safetensors code assumes a little-endian host"
#endif


/* ---- dtypes ---------------------------------------------------------------------------------- */

size_t hyla_dtype_size(hyla_dtype dt)
{
    switch (dt) {
    case HYLA_DT_F32: return 4;
    case HYLA_DT_BF16: return 2;
    case HYLA_DT_F16: return 2;
    }
    return 0;
}

const char *hyla_dtype_name(hyla_dtype dt)
{
    switch (dt) {
    case HYLA_DT_F32: return "F32";
    case HYLA_DT_BF16: return "BF16";
    case HYLA_DT_F16: return "F16";
    }
    return "?";
}

int hyla_dtype_parse(const char *name, hyla_dtype *out)
{
    static const hyla_dtype all[] = {HYLA_DT_F32, HYLA_DT_BF16, HYLA_DT_F16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcasecmp(name, hyla_dtype_name(all[i]))) {
            *out = all[i];
            return HYLA_OK;
        }
    return hyla_error_set(HYLA_ERR_ARG, "unknown dtype '%s' (expected F32, BF16 or F16)", name ? name : "(null)");
}

static inline float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline uint32_t f16_to_f32_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN, payload kept */
        return sign | 0x7f800000u | (man << 13);
    if (exp != 0)
        return sign | ((exp + 112u) << 23) | (man << 13); /* rebias 15 -> 127 */
    if (man == 0)
        return sign;
    /* Subnormal man * 2^-24: normalize so the leading bit becomes the implicit one. */
    int shift = 0;
    while (!(man & 0x400u)) {
        man <<= 1;
        shift++;
    }
    return sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3ffu) << 13);
}

/* Round man >> shift to nearest even (shift in 1..31). */
static inline uint32_t shift_rne(uint32_t man, int shift)
{
    uint32_t r = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return r + (rem > half || (rem == half && (r & 1u)));
}

static inline uint16_t f32_to_f16(uint32_t x)
{
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) { /* NaN */
        uint16_t man = (uint16_t)((ax >> 13) & 0x3ffu);
        return (uint16_t)(sign | 0x7c00u | (man ? man : 0x200u));
    }
    if (ax >= 0x477ff000u) /* >= 65520 = halfway between 65504 (odd mantissa) and 2^16: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) /* >= 2^-14: normal; rebias 127 -> 15, carries are correct */
        return (uint16_t)(sign | shift_rne(ax - 0x38000000u, 13));
    if (ax <= 0x33000000u) /* <= 2^-25: half the smallest subnormal, ties to even zero */
        return sign;
    /* Subnormal result in units of 2^-24: (1.man * 2^(e-127)) / 2^-24 = man24 >> (126 - e). */
    uint32_t e = ax >> 23, man = (ax & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | shift_rne(man, (int)(126u - e))); /* may round up to 0x400: fine */
}

void hyla_dtype_to_f32(float *dst, const void *src, hyla_dtype dt, size_t n)
{
    const unsigned char *p = src;
    switch (dt) {
    case HYLA_DT_F32:
        memmove(dst, src, n * 4);
        return;
    case HYLA_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bits_to_f32((uint32_t)h << 16);
        }
        return;
    case HYLA_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bits_to_f32(f16_to_f32_bits(h));
        }
        return;
    }
    HYLA_ASSERT(!"invalid hyla_dtype");
}

void hyla_dtype_from_f32(void *dst, const float *src, hyla_dtype dt, size_t n)
{
    unsigned char *p = dst;
    switch (dt) {
    case HYLA_DT_F32:
        memmove(dst, src, n * 4);
        return;
    case HYLA_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = hyla_bf16_from_bits(f32_to_bits(src[i]));
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    case HYLA_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = f32_to_f16(f32_to_bits(src[i]));
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    }
    HYLA_ASSERT(!"invalid hyla_dtype");
}

bool hyla_st_tensor_nbytes(int ndim, const int64_t *shape, size_t esize, size_t *out)
{
    size_t n = esize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX || __builtin_mul_overflow(n, (size_t)shape[i], &n))
            return false;
    }
    *out = n;
    return true;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* ---- the tensor table -------------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

const hyla_st_tensor *hyla_st_find(const hyla_st_set *s, const char *name)
{
    if (!s->n_slots)
        return NULL;
    size_t mask = s->n_slots - 1;
    for (size_t i = (size_t)fnv1a(name) & mask;; i = (i + 1) & mask) { /* load <= 1/2: terminates */
        size_t v = s->slots[i];
        if (!v)
            return NULL;
        if (!strcmp(s->tensors[v - 1].name, name))
            return &s->tensors[v - 1];
    }
}

static void slot_insert(size_t *slots, size_t n_slots, const char *name, size_t index)
{
    size_t mask = n_slots - 1, i = (size_t)fnv1a(name) & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = index + 1;
}

/* Append *t (its name already pointing into a file's names block). */
static int add_tensor(hyla_st_set *s, const hyla_st_tensor *t)
{
    const hyla_st_tensor *old = hyla_st_find(s, t->name);
    if (old) {
        const char *path = s->files[t->file].path;
        if (old->file == t->file)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: duplicate tensor '%s'", path, t->name);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' is also in %s", path, t->name,
                              s->files[old->file].path);
    }
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? 2 * s->cap_tensors : 256;
        hyla_st_tensor *nt = realloc(s->tensors, cap * sizeof *nt);
        if (!nt)
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for the tensor table", s->files[t->file].path);
        s->tensors = nt;
        s->cap_tensors = cap;
    }
    if (2 * (s->n_tensors + 1) > s->n_slots) {
        size_t ns = s->n_slots ? 2 * s->n_slots : 512;
        size_t *slots = calloc(ns, sizeof *slots);
        if (!slots)
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for the tensor table", s->files[t->file].path);
        for (size_t i = 0; i < s->n_tensors; i++)
            slot_insert(slots, ns, s->tensors[i].name, i);
        free(s->slots);
        s->slots = slots;
        s->n_slots = ns;
    }
    s->tensors[s->n_tensors] = *t;
    slot_insert(s->slots, s->n_slots, t->name, s->n_tensors);
    s->n_tensors++;
    return HYLA_OK;
}

size_t hyla_st_count(const hyla_st_set *s) { return s->n_tensors; }

const hyla_st_tensor *hyla_st_at(const hyla_st_set *s, size_t i) { return i < s->n_tensors ? &s->tensors[i] : NULL; }

void hyla_st_close(hyla_st_set *s)
{
    for (int i = 0; i < s->n_files; i++) {
        hyla_st_file *f = &s->files[i];
        if (f->map)
            munmap((void *)f->map, f->size);
        free(f->path);
        free(f->names);
    }
    free(s->files);
    free(s->tensors);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

/* ---- header parsing ---------------------------------------------------------------------------- */

/* A JSON number that is an exact non-negative integer (<= 2^53). */
static bool json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return false;
    double d = j->valuedouble;
    if (!(d >= 0.0 && d <= HYLA_ST_JSON_MAX_EXACT) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static int parse_dtype(const char *path, const char *name, const cJSON *j, hyla_dtype *out)
{
    static const char *const unsupported[] = {"F64", "I64", "U64", "I32", "U32", "I16", "U16", "I8",
                                              "U8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ",
                                              "F8_E5M2FNUZ", "F6_E2M3", "F6_E3M2", "F4", "C64", "C128"};
    if (!cJSON_IsString(j))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': missing or non-string 'dtype'", path, name);
    const char *d = j->valuestring;
    static const hyla_dtype ok[] = {HYLA_DT_F32, HYLA_DT_BF16, HYLA_DT_F16};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(d, hyla_dtype_name(ok[i]))) {
            *out = ok[i];
            return HYLA_OK;
        }
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!strcmp(d, unsupported[i]))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': unsupported dtype '%s' (hyla reads F32, BF16, F16)",
                                  path, name, d);
    return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", path, name, d);
}

static int parse_shape(const char *path, const char *name, const cJSON *j, hyla_st_tensor *t)
{
    if (!cJSON_IsArray(j))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': missing or non-array 'shape'", path, name);
    int nd = cJSON_GetArraySize(j);
    if (nd > HYLA_ST_MAX_NDIM)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': shape has %d dims (at most %d)", path, name, nd,
                              HYLA_ST_MAX_NDIM);
    t->ndim = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        uint64_t v;
        if (!json_uint(e, &v))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                                  name, t->ndim);
        t->shape[t->ndim++] = (int64_t)v;
    }
    return HYLA_OK;
}

/* Parse one header entry into *t (the caller sets name and file); t->data points into `data`. */
static int parse_entry(const char *path, const cJSON *item, const unsigned char *data, size_t data_size,
                       hyla_st_tensor *t)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
    HYLA_TRY(parse_dtype(path, name, cJSON_GetObjectItemCaseSensitive(item, "dtype"), &t->dtype));
    HYLA_TRY(parse_shape(path, name, cJSON_GetObjectItemCaseSensitive(item, "shape"), t));
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    uint64_t b, e;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &e))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' is not [begin, end] of non-negative integers",
                              path, name);
    if (b > e)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] has begin > end", path, name,
                              (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu is past the data block (%zu bytes)",
                              path, name, (unsigned long long)e, data_size);
    char shp[160];
    shape_str(shp, sizeof shp, t->ndim, t->shape);
    if (!hyla_st_tensor_nbytes(t->ndim, t->shape, hyla_dtype_size(t->dtype), &t->nbytes))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s': size of shape %s overflows", path, name, shp);
    if (e - b != t->nbytes)
        return hyla_error_set(HYLA_ERR_FORMAT,
                              "%s: tensor '%s': data_offsets span %llu bytes but shape %s of %s needs %zu", path, name,
                              (unsigned long long)(e - b), shp, hyla_dtype_name(t->dtype), t->nbytes);
    t->data = data + b;
    return HYLA_OK;
}

static int check_metadata(const char *path, const cJSON *meta)
{
    if (!cJSON_IsObject(meta))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: '__metadata__' is not a JSON object", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, meta) {
        if (!cJSON_IsString(e))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: '__metadata__' field '%s' is not a string", path, e->string);
    }
    return HYLA_OK;
}

typedef struct {
    size_t begin, end, index;
} span;

static int cmp_span(const void *pa, const void *pb)
{
    const span *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    return (a->end > b->end) - (a->end < b->end);
}

/* Tensors [first, s->n_tensors) all come from one file whose data block starts at `data`. */
static int check_overlaps(const hyla_st_set *s, const char *path, size_t first, const unsigned char *data)
{
    size_t n = s->n_tensors - first;
    if (n < 2)
        return HYLA_OK;
    span *sp = malloc(n * sizeof *sp);
    if (!sp)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        const hyla_st_tensor *t = &s->tensors[first + i];
        size_t b = (size_t)((const unsigned char *)t->data - data);
        sp[i] = (span){b, b + t->nbytes, first + i};
    }
    qsort(sp, n, sizeof *sp, cmp_span);
    int st = HYLA_OK;
    size_t max_end = 0, holder = SIZE_MAX;
    for (size_t i = 0; i < n && st == HYLA_OK; i++) {
        if (sp[i].begin == sp[i].end) /* empty tensors overlap nothing */
            continue;
        if (holder != SIZE_MAX && sp[i].begin < max_end)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data block", path,
                                s->tensors[holder].name, s->tensors[sp[i].index].name);
        if (sp[i].end > max_end) {
            max_end = sp[i].end;
            holder = sp[i].index;
        }
    }
    free(sp);
    return st;
}

/* Decode the header of s->files[fi] (already mapped) and add its tensors. */
static int parse_header(hyla_st_set *s, int fi, const cJSON *root, const unsigned char *data, size_t data_size)
{
    hyla_st_file *f = &s->files[fi];
    size_t names_len = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) names_len += strlen(item->string) + 1;
    f->names = malloc(names_len ? names_len : 1);
    if (!f->names)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for tensor names", f->path);
    char *np = f->names;
    size_t first = s->n_tensors;
    bool seen_meta = false;
    cJSON_ArrayForEach(item, root) {
        if (!strcmp(item->string, "__metadata__")) {
            if (seen_meta)
                return hyla_error_set(HYLA_ERR_FORMAT, "%s: duplicate '__metadata__'", f->path);
            seen_meta = true;
            HYLA_TRY(check_metadata(f->path, item));
            continue;
        }
        hyla_st_tensor t = {0};
        HYLA_TRY(parse_entry(f->path, item, data, data_size, &t));
        size_t len = strlen(item->string) + 1;
        memcpy(np, item->string, len);
        t.name = np;
        np += len;
        t.file = fi;
        HYLA_TRY(add_tensor(s, &t));
    }
    return check_overlaps(s, f->path, first, data);
}

static int parse_file(hyla_st_set *s, int fi)
{
    const hyla_st_file *f = &s->files[fi];
    const unsigned char *m = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | m[i];
    /* The messages give sizes only, never the 8 bytes themselves: a shard may be a symlink to
     * any file, and its first bytes are not ours to print. */
    if (n > f->size - 8)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: not a safetensors file: its 8-byte header length runs past the end "
                              "of the file (%zu bytes)", f->path, f->size);
    if (n > HYLA_ST_MAX_HEADER)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: header length exceeds the %zu-byte limit", f->path,
                              (size_t)HYLA_ST_MAX_HEADER);
    /* Parse a NUL-terminated copy: older cJSON versions can read one byte past a length-bounded
     * buffer on an unterminated string, and the mapping may end right there. */
    char *text = malloc((size_t)n + 1);
    if (!text)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for a %llu-byte header", f->path,
                              (unsigned long long)n);
    memcpy(text, m + 8, (size_t)n);
    text[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    int st = HYLA_OK;
    if (!root) {
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: header is not valid JSON", f->path);
    } else {
        for (const char *p = end; p < text + n && st == HYLA_OK; p++)
            if (!strchr(" \t\r\n", *p) || !*p)
                st = hyla_error_set(HYLA_ERR_FORMAT, "%s: trailing bytes after the header JSON (at header byte %zu)",
                                    f->path, (size_t)(p - text));
        if (st == HYLA_OK && !cJSON_IsObject(root))
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: header JSON is not an object", f->path);
        if (st == HYLA_OK)
            st = parse_header(s, fi, root, m + 8 + n, f->size - 8 - (size_t)n);
    }
    cJSON_Delete(root);
    free(text);
    return st;
}

/* Map `path`, append it to s->files and add its tensors. */
static int add_file(hyla_st_set *s, const char *path)
{
    hyla_st_file *files = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *files);
    if (!files)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    s->files = files;
    hyla_st_file *f = &files[s->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path)))
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    int fi = s->n_files++;
    int fd;
    size_t size;
    HYLA_TRY(hyla_open_regular(path, &fd, &size));
    if (size < 8) {
        close(fd);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: file is %zu bytes, too short for a safetensors header", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot mmap: %s", path, strerror(map_errno));
    f->map = map;
    f->size = size;
    return parse_file(s, fi);
}

int hyla_st_open_file(hyla_st_set *s, const char *path)
{
    memset(s, 0, sizeof *s);
    int st = add_file(s, path);
    if (st != HYLA_OK)
        hyla_st_close(s);
    return st;
}

/* ---- sharded index ----------------------------------------------------------------------------- */

int hyla_st_cmp_names(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static bool plain_file_name(const char *n) { return n[0] && !strchr(n, '/') && !strstr(n, ".."); }

/* Collect the sorted distinct shard names of weight_map into *out (views into the JSON). */
static int index_shards(const char *ipath, const cJSON *wm, const char ***out, size_t *n_out)
{
    size_t n = (size_t)cJSON_GetArraySize(wm);
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", ipath);
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring)) {
            free(names);
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: weight_map entry for tensor '%s' is not a plain shard file name",
                                  ipath, e->string);
        }
        names[k++] = e->valuestring;
    }
    qsort(names, k, sizeof *names, hyla_st_cmp_names);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (!u || strcmp(names[u - 1], names[i]))
            names[u++] = names[i];
    *out = names;
    *n_out = u;
    return HYLA_OK;
}

/* Every weight_map entry is in its named shard, once; every shard tensor is in weight_map. */
static int index_cross_check(const hyla_st_set *s, const char *ipath, const cJSON *wm, const char **shards,
                             size_t n_shards)
{
    unsigned char *listed = calloc(s->n_tensors ? s->n_tensors : 1, 1);
    if (!listed)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", ipath);
    int st = HYLA_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        const char **sh = bsearch(&e->valuestring, shards, n_shards, sizeof *shards, hyla_st_cmp_names);
        HYLA_ASSERT(sh);
        int fi = (int)(sh - shards);
        const hyla_st_tensor *t = hyla_st_find(s, e->string);
        if (!t)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' is listed for shard '%s' but is not in it", ipath,
                                e->string, e->valuestring);
        else if (t->file != fi)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' is listed for shard '%s' but is stored in %s", ipath,
                                e->string, e->valuestring, s->files[t->file].path);
        else if (listed[t - s->tensors]++)
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' is listed twice in weight_map", ipath, e->string);
        if (st != HYLA_OK)
            break;
    }
    for (size_t i = 0; i < s->n_tensors && st == HYLA_OK; i++)
        if (!listed[i])
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor '%s' in %s is not listed in weight_map", ipath,
                                s->tensors[i].name, s->files[s->tensors[i].file].path);
    free(listed);
    return st;
}

static int open_index(hyla_st_set *s, const char *dir, const char *ipath)
{
    char *text;
    size_t len;
    HYLA_TRY(hyla_read_text_file(ipath, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: not valid JSON", ipath);
    const char **shards = NULL;
    size_t n_shards = 0;
    int st = HYLA_OK;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm))
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: missing or non-object 'weight_map'", ipath);
    if (st == HYLA_OK)
        st = index_shards(ipath, wm, &shards, &n_shards);
    for (size_t i = 0; i < n_shards && st == HYLA_OK; i++) {
        char path[4096];
        if ((st = hyla_path_join(path, sizeof path, dir, shards[i])) == HYLA_OK &&
            (st = add_file(s, path)) != HYLA_OK) {
            char inner[1024];
            snprintf(inner, sizeof inner, "%s", hyla_error_message());
            st = hyla_error_set(st, "%s: shard '%s': %s", ipath, shards[i], inner);
        }
    }
    if (st == HYLA_OK)
        st = index_cross_check(s, ipath, wm, shards, n_shards);
    free(shards);
    cJSON_Delete(root);
    return st;
}

int hyla_st_open(hyla_st_set *s, const char *dir)
{
    memset(s, 0, sizeof *s);
    char path[4096];
    HYLA_TRY(hyla_path_join(path, sizeof path, dir, HYLA_ST_INDEX_NAME));
    int st;
    if (access(path, F_OK) == 0) { /* whatever it is: a FIFO or a directory is refused when opened */
        st = open_index(s, dir, path);
    } else {
        HYLA_TRY(hyla_path_join(path, sizeof path, dir, HYLA_ST_SINGLE_NAME));
        if (access(path, F_OK) == 0)
            st = add_file(s, path);
        else
            st = hyla_error_set(HYLA_ERR_IO, "%s: neither " HYLA_ST_INDEX_NAME " nor " HYLA_ST_SINGLE_NAME " found", dir);
    }
    if (st != HYLA_OK)
        hyla_st_close(s);
    return st;
}
