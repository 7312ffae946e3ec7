/* AVX-512 streaming dot kernels for weights stored in ggml block types (quant_kernels.h).
 *
 * Decode reads each weight once per token, so these kernels exist to keep the read at the
 * memory's rate: every block is loaded once, widened to fp32 in registers (16 values per zmm) and
 * multiplied into one accumulator per activation row; the next blocks are prefetched a few KB
 * ahead (31 GB/s on 2 threads for a Q8_0 lm_head read from the mapped file, the DRAM's rate on
 * the first machine; 18-20 prefetching into L1, 12 at a few hundred bytes ahead), into the L2 and
 * then the L1 (hyla_prefetch_stream). The hint was non-temporal on the AMD Zen 5 VM of stops 33-41 (a decoded token
 * streams the whole model through the caches while the GDN states, 18 MB for 0.8B, are read again:
 * Q8_0 0.8B decode 57.5-58.5 -> 59.1-61.5 tok/s there, the K-quant files unchanged); on the Intel
 * Xeon VM (family 6 model 207, 2 MB L2 a core, 300 MB L3, DRAM ~35 GB/s on 2 threads) a
 * prefetchnta holds one of the core's few L1 fill buffers for a whole DRAM latency, and a 1 GiB
 * matrix read at 16 GB/s (Q8_0) / 22 (Q4_K, Q6_K) with it, 17-19 with no software prefetch at all,
 * 27-30 into the L2 (T1 or T2 alike, T0 1-2 GB/s lower; half or twice the distances within 1 GB/s;
 * bench/quant_bench, 2 alternating rounds of each), and 30-34 with a second prefetch into the L1
 * (hyla_prefetch_stream): whole decodes with the first 20.2 -> 31.0 tok/s (0.8B Q8_0),
 * 35.5 -> 47.0 (0.8B Q4_K_M), 53.6 -> 113.6 (MoE Q8_0), 78.2 -> 159.7 (MoE Q4_K_M). The row count N is a
 * compile-time constant in each instance, so the accumulators stay in registers (with a run-time
 * count they went through the stack: 14 GB/s instead of 30).
 *
 * Values: Q8_0 w = d q (exact in fp32); Q6_K w = (d sc) (q - 32), ggml's two roundings; Q4_K /
 * Q5_K w = fma(d sc, q, -dmin m), one rounding where ggml's d1 * q - m1 has two (<= 1 ulp of w
 * apart). Q8_0 folds the scale after the block's products (q . x, then times d: one multiply fewer
 * per block than scaling the weights). Every kernel does the same operations for a row whatever the
 * number of rows N, so a batched decode step gives each sequence the logits it gets alone. */
#include "core/quant_kernels.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/parallel.h"
#include "core/stream_prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_KERNELS 1
#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
#define INLINE __attribute__((target("avx512f,avx512bw,avx512vl,f16c"), always_inline)) static inline
#include "core/quant_vnni.h"

/* Every weight line is asked for twice (core/stream_prefetch.h): from memory into the L2 32 KB ahead
 * of where the kernel reads, and from the L2 into the L1 4 KB ahead (2 KB in the measurements below;
 * one pair per 64 bytes of a block, ~1 per line for Q8_0's 34-byte blocks). On the Intel VM, 1 GiB
 * matrices on 2 threads (bench/quant_bench, 3 alternating rounds): with one prefetch into the L2
 * (8.5 KB ahead for Q8_0, 3.5 + 10 KB for Q4_K, 8.4 KB for Q6_K) they read at 27.5-28.4 GB/s (Q8_0)
 * / 29.9-30.0 (Q4_K) / 29.0-31.4 (Q6_K) of a plain read's 34-36; with the pair 30.4-31.8 /
 * 31.0-34.2 / 29.9-32.8 -- the loads had been waiting on L2 hits. The far one alone at 32 KB read as
 * the single one did, the near one alone 22-26; 64 KB far, 4 KB near, T2 for the far one: within
 * the noise of this pair. On the Zen 5 VM a single non-temporal prefetch 3.5-10 KB ahead was best
 * (see the top). */

/* 16 bytes (u8) -> 16 floats, minus `bias` */
INLINE __m512 widen_u8(__m128i v, int bias)
{
    __m512i i = _mm512_cvtepu8_epi32(v);
    return _mm512_cvtepi32_ps(bias ? _mm512_sub_epi32(i, _mm512_set1_epi32(bias)) : i);
}

/* acc[i] += w . x[i][k0 .. k0 + 16] */
#define FMA_ROWS(N, w, k0)                                                                                             \
    for (int i = 0; i < (N); i++)                                                                                      \
    acc[i] = _mm512_fmadd_ps((w), _mm512_loadu_ps(x + i * ldx + (k0)), acc[i])

#define FINISH(N)                                                                                                      \
    for (int i = 0; i < (N); i++)                                                                                      \
    y[i * ldy] = _mm512_reduce_add_ps(acc[i])

/* ---- Q8_0: 34-byte blocks of 32 -------------------------------------------------------------- */

/* With fp32 activations (HYLA_INT8_ACTIVATIONS=0, Q8_0 rows of a matrix of mixed types, K not a
 * multiple of 64; otherwise q8_0_i8_n below). Each row's blocks alternate between two accumulator
 * chains (even and odd blocks, added at the end): with one, every block waited on the previous
 * block's FMA (~3.7 cycles a block, 77 GB/s from the L3 on 2 threads, under the DRAM's fast phases
 * here); with two, 84. Measured on the Zen 5 VM on a 256 MB matrix in 25 alternating rounds
 * against the one-chain kernel: 79-85 GB/s where that read 67-72 and a plain read 78-87 (fast
 * phases); 47-54 where it read 46-56 (slow phases, plain 47-57). Four
 * rows interleaved (one chain each, the one-chain bits) read 81-87 in fast phases but 32-46 in slow
 * ones: four streams a thread. */
#define Q8_0_CHAINS 2
INLINE void q8_0_n(const int N, float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row, int64_t K)
{
    __m512 acc[HYLA_QUANT_SKINNY_M][Q8_0_CHAINS];
    for (int i = 0; i < N; i++)
        for (int c = 0; c < Q8_0_CHAINS; c++)
            acc[i][c] = _mm512_setzero_ps();
    int64_t nb = K / 32;
    for (int64_t b = 0; b < nb; b += Q8_0_CHAINS) {
#pragma GCC unroll 4
        for (int c = 0; c < Q8_0_CHAINS; c++) {
            if (c > 0 && b + c >= nb) /* an odd block count: the last block is chain 0's */
                break;
            const unsigned char *blk = row + (b + c) * 34;
            hyla_prefetch_stream(blk);
            __m512 d = _mm512_set1_ps(hyla_half_at(blk));
            __m128i q0 = _mm_loadu_si128((const __m128i *)(blk + 2)), q1 = _mm_loadu_si128((const __m128i *)(blk + 18));
            __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1));
            for (int i = 0; i < N; i++) { /* q . x, then times d: each row's arithmetic whatever N */
                const float *xi = x + i * ldx + (b + c) * 32;
                __m512 s = _mm512_mul_ps(w0, _mm512_loadu_ps(xi));
                s = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xi + 16), s);
                acc[i][c] = _mm512_fmadd_ps(s, d, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < N; i++) {
        __m512 t = acc[i][0];
        for (int c = 1; c < Q8_0_CHAINS; c++)
            t = _mm512_add_ps(t, acc[i][c]);
        y[i * ldy] = _mm512_reduce_add_ps(t);
    }
}

/* ---- Q4_K / Q5_K: 256 values in 8 sub-blocks of 32, 6-bit scales and mins ------------------------- */

/* Levels of values 64 p .. 64 p + 63 of a Q4_K / Q5_K block: lo (sub-block 2p, low nibbles) and hi
 * (2p + 1, high nibbles), 32 bytes each; Q5_K's fifth bits from hbits (bit 2p of qh[l] for value
 * l, bit 2p + 1 for value 32 + l). */
INLINE void k4_levels(const unsigned char *qs, __m256i hbits, int q5, int p, __m256i *lo, __m256i *hi)
{
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
    *lo = _mm256_and_si256(q, low4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if (q5) {
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * p), one), 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * p + 1), one), 4));
    }
}


/* One super-block of Q4_K or Q5_K (q5). */
INLINE void k4_block(const int N, const int q5, __m512 *acc, const float *x, int64_t ldx, const unsigned char *b)
{
    float d = hyla_half_at(b), dmin = hyla_half_at(b + 2);
    uint8_t sc[8], mn[8];
    hyla_k4_scales(b + 4, sc, mn);
    __m256i hbits = q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
        __m512 d0 = _mm512_set1_ps(d * (float)sc[2 * p]), n0 = _mm512_set1_ps(dmin * (float)mn[2 * p]);
        __m512 d1 = _mm512_set1_ps(d * (float)sc[2 * p + 1]), n1 = _mm512_set1_ps(dmin * (float)mn[2 * p + 1]);
        __m256i lo, hi;
        k4_levels(b + K4_QS(q5), hbits, q5, p, &lo, &hi);
        __m512 w0 = _mm512_fmsub_ps(d0, widen_u8(_mm256_castsi256_si128(lo), 0), n0);
        __m512 w1 = _mm512_fmsub_ps(d0, widen_u8(_mm256_extracti128_si256(lo, 1), 0), n0);
        __m512 w2 = _mm512_fmsub_ps(d1, widen_u8(_mm256_castsi256_si128(hi), 0), n1);
        __m512 w3 = _mm512_fmsub_ps(d1, widen_u8(_mm256_extracti128_si256(hi, 1), 0), n1);
        FMA_ROWS(N, w0, 64 * p);
        FMA_ROWS(N, w1, 64 * p + 16);
        FMA_ROWS(N, w2, 64 * p + 32);
        FMA_ROWS(N, w3, 64 * p + 48);
    }
}

INLINE void k4_row(const int N, const int q5, float *y, int64_t ldy, const float *x, int64_t ldx,
                   const unsigned char *row, int64_t K)
{
    __m512 acc[HYLA_QUANT_SKINNY_M];
    for (int i = 0; i < N; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < K / 256; b++, row += K4_BYTES(q5)) {
        for (int l = 0; l < K4_BYTES(q5); l += 64)
            hyla_prefetch_stream(row + l);
        k4_block(N, q5, acc, x + b * 256, ldx, row);
    }
    FINISH(N);
}

INLINE void q4_k_n(const int N, float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row, int64_t K)
{
    k4_row(N, 0, y, ldy, x, ldx, row, K);
}

INLINE void q5_k_n(const int N, float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row, int64_t K)
{
    k4_row(N, 1, y, ldy, x, ldx, row, K);
}

/* ---- Q6_K: 256 values in 16 sub-blocks of 16, int8 scales ------------------------------------------ */

INLINE void q6_k_n(const int N, float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row, int64_t K)
{
    __m512 acc[HYLA_QUANT_SKINNY_M];
    for (int i = 0; i < N; i++)
        acc[i] = _mm512_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < K / 256; b++, row += 210) {
        for (int l = 0; l < 210; l += 64)
            hyla_prefetch_stream(row + l);
        float d = hyla_half_at(row + 208);
        const signed char *sc = (const signed char *)(row + 192);
        for (int h = 0; h < 2; h++) { /* values 128 h .. 128 h + 127 */
            const unsigned char *ql = row + 64 * h, *qh = row + 128 + 32 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(hb, low2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), low2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), low2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), low2), 4));
            for (int g = 0; g < 4; g++) { /* values 128 h + 32 g + l, scales sc[8 h + 2 g + l / 16] */
                const float *xk = x + b * 256 + 128 * h + 32 * g;
                __m512 s0 = _mm512_set1_ps(d * (float)sc[8 * h + 2 * g]);
                __m512 s1 = _mm512_set1_ps(d * (float)sc[8 * h + 2 * g + 1]);
                __m512 w0 = _mm512_mul_ps(widen_u8(_mm256_castsi256_si128(q[g]), 32), s0);
                __m512 w1 = _mm512_mul_ps(widen_u8(_mm256_extracti128_si256(q[g], 1), 32), s1);
                for (int i = 0; i < N; i++) {
                    acc[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xk + i * ldx), acc[i]);
                    acc[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xk + i * ldx + 16), acc[i]);
                }
            }
        }
    }
    FINISH(N);
}

/* ---- int8 activations (VNNI): Q4_K, Q5_K, Q6_K against llama.cpp's Q8_K ------------------------- */

/* For zmm j of a K-quant-ordered block (sub-blocks 0 | 2, 1 | 3, 4 | 6, 5 | 7): the pshufb
 * selectors that spread scale s over its sub-block's 16-bit lanes straight from the packed bytes
 * (byte s of the 8 scales, in every 128-bit lane, then a zero byte: a selector byte with its top
 * bit set gives 0), and the qh bit (bit s for sub-block s) of Q5_K. */
#define SEL4(s) (s), -128, (s), -128, (s), -128, (s), -128
#define SEL32(s) SEL4(s), SEL4(s), SEL4(s), SEL4(s)
static const int8_t k4_scale_sel[4][64] = {{SEL32(0), SEL32(2)}, {SEL32(1), SEL32(3)}, {SEL32(4), SEL32(6)},
                                           {SEL32(5), SEL32(7)}};
#define BIT8(v) v, v, v, v, v, v, v, v
#define BIT32(v) BIT8(v), BIT8(v), BIT8(v), BIT8(v)
static const uint8_t k4_fifth_sel[4][64] = {{BIT32(0x01), BIT32(0x04)}, {BIT32(0x02), BIT32(0x08)},
                                            {BIT32(0x10), BIT32(0x40)}, {BIT32(0x20), BIT32(0x80)}};

/* Q4_K / Q5_K (q5) rows against N activation rows whose 256-value blocks are in the K-quant
 * order (hyla_qx_k4_order: sub-blocks 0 2 1 3 4 6 5 7), so that the low / high nibbles of 64
 * stored bytes are 64 values of x in a row: two 64-byte loads give a block's 256 levels in four
 * zmm with two ands and two shifts. Per block: sum_j sc_j (q_w . q_x over sub-block j) in int32
 * (u8 x s8 pairs to int16, |.| <= 2 * 31 * 127, then times the scales as int16 into int32), then
 * d_w d_x once; the mins against the sums of q_x per 32 (exact in int32), times dmin d_x, in four
 * fp32 lanes. */
typedef struct {
    __m512i sel[4], hsel[4];
} k4_consts;

VNNI_INLINE void k4_consts_load(k4_consts *k)
{
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        k->sel[j] = _mm512_loadu_si512((const void *)k4_scale_sel[j]);
        k->hsel[j] = _mm512_loadu_si512((const void *)k4_fifth_sel[j]);
    }
}

/* hyla_k4_scales_words' four words (the 8 scales, then the 8 mins, a byte each) from the 12 packed
 * bytes at p, in one register: with lanes a, b, c of the bytes' 32-bit words, the low parts are
 * (a, c, b, c >> 4) masked to 6, 4, 6, 4 bits a byte and the high ones bits 6-7 of (-, a, -, b)'s
 * bytes moved to bits 4-5. The scalar form stored four words and read them back as one vector:
 * a Q4_K matrix from the L3 on 2 threads 74.5-76.1 -> 77.1-77.7 GB/s with this one (the same words).
 * Reads 16 bytes at p (inside the block: the scales are its bytes 4-15). */
VNNI_INLINE __m128i k4_scales_vec(const unsigned char *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
    lo = _mm_and_si128(lo, _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
    __m128i hi = _mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2);
    hi = _mm_and_si128(hi, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* Four bytes at p as one int (a Q4_K / Q5_K block's d and dmin, f16 each, for one vcvtph2ps: two
 * scalar conversions and products cost ~15% of the kernel's time; with the scales spread straight
 * from the packed bytes below, a Q4_K matrix from the L3 on 2 threads read 77 -> 92 GB/s). */
INLINE int u32_at(const unsigned char *p)
{
    int v;
    memcpy(&v, p, 4);
    return v;
}

/* One stored block: its levels w[4], lane scales s[4], d, dmin and the mins as int16. */
typedef struct {
    __m512i w[4], s[4];
    __m128i mins16;
    __m128 dd; /* d, dmin in lanes 0, 1 */
} k4_unpacked;

VNNI_INLINE void k4_block_unpack(k4_unpacked *B, const int q5, const unsigned char *row, const k4_consts *k)
{
    const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    for (int l = 0; l < K4_BYTES(q5); l += 64)
        hyla_prefetch_stream(row + l);
    B->dd = _mm_cvtph_ps(_mm_cvtsi32_si128(u32_at(row)));
    __m128i sm = k4_scales_vec(row + 4);
    __m512i sc16 = _mm512_broadcast_i32x4(sm);
    B->mins16 = _mm_unpackhi_epi8(sm, _mm_setzero_si128());
    const unsigned char *qs = row + K4_QS(q5);
    __m512i A = _mm512_loadu_si512((const void *)qs), Bq = _mm512_loadu_si512((const void *)(qs + 64));
    B->w[0] = _mm512_and_si512(A, low4), B->w[1] = _mm512_and_si512(_mm512_srli_epi16(A, 4), low4);
    B->w[2] = _mm512_and_si512(Bq, low4), B->w[3] = _mm512_and_si512(_mm512_srli_epi16(Bq, 4), low4);
    if (q5) {
        __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + 16)));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            B->w[j] = _mm512_mask_add_epi8(B->w[j], _mm512_test_epi8_mask(H, k->hsel[j]), B->w[j], sixteen);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        B->s[j] = _mm512_shuffle_epi8(sc16, k->sel[j]);
}

/* acc += d d_x (levels . x) and accm += dmin d_x (mins . sums of x per 32) for block b of
 * activation row i. */
VNNI_INLINE void k4_block_accumulate(__m512 *acc, __m128 *accm, const k4_unpacked *B, const hyla_qx *x, int64_t i,
                                     int64_t b)
{
    int64_t K = x->K;
    __m512i sumi = levels_dot(B->w, B->s, x->q_k4 + i * K + b * 256);
    __m128 f = _mm_mul_ps(B->dd, _mm_set1_ps(x->d[i * (K / 256) + b])); /* d d_x, dmin d_x */
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(f), *acc);
    __m128i pair = _mm_loadu_si128((const __m128i *)(x->sums32 + i * (K / 32) + b * 8)); /* sums per 32 */
    *accm = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(B->mins16, pair)), _mm_permute_ps(f, 0x55), *accm);
}

VNNI_INLINE float k4_finish(__m512 acc, __m128 accm)
{
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

VNNI_INLINE void k4_row_i8(const int N, const int q5, float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)
{
    k4_consts k;
    k4_consts_load(&k);
    __m512 acc[HYLA_QUANT_SKINNY_M];
    __m128 accm[HYLA_QUANT_SKINNY_M];
    for (int i = 0; i < N; i++)
        acc[i] = _mm512_setzero_ps(), accm[i] = _mm_setzero_ps();
    for (int64_t b = 0; b < x->K / 256; b++, row += K4_BYTES(q5)) {
        k4_unpacked B;
        k4_block_unpack(&B, q5, row, &k);
        for (int i = 0; i < N; i++)
            k4_block_accumulate(&acc[i], &accm[i], &B, x, i, b);
    }
    for (int i = 0; i < N; i++)
        y[i * ldy] = k4_finish(acc[i], accm[i]);
}

/* Four rows against one activation row (decode, batch 1): the same operations per row as
 * k4_row_i8 with N = 1 (so the same bits), the rows' blocks interleaved. A row of a 1,024-wide
 * matrix is 4 blocks, and one row per call left each row's final reduction and the call itself
 * exposed: 57 GB/s from cache on 2 threads, under the DRAM's 80 here. */
VNNI_INLINE void k4_rows4_i8(const int q5, float *y, const hyla_qx *x, const unsigned char *const *rows)
{
    k4_consts k;
    k4_consts_load(&k);
    __m512 acc[4];
    __m128 accm[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        acc[r] = _mm512_setzero_ps(), accm[r] = _mm_setzero_ps();
    for (int64_t b = 0; b < x->K / 256; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            k4_unpacked B;
            k4_block_unpack(&B, q5, rows[r] + b * K4_BYTES(q5), &k);
            k4_block_accumulate(&acc[r], &accm[r], &B, x, 0, b);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        y[r] = k4_finish(acc[r], accm[r]);
}

VNNI_INLINE void q4_k_i8_n(const int N, float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)
{
    k4_row_i8(N, 0, y, ldy, x, row);
}

VNNI_INLINE void q5_k_i8_n(const int N, float *y, int64_t ldy, const hyla_qx *x, const unsigned char *row)
{
    k4_row_i8(N, 1, y, ldy, x, row);
}

/* Q6_K: sum over 16 sub-blocks of sc_j (q . q_x) with q in 0..63 (u8 x s8 pairs to int16: |.| <=
 * 2 * 63 * 127), minus 32 sum_j sc_j bsum_j for the -32 offset -- all exact in int32 (|.| < 2^29)
 * -- times d_w d_x once per block. A block's 64 bytes of low nibbles ql[64 h ..] hold values
 * 128 h .. + 63 (low halves) and + 64 .. + 127 (high halves) in x's order; their two high bits
 * come from qh[32 h + l] at bits 0-1, 2-3 (values l, 32 + l) and 4-5, 6-7 (64 + l, 96 + l),
 * moved to bits 4-5 by one variable shift per 16-bit lane. Each zmm of 64 values covers 4
 * sub-blocks of 16, one per 128-bit lane: its int16 scales come from one vpermw. */
static const int16_t q6_shift_lo[32] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
static const int16_t q6_shift_hi[32] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
typedef struct {
    __m512i low4, bits45, sh_lo, sh_hi, sidx[4];
} q6_consts;

VNNI_INLINE void q6_consts_load(q6_consts *c)
{
    c->low4 = _mm512_set1_epi8(0x0F), c->bits45 = _mm512_set1_epi8(0x30);
    c->sh_lo = _mm512_loadu_si512((const void *)q6_shift_lo), c->sh_hi = _mm512_loadu_si512((const void *)q6_shift_hi);
    hyla_group16_sidx_load(c->sidx);
}

VNNI_INLINE void q6_block_unpack(hyla_offset_block *B, const unsigned char *row, const q6_consts *c)
{
    for (int l = 0; l < 210; l += 64)
        hyla_prefetch_stream(row + l);
    B->d = hyla_half_at(row + 208);
    B->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + 192)));
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i L = _mm512_loadu_si512((const void *)(row + 64 * h));
        __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + 128 + 32 * h)));
        B->w[2 * h] = _mm512_or_si512(_mm512_and_si512(L, c->low4),
                                      _mm512_and_si512(_mm512_sllv_epi16(H, c->sh_lo), c->bits45));
        B->w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), c->low4),
                                          _mm512_and_si512(_mm512_srlv_epi16(H, c->sh_hi), c->bits45));
    }
    hyla_group16_spread(B->s, B->sc16, c->sidx);
}

/* acc += d d_x (levels . x - 32 sum_j sc_j bsum_j) for block b of activation row i. */
VNNI_INLINE void q6_block_accumulate(__m512 *acc, const hyla_offset_block *B, const hyla_qx *x, int64_t i, int64_t b)
{
    hyla_offset_block_accumulate(acc, B, 5, x, i, b);
}

/* q6_k_i8_n, and q6_k_rows4 (a Q4_K_M file's lm_head: 248,320 rows of four blocks each) */
HYLA_ONE_ACC_KERNELS(q6_k, 210, q6_consts, q6_consts_load, hyla_offset_block, q6_block_unpack, q6_block_accumulate)

/* ---- Q8_0 against llama.cpp's Q8_0 activations (per 32, f16 scale) ----------------------------- */

/* Two blocks (64 values) a step: the levels offset by 128 (u8: one xor) times the activations' int8 on
 * VNNI into 16 int32 lanes, 8 a block, each lane's sum starting from -128 times the sum of its four
 * activations (hyla_qx_q8_0_lanes, once per product; the abs, sign mask and masked subtract of stop 41's
 * form were two vector operations more a pair, the same integers: 23.0-23.8 -> 23.8-25.5 GB/s from the L2
 * on one thread on the Intel VM): sum q_w q_x, exact (the lane's terms |.| <= 4 * 255 * 127 + 128 * 4 *
 * 127; a block's sum |.| <= 32 * 128 * 127); then (d_w d_x) times it in fp32, d_w of both blocks from one
 * 64-byte load (f16 at bytes 0 and 34) by one vpermw, d_x per lane from hyla_qx_q8_0_lanes. The per-block
 * value of ggml's vec_dot_q8_0_q8_0 (the prefill GEMM's), summed in another order. About half the vector
 * operations a value of the fp32-activation kernel (q8_0_n: two widenings, two conversions, three
 * multiplies a block), on the Zen 5 VM: from the L2 on one thread 38-40 -> 69-72 GB/s, from the L3 on two
 * 70-73 -> 106-107, a 256 MB matrix in a fast memory phase 71 -> 93 (plain reads 83-84; level in slow
 * ones). The pairs alternate between two accumulators, written out: indexed by p & 1 they lived on the
 * stack (41 GB/s from the L2). K: a multiple of 64. x: hyla_quantize_x_q8_0, then hyla_qx_q8_0_lanes. */
#define REP8(v) v, v, v, v, v, v, v, v
static const int16_t q8_0_dw_idx[32] = {REP8(0), REP8(17), REP8(0), REP8(17)};
#undef REP8
typedef struct {
    __m512i didx;
} q8_0_consts;
VNNI_INLINE void q8_0_consts_load(q8_0_consts *c) { c->didx = _mm512_loadu_si512((const void *)q8_0_dw_idx); }

/* acc[i] += the pair of blocks at blk (values 64 p .. 64 p + 63) against activation row i */
VNNI_INLINE void q8_0_pair(const int N, __m512 *acc, const hyla_qx *x, const unsigned char *blk, int64_t p,
                           const q8_0_consts *c)
{
    hyla_prefetch_stream(blk);
    __m512i raw = _mm512_loadu_si512((const void *)blk);
    __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(c->didx, raw)));
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 2))),
                                   _mm256_loadu_si256((const __m256i *)(blk + 36)), 1);
    hyla_pair32_accumulate(N, acc, x, _mm512_xor_si512(w, _mm512_set1_epi8(-128)) /* q_w + 128, as u8 */, dw, p);
}

HYLA_PAIR32_KERNELS(q8_0, 68, q8_0_consts, q8_0_consts_load, q8_0_pair)

/* ---- instances and dispatch -------------------------------------------------------------------- */

#define INSTANCE(type, N)                                                                                              \
    TARGET static void type##_##N(float *y, int64_t ldy, const float *x, int64_t ldx, const unsigned char *row,        \
                                  int64_t K)                                                                           \
    {                                                                                                                  \
        type##_n(N, y, ldy, x, ldx, row, K);                                                                           \
    }
#define INSTANCES(type)                                                                                                \
    INSTANCE(type, 1) INSTANCE(type, 2) INSTANCE(type, 3) INSTANCE(type, 4) INSTANCE(type, 5) INSTANCE(type, 6)       \
    INSTANCE(type, 7) INSTANCE(type, 8)                                                                                \
    static const hyla_qdot_fn type##_by_n[HYLA_QUANT_SKINNY_M + 1] = {NULL,       type##_1, type##_2, type##_3,        \
                                                                       type##_4,   type##_5, type##_6, type##_7, type##_8};
INSTANCES(q8_0)
INSTANCES(q4_k)
INSTANCES(q5_k)
INSTANCES(q6_k)

INSTANCES_I8(q4_k)
INSTANCES_I8(q5_k)
VNNI_TARGET static void q4_k_rows4(float *y, const hyla_qx *x, const unsigned char *const *rows) { k4_rows4_i8(0, y, x, rows); }
VNNI_TARGET static void q5_k_rows4(float *y, const hyla_qx *x, const unsigned char *const *rows) { k4_rows4_i8(1, y, x, rows); }
#endif

/* The int8 rows start on a 64-byte boundary (one cache line a zmm load): at the offsets their layout
 * gave them (18, 34, 58 ... bytes past one; the K-quant-ordered copy of a MoE expert's item 16-48),
 * every 64-byte load of x split over two lines: a Q6_K matrix (a Q4_K_M file's lm_head) read from
 * the L3 on 2 threads at 97 GB/s, aligned 106 (the same bits); a whole decode, from memory, level
 * (8-token windows alternating in one process, +-1%). 32 floats of slack: 62 bytes of
 * padding at most, and the bsums' one int16 past its end. */
static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

int64_t hyla_qx_floats(int64_t n, int64_t K) { return (n * K + 3) / 4 + n * (K / 32) + (n * (K / 16) + 1) / 2 + 32; }

int64_t hyla_qx_k4_bytes(int64_t n, int64_t K) { return n * K + n * (K / 32) * (int64_t)sizeof(int16_t) + 64; }

void hyla_qx_k4_order(hyla_qx *x, int64_t n, int8_t *dst)
{
    dst = align64(dst);
    static const int from[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    int16_t *sums = (int16_t *)(void *)(dst + n * x->K); /* n K is a multiple of 256 */
    for (int64_t i = 0; i < n; i++) {
        for (int64_t b = 0; b < x->K / 256; b++)
            for (int j = 0; j < 8; j++)
                memcpy(dst + i * x->K + b * 256 + 32 * j, x->q + i * x->K + b * 256 + 32 * from[j], 32);
        const int16_t *bs = x->bsums + i * (x->K / 16);
        for (int64_t j = 0; j < x->K / 32; j++) /* |.| <= 32 * 127: exact in int16 */
            sums[i * (x->K / 32) + j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]);
    }
    x->q_k4 = dst;
    x->sums32 = sums;
}

int64_t hyla_qx_q8_0_lanes_bytes(int64_t n, int64_t K)
{
    return n * (K / 4) * (int64_t)(sizeof(float) + sizeof(int32_t)) + 64;
}

void hyla_qx_q8_0_lanes(hyla_qx *x, int64_t n, void *dst)
{
    int64_t K = x->K;
    float *d = align64(dst);
    int32_t *off = (int32_t *)(d + n * (K / 4)); /* 64-byte aligned: K / 4 is a multiple of 16 */
    for (int64_t i = 0; i < n * (K / 32); i++)
        for (int l = 0; l < 8; l++)
            d[8 * i + l] = x->d[i];
    for (int64_t j = 0; j < n * (K / 4); j++) {
        const int8_t *q = x->q + 4 * j;
        off[j] = -128 * (q[0] + q[1] + q[2] + q[3]);
    }
    x->d_lanes = d;
    x->offs_lanes = off;
}

/* One row's blocks of 32 as llama.cpp's x86 quantize_row_q8_0: the scale kept as f16 (the block
 * stores it so), the values scaled by 127 / max |x| and rounded to nearest, ties to even (|x id| <=
 * 127.00002, so no value reaches 128). */
static void q8_0_row_scalar(float *d, int16_t *bsums, int8_t *q, const float *x, int64_t K)
{
    for (int64_t b = 0; b < K / 32; b++) {
        const float *xb = x + b * 32;
        int8_t *qb = q + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        for (int j = 0; j < 32; j++)
            qb[j] = (int8_t)nearbyintf(xb[j] * id);
        for (int g = 0; g < 2; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += qb[16 * g + j];
            bsums[2 * b + g] = (int16_t)s;
        }
    }
}

/* llama.cpp's quantize_row_q8_K_ref, value for value, for one row's blocks of 256: the block's
 * value of largest magnitude `max` (the first one on ties), iscale = -127 / max, q =
 * nearest(iscale x) capped at 127, d = 1 / iscale; bsums the sums of 16 q. */
static void q8_k_row_scalar(float *d, int16_t *bsums, int8_t *q, const float *x, int64_t K)
{
    for (int64_t b = 0; b < K / 256; b++) {
        const float *xb = x + b * 256;
        int8_t *qb = q + b * 256;
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(xb[j]) > amax)
                amax = fabsf(xb[j]), max = xb[j];
        if (amax == 0) {
            d[b] = 0;
            memset(qb, 0, 256);
        } else {
            float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                int v = (int)nearbyintf(iscale * xb[j]);
                qb[j] = (int8_t)(v < 127 ? v : 127);
            }
            d[b] = 1.0f / iscale;
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += qb[16 * g + j];
            bsums[b * 16 + g] = (int16_t)s;
        }
    }
}

#ifdef HAVE_KERNELS
/* The same two roundings 16 values at a time, bit for bit: max |x| is exact in any order; the first
 * value of that magnitude is found by a mask scan in index order; x times the scale is one rounded
 * product either way, and vcvtps2dq rounds it to nearest even as nearbyintf does in the default
 * rounding mode; the int32 values are in [-127, 127] (capped at 127 as the scalar code caps), so the
 * saturating narrowing to int8 changes nothing. tests/test_gguf.c compares both ways. */
TARGET static void q8_0_row_avx512(float *d, int16_t *bsums, int8_t *q, const float *x, int64_t K)
{
    for (int64_t b = 0; b < K / 32; b++) {
        const float *xb = x + b * 32;
        __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        _mm_storeu_si128((__m128i *)(void *)(q + b * 32), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(void *)(q + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
        bsums[2 * b] = (int16_t)_mm512_reduce_add_epi32(q0);
        bsums[2 * b + 1] = (int16_t)_mm512_reduce_add_epi32(q1);
    }
}

TARGET static void q8_k_row_avx512(float *d, int16_t *bsums, int8_t *q, const float *x, int64_t K)
{
    for (int64_t b = 0; b < K / 256; b++) {
        const float *xb = x + b * 256;
        int8_t *qb = q + b * 256;
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < 256; j += 16)
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + j)));
        float amax = _mm512_reduce_max_ps(m), max = 0;
        if (amax == 0) { /* (also every value NaN: the scalar code's comparisons fail the same way) */
            d[b] = 0;
            memset(qb, 0, 256);
            memset(bsums + b * 16, 0, 16 * sizeof *bsums);
            continue;
        }
        for (int j = 0; j < 256; j += 16) {
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = xb[j + __builtin_ctz(hit)];
                break;
            }
        }
        float iscale = -127.0f / max;
        const __m512 s = _mm512_set1_ps(iscale);
        const __m512i cap = _mm512_set1_epi32(127);
        for (int g = 0; g < 16; g++) {
            __m512i v = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(s, _mm512_loadu_ps(xb + 16 * g))), cap);
            _mm_storeu_si128((__m128i *)(void *)(qb + 16 * g), _mm512_cvtsepi32_epi8(v));
            bsums[b * 16 + g] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        d[b] = 1.0f / iscale;
    }
}
#endif

typedef void (*row_quantizer)(float *d, int16_t *bsums, int8_t *q, const float *x, int64_t K);

static int have_avx512(void)
{
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    return have;
}

int hyla_quantize_x_scalar = 0;

/* Rows of x [n, K] through the AVX-512 row quantizer where the CPU has it (and the scalar one is
 * not asked for), else the scalar one; blocks of `block` values: d [n][K / block], bsums
 * [n][K / 16], q [n][K] laid out in scratch. */
static void quantize_rows(hyla_qx *out, const float *x, int64_t n, int64_t K, float *scratch, int block,
                          row_quantizer scalar, row_quantizer vector)
{
    row_quantizer row = vector && have_avx512() && !hyla_quantize_x_scalar ? vector : scalar;
    float *d = scratch;
    int16_t *bsums = (int16_t *)(d + n * (K / block));
    int8_t *q = align64(bsums + n * (K / 16) + 1);
    if (omp_in_parallel() || n * K * 8 < HYLA_PAR_MIN_WORK) { /* (no region: even one not taken costs ~0.4 us) */
        for (int64_t i = 0; i < n; i++)
            row(d + i * (K / block), bsums + i * (K / 16), q + i * K, x + i * K, K);
    } else {
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * K * 8)
        for (int64_t i = 0; i < n; i++)
            row(d + i * (K / block), bsums + i * (K / 16), q + i * K, x + i * K, K);
    }
    *out = (hyla_qx){.q = q, .d = d, .bsums = bsums, .K = K, .block = block};
}

#ifdef HAVE_KERNELS
#define Q8_0_ROW_AVX512 q8_0_row_avx512
#define Q8_K_ROW_AVX512 q8_k_row_avx512
#else
#define Q8_0_ROW_AVX512 NULL
#define Q8_K_ROW_AVX512 NULL
#endif

void hyla_quantize_x_q8_0(hyla_qx *out, const float *x, int64_t n, int64_t K, float *scratch)
{
    quantize_rows(out, x, n, K, scratch, 32, q8_0_row_scalar, Q8_0_ROW_AVX512);
}

void hyla_quantize_x(hyla_qx *out, const float *x, int64_t n, int64_t K, float *scratch)
{
    quantize_rows(out, x, n, K, scratch, 256, q8_k_row_scalar, Q8_K_ROW_AVX512);
}

hyla_qdot_fn hyla_qdot_avx512(hyla_ggml_type t, int64_t n)
{
#ifdef HAVE_KERNELS
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    if (!have || n < 1 || n > HYLA_QUANT_SKINNY_M)
        return NULL;
    switch (t) {
    case HYLA_GGML_Q8_0: return q8_0_by_n[n];
    case HYLA_GGML_Q4_K: return q4_k_by_n[n];
    case HYLA_GGML_Q5_K: return q5_k_by_n[n];
    case HYLA_GGML_Q6_K: return q6_k_by_n[n];
    default: return NULL;
    }
#else
    (void)t, (void)n;
    return NULL;
#endif
}

hyla_qdot_i8_rows4_fn hyla_qdot_i8_rows4_avx512(hyla_ggml_type t)
{
#ifdef HAVE_KERNELS
    if (!hyla_qdot_i8_avx512(t, 1))
        return NULL;
    return t == HYLA_GGML_Q4_K   ? q4_k_rows4
           : t == HYLA_GGML_Q5_K ? q5_k_rows4
           : t == HYLA_GGML_Q6_K ? q6_k_rows4
           : t == HYLA_GGML_IQ4_XS ? hyla_qdot_i8_rows4_iq4(t)
                                 : hyla_qdot_i8_rows4_k23(t);
#else
    (void)t;
    return NULL;
#endif
}

hyla_qdot_i8_fn hyla_qdot_i8_avx512(hyla_ggml_type t, int64_t n)
{
#ifdef HAVE_KERNELS
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    if (!have || n < 1 || n > HYLA_QUANT_SKINNY_M)
        return NULL;
    switch (t) {
    case HYLA_GGML_Q8_0: return q8_0_i8_by_n[n];
    case HYLA_GGML_Q4_K: return q4_k_i8_by_n[n];
    case HYLA_GGML_Q5_K: return q5_k_i8_by_n[n];
    case HYLA_GGML_Q6_K: return q6_k_i8_by_n[n];
    case HYLA_GGML_Q2_K: case HYLA_GGML_Q3_K: return hyla_qdot_i8_k23(t, n);
    case HYLA_GGML_IQ4_XS: return hyla_qdot_i8_iq4(t, n);
    case HYLA_GGML_Q4_0: case HYLA_GGML_IQ4_NL: return hyla_qdot_i8_b32(t, n);
    default: return NULL;
    }
#else
    (void)t, (void)n;
    return NULL;
#endif
}
