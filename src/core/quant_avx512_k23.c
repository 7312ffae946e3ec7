/* AVX-512 VNNI decode kernels for Q2_K and Q3_K weights (quant_kernels.h; a Q3_K_M or Q2_K file's
 * bulk), against activations rounded as llama.cpp rounds them for these types (Q8_K, in x's order).
 *
 * Both store a block's 256 low 2-bit levels alike (widened by hyla_k23_levels, core/quant_vnni.h, which
 * also adds Q3_K's third bits); groups of 16 values (one 128-bit lane each) carry the scales: zmm k
 * lane L is group 4 k + L (hyla_group16_scale_idx).
 *   Q3_K: a set third bit means no offset: with u = low + 4 bit (0..7) the value is u - 4, so per block
 *     sum_j sc_j (u . x)_j - 4 sum_j sc_j bsum_j (the scales sc_j = 6 bits - 32, hyla_k3_scales),
 *     exact in int32 (|.| < 2^23), times d d_x once: ggml's vec_dot_q3_K_q8_K's integers.
 *   Q2_K: sum_j sc_j (q . x)_j times d d_x minus dmin d_x sum_j m_j bsum_j (scale and min the low
 *     and high nibbles of byte j), as ggml's vec_dot_q2_K_q8_K.
 * Each kernel does the same operations per row whatever the number of rows, and the four-row forms
 * (batch 1) those of the one-row form interleaved: the same bits. */
#include "core/quant_kernels.h"

#include <stdint.h>
#include <string.h>

#include "core/stream_prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>

#include "core/quant_vnni.h"
#define HAVE_KERNELS 1

/* (hyla_k23_consts, and the scale index per zmm) */
typedef struct {
    hyla_k23_consts l;
    __m512i sidx[4];
} k23_consts;

VNNI_INLINE void k23_consts_load(k23_consts *c)
{
    hyla_k23_consts_load(&c->l);
    hyla_group16_sidx_load(c->sidx);
}

/* ---- Q3_K: hmask[32] at 0, qs[64] at 32, scales[12] at 96, f16 d at 108 (110 bytes) ------------- */

VNNI_INLINE void k3_block_unpack(hyla_offset_block *B, const unsigned char *row, const k23_consts *c)
{
    for (int l = 0; l < 110; l += 64)
        hyla_prefetch_stream(row + l);
    hyla_k23_levels(B->w, row + 32, row, &c->l);
    /* the 16 scales (hyla_k3_scales) in registers: the low nibbles of bytes 0..7, then their high ones,
     * each | bits 2 (j / 4) .. + 1 of byte 8 + j % 4 moved to bits 4-5, minus 32 */
    uint64_t lo8;
    int hi4;
    memcpy(&lo8, row + 96, 8);
    memcpy(&hi4, row + 104, 4);
    __m128i b8 = _mm_cvtsi64_si128((long long)lo8), m4 = _mm_set1_epi8(0x0F);
    __m128i nib = _mm_unpacklo_epi64(_mm_and_si128(b8, m4), _mm_and_si128(_mm_srli_epi16(b8, 4), m4));
    __m128i top = _mm_srlv_epi32(_mm_set1_epi32(hi4), _mm_setr_epi32(0, 2, 4, 6));
    top = _mm_slli_epi32(_mm_and_si128(top, _mm_set1_epi32(0x03030303)), 4);
    __m128i sc8 = _mm_sub_epi8(_mm_or_si128(nib, top), _mm_set1_epi8(32));
    B->sc16 = _mm256_cvtepi8_epi16(sc8);
    hyla_group16_spread(B->s, B->sc16, c->sidx);
    B->d = hyla_half_at(row + 108);
}

/* acc += d d_x (levels . x - 4 sum_j sc_j bsum_j) for block b of activation row i. */
VNNI_INLINE void k3_block_accumulate(__m512 *acc, const hyla_offset_block *B, const hyla_qx *x, int64_t i, int64_t b)
{
    hyla_offset_block_accumulate(acc, B, 2, x, i, b);
}

HYLA_ONE_ACC_KERNELS(q3_k, 110, k23_consts, k23_consts_load, hyla_offset_block, k3_block_unpack, k3_block_accumulate)

/* ---- Q2_K: scales[16] at 0 (scale | min << 4), qs[64] at 16, f16 d, dmin at 80 (84 bytes) -------- */

typedef struct {
    __m512i w[4], s[4];
    __m256i m16;
    __m128 dd; /* d, dmin in lanes 0, 1 */
} k2_unpacked;

VNNI_INLINE void k2_block_unpack(k2_unpacked *B, const unsigned char *row, const k23_consts *c)
{
    for (int l = 0; l < 84; l += 64)
        hyla_prefetch_stream(row + l);
    hyla_k23_levels(B->w, row + 16, NULL, &c->l);
    __m128i sm = _mm_loadu_si128((const __m128i *)row), low4 = _mm_set1_epi8(0x0F);
    __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, low4));
    B->m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), low4));
    hyla_group16_spread(B->s, sc16, c->sidx);
    int dd;
    memcpy(&dd, row + 80, 4);
    B->dd = _mm_cvtph_ps(_mm_cvtsi32_si128(dd));
}

/* acc += d d_x (levels . x) and accm += dmin d_x (mins . bsums) for block b of activation row i. */
VNNI_INLINE void k2_block_accumulate(__m512 *acc, __m256 *accm, const k2_unpacked *B, const hyla_qx *x, int64_t i,
                                     int64_t b)
{
    int64_t K = x->K;
    __m512i sumi = levels_dot(B->w, B->s, x->q + i * K + b * 256);
    __m128 f = _mm_mul_ps(B->dd, _mm_set1_ps(x->d[i * (K / 256) + b])); /* d d_x, dmin d_x */
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(f), *acc);
    __m256i mins = _mm256_madd_epi16(B->m16, _mm256_loadu_si256((const __m256i *)(x->bsums + i * (K / 16) + b * 16)));
    *accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_broadcastss_ps(_mm_permute_ps(f, 0x55)), *accm);
}

VNNI_INLINE float k2_finish(__m512 acc, __m256 accm)
{
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(accm), _mm256_extractf128_ps(accm, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

VNNI_INLINE void q2_k_i8_n(const int N, float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)
{
    k23_consts c;
    k23_consts_load(&c);
    __m512 acc[HYLA_QUANT_SKINNY_M];
    __m256 accm[HYLA_QUANT_SKINNY_M];
    for (int i = 0; i < N; i++)
        acc[i] = _mm512_setzero_ps(), accm[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->K / 256; b++, row += 84) {
        k2_unpacked B;
        k2_block_unpack(&B, row, &c);
        for (int i = 0; i < N; i++)
            k2_block_accumulate(&acc[i], &accm[i], &B, x, i, b);
    }
    for (int i = 0; i < N; i++)
        y[i * ldy] = k2_finish(acc[i], accm[i]);
}

VNNI_TARGET static void q2_k_rows4(float *y, const hyla_qx *x, const unsigned char *const *rows)
{
    k23_consts c;
    k23_consts_load(&c);
    __m512 acc[4];
    __m256 accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->K / 256; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            k2_unpacked B;
            k2_block_unpack(&B, rows[r] + b * 84, &c);
            k2_block_accumulate(&acc[r], &accm[r], &B, x, 0, b);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        y[r] = k2_finish(acc[r], accm[r]);
}

INSTANCES_I8(q2_k)
#endif

hyla_qdot_i8_fn hyla_qdot_i8_k23(hyla_ggml_type t, int64_t n)
{
#ifdef HAVE_KERNELS
    if (n < 1 || n > HYLA_QUANT_SKINNY_M)
        return NULL;
    return t == HYLA_GGML_Q3_K ? q3_k_i8_by_n[n] : t == HYLA_GGML_Q2_K ? q2_k_i8_by_n[n] : NULL;
#else
    (void)t, (void)n;
    return NULL;
#endif
}

hyla_qdot_i8_rows4_fn hyla_qdot_i8_rows4_k23(hyla_ggml_type t)
{
#ifdef HAVE_KERNELS
    return t == HYLA_GGML_Q3_K ? q3_k_rows4 : t == HYLA_GGML_Q2_K ? q2_k_rows4 : NULL;
#else
    (void)t;
    return NULL;
#endif
}
