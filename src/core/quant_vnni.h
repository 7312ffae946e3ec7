/* What the AVX-512 VNNI decode kernels share (core/quant_avx512.c: Q8_0, Q4_K, Q5_K, Q6_K;
 * core/quant_avx512_k23.c: Q2_K, Q3_K; core/quant_avx512_iq4.c: IQ4_XS) and the prefill GEMM's repack
 * (core/quant_gemm.c): their target attributes, the dot of a block's 256 levels with scales per lane
 * against int8 activations, the scale index of a block of 16-value groups, the Q2_K / Q3_K levels and the
 * IQ4_XS indices widened in registers.
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

/* Q2_K / Q3_K levels: a block's 64 bytes qs hold 256 2-bit levels, two 32-byte halves of 128 values;
 * in a half, bits 2 s .. 2 s + 1 of byte 16 g + l are value 32 s + 16 g + l (s < 4, g < 2, l < 16).
 * zmm k (values 64 k .. 64 k + 63) is the half k / 2 broadcast to both 256-bit halves and shifted
 * right per int16 lane by 2 s with s = 2 (k % 2) (low half), 2 (k % 2) + 1 (high half), masked to 2
 * bits: a byte's bits s .. s + 1 stay in that byte for s <= 6. Q3_K's third bit of value 32 s + 16 g
 * + l of half h is bit 4 h + s of hmask[16 g + l]: for zmm k bits 2 k (low half) and 2 k + 1 (high
 * half), moved to bits 0, 1 of the same bytes by one shift of 2 k (k <= 3: no bit crosses a byte's
 * top), tested against 1 / 2, and 4 added where set. The constants are few on purpose: with a
 * selector per zmm, four rows' accumulators and a block's levels and scales outgrew the 32 zmm
 * registers in the decode kernel and its accumulators went through the stack. */
#define HYLA_REP16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
static const int16_t hyla_k23_shift[2][32] = {{HYLA_REP16(0), HYLA_REP16(2)}, {HYLA_REP16(4), HYLA_REP16(6)}};
static const uint8_t hyla_k3_high_sel[64] = {HYLA_REP16(1), HYLA_REP16(1), HYLA_REP16(2), HYLA_REP16(2)};
#undef HYLA_REP16
typedef struct {
    __m512i shift[2], three, four, hsel;
} hyla_k23_consts;

VNNI_INLINE void hyla_k23_consts_load(hyla_k23_consts *c)
{
    c->shift[0] = _mm512_loadu_si512((const void *)hyla_k23_shift[0]);
    c->shift[1] = _mm512_loadu_si512((const void *)hyla_k23_shift[1]);
    c->three = _mm512_set1_epi8(3), c->four = _mm512_set1_epi8(4);
    c->hsel = _mm512_loadu_si512((const void *)hyla_k3_high_sel);
}

/* w[k] = the levels of values 64 k .. 64 k + 63 (0..3; with hm, Q3_K's hmask, 0..7). */
VNNI_INLINE void hyla_k23_levels(__m512i w[4], const unsigned char *qs, const unsigned char *hm,
                                 const hyla_k23_consts *c)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i Q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
        w[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(Q, c->shift[0]), c->three);
        w[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(Q, c->shift[1]), c->three);
    }
    if (hm) {
        __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)hm));
        w[0] = _mm512_mask_add_epi8(w[0], _mm512_test_epi8_mask(H, c->hsel), w[0], c->four);
        w[1] = _mm512_mask_add_epi8(w[1], _mm512_test_epi8_mask(_mm512_srli_epi16(H, 2), c->hsel), w[1], c->four);
        w[2] = _mm512_mask_add_epi8(w[2], _mm512_test_epi8_mask(_mm512_srli_epi16(H, 4), c->hsel), w[2], c->four);
        w[3] = _mm512_mask_add_epi8(w[3], _mm512_test_epi8_mask(_mm512_srli_epi16(H, 6), c->hsel), w[3], c->four);
    }
}

/* IQ4_NL / IQ4_XS indices: 16 bytes a sub-block of 32 values, the low nibbles indexing values 0..15 and
 * the high ones 16..31. A 64-byte load holds 4 sub-blocks, one per 128-bit lane; their low and high
 * nibbles interleaved by lane (one vpermt2q for each half) are 128 indices in x's order: sub-block j's
 * first 16 are lane j of lo (64-bit lanes 2 j, 2 j + 1), its last 16 the same lanes of hi (8 + ...). */
static const int64_t hyla_iq4_lanes[2][8] = {{0, 1, 8, 9, 2, 3, 10, 11}, {4, 5, 12, 13, 6, 7, 14, 15}};
typedef struct {
    __m512i low4, lanes[2];
} hyla_iq4_consts;

VNNI_INLINE void hyla_iq4_consts_load(hyla_iq4_consts *c)
{
    c->low4 = _mm512_set1_epi8(0x0F);
    c->lanes[0] = _mm512_loadu_si512((const void *)hyla_iq4_lanes[0]);
    c->lanes[1] = _mm512_loadu_si512((const void *)hyla_iq4_lanes[1]);
}

/* n[k] = the indices of values 64 k .. 64 k + 63 of the 128 bytes at qs (a 256-value IQ4_XS block). */
VNNI_INLINE void hyla_iq4_indices(__m512i n[4], const unsigned char *qs, const hyla_iq4_consts *c)
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i Q = _mm512_loadu_si512((const void *)(qs + 64 * h));
        __m512i lo = _mm512_and_si512(Q, c->low4), hi = _mm512_and_si512(_mm512_srli_epi16(Q, 4), c->low4);
        n[2 * h] = _mm512_permutex2var_epi64(lo, c->lanes[0], hi);
        n[2 * h + 1] = _mm512_permutex2var_epi64(lo, c->lanes[1], hi);
    }
}

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

VNNI_INLINE void hyla_group16_sidx_load(__m512i sidx[4])
{
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        sidx[k] = _mm512_loadu_si512((const void *)hyla_group16_scale_idx[k]);
}

/* s[k] = the int16 scales sc16 spread over the lanes of zmm k (hyla_group16_sidx_load's sidx). */
VNNI_INLINE void hyla_group16_spread(__m512i s[4], __m256i sc16, const __m512i sidx[4])
{
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        s[k] = _mm512_permutexvar_epi16(sidx[k], _mm512_castsi256_si512(sc16));
}

/* A stored block of 16 groups of 16 whose unsigned levels carry an offset (Q3_K: 4, Q6_K: 32), in
 * registers: levels w[4], lane scales s[4], the 16 scales as int16 and d. */
typedef struct {
    __m512i w[4], s[4];
    __m256i sc16;
    float d;
} hyla_offset_block;

/* acc += d d_x (levels . x - 2^shift sum_j sc_j bsum_j) for block b of activation row i (exact in
 * int32 before the scaling). */
VNNI_INLINE void hyla_offset_block_accumulate(__m512 *acc, const hyla_offset_block *B, const int shift,
                                              const hyla_qx *x, int64_t i, int64_t b)
{
    int64_t K = x->K;
    __m512i sumi = levels_dot(B->w, B->s, x->q + i * K + b * 256);
    __m256i offs = _mm256_madd_epi16(B->sc16, _mm256_loadu_si256((const __m256i *)(x->bsums + i * (K / 16) + b * 16)));
    sumi = _mm512_sub_epi32(sumi, _mm512_castsi256_si512(_mm256_slli_epi32(offs, shift)));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(B->d * x->d[i * (K / 256) + b]), *acc);
}

/* The loops of a kernel with one fp32 accumulator per row (Q6_K, Q3_K, IQ4_XS): type##_i8_n (N rows) and
 * the four-row form type##_rows4 (batch 1: four weight rows' blocks interleaved, the same operations per
 * row as N = 1, so the same bits; the constants loaded and the call made once for four rows), from
 * consts_t / consts_load (the kernel's constants), unpacked_t / unpack(&B, row, &c) (a stored block of
 * `bytes` bytes in registers) and accumulate(&acc, &B, x, i, b) (block b against activation row i). */
#define HYLA_ONE_ACC_KERNELS(type, bytes, consts_t, consts_load, unpacked_t, unpack, accumulate)                      \
    VNNI_INLINE void type##_i8_n(const int N, float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)       \
    {                                                                                                                  \
        consts_t c;                                                                                                    \
        consts_load(&c);                                                                                               \
        __m512 acc[HYLA_QUANT_SKINNY_M];                                                                               \
        for (int i = 0; i < N; i++)                                                                                    \
            acc[i] = _mm512_setzero_ps();                                                                              \
        for (int64_t b = 0; b < x->K / 256; b++, row += (bytes)) {                                                     \
            unpacked_t B;                                                                                              \
            unpack(&B, row, &c);                                                                                       \
            for (int i = 0; i < N; i++)                                                                                \
                accumulate(&acc[i], &B, x, i, b);                                                                      \
        }                                                                                                              \
        for (int i = 0; i < N; i++)                                                                                    \
            y[i * ldy] = _mm512_reduce_add_ps(acc[i]);                                                                 \
    }                                                                                                                  \
    VNNI_TARGET static void type##_rows4(float *y, const hyla_qx *x, const unsigned char *const *rows)                 \
    {                                                                                                                  \
        consts_t c;                                                                                                    \
        consts_load(&c);                                                                                               \
        __m512 acc[4];                                                                                                 \
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();                              \
        for (int64_t b = 0; b < x->K / 256; b++) {                                                                     \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                                        \
            {                                                                                                          \
                unpacked_t B;                                                                                          \
                unpack(&B, rows[r] + b * (bytes), &c);                                                                 \
                accumulate(&acc[r], &B, x, 0, b);                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) y[r] = _mm512_reduce_add_ps(acc[r]);                       \
    }                                                                                                                  \
    INSTANCES_I8(type)

/* acc[i] += d_w d_x (levels . x) over values 64 p .. 64 p + 63 of N activation rows rounded per 32
 * (llama.cpp's Q8_0 activations, with hyla_qx_q8_0_lanes' per-lane scales and offsets): wu holds the
 * 64 levels + 128 as u8 (the offset taken back by each lane's -128 sum of its activations), dw each
 * int32 lane's weight scale (lanes 0-7 the pair's first block of 32, 8-15 its second). */
VNNI_INLINE void hyla_pair32_accumulate(const int N, __m512 *acc, const hyla_qx *x, __m512i wu, __m512 dw, int64_t p)
{
    int64_t K = x->K;
    for (int i = 0; i < N; i++) {
        __m512i xq = _mm512_loadu_si512((const void *)(x->q + i * K + 64 * p));
        __m512i off = _mm512_load_si512((const void *)(x->offs_lanes + i * (K / 4) + 16 * p)); /* -128 sum q_x */
        __m512i s = _mm512_dpbusd_epi32(off, wu, xq);
        __m512 d = _mm512_mul_ps(dw, _mm512_loadu_ps(x->d_lanes + i * (K / 4) + 16 * p));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[i]);
    }
}

/* type##_i8_n for weights in blocks of 32 against Q8_0 activations (K a multiple of 64), a pair of
 * blocks (pair_bytes) a step, the pairs alternating between two accumulators per row (written out:
 * indexed by p & 1 they lived on the stack), pair(N, acc, x, blk, p, &c) adding the pair at blk
 * (values 64 p ..) with the kernel's constants c (consts_t, consts_load). */
#define HYLA_PAIR32_KERNELS(type, pair_bytes, consts_t, consts_load, pair)                                             \
    VNNI_INLINE void type##_i8_n(const int N, float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)       \
    {                                                                                                                  \
        consts_t c;                                                                                                    \
        consts_load(&c);                                                                                               \
        __m512 acc0[HYLA_QUANT_SKINNY_M], acc1[HYLA_QUANT_SKINNY_M];                                                   \
        for (int i = 0; i < N; i++)                                                                                    \
            acc0[i] = acc1[i] = _mm512_setzero_ps();                                                                   \
        int64_t np = x->K / 64, p = 0;                                                                                 \
        for (; p + 1 < np; p += 2) {                                                                                   \
            pair(N, acc0, x, row + (pair_bytes) * p, p, &c);                                                           \
            pair(N, acc1, x, row + (pair_bytes) * (p + 1), p + 1, &c);                                                 \
        }                                                                                                              \
        if (p < np)                                                                                                    \
            pair(N, acc0, x, row + (pair_bytes) * p, p, &c);                                                           \
        for (int i = 0; i < N; i++)                                                                                    \
            y[i * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));                                       \
    }                                                                                                                  \
    INSTANCES_I8(type)

#endif
