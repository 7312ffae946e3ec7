/* What the AVX-512 VNNI decode kernels share (core/quant_avx512.c: Q8_0, Q4_K, Q5_K, Q6_K;
 * core/quant_avx512_k23.c: Q2_K, Q3_K): their target attributes, the dot of a block's 256 levels
 * with scales per lane against int8 activations, and the scale index of a block of 16-value groups.
 * Internal to core/; include only where HAVE_KERNELS (x86-64, GCC >= 10). */
#ifndef HYLA_CORE_QUANT_VNNI_H
#define HYLA_CORE_QUANT_VNNI_H

#include <immintrin.h>
#include <stdint.h>

#include "core/quant_kernels.h"

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))
#define VNNI_INLINE __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c"), always_inline)) static inline

/* sum over a block's 256 values of s (w . xq) in 16 int32 lanes: w[j] the levels (u8) of values
 * 64 j .. 64 j + 63 in the order of xq, s[j] the int16 scales of their lanes; u8 x s8 pairs to int16
 * (|.| <= 2 * 63 * 127), then times the scales into int32. */
VNNI_INLINE __m512i levels_dot(const __m512i w[4], const __m512i s[4], const int8_t *xq)
{
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(w[j], _mm512_loadu_si512((const void *)(xq + 64 * j))),
                                   s[j]);
    return sumi;
}

/* A block of 16 groups of 16 values in x's order (Q2_K, Q3_K, Q6_K): zmm k of levels_dot holds
 * groups 4 k .. 4 k + 3, one per 128-bit lane, so its int16 scales are one vpermw of the block's 16
 * scales (as int16) by row k of this table. */
#define HYLA_REP8(v) v, v, v, v, v, v, v, v
static const int16_t hyla_group16_scale_idx[4][32] = {{HYLA_REP8(0), HYLA_REP8(1), HYLA_REP8(2), HYLA_REP8(3)},
                                                      {HYLA_REP8(4), HYLA_REP8(5), HYLA_REP8(6), HYLA_REP8(7)},
                                                      {HYLA_REP8(8), HYLA_REP8(9), HYLA_REP8(10), HYLA_REP8(11)},
                                                      {HYLA_REP8(12), HYLA_REP8(13), HYLA_REP8(14), HYLA_REP8(15)}};
#undef HYLA_REP8

/* hyla_qdot_i8_fn instances of type##_i8_n for N = 1 .. HYLA_QUANT_SKINNY_M (a compile-time N: the
 * accumulators stay in registers), and the table type##_i8_by_n[N] of them. */
#define INSTANCE_I8(type, N)                                                                                           \
    VNNI_TARGET static void type##_i8_##N(float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)          \
    {                                                                                                                  \
        type##_i8_n(N, y, ldy, x, row);                                                                                \
    }
#define INSTANCES_I8(type)                                                                                             \
    INSTANCE_I8(type, 1) INSTANCE_I8(type, 2) INSTANCE_I8(type, 3) INSTANCE_I8(type, 4) INSTANCE_I8(type, 5)          \
    INSTANCE_I8(type, 6) INSTANCE_I8(type, 7) INSTANCE_I8(type, 8)                                                    \
    static const hyla_qdot_i8_fn type##_i8_by_n[HYLA_QUANT_SKINNY_M + 1] = {                                          \
        NULL, type##_i8_1, type##_i8_2, type##_i8_3, type##_i8_4, type##_i8_5, type##_i8_6, type##_i8_7, type##_i8_8};

#endif
