/* ggml's tensor types (the storage of a GGUF file's tensors) and products with weights stored in
 * them, read in place.
 *
 * Block formats (ggml-common.h; every type stores a row of ne[0] values as ne[0] / block_values
 * blocks, a block's bytes little-endian, f16 = IEEE half):
 *   F32, F16, BF16  one value per element
 *   Q8_0   32 values, 34 bytes: f16 d; int8 q[32]                     x = d q
 *   Q4_0   32 values, 18 bytes: f16 d; u8 qs[16]                      x[j] = d ((qs[j] & 15) - 8),
 *                                                                     x[j + 16] = d ((qs[j] >> 4) - 8)
 *   Q4_1   32 values, 20 bytes: f16 d, m; u8 qs[16]                   x = d q + m, q 4 bits as Q4_0's
 *   Q5_0   32 values, 22 bytes: f16 d; u8 qh[4]; u8 qs[16]            x = d (q - 16), q = 4 bits | fifth bit
 *                                                                     (bit j of qh, le u32, for value j)
 *   Q5_1   32 values, 24 bytes: f16 d, m; u8 qh[4]; u8 qs[16]         x = d q + m
 *   IQ4_NL 32 values, 18 bytes: f16 d; u8 qs[16]                      x = d table[q] (a fixed non-linear
 *                                                                     16-entry table), q as Q4_0's
 *   IQ4_XS 256 values, 136 bytes: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]: 8 sub-blocks of 32
 *                                                                     with a 6-bit scale each (stored + 32);
 *                                                                     x = d (ls - 32) table[q], q as IQ4_NL's
 * (llama.cpp's quantizer writes Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL for tensors whose rows are not
 * whole 256-value blocks when a K-quant was asked for.)
 *   Q4_K  256 values, 144 bytes: f16 d, dmin; u8 scales[12]; u8 qs[128]: 8 sub-blocks of 32 with
 *         6-bit scale sc and min m each (packed in scales[12]); x = d sc q - dmin m, q 4 bits
 *   Q5_K  256 values, 176 bytes: f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]: Q4_K with a
 *         fifth bit per value in qh
 *   Q2_K  256 values, 84 bytes: u8 scales[16]; u8 qs[64]; f16 d, dmin: 16 groups of 16 with a 4-bit
 *         scale sc and min m each; x = d sc q - dmin m, q 2 bits
 *   Q3_K  256 values, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d: 16 groups of 16 with
 *         a 6-bit scale each (stored + 32); x = d sc (q - 4), q 3 bits (the third, inverted, in hmask)
 *   Q6_K  256 values, 210 bytes: u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d: 16 sub-blocks of 16
 *         with an 8-bit scale each; x = d sc (q - 32), q 6 bits
 * Dequantization is exactly ggml's dequantize_row_* (the same products in the same order). */
#ifndef HYLA_CORE_QUANT_H
#define HYLA_CORE_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    HYLA_GGML_F32 = 0,
    HYLA_GGML_F16 = 1,
    HYLA_GGML_Q4_0 = 2,
    HYLA_GGML_Q4_1 = 3,
    HYLA_GGML_Q5_0 = 6,
    HYLA_GGML_Q5_1 = 7,
    HYLA_GGML_Q8_0 = 8,
    HYLA_GGML_Q2_K = 10,
    HYLA_GGML_Q3_K = 11,
    HYLA_GGML_Q4_K = 12,
    HYLA_GGML_Q5_K = 13,
    HYLA_GGML_Q6_K = 14,
    HYLA_GGML_IQ4_NL = 20,
    HYLA_GGML_IQ4_XS = 23,
    HYLA_GGML_BF16 = 30,
} hyla_ggml_type;

#define HYLA_Q8_0_BLOCK 32
#define HYLA_QK_K 256

/* 1 when hyla reads type t (a ggml type id from a file); 0 otherwise. */
int hyla_ggml_type_supported(uint32_t t);
/* "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_K",
 * "Q5_K", "Q6_K";
 * "?" otherwise. */
const char *hyla_ggml_type_name(hyla_ggml_type t);
/* ggml's kvalues_iq4nl: the 16 levels of IQ4_NL / IQ4_XS. */
extern const int8_t hyla_iq4_values[16];
/* Sub-block j's scale of an IQ4_XS block b, minus 32: nibble j % 2 of scales_l[j / 2] (byte 4 + j / 2) |
 * bits 2 j, 2 j + 1 of scales_h (bytes 2-3, little endian) << 4. */
static inline int hyla_iq4_xs_scale(const unsigned char *b, int j)
{
    unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
    return (((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4)) - 32;
}
/* The 16 scales of a Q3_K block's 12 packed scale bytes, minus 32 (ggml's kmask unpacking). */
void hyla_k3_scales(const unsigned char *packed, int8_t sc[16]);
/* Values per block and bytes per block (1 and 4/2 for F32/F16/BF16); 0 for an unknown type. */
int64_t hyla_ggml_block_values(hyla_ggml_type t);
int64_t hyla_ggml_block_bytes(hyla_ggml_type t);
/* Bytes of n values of type t (n a multiple of the block size). */
size_t hyla_ggml_bytes(hyla_ggml_type t, size_t n);
/* The 8 6-bit scales and 8 mins packed in a Q4_K / Q5_K block's 12 scale bytes (ggml's
 * get_scale_min_k4 for j = 0..7). */
void hyla_k4_scales(const unsigned char *packed, uint8_t sc[8], uint8_t m[8]);
/* The same as four words, the way a SIMD kernel wants them: the bytes of w[0], w[1] (little
 * endian) are sc[0..7], those of w[2], w[3] m[0..7]. Scale j < 4 is the low 6 bits of byte j (min:
 * byte j + 4); j >= 4 takes its low 4 bits from byte j + 4 (min: its high 4 bits) and its top 2
 * bits from the top of byte j - 4 (min: byte j). */
static inline void hyla_k4_scales_words(const unsigned char *packed, uint32_t w[4])
{
    uint32_t a = (uint32_t)packed[0] | (uint32_t)packed[1] << 8 | (uint32_t)packed[2] << 16 | (uint32_t)packed[3] << 24;
    uint32_t b = (uint32_t)packed[4] | (uint32_t)packed[5] << 8 | (uint32_t)packed[6] << 16 | (uint32_t)packed[7] << 24;
    uint32_t c = (uint32_t)packed[8] | (uint32_t)packed[9] << 8 | (uint32_t)packed[10] << 16 | (uint32_t)packed[11] << 24;
    w[0] = a & 0x3F3F3F3Fu;
    w[1] = (c & 0x0F0F0F0Fu) | ((a >> 6) & 0x03030303u) << 4;
    w[2] = b & 0x3F3F3F3Fu;
    w[3] = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 6) & 0x03030303u) << 4;
}
/* dst[0..n) = the values of the n stored ones at src (n a multiple of the block size). */
void hyla_ggml_to_f32(hyla_ggml_type t, float *dst, const void *src, int64_t n);

/* A weight matrix [rows, cols] stored in a ggml type, its rows anywhere (each row is contiguous
 * blocks; rows may be a permutation or a merge of a file's tensors): row[r] is row r's first
 * byte (row_type[r] its type when rows differ). col_map, when set, says the stored columns are permuted: stored column j holds logical
 * column col_map[j], and a product reads x[col_map[j]] against it. */
typedef struct hyla_qmat_s {
    hyla_ggml_type type;       /* of every row, unless row_type */
    int64_t rows, cols;
    const unsigned char **row; /* [rows] */
    unsigned char *row_type;   /* [rows] each row's hyla_ggml_type (a parameter merged from tensors of
                                * different types, e.g. gate and up of a mixed-type file), or NULL */
    int32_t *col_map;          /* [cols] or NULL */
} hyla_qmat;

/* Rows up to this go through the streaming kernel (each stored block read once for all rows);
 * more: blocks of rows dequantized to fp32 and multiplied by the sgemm. */
#define HYLA_QUANT_SKINNY_M 8

/* Decode-sized products with Q4_K / Q5_K / Q6_K weights round the activations to int8 per block
 * of 256 first, as llama.cpp does (Q8_K), Q8_0 weights per block of 32 (llama.cpp's Q8_0, the
 * prefill GEMM's rounding), and multiply with VNNI (core/quant_kernels.h), when the CPU has it and
 * this is 1 (the default); 0: fp32 activations for every type. The other types (Q4_0, F16, ...)
 * always keep fp32 activations. */
extern int hyla_quant_int8_activations;

/* y[n, out] = x[n, in] W[row0 .. row0 + out, :]^T, fp32 x and y (in = W->cols). scratch:
 * hyla_linear_q_scratch_floats(n, in) floats. */
int64_t hyla_linear_q_scratch_floats(int64_t n, int64_t in);
void hyla_linear_q(float *y, const float *x, const hyla_qmat *W, int64_t row0, int64_t n, int64_t in, int64_t out,
                   float *scratch);
/* A set of decode-sized products on one matrix, e.g. the routed experts of an MoE layer (W their
 * stacked rows): y_j[n_j, out] = x_j[n_j, in] W[row0_j .. row0_j + out, :]^T for j < count, each
 * n_j <= HYLA_QUANT_SKINNY_M, count <= HYLA_QITEMS_MAX. All items' rows go through one parallel
 * loop (one region instead of one per item); each y_j equals hyla_linear_q's for item j alone, bit
 * for bit (the kernels do the same operations per row whatever else runs). */
#define HYLA_QITEMS_MAX 64
typedef struct {
    float *y;
    const float *x;
    int64_t n, row0;
} hyla_qitem;
/* Scratch floats for items of `rows` rows in all. */
int64_t hyla_linear_q_items_scratch_floats(int64_t rows, int64_t count, int64_t in);
void hyla_linear_q_items(const hyla_qmat *W, const hyla_qitem *items, int64_t count, int64_t in, int64_t out,
                         float *scratch);
/* Products of the same activations with several matrices (a layer's input projections):
 * y_j[n, out_j] = x[n, in] W_j[row0_j .. row0_j + out_j, :]^T for j < count, n <= HYLA_QUANT_SKINNY_M,
 * count <= HYLA_FANOUT_MAX, in one parallel loop whose threads share the rows by stored bytes; x is
 * prepared (rounded to int8) once for every matrix that takes it alike. Each y_j equals
 * hyla_linear_q's for W_j alone, bit for bit. scratch: hyla_linear_q_fanout_scratch_floats. */
#define HYLA_FANOUT_MAX 4
typedef struct {
    const hyla_qmat *W;
    float *y; /* [n, out] */
    int64_t row0, out;
} hyla_qtarget;
int64_t hyla_linear_q_fanout_scratch_floats(int64_t n, int64_t count, int64_t in);
void hyla_linear_q_fanout(const hyla_qtarget *targets, int64_t count, const float *x, int64_t n, int64_t in,
                          float *scratch);
/* Stored bytes of W's rows. */
size_t hyla_qmat_bytes(const hyla_qmat *W);
/* dst[0..cols) = logical row r of W (an embedding lookup). */
void hyla_qmat_row(const hyla_qmat *W, int64_t r, float *dst);

#endif
