/* AVX-512 VNNI decode kernels for Q4_0 and IQ4_NL weights (quant_kernels.h): blocks of 32 values, an
 * f16 scale d and 16 bytes of 4-bit indices (the low nibbles values 0..15, the high ones 16..31), the
 * value d (q - 8) for Q4_0 and d table[q] for IQ4_NL -- against activations rounded per 32 as
 * llama.cpp rounds them for these types (its Q8_0), the Q8_0 kernel's arithmetic (hyla_pair32_accumulate):
 * a pair of blocks (36 bytes) a step, its 64 indices put in x's order (the two 16-byte index runs as one
 * ymm, its low and high nibbles as one zmm, 128-bit lanes reordered by one vshufi64x2), then the level
 * + 128 as u8: q + 120 (Q4_0), or one vpshufb of the table + 128 (IQ4_NL). Integer sums exact, d_w d_x
 * per lane in fp32: ggml's vec_dot_q4_0_q8_0 / vec_dot_iq4_nl_q8_0 per block, summed in another order.
 * Each kernel does the same operations per row whatever the number of rows. */
#include "core/quant_kernels.h"

#include <stdint.h>

#include "core/stream_prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>

#include "core/quant_vnni.h"
#define HAVE_KERNELS 1

/* the pair's two f16 scales (words 0 and 9 of its first 32 bytes) for int32 lanes 0-7 and 8-15 */
#define REP8(v) v, v, v, v, v, v, v, v
static const int16_t b32_dw_idx[32] = {REP8(0), REP8(9), REP8(0), REP8(9)};
#undef REP8
#define IQ4_U8 1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241 /* hyla_iq4_values + 128 */
static const uint8_t iq4_nl_u8[64] = {IQ4_U8, IQ4_U8, IQ4_U8, IQ4_U8};

typedef struct {
    __m512i didx, table;
} b32_consts;

VNNI_INLINE void b32_consts_load(b32_consts *c)
{
    c->didx = _mm512_loadu_si512((const void *)b32_dw_idx);
    c->table = _mm512_loadu_si512((const void *)iq4_nl_u8);
}

/* acc[i] += the pair of blocks at blk (values 64 p .. 64 p + 63) against activation row i; iq4: IQ4_NL. */
VNNI_INLINE void b32_pair(const int N, const int iq4, __m512 *acc, const hyla_qx *x, const unsigned char *blk,
                          int64_t p, const b32_consts *c)
{
    hyla_prefetch_stream(blk);
    __m256i head = _mm256_loadu_si256((const __m256i *)blk); /* (32 of the pair's 36 bytes) */
    __m512i dwords = _mm512_permutexvar_epi16(c->didx, _mm512_castsi256_si512(head));
    __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(dwords));
    __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2))),
                                        _mm_loadu_si128((const __m128i *)(blk + 20)), 1);
    __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
    __m512i n = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); /* lanes lo A, lo B, hi A, hi B */
    n = _mm512_shuffle_i64x2(n, n, _MM_SHUFFLE(3, 1, 2, 0));            /* lo A, hi A, lo B, hi B */
    __m512i wu = iq4 ? _mm512_shuffle_epi8(c->table, n) : _mm512_add_epi8(n, _mm512_set1_epi8(120));
    hyla_pair32_accumulate(N, acc, x, wu, dw, p);
}

VNNI_INLINE void q4_0_pair(const int N, __m512 *acc, const hyla_qx *x, const unsigned char *blk, int64_t p,
                           const b32_consts *c)
{
    b32_pair(N, 0, acc, x, blk, p, c);
}

VNNI_INLINE void iq4_nl_pair(const int N, __m512 *acc, const hyla_qx *x, const unsigned char *blk, int64_t p,
                             const b32_consts *c)
{
    b32_pair(N, 1, acc, x, blk, p, c);
}

HYLA_PAIR32_KERNELS(q4_0, 36, b32_consts, b32_consts_load, q4_0_pair)
HYLA_PAIR32_KERNELS(iq4_nl, 36, b32_consts, b32_consts_load, iq4_nl_pair)
#endif

hyla_qdot_i8_fn hyla_qdot_i8_b32(hyla_ggml_type t, int64_t n)
{
#ifdef HAVE_KERNELS
    if (n < 1 || n > HYLA_QUANT_SKINNY_M)
        return NULL;
    return t == HYLA_GGML_Q4_0 ? q4_0_i8_by_n[n] : t == HYLA_GGML_IQ4_NL ? iq4_nl_i8_by_n[n] : NULL;
#else
    (void)t, (void)n;
    return NULL;
#endif
}
