/* GGUF reading: a .gguf file mapped read-only, its header, metadata and tensor infos parsed and
 * checked against the file before anything is used.
 *
 * Checked (each failure a one-line error naming the file and what is wrong): the magic; version
 * 2 or 3; tensor and key-value counts that the remaining bytes can hold; every string and array
 * inside the file (array lengths times element sizes without overflow; arrays of arrays are
 * refused); known value types; no duplicate key or tensor name; general.alignment a power of two
 * up to 2^20; per tensor 1..4 dimensions each >= 1 with a product that fits, a type hyla reads,
 * a row length that is a multiple of the type's block, an offset aligned and the bytes inside the
 * data block, and no two tensors overlapping. After a successful open every pointer handed out
 * lies inside the mapping.
 *
 * Strings are not NUL-terminated in the file: they come back as (pointer, length). */
#ifndef HYLA_IO_GGUF_READ_H
#define HYLA_IO_GGUF_READ_H

#include <stddef.h>
#include <stdint.h>

#include "core/quant.h"

/* GGUF value types */
enum {
    HYLA_GGUF_U8 = 0, HYLA_GGUF_I8 = 1, HYLA_GGUF_U16 = 2, HYLA_GGUF_I16 = 3, HYLA_GGUF_U32 = 4, HYLA_GGUF_I32 = 5,
    HYLA_GGUF_F32 = 6, HYLA_GGUF_BOOL = 7, HYLA_GGUF_STRING = 8, HYLA_GGUF_ARRAY = 9, HYLA_GGUF_U64 = 10,
    HYLA_GGUF_I64 = 11, HYLA_GGUF_F64 = 12
};

typedef struct {
    const char *key;            /* NUL-terminated copy, owned by the file */
    uint32_t type;              /* HYLA_GGUF_* */
    uint32_t elem_type;         /* arrays: the elements' type */
    uint64_t count;             /* arrays: element count; else 1 */
    const unsigned char *value; /* the value's (or the first element's) bytes in the mapping */
    const unsigned char **strs; /* string arrays: [count] each element's length field, else NULL */
} hyla_gguf_kv;

typedef struct {
    const char *name;           /* NUL-terminated copy, owned by the file */
    int n_dims;
    int64_t ne[4];              /* ggml order: ne[0] = row length; unused dims 1 */
    hyla_ggml_type type;
    uint64_t offset;            /* relative to the data block */
    size_t nbytes;
    const unsigned char *data;  /* in the mapping */
} hyla_gguf_tensor;

typedef struct hyla_gguf_file hyla_gguf_file;

/* Bytes of one stored value of a fixed-size type (HYLA_GGUF_*); 0 for a string, an array or an
 * unknown type. */
int hyla_gguf_value_size(uint32_t type);

/* Map and parse `path`. */
int hyla_gguf_open(hyla_gguf_file **out, const char *path);
/* 1 when `path` names a GGUF file (ends in ".gguf"): what opens as a GGUF model or vocabulary. */
int hyla_is_gguf_path(const char *path);
/* Parse bytes already in memory (not copied: they must outlive the result); `label` names them in
 * errors. For the fuzz harness and tests. */
int hyla_gguf_parse(hyla_gguf_file **out, const void *bytes, size_t len, const char *label);
void hyla_gguf_close(hyla_gguf_file *f);

const char *hyla_gguf_path(const hyla_gguf_file *f);
/* Resident bytes of the parsed file besides its tensors: the header's pages (read while parsing)
 * and the tables built from it (about 64 bytes per key and tensor, a pointer per array string). */
size_t hyla_gguf_metadata_bytes(const hyla_gguf_file *f);
uint32_t hyla_gguf_version(const hyla_gguf_file *f);
size_t hyla_gguf_n_kv(const hyla_gguf_file *f);
const hyla_gguf_kv *hyla_gguf_kv_at(const hyla_gguf_file *f, size_t i);
size_t hyla_gguf_n_tensors(const hyla_gguf_file *f);
const hyla_gguf_tensor *hyla_gguf_tensor_at(const hyla_gguf_file *f, size_t i);

/* Lookups; NULL when absent. */
const hyla_gguf_kv *hyla_gguf_find_kv(const hyla_gguf_file *f, const char *key);
const hyla_gguf_tensor *hyla_gguf_find_tensor(const hyla_gguf_file *f, const char *name);

/* Typed reads of a key: HYLA_OK, or an error naming the file and key when it is absent (unless
 * `required` is 0: then *out keeps its value and HYLA_OK is returned) or of another type.
 * Integers of any integer type are accepted when the value fits. */
int hyla_gguf_get_int(const hyla_gguf_file *f, const char *key, int required, int64_t *out);
int hyla_gguf_get_f64(const hyla_gguf_file *f, const char *key, int required, double *out);
int hyla_gguf_get_bool(const hyla_gguf_file *f, const char *key, int required, int *out);
/* A string value: pointer into the mapping and length. */
int hyla_gguf_get_str(const hyla_gguf_file *f, const char *key, int required, const char **s, size_t *len);

/* Element i of an array kv: integers (any integer or bool type) and strings. */
int64_t hyla_gguf_arr_int(const hyla_gguf_kv *kv, uint64_t i);
const char *hyla_gguf_arr_str(const hyla_gguf_kv *kv, uint64_t i, size_t *len);

#endif
