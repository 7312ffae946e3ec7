/* GGUF (version 3) writing: the file format llama.cpp and Ollama load.
 *
 * Layout: "GGUF", version 3, tensor count (u64), key-value count (u64); the key-value pairs
 * (key string, value type u32, value); one info per tensor (name, n_dims u32, dims u64 in ggml
 * order -- fastest-varying first, the reverse of a PyTorch shape --, ggml type u32, data offset
 * u64 relative to the data block); padding to general.alignment (32); the data block, each
 * tensor's bytes starting at a multiple of 32. Strings are a u64 length and the bytes.
 *
 * Tensor types written: F32, F16, BF16 and Q8_0 (blocks of 32 values: an f16 scale d =
 * max|x| / 127 and 32 int8 q = round(x / d), rounding half away from zero, as ggml's
 * quantize_row_q8_0_ref and the gguf Python package do).
 *
 * The writer collects the metadata and tensor infos in memory, then streams the file through
 * io/fileio.h's atomic writer, asking for each tensor's bytes in order: a failed export never
 * leaves a partial file in place of a good one. */
#ifndef HYLA_IO_GGUF_H
#define HYLA_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/quant.h" /* hyla_ggml_type, block sizes */
#include "io/gguf_read.h" /* hyla_gguf_kv */

#define HYLA_GGUF_ALIGNMENT 32

/* Convert n float32 values to type t (F32, F16, BF16, Q8_0 or Q6_K; n a whole number of blocks;
 * f16/bf16 round to nearest even; the quantized types as llama.cpp's reference quantizers,
 * io/gguf_quantize.c). */
void hyla_ggml_from_f32(hyla_ggml_type t, void *dst, const float *src, size_t n);

typedef struct hyla_gguf_writer hyla_gguf_writer;

/* A new, empty writer (NULL when out of memory). */
hyla_gguf_writer *hyla_gguf_new(void);
void hyla_gguf_free(hyla_gguf_writer *w);

/* Metadata. Errors (out of memory) are remembered and reported by hyla_gguf_write. */
void hyla_gguf_kv_str(hyla_gguf_writer *w, const char *key, const char *value);
void hyla_gguf_kv_u32(hyla_gguf_writer *w, const char *key, uint32_t value);
void hyla_gguf_kv_f32(hyla_gguf_writer *w, const char *key, float value);
void hyla_gguf_kv_bool(hyla_gguf_writer *w, const char *key, int value);
void hyla_gguf_kv_str_array(hyla_gguf_writer *w, const char *key, const char *const *values, const size_t *lens, size_t n);
void hyla_gguf_kv_i32_array(hyla_gguf_writer *w, const char *key, const int32_t *values, size_t n);
void hyla_gguf_kv_bool_array(hyla_gguf_writer *w, const char *key, const unsigned char *values, size_t n);
/* A key-value pair of a parsed file (io/gguf_read.h), its value's bytes as that file holds them. */
void hyla_gguf_kv_copy(hyla_gguf_writer *w, const hyla_gguf_kv *kv);

/* Declare a tensor: ne[0..n_dims) in ggml order (ne[0] = row length), all >= 1. Q8_0 needs
 * ne[0] % 32 == 0. Returns its index (tensors are written in declaration order), or -1 with
 * the error set. */
int hyla_gguf_add_tensor(hyla_gguf_writer *w, const char *name, int n_dims, const int64_t *ne, hyla_ggml_type type);
size_t hyla_gguf_tensor_count(const hyla_gguf_writer *w);

/* Fill `dst` (nbytes = the tensor's size) with tensor `index`'s bytes; return HYLA_OK or an error. */
typedef int (*hyla_gguf_fill_fn)(void *ctx, size_t index, void *dst, size_t nbytes);

/* Write the file atomically; `fill` is called once per tensor, in order. */
int hyla_gguf_write(const hyla_gguf_writer *w, const char *path, hyla_gguf_fill_fn fill, void *ctx);

#endif
