/* The streaming dot kernels of core/quant.c's decode path (core/quant_avx512.c): for a stored row
 * of K values of one type and n <= HYLA_QUANT_SKINNY_M activation rows x[i * ldx ..], y[i * ldy] =
 * sum_k w_k x[i][k], where w_k is the value ggml's dequantization gives (up to the rounding of
 * its last operation: the kernels form w with one fused multiply-add where ggml rounds a product
 * and a difference). Each block is widened in registers, never stored. Internal to core/. */
#ifndef HYLA_CORE_QUANT_KERNELS_H
#define HYLA_CORE_QUANT_KERNELS_H

#include <stdint.h>

#include "core/quant.h"

typedef void (*hyla_qdot_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row, int64_t K);

/* The kernel for type t and n rows (1..HYLA_QUANT_SKINNY_M); NULL when there is none for t or
 * the CPU lacks AVX-512 (the caller falls back to dequantizing pieces). */
hyla_qdot_fn hyla_qdot_avx512(hyla_ggml_type t, int64_t n);

#endif
