/* The streaming dot kernels of core/quant.c's decode path (core/quant_avx512.c): for a stored row
 * of K values of one type and n <= HYLA_QUANT_SKINNY_M activation rows x[i * ldx ..], y[i * ldy] =
 * sum_k w_k x[i][k], where w_k is the value ggml's dequantization gives (up to the rounding of
 * its last operation: the kernels form w with one fused multiply-add where ggml rounds a product
 * and a difference). Each block is widened in registers, never stored. Internal to core/. */
#ifndef HYLA_CORE_QUANT_KERNELS_H
#define HYLA_CORE_QUANT_KERNELS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/quant.h"

/* A block's f16 field (exact). */
static inline float hyla_half_at(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Where a Q4_K / Q5_K block keeps its parts: bytes, the quants, the fifth bits (Q5_K). */
#define K4_BYTES(q5) ((q5) ? 176 : 144)
#define K4_QS(q5) ((q5) ? 48 : 16)

typedef void (*hyla_qdot_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row, int64_t K);

/* The kernel for type t and n rows (1..HYLA_QUANT_SKINNY_M); NULL when there is none for t or
 * the CPU lacks AVX-512 (the caller falls back to dequantizing pieces). */
hyla_qdot_fn hyla_qdot_avx512(hyla_ggml_type t, int64_t n);

/* Activations rounded to int8 as llama.cpp rounds them for its K-quant products (Q8_K): per row
 * and block of 256 values, d = max / -127 where max is the value of largest magnitude, q = x / d
 * rounded to nearest (even), capped at 127, so |x - d q| <= |d| / 2; bsums the sums of 16 q.
 * K a multiple of 256. */
typedef struct {
    const int8_t *q;      /* [n][K] */
    const int8_t *q_k4;   /* [n][K] the same in the K-quant order (hyla_qx_k4_order), or NULL */
    const int16_t *sums32; /* [n][K / 32] sums of q per 32 (bsums in pairs), with q_k4; or NULL */
    const float *d_lanes; /* [n][K / 4] Q8_0 decode: the d of each int32 lane's block of 32 (8 lanes a
                           * block, hyla_qx_q8_0_lanes), or NULL */
    const int32_t *offs_lanes; /* [n][K / 4] Q8_0 decode: -128 times the sum of each lane's 4 values of q
                                * (the kernel reads the levels offset by 128), with d_lanes */
    const float *d;       /* [n][K / block] */
    const int16_t *bsums; /* [n][K / 16] */
    int64_t K;
    int block;            /* 256 (Q8_K, hyla_quantize_x) or 32 (Q8_0, hyla_quantize_x_q8_0) */
} hyla_qx;
/* Floats of scratch hyla_quantize_x needs for n rows of K. */
int64_t hyla_qx_floats(int64_t n, int64_t K);
void hyla_quantize_x(hyla_qx *out, const float *x, int64_t n, int64_t K, float *scratch);
/* dst[n][K] = x->q with each block of 256 in the order the Q4_K / Q5_K decode kernels read it --
 * sub-blocks of 32 as 0 2 1 3 4 6 5 7, the order of the low and high nibbles of a block's stored
 * bytes -- and x->q_k4 = dst; after it the sums per 32 (x->sums32). dst: hyla_qx_k4_bytes(n, K). */
void hyla_qx_k4_order(hyla_qx *x, int64_t n, int8_t *dst);
int64_t hyla_qx_k4_bytes(int64_t n, int64_t K);
/* x->d_lanes and x->offs_lanes from a Q8_0 rounding (block 32) laid out in dst: the activations'
 * scale and offset per int32 lane of the Q8_0 decode kernel's vpdpbusd (K a multiple of 64). dst:
 * hyla_qx_q8_0_lanes_bytes(n, K). */
void hyla_qx_q8_0_lanes(hyla_qx *x, int64_t n, void *dst);
int64_t hyla_qx_q8_0_lanes_bytes(int64_t n, int64_t K);
/* The rounding per block of 32 of llama.cpp's Q8_0 activations (its x86 quantize_row_q8_0): d =
 * max |x| / 127 rounded to f16 (as the block stores it), q = x * (127 / max |x|) rounded to
 * nearest, ties to even: what the Q8_0 prefill GEMM multiplies (block = 32). */
void hyla_quantize_x_q8_0(hyla_qx *out, const float *x, int64_t n, int64_t K, float *scratch);
/* Both quantizers run 16 values at a time with AVX-512, giving the scalar code's bits; nonzero:
 * the scalar code (what a CPU without AVX-512 runs; for tests). */
extern int hyla_quantize_x_scalar;

/* y[i * ldy] = sum_k w_k (d q)[i][k] as ggml's vec_dot_q*_K_q8_K computes it: integer products and
 * scales (exact, in int32), d_w d_x and the mins / offsets in fp32 once per block. */
typedef void (*hyla_qdot_i8_fn)(float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row);
/* 1 for the types whose int8 products take activations rounded per 32 (llama.cpp's Q8_0: Q8_0, Q4_0,
 * IQ4_NL), 0 for those that take them per 256 (Q8_K). */
static inline int hyla_q8_0_activations(hyla_ggml_type t)
{
    return t == HYLA_GGML_Q8_0 || t == HYLA_GGML_Q4_0 || t == HYLA_GGML_IQ4_NL;
}
/* For Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (x: Q8_K) and Q8_0, Q4_0, IQ4_NL (x: Q8_0 with its lanes, K a
 * multiple of 64: hyla_q8_0_activations) with AVX-512 VNNI; NULL otherwise. */
hyla_qdot_i8_fn hyla_qdot_i8_avx512(hyla_ggml_type t, int64_t n);
/* y[r] = the n = 1 kernel's value for rows[r], r < 4, bit for bit (the four rows' blocks
 * interleaved): for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS with AVX-512 VNNI; NULL otherwise. */
typedef void (*hyla_qdot_i8_rows4_fn)(float *y, const hyla_qx *x, const unsigned char *const *rows);
hyla_qdot_i8_rows4_fn hyla_qdot_i8_rows4_avx512(hyla_ggml_type t);
/* The Q2_K and Q3_K kernels of both kinds (core/quant_avx512_k23.c; x: Q8_K), which the two functions
 * above hand out for those types: call only where the CPU has AVX-512 VNNI. NULL for other types. */
hyla_qdot_i8_fn hyla_qdot_i8_k23(hyla_ggml_type t, int64_t n);
hyla_qdot_i8_rows4_fn hyla_qdot_i8_rows4_k23(hyla_ggml_type t);
/* The same for IQ4_XS (core/quant_avx512_iq4.c; x: Q8_K), and the one-row / N-row kernels of Q4_0 and
 * IQ4_NL (core/quant_avx512_q4_0.c; x: Q8_0 with its lanes, K a multiple of 64). */
hyla_qdot_i8_fn hyla_qdot_i8_b32(hyla_ggml_type t, int64_t n);
hyla_qdot_i8_fn hyla_qdot_i8_iq4(hyla_ggml_type t, int64_t n);
hyla_qdot_i8_rows4_fn hyla_qdot_i8_rows4_iq4(hyla_ggml_type t);

/* Prefill products with K-quant, IQ4_XS or Q8_0 weights (Q2_K .. Q6_K, IQ4_XS, Q8_0) on VNNI (core/quant_gemm.c):
 * a tile of up to HYLA_QGEMM_TILE weight rows repacked once into levels and scales, then every
 * activation row (rounded as Q8_K, or per 32 for Q8_0) against it, 16 weight rows per vpdpbusd;
 * y[i * ldy + r] for r < nrows. Per row the arithmetic of the decode kernels up to summation order:
 * integer products and scales, then d d_x in fp32. scratch: hyla_qgemm_scratch_floats(K) floats. */
#define HYLA_QGEMM_TILE 256
int hyla_qgemm_supported(hyla_ggml_type t);
int64_t hyla_qgemm_scratch_floats(int64_t K);
void hyla_qgemm_tile(float *y, int64_t ldy, const hyla_qx *x, int64_t n, hyla_ggml_type t,
                     const unsigned char *const *rows, int64_t nrows, float *scratch);

#endif
