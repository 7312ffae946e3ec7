/* Prefill products with quantized weights (quant_kernels.h: hyla_qgemm_tile): an int8 VNNI GEMM
 * over a tile of up to HYLA_QGEMM_TILE weight rows, repacked once per call so that one vpdpbusd
 * multiplies 16 weight rows by 4 values of one activation row: for 16-row group g, unit u (a
 * scale group: 32 values for Q8_0 / Q4_K / Q5_K, 16 for Q2_K / Q3_K / Q6_K / IQ4_XS) and quad t, 64
 * bytes holding row r's 4 levels at 4 r.
 *
 * K-quants (Q2_K .. Q6_K) and IQ4_XS against Q8_K activations (one scale d_x per 256): per
 * super-block of 256 values, A = sum_u sc_u (L . q_x over unit u) and
 * M = sum_j c_j bsum_j over the 16 sums of 16 q_x (c_j = the min m of j's unit for Q2_K / Q4_K /
 * Q5_K, the scale sc_j for Q3_K / Q6_K / IQ4_XS, whose levels carry +4 / +32 / +128), then
 * y += d d_x A - dm d_x M in fp32 with dm = dmin (Q2_K / Q4_K / Q5_K) or 4 d / 32 d / 128 d: the
 * products of the decode kernels, summed per block instead of per row (IQ4_XS's decode kernel takes
 * its signed levels without the offset: the same integers). Each unit's integer sum L . q_x
 * (vpdpbusd, exact in int32) is scaled by sc_u and added into A in fp32: |sc_u L . q_x| < 2^24 for
 * every type (Q6_K: 16 x 63 x 128 x 128 = 16.5M; IQ4_XS: 32 x 241 x 127 x 16 = 15.7M, hence its units
 * of 16), so each product is exact and A is the integer sum while its partial sums stay below 2^24 (a
 * unit's is ~1e4-1e5 for typical activations, IQ4_XS's ~1e5-1e6 with the +128; past 2^24 a sum rounds
 * by < 2^-24 of itself; the GEMM outputs of test harnesses came out byte-identical). The integer form,
 * vpmulld (two uops, 10 cycles) + vpaddd, had been a uop more per unit than vcvtdq2ps + vfmadd (prefill
 * 512 of the 0.8B Q4_K_M file +3-6%, stop 45). A pass covers 2 groups (32 weight rows) x
 * 6 activation rows: 12 independent accumulator chains, each broadcast of activations feeding two weight
 * vectors.
 *
 * Q8_0 (and Q4_0, IQ4_NL: their levels q - 8, table[q]) against Q8_0 activations (one scale per 32 on
 * both sides): per unit, y += (d_w d_x) (L .
 * q_x - 128 bsum), the integer sum exact (levels stored as q + 128, unsigned for vpdpbusd): the
 * per-block value of ggml's vec_dot_q8_0_q8_0. 16 rows x 4 activation rows per pass. */
#include <string.h>

#include "core/parallel.h"
#include "core/quant_kernels.h"

/* The scratch's regions (floats): the levels, then per-unit scales, then per-block fields. */
#define LEVELS_FLOATS(K) ((HYLA_QGEMM_TILE * (K)) / 4)
#define UNIT_FLOATS(K) ((HYLA_QGEMM_TILE * (K)) / 16)

int64_t hyla_qgemm_scratch_floats(int64_t K) { return LEVELS_FLOATS(K) + 2 * UNIT_FLOATS(K) + 64; }

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_KERNELS 1
#include "core/quant_vnni.h"

static int unit_len(hyla_ggml_type t) { return t == HYLA_GGML_Q4_K || t == HYLA_GGML_Q5_K ? 32 : 16; }

/* Q2_K / Q3_K: a block's 256 levels in x's order, plus 4 where Q3_K's hmask (hm; NULL for Q2_K) has the
 * value's third bit (hyla_k23_levels: a plain loop was not vectorised, 7% of an MoE Q3_K_M prefill's
 * samples). */
VNNI_TARGET static void k23_levels(uint8_t *l, const unsigned char *qs, const unsigned char *hm)
{
    hyla_k23_consts c;
    hyla_k23_consts_load(&c);
    __m512i w[4];
    hyla_k23_levels(w, qs, hm, &c);
    for (int k = 0; k < 4; k++)
        _mm512_storeu_si512((void *)(l + 64 * k), w[k]);
}

/* IQ4_XS: a block's 256 levels in x's order, table[q] + 128 (u8) (hyla_iq4_indices, a vpshufb of the
 * offset table). */
#define IQ4_U8 1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241 /* hyla_iq4_values + 128 */
static const uint8_t iq4_u8[64] = {IQ4_U8, IQ4_U8, IQ4_U8, IQ4_U8};
VNNI_TARGET static void iq4_levels(uint8_t *l, const unsigned char *qs)
{
    hyla_iq4_consts c;
    hyla_iq4_consts_load(&c);
    __m512i n[4], table = _mm512_loadu_si512((const void *)iq4_u8);
    hyla_iq4_indices(n, qs, &c);
    for (int k = 0; k < 4; k++)
        _mm512_storeu_si512((void *)(l + 64 * k), _mm512_shuffle_epi8(table, n[k]));
}

/* A K-quant row's fields: levels L[K] (0..15 / 0..31 / 0..63), integer unit scales sc[K / ul] (as floats),
 * per block d and dm, and the 16 per-16 weights c[16] of each block's M (see the top). */
static void kq_row(hyla_ggml_type t, const unsigned char *row, int64_t K, uint8_t *L, float *sc, float *dv,
                   float *dm, int16_t *c)
{
    for (int64_t b = 0; b < K / 256; b++) {
        uint8_t *l = L + b * 256;
        if (t == HYLA_GGML_Q2_K) { /* levels 0..3, scale and min per 16: c = the min */
            const unsigned char *blk = row + b * 84;
            k23_levels(l, blk + 16, NULL);
            dv[b] = hyla_half_at(blk + 80);
            dm[b] = hyla_half_at(blk + 82);
            for (int j = 0; j < 16; j++)
                sc[b * 16 + j] = blk[j] & 0xF, c[b * 16 + j] = (int16_t)(blk[j] >> 4);
            continue;
        }
        if (t == HYLA_GGML_Q3_K) { /* levels 0..7 (the third bit set: +4) carrying +4, as Q6_K's +32 */
            const unsigned char *blk = row + b * 110;
            k23_levels(l, blk + 32, blk);
            int8_t s[16];
            hyla_k3_scales(blk + 96, s);
            dv[b] = hyla_half_at(blk + 108);
            dm[b] = 4.0f * dv[b]; /* exact */
            for (int j = 0; j < 16; j++)
                sc[b * 16 + j] = s[j], c[b * 16 + j] = s[j];
            continue;
        }
        if (t == HYLA_GGML_IQ4_XS) { /* levels table[q] + 128 (1..241) carrying +128 as Q6_K's +32; a unit
                                       * of 16 (each sub-block's scale twice): |sc L . q_x| <= 32 x 241 x 127 x 16
                                       * < 2^24 */
            const unsigned char *blk = row + b * 136, *qs = blk + 8;
            iq4_levels(l, qs);
            for (int j = 0; j < 8; j++) {
                int s = hyla_iq4_xs_scale(blk, j);
                sc[b * 16 + 2 * j] = sc[b * 16 + 2 * j + 1] = (float)s;
                c[b * 16 + 2 * j] = c[b * 16 + 2 * j + 1] = (int16_t)s;
            }
            dv[b] = hyla_half_at(blk);
            dm[b] = 128.0f * dv[b]; /* exact */
            continue;
        }
        if (t == HYLA_GGML_Q6_K) {
            const unsigned char *blk = row + b * 210, *ql = blk, *qh = blk + 128;
            const signed char *s = (const signed char *)(blk + 192);
            for (int half_ = 0; half_ < 2; half_++, ql += 64, qh += 32)
                for (int i = 0; i < 32; i++) {
                    l[128 * half_ + i] = (uint8_t)((ql[i] & 0xF) | (((qh[i] >> 0) & 3) << 4));
                    l[128 * half_ + i + 32] = (uint8_t)((ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4));
                    l[128 * half_ + i + 64] = (uint8_t)((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4));
                    l[128 * half_ + i + 96] = (uint8_t)((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4));
                }
            dv[b] = hyla_half_at(blk + 208);
            dm[b] = 32.0f * dv[b]; /* exact */
            for (int j = 0; j < 16; j++)
                sc[b * 16 + j] = s[j], c[b * 16 + j] = s[j];
            continue;
        }
        int q5 = t == HYLA_GGML_Q5_K;
        const unsigned char *blk = row + b * K4_BYTES(q5), *qs = blk + K4_QS(q5), *qh = blk + 16;
        uint8_t s8[8], m8[8];
        hyla_k4_scales(blk + 4, s8, m8);
        for (int p = 0; p < 4; p++) /* (two plain loops: the compiler keeps each in vector registers) */
            for (int i = 0; i < 32; i++) {
                l[64 * p + i] = (uint8_t)(qs[32 * p + i] & 0xF);
                l[64 * p + 32 + i] = (uint8_t)(qs[32 * p + i] >> 4);
            }
        for (int p = 0; q5 && p < 4; p++)
            for (int i = 0; i < 32; i++) {
                l[64 * p + i] |= (uint8_t)(((qh[i] >> (2 * p)) & 1) << 4);
                l[64 * p + 32 + i] |= (uint8_t)(((qh[i] >> (2 * p + 1)) & 1) << 4);
            }
        dv[b] = hyla_half_at(blk);
        dm[b] = hyla_half_at(blk + 2);
        for (int j = 0; j < 8; j++)
            sc[b * 8 + j] = s8[j], c[b * 16 + 2 * j] = c[b * 16 + 2 * j + 1] = (int16_t)m8[j];
    }
}

/* A group's levels in the tile's order (quads of 16 rows, as at the top) from its 16 rows' levels
 * L [16][ld] over `len` values (a multiple of 64): out[x][r] = the 4 bytes L[r][4x .. 4x + 3], 16 x 16
 * words transposed in registers at a time. A pack had copied 4 bytes per row and quad (~1/3 of its
 * time; packs were ~1/4 of an MoE prefill's GEMM time): prefill 512 with this, MoE Q4_K_M 1564-1619 ->
 * 1629-1661 tok/s (routed experts' products 87 -> 78 ms), 0.8B Q4_K_M 536-539 -> 554-569; the same bits. */
VNNI_TARGET static void put_group_levels(uint8_t *out /*[len / 4][16][4]*/, const uint8_t *L, int64_t ld, int64_t len)
{
    for (int64_t x0 = 0; x0 < len / 4; x0 += 16) {
        __m512 r[16], t[16]; /* r[j]: row j's words x0 .. x0 + 15 (as floats: moves only) */
        for (int j = 0; j < 16; j++)
            r[j] = _mm512_castsi512_ps(_mm512_loadu_si512((const void *)(L + j * ld + 4 * x0)));
        for (int i = 0; i < 8; i++) {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for (int i = 0; i < 4; i++) {
            __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
            __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
            r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        for (int i = 0; i < 4; i++) {
            t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
            t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
            t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
            t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
        }
        for (int i = 0; i < 8; i++) { /* word x0 + i of the 16 rows, then word x0 + 8 + i */
            __m512 lo = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88), hi = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
            _mm512_storeu_si512((void *)(out + (x0 + i) * 64), _mm512_castps_si512(lo));
            _mm512_storeu_si512((void *)(out + (x0 + 8 + i) * 64), _mm512_castps_si512(hi));
        }
    }
}

#define PACK_PIECE 1024 /* values of a group's 16 rows unpacked at a time: 16 KB of levels */

/* K-quant tile: rows [0, rows) into groups of 16, padded with zero rows to an even count of groups
 * (a pass covers two). Layout after the levels: SC float [g][u][16] (the unit scales, integers); then
 * per group and block, DV float [16], DM float [16], C int32 [8][16] (c_2p | c_2p+1 << 16, int16 each). */
static void pack_kq(hyla_ggml_type t, const unsigned char *const *rowp, int64_t rows, int64_t K, float *scratch)
{
    int ul = unit_len(t);
    int64_t units = K / ul, nsb = K / 256, groups = ((rows + 31) / 32) * 2;
    uint8_t *U = (uint8_t *)scratch;
    float *SC = scratch + LEVELS_FLOATS(K);
    float *BLK = scratch + LEVELS_FLOATS(K) + UNIT_FLOATS(K);
#pragma omp parallel for schedule(static) HYLA_PAR_IF(groups * 16 * K)
    for (int64_t g = 0; g < groups; g++) {
        uint8_t L[16][PACK_PIECE];
        float sc[PACK_PIECE / 16];
        float dv[PACK_PIECE / 256], dm[PACK_PIECE / 256];
        int16_t c[PACK_PIECE / 16];
        for (int64_t k0 = 0; k0 < K; k0 += PACK_PIECE) { /* pieces of PACK_PIECE values (4 blocks) */
            int64_t len = K - k0 < PACK_PIECE ? K - k0 : PACK_PIECE, b0 = k0 / 256;
            for (int64_t r = 0; r < 16; r++) {
                int64_t gr = g * 16 + r;
                if (gr < rows) {
                    kq_row(t, rowp[gr] + (size_t)b0 * hyla_ggml_bytes(t, 256), len, L[r], sc, dv, dm, c);
                } else { /* a padding row: zero levels and scales */
                    memset(L[r], 0, (size_t)len), memset(sc, 0, sizeof sc), memset(c, 0, sizeof c);
                    memset(dv, 0, sizeof dv), memset(dm, 0, sizeof dm);
                }
                for (int64_t u = 0; u < len / ul; u++)
                    SC[(g * units + k0 / ul + u) * 16 + r] = sc[u];
                for (int64_t b = 0; b < len / 256; b++) {
                    float *f = BLK + (g * nsb + b0 + b) * 160;
                    f[r] = dv[b];
                    f[16 + r] = dm[b];
                    int32_t *cp = (int32_t *)(f + 32);
                    for (int p = 0; p < 8; p++)
                        cp[p * 16 + r] = (int32_t)(uint16_t)c[b * 16 + 2 * p] |
                                         (int32_t)((uint32_t)(uint16_t)c[b * 16 + 2 * p + 1] << 16);
                }
            }
            put_group_levels(U + (g * (K / 4) + k0 / 4) * 64, &L[0][0], PACK_PIECE, len);
        }
    }
}

/* y[i * ldy + 16 h + r] for activation rows i0 + i (i < NI) and rows r of groups g + h (h < 2):
 * 2 NI chains of vpdpbusd (12 cover its latency at two a cycle), their unit sums scaled into A in
 * int32; y itself (in L1) holds the fp32 sums between blocks, so the registers hold P and A. */
#define KQ_ROWS 6
VNNI_INLINE void kq_pass(const int NI, const int ul, float *y, int64_t ldy, const hyla_qx *x, int64_t i0,
                         const float *scratch, int64_t g, int64_t K)
{
    int64_t units = K / ul, nsb = K / 256, per_block = 256 / ul;
    const uint8_t *U = (const uint8_t *)scratch;
    const float *SC = scratch + LEVELS_FLOATS(K), *BLK = scratch + LEVELS_FLOATS(K) + UNIT_FLOATS(K);
#pragma GCC unroll 8
    for (int i = 0; i < NI; i++) {
        _mm512_storeu_ps(y + i * ldy, _mm512_setzero_ps());
        _mm512_storeu_ps(y + i * ldy + 16, _mm512_setzero_ps());
    }
    for (int64_t b = 0; b < nsb; b++) {
        __m512 A[2][KQ_ROWS];
#pragma GCC unroll 8
        for (int i = 0; i < NI; i++)
            A[0][i] = A[1][i] = _mm512_setzero_ps();
        for (int64_t u = b * per_block; u < (b + 1) * per_block; u++) {
            const uint8_t *W0 = U + (g * units + u) * (ul / 4) * 64, *W1 = U + ((g + 1) * units + u) * (ul / 4) * 64;
            __m512i P[2][KQ_ROWS];
#pragma GCC unroll 8
            for (int i = 0; i < NI; i++)
                P[0][i] = P[1][i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int q = 0; q < ul / 4; q++) {
                __m512i w0 = _mm512_loadu_si512((const void *)(W0 + 64 * q)), w1 = _mm512_loadu_si512((const void *)(W1 + 64 * q));
#pragma GCC unroll 8
                for (int i = 0; i < NI; i++) {
                    int32_t v;
                    memcpy(&v, x->q + (i0 + i) * K + u * ul + 4 * q, 4);
                    __m512i xv = _mm512_set1_epi32(v);
                    P[0][i] = _mm512_dpbusd_epi32(P[0][i], w0, xv);
                    P[1][i] = _mm512_dpbusd_epi32(P[1][i], w1, xv);
                }
            }
            __m512 s0 = _mm512_loadu_ps(SC + (g * units + u) * 16);
            __m512 s1 = _mm512_loadu_ps(SC + ((g + 1) * units + u) * 16);
#pragma GCC unroll 8
            for (int i = 0; i < NI; i++) {
                A[0][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[0][i]), s0, A[0][i]);
                A[1][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[1][i]), s1, A[1][i]);
            }
        }
        const float *f0 = BLK + (g * nsb + b) * 160, *f1 = BLK + ((g + 1) * nsb + b) * 160;
#pragma GCC unroll 8
        for (int i = 0; i < NI; i++) {
            const int16_t *bs = x->bsums + (i0 + i) * (K / 16) + b * 16;
            __m512i M0 = _mm512_setzero_si512(), M1 = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) {
                int32_t v;
                memcpy(&v, bs + 2 * p, 4);
                __m512i bv = _mm512_set1_epi32(v);
                M0 = _mm512_dpwssd_epi32(M0, _mm512_loadu_si512((const void *)(f0 + 32 + 16 * p)), bv);
                M1 = _mm512_dpwssd_epi32(M1, _mm512_loadu_si512((const void *)(f1 + 32 + 16 * p)), bv);
            }
            __m512 dx = _mm512_set1_ps(x->d[(i0 + i) * nsb + b]);
            __m512 F0 = _mm512_loadu_ps(y + i * ldy), F1 = _mm512_loadu_ps(y + i * ldy + 16);
            F0 = _mm512_fmadd_ps(A[0][i], _mm512_mul_ps(_mm512_loadu_ps(f0), dx), F0);
            F0 = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M0), _mm512_mul_ps(_mm512_loadu_ps(f0 + 16), dx), F0);
            F1 = _mm512_fmadd_ps(A[1][i], _mm512_mul_ps(_mm512_loadu_ps(f1), dx), F1);
            F1 = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M1), _mm512_mul_ps(_mm512_loadu_ps(f1 + 16), dx), F1);
            _mm512_storeu_ps(y + i * ldy, F0);
            _mm512_storeu_ps(y + i * ldy + 16, F1);
        }
    }
}

#define KQ_CASE(NI, UL) kq_pass(NI, UL, y, ldy, x, i0, scratch, g, K)
#define KQ_CASES(UL)                                                                                                   \
    switch (ni) {                                                                                                      \
    case 6: KQ_CASE(6, UL); break;                                                                                     \
    case 5: KQ_CASE(5, UL); break;                                                                                     \
    case 4: KQ_CASE(4, UL); break;                                                                                     \
    case 3: KQ_CASE(3, UL); break;                                                                                     \
    case 2: KQ_CASE(2, UL); break;                                                                                     \
    default: KQ_CASE(1, UL); break;                                                                                    \
    }
VNNI_TARGET static void kq_rows(float *y, int64_t ldy, const hyla_qx *x, int64_t i0, int64_t ni, const float *scratch,
                                int64_t g, int ul, int64_t K)
{
    /* row count and unit length as constants: the accumulators stay in registers */
    if (ul == 32)
        KQ_CASES(32)
    else
        KQ_CASES(16)
}

/* ---- Q8_0 ---------------------------------------------------------------------------------------- */

/* Q8_0 / Q4_0 / IQ4_NL tile: levels + 128 (unsigned for vpdpbusd; Q4_0's q - 8, IQ4_NL's table[q]), with
 * each unit of 16 rows its scale d in floats (after the levels). Rows [rows, 16 * groups) are zero. */
static void pack_q8_0(hyla_ggml_type t, const unsigned char *const *rowp, int64_t rows, int64_t K, float *scratch)
{
    int64_t bb = hyla_ggml_block_bytes(t);
    int64_t units = K / 32, groups = (rows + 15) / 16;
    uint8_t *U = (uint8_t *)scratch;
    float *SC = scratch + LEVELS_FLOATS(K);
    uint8_t level[16]; /* a 4-bit index's level + 128: Q4_0's q - 8, IQ4_NL's table[q] */
    for (int q = 0; q < 16; q++)
        level[q] = (uint8_t)(t == HYLA_GGML_Q4_0 ? q + 120 : hyla_iq4_values[q] + 128);
#pragma omp parallel for schedule(static) HYLA_PAR_IF(groups * 16 * K)
    for (int64_t g = 0; g < groups; g++) {
        uint8_t L[16][PACK_PIECE];
        for (int64_t k0 = 0; k0 < K; k0 += PACK_PIECE) {
            int64_t len = K - k0 < PACK_PIECE ? K - k0 : PACK_PIECE;
            for (int64_t r = 0; r < 16; r++) {
                int64_t gr = g * 16 + r;
                for (int64_t u = 0; u < len / 32; u++) {
                    float d = 0;
                    if (gr < rows) {
                        const unsigned char *blk = rowp[gr] + (k0 / 32 + u) * bb;
                        d = hyla_half_at(blk);
                        if (t == HYLA_GGML_Q8_0)
                            for (int i = 0; i < 32; i++)
                                L[r][32 * u + i] = (uint8_t)((signed char)blk[2 + i] + 128);
                        else /* the low nibbles values 0..15, the high ones 16..31 */
                            for (int i = 0; i < 16; i++) {
                                L[r][32 * u + i] = level[blk[2 + i] & 0xF];
                                L[r][32 * u + 16 + i] = level[blk[2 + i] >> 4];
                            }
                    } else {
                        memset(L[r] + 32 * u, 0, 32);
                    }
                    SC[(g * units + k0 / 32 + u) * 16 + r] = d;
                }
            }
            put_group_levels(U + (g * (K / 4) + k0 / 4) * 64, &L[0][0], PACK_PIECE, len);
        }
    }
}

/* y[i * ldy + r] for activation rows i0 + i (i < NI) and the 16 rows r of group g. */
#define QG_ROWS 4
VNNI_INLINE void q8_0_pass(const int NI, float *y, int64_t ldy, const hyla_qx *x, int64_t i0, const float *scratch,
                           int64_t g, int64_t K)
{
    int64_t units = K / 32;
    const uint8_t *U = (const uint8_t *)scratch;
    const float *SC = scratch + LEVELS_FLOATS(K);
    __m512 accf[QG_ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < NI; i++)
        accf[i] = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; u++) {
        int64_t gu = g * units + u;
        __m512i acc[QG_ROWS];
#pragma GCC unroll 8
        for (int i = 0; i < NI; i++) { /* levels carry +128: start from -128 sum(q_x), exact in int32 */
            const int16_t *bs = x->bsums + (i0 + i) * (K / 16) + 2 * u;
            acc[i] = _mm512_set1_epi32(-128 * (bs[0] + bs[1]));
        }
        const uint8_t *A = U + gu * 8 * 64;
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            __m512i w = _mm512_loadu_si512((const void *)(A + 64 * q));
#pragma GCC unroll 8
            for (int i = 0; i < NI; i++) {
                int32_t v;
                memcpy(&v, x->q + (i0 + i) * K + u * 32 + 4 * q, 4);
                acc[i] = _mm512_dpbusd_epi32(acc[i], w, _mm512_set1_epi32(v));
            }
        }
        __m512 scv = _mm512_loadu_ps(SC + gu * 16);
#pragma GCC unroll 8
        for (int i = 0; i < NI; i++) /* (d_w d_x) sum(q_w q_x) per block, as ggml's vec_dot_q8_0_q8_0 */
            accf[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), _mm512_mul_ps(scv, _mm512_set1_ps(x->d[(i0 + i) * units + u])),
                                      accf[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NI; i++)
        _mm512_storeu_ps(y + i * ldy, accf[i]);
}

VNNI_TARGET static void q8_0_rows(float *y, int64_t ldy, const hyla_qx *x, int64_t i0, int64_t ni, const float *scratch,
                                  int64_t g, int64_t K)
{
    switch (ni) {
    case 4: q8_0_pass(4, y, ldy, x, i0, scratch, g, K); break;
    case 3: q8_0_pass(3, y, ldy, x, i0, scratch, g, K); break;
    case 2: q8_0_pass(2, y, ldy, x, i0, scratch, g, K); break;
    default: q8_0_pass(1, y, ldy, x, i0, scratch, g, K); break;
    }
}
#endif

int hyla_qgemm_supported(hyla_ggml_type t)
{
#ifdef HAVE_KERNELS
    int kq = t == HYLA_GGML_Q2_K || t == HYLA_GGML_Q3_K || t == HYLA_GGML_Q4_K || t == HYLA_GGML_Q5_K ||
             t == HYLA_GGML_Q6_K || t == HYLA_GGML_IQ4_XS;
    return (kq || hyla_q8_0_activations(t)) && hyla_qdot_i8_avx512(HYLA_GGML_Q4_K, 1) != NULL; /* (VNNI) */
#else
    (void)t;
    return 0;
#endif
}

void hyla_qgemm_tile(float *y, int64_t ldy, const hyla_qx *x, int64_t n, hyla_ggml_type t,
                     const unsigned char *const *rows, int64_t nrows, float *scratch)
{
#ifdef HAVE_KERNELS
    int64_t K = x->K, q8 = hyla_q8_0_activations(t), span = q8 ? 16 : 32; /* weight rows per pass */
    int64_t passes = (nrows + span - 1) / span, per = q8 ? QG_ROWS : KQ_ROWS;
    if (q8)
        pack_q8_0(t, rows, nrows, K, scratch);
    else
        pack_kq(t, rows, nrows, K, scratch);
    float tail[KQ_ROWS * 32]; /* >= QG_ROWS * 16 */
    int64_t tasks = (n + per - 1) / per;
#pragma omp parallel for schedule(static) private(tail) HYLA_PAR_IF(n * nrows * K)
    for (int64_t task = 0; task < tasks * passes; task++) {
        int64_t p = task % passes, i0 = task / passes * per, ni = n - i0 < per ? n - i0 : per;
        int full = span * p + span <= nrows;
        float *out = full ? y + i0 * ldy + span * p : tail;
        int64_t ld = full ? ldy : span;
        if (q8)
            q8_0_rows(out, ld, x, i0, ni, scratch, p, K);
        else
            kq_rows(out, ld, x, i0, ni, scratch, 2 * p, unit_len(t), K);
        if (!full) /* a partial last pass: into a small buffer, then the rows that exist */
            for (int64_t i = 0; i < ni; i++)
                memcpy(y + (i0 + i) * ldy + span * p, tail + i * span, (size_t)(nrows - span * p) * sizeof(float));
    }
#else
    (void)y, (void)ldy, (void)x, (void)n, (void)t, (void)rows, (void)nrows, (void)scratch;
#endif
}
