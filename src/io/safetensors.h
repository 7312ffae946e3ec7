/* safetensors reading (mmapped, validated) and writing (atomic, optionally sharded).
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON header
 *   {"__metadata__": {...strings...}, "name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...}
 * then the data block; offsets are relative to the start of the data block (byte 8 + N).
 * hyla reads and writes F32, BF16 and F16; other safetensors dtypes are rejected by name.
 *
 * A model directory holds either model.safetensors, or model.safetensors.index.json
 * ({"metadata": {...}, "weight_map": {tensor: shard file}}) plus the shards it names; the index
 * wins when both exist. Host byte order must be little-endian (checked at compile time). */
#ifndef HYLA_IO_SAFETENSORS_H
#define HYLA_IO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- dtypes ---------------------------------------------------------------------------------- */

typedef enum { HYLA_DT_F32, HYLA_DT_BF16, HYLA_DT_F16 } hyla_dtype;

size_t hyla_dtype_size(hyla_dtype dt);        /* bytes per element; 0 for an invalid value */
const char *hyla_dtype_name(hyla_dtype dt);   /* "F32", "BF16", "F16"; "?" for an invalid value */
/* Parse "F32"/"BF16"/"F16" (case-insensitive). HYLA_ERR_ARG with a message on anything else. */
int hyla_dtype_parse(const char *name, hyla_dtype *out);

/* dst[i] = src[i] as float. Exact for every dtype (bf16 and f16 widen without rounding, f16
 * subnormals, infinities and NaN payloads included). src need not be aligned. */
void hyla_dtype_to_f32(float *dst, const void *src, hyla_dtype dt, size_t n);
/* dst[i] = src[i] rounded to dt, round-to-nearest-even; overflow gives +-inf, f16 underflow gives
 * subnormals / signed zero. NaN stays NaN (sign and top payload bits kept, quiet bit set only if
 * the kept payload would be zero). dst need not be aligned. Round trips dt -> f32 -> dt are the
 * identity for every non-NaN pattern (and for NaNs whose payload fits). */
void hyla_dtype_from_f32(void *dst, const float *src, hyla_dtype dt, size_t n);

/* ---- reader ---------------------------------------------------------------------------------- */

#define HYLA_ST_MAX_NDIM 8
#define HYLA_ST_MAX_HEADER ((size_t)100 << 20) /* header JSON larger than this is rejected */
#define HYLA_ST_INDEX_NAME "model.safetensors.index.json"
#define HYLA_ST_SINGLE_NAME "model.safetensors"
#define HYLA_ST_JSON_MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers may not be exact doubles */

typedef struct {
    char *name;         /* owned by the set (one names block per file) */
    hyla_dtype dtype;
    int ndim;           /* 0..HYLA_ST_MAX_NDIM; 0 is a scalar (one element) */
    int64_t shape[HYLA_ST_MAX_NDIM];
    const void *data;   /* view into the mmapped file, valid until hyla_st_close; may be unaligned */
    size_t nbytes;      /* product(shape) * hyla_dtype_size(dtype) */
    int file;           /* index into hyla_st_set.files */
} hyla_st_tensor;

typedef struct {
    char *path;                 /* owned */
    const unsigned char *map;   /* whole file, mapped read-only */
    size_t size;                /* file size in bytes */
    char *names;                /* one block holding the names of this file's tensors */
} hyla_st_file;

typedef struct hyla_st_set_s {
    hyla_st_file *files;        /* [n_files] */
    int n_files;
    hyla_st_tensor *tensors;    /* [n_tensors] in file order, then header order within a file */
    size_t n_tensors, cap_tensors;
    size_t *slots;              /* [n_slots] open addressing on FNV-1a(name): tensor index + 1; 0 empty */
    size_t n_slots;             /* power of two, kept >= 2 * n_tensors */
} hyla_st_set;

/* Open DIR/model.safetensors.index.json and every shard it names (shards are opened in sorted
 * file-name order), or else DIR/model.safetensors. Validates every file completely (see
 * safetensors.c) and, for an index, that it and the shards list exactly the same tensors.
 * On failure returns a negative status with a message naming the file and tensor, and leaves
 * *s empty (hyla_st_close on it is a harmless no-op). */
int hyla_st_open(hyla_st_set *s, const char *dir);
/* Open one safetensors file. Same validation and failure contract as hyla_st_open. */
int hyla_st_open_file(hyla_st_set *s, const char *path);
/* Tensor by exact name, or NULL. The pointer is valid until hyla_st_close. */
const hyla_st_tensor *hyla_st_find(const hyla_st_set *s, const char *name);
size_t hyla_st_count(const hyla_st_set *s);
const hyla_st_tensor *hyla_st_at(const hyla_st_set *s, size_t i); /* i < count; NULL otherwise */
/* Unmap every file and free everything; *s is zeroed. Safe on a zeroed or failed-open set. */
void hyla_st_close(hyla_st_set *s);

/* ---- writer ---------------------------------------------------------------------------------- */

/* Write tensor `index`'s bytes (already in its dtype, product(shape) * dtype size bytes) to dst.
 * Return HYLA_OK or a negative status (set the message with hyla_error_set). */
typedef int (*hyla_st_fill_fn)(void *ctx, size_t index, void *dst);

typedef struct {
    const char *name;   /* not owned; must be unique, non-empty and not "__metadata__" */
    hyla_dtype dtype;
    int ndim;
    int64_t shape[HYLA_ST_MAX_NDIM];
} hyla_st_entry;

/* Write entries[0..n) into the existing directory DIR, tensors in the given order, with header
 * "__metadata__": {"format": "pt"} padded with spaces to a multiple of 8 bytes.
 * If max_shard_bytes == 0 or the total data size fits in max_shard_bytes: DIR/model.safetensors.
 * Else shards DIR/model-00001-of-0000N.safetensors, filled greedily in order (a new shard starts
 * when the next tensor would push a non-empty shard past max_shard_bytes; a tensor larger than
 * the limit gets a shard of its own) and DIR/model.safetensors.index.json with
 * {"metadata": {"total_size": <data bytes>}, "weight_map": {...}}.
 * Every file is first written to DIR/.<name>.tmp.<pid> and fsync'ed; only when all of them are
 * written are they renamed into place (shards first, index last). On any error the temporaries
 * are removed and existing files are untouched (barring a failing rename() in the final step).
 * fill() is called once per tensor, in order, with one scratch buffer sized for the largest tensor.
 * The writer never deletes other files: stale shards, or a stale model.safetensors.index.json
 * (which hyla_st_open prefers over model.safetensors!), are the caller's to remove. */
int hyla_st_write(const char *dir, const hyla_st_entry *entries, size_t n, size_t max_shard_bytes,
                  hyla_st_fill_fn fill, void *ctx);
/* The same, one file DIR/file_name (e.g. adapter_model.safetensors), never sharded. */
int hyla_st_write_named(const char *dir, const char *file_name, const hyla_st_entry *entries, size_t n,
                        hyla_st_fill_fn fill, void *ctx);

/* Internal to src/io/safetensors*.c: product(shape) * esize (false on overflow); strcmp on
 * const char * array elements (qsort). */
bool hyla_st_tensor_nbytes(int ndim, const int64_t *shape, size_t esize, size_t *out);
int hyla_st_cmp_names(const void *a, const void *b);

#endif
