/* AVX-512 VNNI decode kernel for IQ4_XS weights (quant_kernels.h; an IQ4_XS file's bulk), against
 * activations rounded as llama.cpp rounds them for this type (Q8_K, in x's order).
 *
 * A block's 8 sub-blocks of 32 values each keep 16 bytes: the low nibbles of its bytes index values 0..15,
 * the high ones 16..31, into the non-linear table (hyla_iq4_values, -127..113): hyla_iq4_indices
 * (core/quant_vnni.h) puts them in x's order, two vpermt2q per 128 values. The levels are signed, and
 * vpmaddubsw wants one unsigned operand: each index gives |value| by one vpshufb, and the activations are
 * negated where the value is negative (index < 8, a vptestnmb mask) -- |value| x |x| <= 127 x 127, so the
 * int16 pairs never saturate. Per block: sum_j (ls_j - 32) (v . x)_j in int32 (exact: |.| < 2^25), times
 * d d_x once: ggml's vec_dot_iq4_xs_q8_K's integers. The one-row, N-row and four-row forms do the same
 * operations per row (the same bits). */
#include "core/quant_kernels.h"

#include <stdint.h>
#include <string.h>

#include "core/stream_prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>

#include "core/quant_vnni.h"
#define HAVE_KERNELS 1

#define ABS16 127, 104, 83, 65, 49, 35, 22, 10, 1, 13, 25, 38, 53, 69, 89, 113 /* |hyla_iq4_values| */
static const uint8_t iq4_abs[64] = {ABS16, ABS16, ABS16, ABS16};
/* zmm k (values 64 k ..) holds sub-blocks 2 k (128-bit lanes 0, 1) and 2 k + 1 (lanes 2, 3) */
#define REP8(v) v, v, v, v, v, v, v, v
static const int16_t iq4_scale_idx[4][32] = {{REP8(0), REP8(0), REP8(1), REP8(1)},
                                             {REP8(2), REP8(2), REP8(3), REP8(3)},
                                             {REP8(4), REP8(4), REP8(5), REP8(5)},
                                             {REP8(6), REP8(6), REP8(7), REP8(7)}};
static const int16_t iq4_high_shift[8] = {0, 2, 4, 6, 8, 10, 12, 14};

typedef struct {
    hyla_iq4_consts n;
    __m512i abs, eight, sidx[4];
} iq4_consts;

VNNI_INLINE void iq4_consts_load(iq4_consts *c)
{
    hyla_iq4_consts_load(&c->n);
    c->abs = _mm512_loadu_si512((const void *)iq4_abs);
    c->eight = _mm512_set1_epi8(8);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        c->sidx[k] = _mm512_loadu_si512((const void *)iq4_scale_idx[k]);
}

/* One stored block: |levels| w[4] and where they are negative neg[4], lane scales s[4], d. */
typedef struct {
    __m512i w[4], s[4];
    __mmask64 neg[4];
    float d;
} iq4_unpacked;

VNNI_INLINE void iq4_block_unpack(iq4_unpacked *B, const unsigned char *row, const iq4_consts *c)
{
    for (int l = 0; l < 136; l += 64)
        hyla_prefetch_stream(row + l);
    B->d = hyla_half_at(row);
    __m512i n[4];
    hyla_iq4_indices(n, row + 8, &c->n);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        B->w[k] = _mm512_shuffle_epi8(c->abs, n[k]);
        B->neg[k] = _mm512_testn_epi8_mask(n[k], c->eight);
    }
    /* the 8 scales: nibble j % 2 of scales_l[j / 2] | bits 2 j, 2 j + 1 of scales_h << 4, minus 32 */
    int sl;
    uint16_t sh;
    memcpy(&sl, row + 4, 4);
    memcpy(&sh, row + 2, 2);
    __m128i b = _mm_cvtsi32_si128(sl), m4 = _mm_set1_epi8(0x0F);
    __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    __m128i top = _mm_srlv_epi16(_mm_set1_epi16((short)sh), _mm_loadu_si128((const __m128i *)iq4_high_shift));
    __m128i sc = _mm_or_si128(_mm_cvtepu8_epi16(nib), _mm_slli_epi16(_mm_and_si128(top, _mm_set1_epi16(3)), 4));
    sc = _mm_sub_epi16(sc, _mm_set1_epi16(32));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        B->s[k] = _mm512_permutexvar_epi16(c->sidx[k], _mm512_castsi128_si512(sc));
}

/* acc += d d_x (levels . x) for block b of activation row i. */
VNNI_INLINE void iq4_block_accumulate(__m512 *acc, const iq4_unpacked *B, const hyla_qx *x, int64_t i, int64_t b)
{
    int64_t K = x->K;
    const int8_t *xq = x->q + i * K + b * 256;
    __m512i sumi = _mm512_setzero_si512(), zero = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i xk = _mm512_loadu_si512((const void *)(xq + 64 * k));
        xk = _mm512_mask_sub_epi8(xk, B->neg[k], zero, xk);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(B->w[k], xk), B->s[k]);
    }
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(B->d * x->d[i * (K / 256) + b]), *acc);
}

HYLA_ONE_ACC_KERNELS(iq4_xs, 136, iq4_consts, iq4_consts_load, iq4_unpacked, iq4_block_unpack, iq4_block_accumulate)
#endif

hyla_qdot_i8_fn hyla_qdot_i8_iq4(hyla_ggml_type t, int64_t n)
{
#ifdef HAVE_KERNELS
    return t == HYLA_GGML_IQ4_XS && n >= 1 && n <= HYLA_QUANT_SKINNY_M ? iq4_xs_i8_by_n[n] : NULL;
#else
    (void)t, (void)n;
    return NULL;
#endif
}

hyla_qdot_i8_rows4_fn hyla_qdot_i8_rows4_iq4(hyla_ggml_type t)
{
#ifdef HAVE_KERNELS
    return t == HYLA_GGML_IQ4_XS ? iq4_xs_rows4 : NULL;
#else
    (void)t;
    return NULL;
#endif
}
