/* Causal GQA softmax attention, forward (spec §3.5 step 5), flash-style.
 *
 * Work is split into tasks (kv head g, block of ATT_BQ = 16 of the T x Hq/Hkv query rows
 * (position, query head) that share g); each task is done by one thread, walking the visible
 * keys in blocks of ATT_BK with an online softmax (running max m, running sum l; the output
 * rows, which double as accumulators, are rescaled when the max grows). The arithmetic of a
 * task does not depend on which thread runs it or on how many there are, so results are
 * bitwise thread-count invariant. Scratch is a few fixed-size stack arrays
 * (the largest, the task's transposed queries, ATT_MAX_HD x 16 floats = 64 KiB), so
 * hyla_attention_work_floats() is 0.
 *
 * The 16 rows of a task are the vector lanes: queries are transposed once per task into
 * qT [hd, 16], scores are kept key-major sT [key, 16], and the softmax (mask, max, exp, sums)
 * runs across rows in vector registers. Inner kernels are plain C loops over fixed-size local
 * arrays, fully unrolled (`GCC unroll 16`) so that GCC's SLP vectoriser keeps them in vector
 * registers for AVX2 (2 x 8 lanes) and AVX-512 (16 lanes) alike:
 *   scores: 16 rows x 8 keys, rank-1 updates over d (qT column times a key element);
 *   P.V:    4 rows x 32 output dims, rank-1 updates over keys (probability times a value row).
 * Each keeps 8 vector accumulators: an FMA's latency times its two pipes (4 measured half the
 * rate). The order of every element's sum is that of the narrower kernels they replaced.
 * Lanes past the task's rows are zero queries whose results are never stored.
 *
 * Rounding vs a two-pass softmax in exact arithmetic: scores are length-hd fma dots; exp
 * arguments, exp itself (att_exp, <= 1.02 ulp) and the per-block rescaling each add a rounding;
 * the P.V and l sums have S terms. tests/test_core_ops.c derives the resulting bound. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/ops.h"

#define ATT_BQ 16        /* query rows per task = vector lanes of the softmax */
#define ATT_BK 64        /* keys per online-softmax block */
#define ATT_KG 8         /* keys per score micro-kernel */
#define ATT_RG 4         /* query rows per P.V micro-kernel */
#define ATT_DC 16        /* output dims per P.V micro-kernel */
#define ATT_MAX_HD 1024  /* bounds qT on the stack */

/* Fused multiply-add where the hardware has one; elsewhere fmaf would be a slow libm call. */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define ATT_FMA(a, b, c) fmaf(a, b, c)
#else
#define ATT_FMA(a, b, c) ((a) * (b) + (c))
#endif

size_t hyla_attention_work_floats(int64_t S) { return 0; }

/* e^x for x <= 0, vectorisable (Cody-Waite reduction by ln 2, degree-7 Cephes polynomial; 2^n
 * built from the bits of a magic-number rounding, so there is no float->int conversion and GCC
 * vectorises it for AVX2 and AVX-512). Max error 1.02 ulp measured over [-87.3, 0] (FMA
 * build); results below 2^-126 may flush to 0 (abs error < 1.2e-38); -inf -> 0. */
static inline float att_exp(float x)
{
    float xc = x > -100.0f ? x : -100.0f;
    union { float f; int32_t i; } t = {.f = ATT_FMA(xc, 1.44269504088896341f, 12582912.0f)};
    float n = t.f - 12582912.0f;          /* round(xc / ln 2), exact */
    int32_t b = (t.i - 0x4b400000) + 127; /* biased exponent of 2^n */
    b = b > 0 ? b : 0;                    /* 2^n -> 0 below 2^-126 */
    float r = ATT_FMA(n, -0.693145751953125f, xc); /* ln 2 split: n * hi is exact */
    r = ATT_FMA(n, -1.428606765330187e-06f, r);
    float p = 1.9875691500e-4f;
    p = ATT_FMA(p, r, 1.3981999507e-3f);
    p = ATT_FMA(p, r, 8.3334519073e-3f);
    p = ATT_FMA(p, r, 4.1665795894e-2f);
    p = ATT_FMA(p, r, 1.6666665459e-1f);
    p = ATT_FMA(p, r, 5.0000001201e-1f);
    p = ATT_FMA(p * r, r, r) + 1.0f;
    union { int32_t i; float f; } two_n = {.i = b << 23};
    return p * two_n.f;
}

/* sT[j][i] = scale * q_i . k_j for 16 rows i and 8 keys j, from qT [hd, 16]: 8 independent
 * accumulators (FMA latency x its two pipes), each a length-hd fma chain over d in order.
 * pf: NULL, or 16 rows [hd] to ask the caches for alongside, a line of each per 16 values of d
 * (see att_task). */
static void att_scores_16x8(float *sT /*[8, 16]*/, const float *qT /*[hd, 16]*/,
                            const float *const *kr /*[8]->[hd]*/, int64_t hd, float scale, const float *const *pf)
{
    float a0[ATT_BQ] = {0}, a1[ATT_BQ] = {0}, a2[ATT_BQ] = {0}, a3[ATT_BQ] = {0};
    float a4[ATT_BQ] = {0}, a5[ATT_BQ] = {0}, a6[ATT_BQ] = {0}, a7[ATT_BQ] = {0};
    const float *k0 = kr[0], *k1 = kr[1], *k2 = kr[2], *k3 = kr[3], *k4 = kr[4], *k5 = kr[5], *k6 = kr[6], *k7 = kr[7];
    for (int64_t d = 0; d < hd; d++) {
        if (pf && d % 16 == 0)
            for (int c = 0; c < 2 * ATT_KG; c++)
                __builtin_prefetch(pf[c] + d, 0, 3);
        const float *qd = qT + d * ATT_BQ;
        float x0 = k0[d], x1 = k1[d], x2 = k2[d], x3 = k3[d], x4 = k4[d], x5 = k5[d], x6 = k6[d], x7 = k7[d];
#pragma GCC unroll 16
        for (int i = 0; i < ATT_BQ; i++) {
            a0[i] = ATT_FMA(qd[i], x0, a0[i]);
            a1[i] = ATT_FMA(qd[i], x1, a1[i]);
            a2[i] = ATT_FMA(qd[i], x2, a2[i]);
            a3[i] = ATT_FMA(qd[i], x3, a3[i]);
            a4[i] = ATT_FMA(qd[i], x4, a4[i]);
            a5[i] = ATT_FMA(qd[i], x5, a5[i]);
            a6[i] = ATT_FMA(qd[i], x6, a6[i]);
            a7[i] = ATT_FMA(qd[i], x7, a7[i]);
        }
    }
#pragma omp simd
    for (int i = 0; i < ATT_BQ; i++) {
        sT[i] = a0[i] * scale;
        sT[ATT_BQ + i] = a1[i] * scale;
        sT[2 * ATT_BQ + i] = a2[i] * scale;
        sT[3 * ATT_BQ + i] = a3[i] * scale;
        sT[4 * ATT_BQ + i] = a4[i] * scale;
        sT[5 * ATT_BQ + i] = a5[i] * scale;
        sT[6 * ATT_BQ + i] = a6[i] * scale;
        sT[7 * ATT_BQ + i] = a7[i] * scale;
    }
}

/* The one product shape of the forward's P.V and the backward's tiles: c_r[k] += sum_{x < nx}
 * A[r ars + x axs] B[x ldb + k] for 4 rows r (each its own pointer) and 16 columns k, rank-1 updates
 * over x in order (GCC keeps the 4 x 16 accumulators in vector registers). */
static void mk_4x16(float *const *c, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb, int64_t nx)
{
    float a0[ATT_DC], a1[ATT_DC], a2[ATT_DC], a3[ATT_DC];
    memcpy(a0, c[0], sizeof a0), memcpy(a1, c[1], sizeof a1), memcpy(a2, c[2], sizeof a2), memcpy(a3, c[3], sizeof a3);
    for (int64_t x = 0; x < nx; x++) {
        const float *b = B + x * ldb, *ax = A + x * axs;
        float x0 = ax[0], x1 = ax[ars], x2 = ax[2 * ars], x3 = ax[3 * ars];
#pragma GCC unroll 16
        for (int k = 0; k < ATT_DC; k++) {
            a0[k] = ATT_FMA(x0, b[k], a0[k]);
            a1[k] = ATT_FMA(x1, b[k], a1[k]);
            a2[k] = ATT_FMA(x2, b[k], a2[k]);
            a3[k] = ATT_FMA(x3, b[k], a3[k]);
        }
    }
    memcpy(c[0], a0, sizeof a0), memcpy(c[1], a1, sizeof a1), memcpy(c[2], a2, sizeof a2), memcpy(c[3], a3, sizeof a3);
}

/* The same for 32 columns (8 accumulators: an FMA's latency times its two pipes; 4 measured half
 * the rate); each element's sum runs over x in the same order, so it equals two mk_4x16 calls bit
 * for bit. With AVX-512 in intrinsics, the B row held in two registers: GCC's version of the plain
 * loop re-read it from memory for each of the 4 rows (12 loads per 8 FMAs instead of 6, slower than
 * the 16-column kernel). */
#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>
static void mk_4x32(float *const *c, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb, int64_t nx)
{
    __m512 c00 = _mm512_loadu_ps(c[0]), c01 = _mm512_loadu_ps(c[0] + 16);
    __m512 c10 = _mm512_loadu_ps(c[1]), c11 = _mm512_loadu_ps(c[1] + 16);
    __m512 c20 = _mm512_loadu_ps(c[2]), c21 = _mm512_loadu_ps(c[2] + 16);
    __m512 c30 = _mm512_loadu_ps(c[3]), c31 = _mm512_loadu_ps(c[3] + 16);
    for (int64_t x = 0; x < nx; x++) {
        const float *b = B + x * ldb, *ax = A + x * axs;
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        __asm__("" : "+v"(b0), "+v"(b1)); /* in registers: GCC would fold them into each FMA, 8 loads */
        __m512 x0 = _mm512_set1_ps(ax[0]), x1 = _mm512_set1_ps(ax[ars]);
        __m512 x2 = _mm512_set1_ps(ax[2 * ars]), x3 = _mm512_set1_ps(ax[3 * ars]);
        c00 = _mm512_fmadd_ps(x0, b0, c00), c01 = _mm512_fmadd_ps(x0, b1, c01);
        c10 = _mm512_fmadd_ps(x1, b0, c10), c11 = _mm512_fmadd_ps(x1, b1, c11);
        c20 = _mm512_fmadd_ps(x2, b0, c20), c21 = _mm512_fmadd_ps(x2, b1, c21);
        c30 = _mm512_fmadd_ps(x3, b0, c30), c31 = _mm512_fmadd_ps(x3, b1, c31);
    }
    _mm512_storeu_ps(c[0], c00), _mm512_storeu_ps(c[0] + 16, c01);
    _mm512_storeu_ps(c[1], c10), _mm512_storeu_ps(c[1] + 16, c11);
    _mm512_storeu_ps(c[2], c20), _mm512_storeu_ps(c[2] + 16, c21);
    _mm512_storeu_ps(c[3], c30), _mm512_storeu_ps(c[3] + 16, c31);
}

/* 8 rows x 32 columns: 16 accumulators, so each pair of B registers and each broadcast serve twice
 * the FMAs of mk_4x32 (10 loads per 16 FMAs instead of 6 per 8); each element's sum runs over x
 * in the same order, so it equals two mk_4x32 calls bit for bit. The attention backward's tiles
 * (8 rows of dK / dV / dQ, or two row groups of a P / dS tile with the same columns) take it:
 * 6 layers of a 512-token backward, 8 x 256 query heads: 96-103 -> 68-78 ms on 2 threads, and the
 * forward's P.V (two row groups that see the same keys) 27 -> 22 ms; the same bits. */
#define ATT_HAVE_MK8 1
static void mk_8x32(float *const *c, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb, int64_t nx)
{
    __m512 c00 = _mm512_loadu_ps(c[0]), c01 = _mm512_loadu_ps(c[0] + 16);
    __m512 c10 = _mm512_loadu_ps(c[1]), c11 = _mm512_loadu_ps(c[1] + 16);
    __m512 c20 = _mm512_loadu_ps(c[2]), c21 = _mm512_loadu_ps(c[2] + 16);
    __m512 c30 = _mm512_loadu_ps(c[3]), c31 = _mm512_loadu_ps(c[3] + 16);
    __m512 c40 = _mm512_loadu_ps(c[4]), c41 = _mm512_loadu_ps(c[4] + 16);
    __m512 c50 = _mm512_loadu_ps(c[5]), c51 = _mm512_loadu_ps(c[5] + 16);
    __m512 c60 = _mm512_loadu_ps(c[6]), c61 = _mm512_loadu_ps(c[6] + 16);
    __m512 c70 = _mm512_loadu_ps(c[7]), c71 = _mm512_loadu_ps(c[7] + 16);
    for (int64_t x = 0; x < nx; x++) {
        const float *b = B + x * ldb, *ax = A + x * axs;
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        __asm__("" : "+v"(b0), "+v"(b1));
        __m512 xr;
#define MK8_ROW(r, a0, a1) \
    xr = _mm512_set1_ps(ax[(r) * ars]), a0 = _mm512_fmadd_ps(xr, b0, a0), a1 = _mm512_fmadd_ps(xr, b1, a1)
        MK8_ROW(0, c00, c01);
        MK8_ROW(1, c10, c11);
        MK8_ROW(2, c20, c21);
        MK8_ROW(3, c30, c31);
        MK8_ROW(4, c40, c41);
        MK8_ROW(5, c50, c51);
        MK8_ROW(6, c60, c61);
        MK8_ROW(7, c70, c71);
#undef MK8_ROW
    }
    __asm__("" : "+r"(c)); /* the row pointers read again here: GCC had kept all 8 live through the loop
                            * (in vector registers), spilling a B register to the stack */
    _mm512_storeu_ps(c[0], c00), _mm512_storeu_ps(c[0] + 16, c01);
    _mm512_storeu_ps(c[1], c10), _mm512_storeu_ps(c[1] + 16, c11);
    _mm512_storeu_ps(c[2], c20), _mm512_storeu_ps(c[2] + 16, c21);
    _mm512_storeu_ps(c[3], c30), _mm512_storeu_ps(c[3] + 16, c31);
    _mm512_storeu_ps(c[4], c40), _mm512_storeu_ps(c[4] + 16, c41);
    _mm512_storeu_ps(c[5], c50), _mm512_storeu_ps(c[5] + 16, c51);
    _mm512_storeu_ps(c[6], c60), _mm512_storeu_ps(c[6] + 16, c61);
    _mm512_storeu_ps(c[7], c70), _mm512_storeu_ps(c[7] + 16, c71);
}
#else
static void mk_4x32(float *const *c, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb, int64_t nx)
{
    float *hi[4] = {c[0] + ATT_DC, c[1] + ATT_DC, c[2] + ATT_DC, c[3] + ATT_DC};
    mk_4x16(c, A, ars, axs, B, ldb, nx);
    mk_4x16(hi, A, ars, axs, B + ATT_DC, ldb, nx);
}
#endif

/* Columns [k0, k1) of the 4 rows c (k1 - k0 a multiple of 16): 32 at a time while they last. */
static void mk_4xn(float *const *c, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb, int64_t nx,
                   int64_t k0, int64_t k1)
{
    for (int64_t k = k0; k < k1;) {
        float *ck[4] = {c[0] + k, c[1] + k, c[2] + k, c[3] + k};
        if (k + 2 * ATT_DC <= k1) {
            mk_4x32(ck, A, ars, axs, B + k, ldb, nx);
            k += 2 * ATT_DC;
        } else {
            mk_4x16(ck, A, ars, axs, B + k, ldb, nx);
            k += ATT_DC;
        }
    }
}

/* The same for 8 rows (A's rows ars apart from c[0]'s): mk_8x32 where there is one, else two
 * mk_4xn calls; the same bits either way. */
static void mk_8xn(float *const *c, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb, int64_t nx,
                   int64_t k0, int64_t k1)
{
#ifdef ATT_HAVE_MK8
    int64_t k = k0;
    for (; k + 2 * ATT_DC <= k1; k += 2 * ATT_DC) {
        float *ck[8];
        for (int r = 0; r < 8; r++)
            ck[r] = c[r] + k;
        mk_8x32(ck, A, ars, axs, B + k, ldb, nx);
    }
    k0 = k;
#endif
    mk_4xn(c, A, ars, axs, B, ldb, nx, k0, k1);
    mk_4xn(c + 4, A + 4 * ars, ars, axs, B, ldb, nx, k0, k1);
}

/* o_r[c] += sum_{j < nk} pT[j][r] v_j[c] for 4 rows r and c < w, keys j in order for every
 * element: 32 columns at a time, then 16, then one at a time. */
/* (not inlined: inside att_task GCC then left the score and softmax loops scalar, 7x slower) */
__attribute__((noinline)) static void att_pv_rows(float *const *o /*[rows]->[w]*/,
                                                  const float *pT /*[nk, 16], lane 0 = row 0*/,
                                                  const float *v /*[nk, ldv]*/, int64_t ldv, int nk, int w,
                                                  int rows /* 4 or 8 */)
{
    int c0 = w / ATT_DC * ATT_DC;
    if (rows == 8)
        mk_8xn(o, pT, 1, ATT_BQ, v, ldv, nk, 0, c0);
    else
        mk_4xn(o, pT, 1, ATT_BQ, v, ldv, nk, 0, c0);
    for (int j = 0; j < nk && c0 < w; j++) { /* tail: same operations, same order per element */
        const float *vr = v + j * ldv, *p = pT + j * ATT_BQ;
        for (int c = c0; c < w; c++)
            for (int r = 0; r < rows; r++)
                o[r][c] = ATT_FMA(p[r], vr[c], o[r][c]);
    }
}

/* Online-softmax step for one key block across the 16 rows: masks keys j >= lim[i], turns sT
 * into probabilities relative to the new running max, updates m and l, returns the factor
 * corr[i] by which row i's output must be rescaled. */
static void att_softmax_block(float *sT /*[nk, 16]*/, int nk, const int *lim /*[16]*/,
                              float *m /*[16]*/, float *l /*[16]*/, float *corr /*[16]*/)
{
    float mx[ATT_BQ], sum[ATT_BQ] = {0};
    memcpy(mx, m, sizeof mx);
    for (int j = 0; j < nk; j++) {
        float *s = sT + j * ATT_BQ;
#pragma omp simd
        for (int i = 0; i < ATT_BQ; i++) {
            s[i] = j < lim[i] ? s[i] : -INFINITY;
            mx[i] = s[i] > mx[i] ? s[i] : mx[i];
        }
    }
    for (int j = 0; j < nk; j++) {
        float *s = sT + j * ATT_BQ;
#pragma omp simd
        for (int i = 0; i < ATT_BQ; i++) {
            s[i] = att_exp(s[i] - mx[i]);
            sum[i] += s[i];
        }
    }
#pragma omp simd
    for (int i = 0; i < ATT_BQ; i++) {
        corr[i] = att_exp(m[i] - mx[i]); /* 0 on the first block (m = -inf), 1 if max holds */
        l[i] = l[i] * corr[i] + sum[i];
        m[i] = mx[i];
    }
}

/* One task: kv head g, rows row0 .. row0+nq-1 of that head's T * r query rows, row = t r + hh
 * for position t and query head h = g r + hh (the r heads sharing g fill the lanes together,
 * which also keeps decode, T = 1, from wasting lanes).
 * stream: this task is the only one to read its head's keys and values (a decoded token, or a
 * verify of a few), so they come from memory once, a row of 1 KB (hd = 256) every 2 (the other
 * heads' rows between): too short a run for the hardware's prefetchers. The scores of each 8 keys
 * then ask for the next 8 key rows and these 8 keys' value rows (read by P.V after the block's
 * scores). A decoded token's attention over 4,096 cached positions (6 layers, 8 x 2 heads of 256,
 * 100 MB of keys and values) 4.1-4.2 -> 2.5 ms on 2 threads; the bf16 0.8B model's decode at 4,000
 * positions 26.0 -> 28.5 and 34.0 -> 36.9 tok/s (8-token windows alternating in one process), at 500
 * level; the same bits. Prefill's tasks read their keys from the caches, so they ask for none. */
static void att_task(float *out, float *lse, const float *q, const float *k, const float *v,
                     int64_t row0, int nq, int64_t past, int64_t g, int64_t r, int64_t Hq,
                     int64_t Hkv, int64_t hd, float scale, int stream)
{
    float qT[ATT_MAX_HD * ATT_BQ];      /* [hd, 16] queries, transposed; zero past nq */
    float sT[ATT_BK * ATT_BQ];          /* [BK, 16] scores, then probabilities */
    float m[ATT_BQ], l[ATT_BQ], corr[ATT_BQ];
    float dummy[ATT_MAX_HD] = {0};      /* output of rows past nq */
    int64_t last[ATT_BQ];               /* last key row i sees: past + t */
    int lim[ATT_BQ];
    float *orow[ATT_BQ];
    for (int i = 0; i < ATT_BQ; i++) {
        int64_t row = row0 + (i < nq ? i : nq - 1);
        int64_t t = row / r, h = g * r + row % r;
        const float *qi = q + (t * Hq + h) * hd;
        for (int64_t d = 0; d < hd; d++)
            qT[d * ATT_BQ + i] = i < nq ? qi[d] : 0.0f;
        orow[i] = i < nq ? out + (t * Hq + h) * hd : NULL;
        if (orow[i])
            memset(orow[i], 0, (size_t)hd * sizeof(float));
        last[i] = past + t;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    int64_t ld = Hkv * hd;
    int64_t kend = last[nq - 1] + 1; /* keys visible to the last row: 0 .. kend-1 */
    for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
        int nk = (int)(kend - j0 < ATT_BK ? kend - j0 : ATT_BK);
        const float *kb = k + j0 * ld + g * hd, *vb = v + j0 * ld + g * hd;
        for (int j = 0; j < nk; j += ATT_KG) { /* keys past nk repeat the last one (masked) */
            const float *kr[ATT_KG];
            for (int c = 0; c < ATT_KG; c++)
                kr[c] = kb + (j + c < nk ? j + c : nk - 1) * ld;
            float s4[ATT_KG * ATT_BQ];
            const float *pf[2 * ATT_KG];
            for (int c = 0; stream && c < ATT_KG; c++) { /* rows past the last visible key repeat it */
                int64_t next = j0 + j + ATT_KG + c < kend ? j + ATT_KG + c : kend - 1 - j0;
                pf[c] = kb + next * ld, pf[ATT_KG + c] = kr[c] - kb + vb; /* the next keys, these values */
            }
            att_scores_16x8(s4, qT, kr, hd, scale, stream ? pf : NULL);
            int nc = nk - j < ATT_KG ? nk - j : ATT_KG;
            memcpy(sT + j * ATT_BQ, s4, (size_t)nc * ATT_BQ * sizeof(float));
        }
        for (int i = 0; i < ATT_BQ; i++) { /* row i sees keys j0 + j for j < lim[i] */
            int64_t li = last[i] + 1 - j0;
            lim[i] = (int)(li < 0 ? 0 : li < nk ? li : nk);
        }
        att_softmax_block(sT, nk, lim, m, l, corr);
        for (int i = 0; i < nq; i++)
            if (corr[i] != 1.0f)
                for (int64_t d = 0; d < hd; d++)
                    orow[i][d] *= corr[i];
        for (int i = 0; i < nq;) { /* o += P V: groups of ATT_RG rows over the keys the group sees */
            int nj[2] = {0, 0};
            for (int rr = 0; rr < 2 * ATT_RG && i + rr < nq; rr++)
                nj[rr / ATT_RG] = lim[i + rr] > nj[rr / ATT_RG] ? lim[i + rr] : nj[rr / ATT_RG];
            int rows = i + ATT_RG < nq && nj[1] == nj[0] ? 2 * ATT_RG : ATT_RG; /* two groups alike: at once */
            float *o8[2 * ATT_RG];
            for (int rr = 0; rr < rows; rr++)
                o8[rr] = i + rr < nq ? orow[i + rr] : dummy;
            att_pv_rows(o8, sT + i, vb, ld, nj[0], (int)hd, rows);
            i += rows;
        }
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        for (int64_t d = 0; d < hd; d++)
            orow[i][d] *= inv;
        if (lse) {
            int64_t row = row0 + i, t = row / r, h = g * r + row % r;
            lse[t * Hq + h] = m[i] + logf(l[i]);
        }
    }
}

void hyla_attention_fwd(float *out /*[T,Hq,hd]*/, float *lse /*[T,Hq] or NULL*/,
                        const float *q /*[T,Hq,hd]*/, const float *k /*[S,Hkv,hd]*/,
                        const float *v /*[S,Hkv,hd]*/, int64_t T, int64_t past, int64_t Hq,
                        int64_t Hkv, int64_t hd, float scale, float *work)
{
    HYLA_ASSERT(T >= 0 && past >= 0 && Hkv > 0 && Hq % Hkv == 0 && hd > 0 && hd <= ATT_MAX_HD);
    int64_t r = Hq / Hkv;
    int64_t nb = (T * r + ATT_BQ - 1) / ATT_BQ; /* row blocks per kv head */
    int stream = nb == 1;                        /* one task per head reads its keys (att_task) */
    /* later row blocks see more keys: hand them out first */
#pragma omp parallel for schedule(dynamic, 1) HYLA_PAR_IF(T * Hq * (past + T) * hd)
    for (int64_t task = 0; task < nb * Hkv; task++) {
        int64_t b = nb - 1 - task / Hkv, g = task % Hkv;
        int64_t row0 = b * ATT_BQ;
        int nq = (int)(T * r - row0 < ATT_BQ ? T * r - row0 : ATT_BQ);
        att_task(out, lse, q, k, v, row0, nq, past, g, r, Hq, Hkv, hd, scale, stream);
    }
}

/* ==== backward =============================================================================
 * Causal GQA attention backward for one sequence, flash-style (queries from position past, keys
 * 0 .. past + T - 1: a slice of a longer sequence under context parallelism), in two passes:
 *   A. task (kv head g, block of ATB_BK keys) owns d_k, d_v of those keys. It walks the query
 *      rows that see them (t >= first key) in tiles of ATB_BQ rows, recomputes
 *      S = scale q.k, P = exp(S - lse), dP = dout.v, dS = scale P (dP - D) with
 *      D = rowsum(dout * out) (computed once up front), and accumulates dv += P^T dout and
 *      dk += dS^T q.
 *   B. task (kv head g, block of ATB_BQ query rows) owns d_q of those rows. It walks their
 *      visible keys in blocks of ATB_BK, recomputes the tile (transposed: [key, row]) the same
 *      way and accumulates dq += dS k.
 * Recomputing the tile in B costs 7 tile products instead of 5, but needs neither atomics nor
 * T^2 scratch: every output element is written by exactly one task, and a task's arithmetic does
 * not depend on which thread runs it, so results are bitwise thread-count invariant.
 * Rows are (position t, query head h = g r + hh) packed as row = t r + hh like the forward, so
 * the r query heads sharing a kv head share tiles and their d_k/d_v contributions are summed
 * inside the task (in row order).
 * All products are the forward's P.V micro-kernels, mk_4x32 (4 output rows x 32 columns, rank-1
 * updates over the contraction index, accumulators in vector registers), with mk_4x16 for a last
 * 16 columns. Its
 * column operand is always a contiguous copy in per-thread scratch: the task's fixed operand
 * transposed once (A: keys and values [hd, key]; B: queries and dout [hd, row]) and the varying
 * one copied row-major per tile; hd is zero-padded to hdp (a multiple of 16), so no tails. */
#include <omp.h>

#define ATB_BQ 64 /* query rows per tile */
#define ATB_BK 64 /* keys per tile */
#define ATB_NC 16 /* columns per micro-kernel call */
#define ATB_BX (ATB_BQ > ATB_BK ? ATB_BQ : ATB_BK)

static int64_t atb_hdp(int64_t hd) { return (hd + ATB_NC - 1) / ATB_NC * ATB_NC; }

/* One thread's scratch (see atb_scratch), rounded up to 64 bytes. */
static size_t atb_thread_floats(int64_t hd)
{
    size_t hdp = (size_t)atb_hdp(hd);
    size_t f = 2 * ATB_BX * hdp + 2 * ATB_BK * hdp + 3 * ATB_BQ * hdp + 2 * ATB_BQ * ATB_BK +
               2 * ATB_BQ;
    return (f + 15) / 16 * 16;
}

size_t hyla_attention_bwd_work_floats(int64_t T, int64_t Hq, int64_t hd)
{
    size_t shared = ((size_t)(T * Hq) + 15) / 16 * 16; /* D [T, Hq] */
    return shared + (size_t)omp_get_max_threads() * atb_thread_floats(hd);
}

/* Columns [c0, c1) of C's 4 rows (ldc apart) (+)= A B (c0, c1 multiples of 16): mk_4xn. */
static void atb_mk_4xn(float *C, int64_t ldc, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb,
                       int64_t nx, int64_t c0, int64_t c1)
{
    float *rows[4] = {C, C + ldc, C + 2 * ldc, C + 3 * ldc};
    mk_4xn(rows, A, ars, axs, B, ldb, nx, c0, c1);
}

/* The same for 8 rows: mk_8xn. */
static void atb_mk_8xn(float *C, int64_t ldc, const float *A, int64_t ars, int64_t axs, const float *B, int64_t ldb,
                       int64_t nx, int64_t c0, int64_t c1)
{
    float *rows[8];
    for (int r = 0; r < 8; r++)
        rows[r] = C + r * ldc;
    mk_8xn(rows, A, ars, axs, B, ldb, nx, c0, c1);
}

/* A tile product over the head dimension: rows 4 g .. 4 g + 3 of C [, ldc] (+)= A rows (ars apart)
 * times B [hd, ldb], columns [lo[g], hi[g]) of each group g < ng (multiples of 16). The column
 * blocks are the outer loop, so that a block of B (hd x 32 floats, 32 KB at hd 256) stays in L1
 * while every row group reads it. */
static void atb_tile_product(float *C, int64_t ldc, const float *A, int64_t ars, const float *B, int64_t ldb,
                             int64_t nx, const int64_t *lo, const int64_t *hi, int ng, int64_t width)
{
    for (int64_t c0 = 0; c0 < width; c0 += 2 * ATB_NC)
        for (int g = 0; g < ng; g++) {
            int64_t a = lo[g] > c0 ? lo[g] : c0, b = hi[g] < c0 + 2 * ATB_NC ? hi[g] : c0 + 2 * ATB_NC;
            if (a >= b)
                continue;
            int64_t a2 = g + 1 < ng && lo[g + 1] > c0 ? lo[g + 1] : c0;
            int64_t b2 = g + 1 < ng && hi[g + 1] < c0 + 2 * ATB_NC ? hi[g + 1] : c0 + 2 * ATB_NC;
            if (g + 1 < ng && a2 == a && b2 == b) { /* the next group wants the same columns: both at once */
                atb_mk_8xn(C + 4 * g * ldc, ldc, A + 4 * g * ars, ars, 1, B, ldb, nx, a, b);
                g++;
            } else
                atb_mk_4xn(C + 4 * g * ldc, ldc, A + 4 * g * ars, ars, 1, B, ldb, nx, a, b);
        }
}

typedef struct {
    const float *dout, *q, *k, *v, *lse, *D; /* D [T, Hq] = rowsum(dout * out) */
    int64_t T, Hq, Hkv, hd, hdp, r;
    float scale;
    int64_t past; /* the queries' first position; keys 0 .. past + T - 1 */
} atb_args;

/* One thread's scratch, carved from atb_thread_floats(hd) floats. */
typedef struct {
    float *xT, *yT;     /* [hdp, BX] A: keys, values transposed; B: queries, dout transposed */
    float *dK, *dV;     /* [BK, hdp] A: accumulators; B: key and value rows of the block */
    float *Qb, *dOb;    /* [BQ, hdp] A: query / dout rows of the tile */
    float *dQ;          /* [BQ, hdp] B: accumulator */
    float *P, *dS;      /* A: [BQ, BK]; B: [BK, BQ] */
    float *lse_b, *D_b; /* [BQ] */
    int64_t t_b[ATB_BQ]; /* position of each tile row, -1 past the last row */
} atb_scratch;

static atb_scratch atb_carve(float *w, int64_t hdp)
{
    atb_scratch s;
    s.xT = w, w += ATB_BX * hdp;
    s.yT = w, w += ATB_BX * hdp;
    s.dK = w, w += ATB_BK * hdp;
    s.dV = w, w += ATB_BK * hdp;
    s.Qb = w, w += ATB_BQ * hdp;
    s.dOb = w, w += ATB_BQ * hdp;
    s.dQ = w, w += ATB_BQ * hdp;
    s.P = w, w += ATB_BQ * ATB_BK;
    s.dS = w, w += ATB_BQ * ATB_BK;
    s.lse_b = w, w += ATB_BQ;
    s.D_b = w;
    return s;
}

/* dst [hdp] = src [hd], zero padded. */
static inline void atb_copy_row(float *dst, const float *src, const atb_args *a)
{
    memcpy(dst, src, (size_t)a->hd * sizeof(float));
    for (int64_t d = a->hd; d < a->hdp; d++)
        dst[d] = 0.0f;
}

/* Tile rows row0 .. row0+nq-1 of kv head g: positions, lse and D of each; and, if Qb is not
 * NULL, the q and dout rows into Qb, dOb [BQ, hdp] (zero padded). */
static void atb_gather_rows(atb_scratch *s, const atb_args *a, int64_t g, int64_t row0, int nq,
                            float *Qb, float *dOb)
{
    if (Qb && nq < ATB_BQ) { /* rows past nq */
        memset(Qb + nq * a->hdp, 0, (size_t)((ATB_BQ - nq) * a->hdp) * sizeof(float));
        memset(dOb + nq * a->hdp, 0, (size_t)((ATB_BQ - nq) * a->hdp) * sizeof(float));
    }
    for (int i = 0; i < ATB_BQ; i++) {
        s->t_b[i] = -1, s->lse_b[i] = 0.0f, s->D_b[i] = 0.0f;
        if (i >= nq)
            continue;
        int64_t row = row0 + i, t = row / a->r, h = g * a->r + row % a->r;
        if (Qb) {
            atb_copy_row(Qb + i * a->hdp, a->q + (t * a->Hq + h) * a->hd, a);
            atb_copy_row(dOb + i * a->hdp, a->dout + (t * a->Hq + h) * a->hd, a);
        }
        s->t_b[i] = a->past + t;
        s->lse_b[i] = a->lse[t * a->Hq + h];
        s->D_b[i] = a->D[t * a->Hq + h];
    }
}

/* n rows of x (row i at x + i ld, hd floats each) into xT [hdp, ldt] columns 0..n-1, zero padded
 * to ldt columns and hdp rows. */
static void atb_transpose(float *xT, int64_t ldt, const float *x, int64_t ld, int n,
                          const atb_args *a)
{
    memset(xT, 0, (size_t)(a->hdp * ldt) * sizeof(float));
    for (int i = 0; i < n; i++)
        for (int64_t d = 0; d < a->hd; d++)
            xT[d * ldt + i] = x[i * ld + d];
}

/* Row i sees keys j0 + j for j < lim[i] of a block of nk keys. */
static void atb_limits(int *lim /*[BQ]*/, const int64_t *t_b, int64_t j0, int nk)
{
    for (int i = 0; i < ATB_BQ; i++) {
        int64_t li = t_b[i] + 1 - j0;
        lim[i] = (int)(li < 0 ? 0 : li < nk ? li : nk);
    }
}

/* P = exp(scale q.k - lse) for a visible key, exactly 0 (att_exp(-inf)) for a masked one. */
static inline float atb_p(float qk, float scale, float lse, int visible)
{
    return att_exp(visible ? qk * scale - lse : -INFINITY);
}

/* Pass A tile [BQ rows, BK keys] from Qb, dOb and xT = keys^T, yT = values^T:
 * P = exp(scale q.k - lse), dS = scale P (dout.v - D); 0 where masked or past nq / nk. */
static void atb_tile_rows(atb_scratch *s, const atb_args *a, int nq, int64_t j0, int nk)
{
    int lim[ATB_BQ];
    atb_limits(lim, s->t_b, j0, nk);
    memset(s->P, 0, sizeof(float) * ATB_BQ * ATB_BK);
    memset(s->dS, 0, sizeof(float) * ATB_BQ * ATB_BK);
    int64_t lo[ATB_BQ / 4], hi[ATB_BQ / 4];
    int ng = (nq + 3) / 4;
    for (int g = 0; g < ng; g++) {
        int lmax = lim[4 * g + 3 < nq ? 4 * g + 3 : nq - 1]; /* t grows with the row */
        lo[g] = 0, hi[g] = (lmax + ATB_NC - 1) / ATB_NC * ATB_NC;
    }
    atb_tile_product(s->P, ATB_BK, s->Qb, a->hdp, s->xT, ATB_BK, a->hd, lo, hi, ng, ATB_BK);
    atb_tile_product(s->dS, ATB_BK, s->dOb, a->hdp, s->yT, ATB_BK, a->hd, lo, hi, ng, ATB_BK);
    for (int i = 0; i < nq; i++) {
        float *p = s->P + i * ATB_BK, *ds = s->dS + i * ATB_BK, l = s->lse_b[i], D = s->D_b[i];
        int li = lim[i];
#pragma omp simd
        for (int j = 0; j < ATB_BK; j++) {
            float pj = atb_p(p[j], a->scale, l, j < li);
            p[j] = pj;
            ds[j] = (pj * (ds[j] - D)) * a->scale;
        }
    }
}

/* Pass B tile, transposed [BK keys, BQ rows], from the key and value rows in dK, dV (as
 * [BK, hdp], zero padded) and xT = queries^T, yT = dout^T [hdp, BQ]. */
static void atb_tile_keys(atb_scratch *s, const atb_args *a, int nq, int64_t j0, int nk)
{
    int lim[ATB_BQ];
    atb_limits(lim, s->t_b, j0, nk);
    memset(s->P, 0, sizeof(float) * ATB_BQ * ATB_BK);
    memset(s->dS, 0, sizeof(float) * ATB_BQ * ATB_BK);
    int64_t lo[ATB_BK / 4], hi[ATB_BK / 4];
    int ng = (nk + 3) / 4;
    for (int g = 0; g < ng; g++) {
        int i = 0, j = 4 * g; /* skip row groups that see none of keys j .. j+3 (t grows with the row) */
        while (i < nq && lim[i + ATB_NC - 1 < nq ? i + ATB_NC - 1 : nq - 1] <= j)
            i += ATB_NC;
        lo[g] = i, hi[g] = (nq + ATB_NC - 1) / ATB_NC * ATB_NC;
    }
    atb_tile_product(s->P, ATB_BQ, s->dK, a->hdp, s->xT, ATB_BQ, a->hd, lo, hi, ng, ATB_BQ);
    atb_tile_product(s->dS, ATB_BQ, s->dV, a->hdp, s->yT, ATB_BQ, a->hd, lo, hi, ng, ATB_BQ);
    for (int j = 0; j < nk; j++) {
        float *p = s->P + j * ATB_BQ, *ds = s->dS + j * ATB_BQ;
#pragma omp simd
        for (int i = 0; i < ATB_BQ; i++) {
            float pi = atb_p(p[i], a->scale, s->lse_b[i], j < lim[i]);
            p[i] = pi;
            ds[i] = (pi * (ds[i] - s->D_b[i])) * a->scale;
        }
    }
}

/* Pass A: d_k, d_v of keys kb*BK .. of kv head g. */
static void atb_task_kv(float *d_k, float *d_v, const atb_args *a, int64_t g, int64_t kb,
                        atb_scratch *s)
{
    int64_t j0 = kb * ATB_BK, hdp = a->hdp, nrows = a->T * a->r, ld = a->Hkv * a->hd, S = a->past + a->T;
    int nk = (int)(S - j0 < ATB_BK ? S - j0 : ATB_BK);
    atb_transpose(s->xT, ATB_BK, a->k + j0 * ld + g * a->hd, ld, nk, a);
    atb_transpose(s->yT, ATB_BK, a->v + j0 * ld + g * a->hd, ld, nk, a);
    memset(s->dK, 0, (size_t)(ATB_BK * hdp) * sizeof(float));
    memset(s->dV, 0, (size_t)(ATB_BK * hdp) * sizeof(float));
    for (int64_t row0 = (j0 > a->past ? j0 - a->past : 0) * a->r; row0 < nrows; row0 += ATB_BQ) { /* rows that see j0 */
        int nq = (int)(nrows - row0 < ATB_BQ ? nrows - row0 : ATB_BQ);
        atb_gather_rows(s, a, g, row0, nq, s->Qb, s->dOb);
        atb_tile_rows(s, a, nq, j0, nk);
        for (int j = 0; j < nk; j += 8) { /* dV[j] += sum_i P[i][j] dout_i ; dK likewise with dS, q */
            atb_mk_8xn(s->dV + j * hdp, hdp, s->P + j, 1, ATB_BK, s->dOb, hdp, nq, 0, hdp);
            atb_mk_8xn(s->dK + j * hdp, hdp, s->dS + j, 1, ATB_BK, s->Qb, hdp, nq, 0, hdp);
        }
    }
    size_t hdb = (size_t)a->hd * sizeof(float);
    for (int j = 0; j < nk; j++) {
        memcpy(d_k + (j0 + j) * ld + g * a->hd, s->dK + j * hdp, hdb);
        memcpy(d_v + (j0 + j) * ld + g * a->hd, s->dV + j * hdp, hdb);
    }
}

/* Pass B: d_q of rows row0 .. row0+nq-1 of kv head g. */
static void atb_task_q(float *d_q, const atb_args *a, int64_t g, int64_t row0, int nq,
                       atb_scratch *s)
{
    int64_t hdp = a->hdp, ld = a->Hkv * a->hd;
    /* queries and dout of the task, transposed once: rows are not evenly spaced in memory, so
     * gather them into Qb / dOb first */
    atb_gather_rows(s, a, g, row0, nq, s->Qb, s->dOb);
    atb_transpose(s->xT, ATB_BQ, s->Qb, hdp, nq, a);
    atb_transpose(s->yT, ATB_BQ, s->dOb, hdp, nq, a);
    memset(s->dQ, 0, (size_t)(ATB_BQ * hdp) * sizeof(float));
    int64_t kend = s->t_b[nq - 1] + 1; /* keys visible to the last row */
    for (int64_t j0 = 0; j0 < kend; j0 += ATB_BK) {
        int nk = (int)(kend - j0 < ATB_BK ? kend - j0 : ATB_BK);
        float *Kb = s->dK, *Vb = s->dV; /* key and value rows of the block, zero padded */
        if (nk < ATB_BK) {
            memset(Kb + nk * hdp, 0, (size_t)((ATB_BK - nk) * hdp) * sizeof(float));
            memset(Vb + nk * hdp, 0, (size_t)((ATB_BK - nk) * hdp) * sizeof(float));
        }
        for (int j = 0; j < nk; j++) {
            atb_copy_row(Kb + j * hdp, a->k + (j0 + j) * ld + g * a->hd, a);
            atb_copy_row(Vb + j * hdp, a->v + (j0 + j) * ld + g * a->hd, a);
        }
        atb_tile_keys(s, a, nq, j0, nk);
        for (int i = 0; i < nq; i += 8) /* dQ[i] += sum_j dS[i][j] k_j */
            atb_mk_8xn(s->dQ + i * hdp, hdp, s->dS + i, 1, ATB_BQ, Kb, hdp, nk, 0, hdp);
    }
    for (int i = 0; i < nq; i++) {
        int64_t row = row0 + i, t = row / a->r, h = g * a->r + row % a->r;
        memcpy(d_q + (t * a->Hq + h) * a->hd, s->dQ + i * hdp, (size_t)a->hd * sizeof(float));
    }
}

void hyla_attention_bwd(float *d_q /*[T,Hq,hd]*/, float *d_k /*[T,Hkv,hd]*/,
                        float *d_v /*[T,Hkv,hd]*/, const float *dout /*[T,Hq,hd]*/,
                        const float *out /*[T,Hq,hd]*/, const float *lse /*[T,Hq]*/,
                        const float *q /*[T,Hq,hd]*/, const float *k /*[T,Hkv,hd]*/,
                        const float *v /*[T,Hkv,hd]*/, int64_t T, int64_t Hq, int64_t Hkv,
                        int64_t hd, float scale, float *work)
{
    hyla_attention_bwd_past(d_q, d_k, d_v, dout, out, lse, q, k, v, T, 0, Hq, Hkv, hd, scale, work);
}

void hyla_attention_bwd_past(float *d_q /*[T,Hq,hd]*/, float *d_k /*[S,Hkv,hd]*/, float *d_v /*[S,Hkv,hd]*/,
                             const float *dout /*[T,Hq,hd]*/, const float *out /*[T,Hq,hd]*/,
                             const float *lse /*[T,Hq]*/, const float *q /*[T,Hq,hd]*/,
                             const float *k /*[S,Hkv,hd]*/, const float *v /*[S,Hkv,hd]*/, int64_t T, int64_t past,
                             int64_t Hq, int64_t Hkv, int64_t hd, float scale, float *work)
{
    HYLA_ASSERT(T >= 0 && past >= 0 && Hkv > 0 && Hq % Hkv == 0 && hd > 0);
    int64_t S = past + T;
    if (T == 0) { /* no query: no key takes a gradient */
        memset(d_k, 0, (size_t)(S * Hkv * hd) * sizeof(float));
        memset(d_v, 0, (size_t)(S * Hkv * hd) * sizeof(float));
        return;
    }
    float *D = work;
    float *thread_work = work + ((size_t)(T * Hq) + 15) / 16 * 16;
    size_t per_thread = atb_thread_floats(hd);
    atb_args a = {dout, q, k, v, lse, D, T, Hq, Hkv, hd, atb_hdp(hd), Hq / Hkv, scale, past};
    int64_t nkb = (S + ATB_BK - 1) / ATB_BK, nqb = (T * a.r + ATB_BQ - 1) / ATB_BQ;
#pragma omp parallel HYLA_PAR_IF(T * Hq * S * hd)
    {
        atb_scratch s = atb_carve(thread_work + (size_t)omp_get_thread_num() * per_thread, a.hdp);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < T * Hq; i++) { /* D = rowsum(dout * out), in double */
            double acc = 0.0;
#pragma omp simd reduction(+ : acc) /* (a fixed vector order; serial, one add's latency per element) */
            for (int64_t d = 0; d < hd; d++)
                acc += (double)dout[i * hd + d] * (double)out[i * hd + d];
            D[i] = (float)acc;
        }
        /* early key blocks see the most rows, late query blocks the most keys: those first */
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t task = 0; task < nkb * Hkv; task++)
            atb_task_kv(d_k, d_v, &a, task % Hkv, task / Hkv, &s);
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < nqb * Hkv; task++) {
            int64_t b = nqb - 1 - task / Hkv, row0 = b * ATB_BQ;
            int nq = (int)(T * a.r - row0 < ATB_BQ ? T * a.r - row0 : ATB_BQ);
            atb_task_q(d_q, &a, task % Hkv, row0, nq, &s);
        }
    }
}
