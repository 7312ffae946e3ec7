/* Products with one side of small rank r (LoRA's adapters), see core/gemm.h.
 *
 * LoRA's products are long and thin: y[512, 6144] += s xa[512, 16] B^T, dB[6144, 16] += s dy^T xa,
 * xa = x A^T, dxa = s dy B. Here every output element is one FMA chain over the contraction in
 * order, started from 0, then alpha times it added to (or stored in) the output by one more FMA,
 * the same arithmetic in the vector kernels and their scalar tails, whatever the blocking, the
 * thread count or M: a decoded token's adapter output has the bits of the same row in a prompt,
 * and a run's bits do not depend on its threads (oneDNN's sgemm promised neither for these
 * shapes). Speed: level with sgemm's from the caches (0.8B shapes, 2 threads: within +-10%) and
 * in a 0.8B LoRA step (5 paired runs level): there the cost is the traffic of the big operand,
 * which neither avoids. Builds without AVX-512, and reduce / gather at ranks other than 16, go
 * through hyla_gemm. */
#include "core/gemm.h"

#include <math.h>

#include "core/parallel.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* ---- expand: C[M,N] (+)= alpha X[M,r] Y[r,N] -------------------------------------------------- */

#if defined(__AVX512F__)
/* One row of C, columns [j0, N), scalar (the last columns short of 16). */
static void expand_row_tail(float *c, const float *x, const float *Y, int64_t ldy, int64_t j0, int64_t N, int64_t r,
                            float alpha, int accumulate)
{
    for (int64_t j = j0; j < N; j++) {
        float acc = 0.0f;
        for (int64_t k = 0; k < r; k++)
            acc = fmaf(x[k], Y[k * ldy + j], acc);
        c[j] = accumulate ? fmaf(alpha, acc, c[j]) : alpha * acc;
    }
}

static inline __m512 expand_out(__m512 acc, __m512 alpha, const float *c, int accumulate)
{
    return accumulate ? _mm512_fmadd_ps(alpha, acc, _mm512_loadu_ps(c)) : _mm512_mul_ps(alpha, acc);
}

/* Rows i0 .. i0+3 of C, columns in steps of 32 (8 accumulators: the FMA's latency times its two
 * pipes), then 16. */
static void expand_rows4(float *C, int64_t ldc, const float *X, int64_t ldx, const float *Y, int64_t ldy, int64_t N,
                         int64_t r, float alpha_f, int accumulate)
{
    __m512 alpha = _mm512_set1_ps(alpha_f);
    int64_t j = 0;
    for (; j + 32 <= N; j += 32) {
        __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        for (int64_t k = 0; k < r; k++) {
            __m512 y0 = _mm512_loadu_ps(Y + k * ldy + j), y1 = _mm512_loadu_ps(Y + k * ldy + j + 16);
            __asm__("" : "+v"(y0), "+v"(y1)); /* in registers: GCC would fold them into each FMA, 8 loads */
            __m512 x0 = _mm512_set1_ps(X[k]), x1 = _mm512_set1_ps(X[ldx + k]);
            __m512 x2 = _mm512_set1_ps(X[2 * ldx + k]), x3 = _mm512_set1_ps(X[3 * ldx + k]);
            a00 = _mm512_fmadd_ps(x0, y0, a00), a01 = _mm512_fmadd_ps(x0, y1, a01);
            a10 = _mm512_fmadd_ps(x1, y0, a10), a11 = _mm512_fmadd_ps(x1, y1, a11);
            a20 = _mm512_fmadd_ps(x2, y0, a20), a21 = _mm512_fmadd_ps(x2, y1, a21);
            a30 = _mm512_fmadd_ps(x3, y0, a30), a31 = _mm512_fmadd_ps(x3, y1, a31);
        }
        float *c0 = C + j, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
        _mm512_storeu_ps(c0, expand_out(a00, alpha, c0, accumulate));
        _mm512_storeu_ps(c0 + 16, expand_out(a01, alpha, c0 + 16, accumulate));
        _mm512_storeu_ps(c1, expand_out(a10, alpha, c1, accumulate));
        _mm512_storeu_ps(c1 + 16, expand_out(a11, alpha, c1 + 16, accumulate));
        _mm512_storeu_ps(c2, expand_out(a20, alpha, c2, accumulate));
        _mm512_storeu_ps(c2 + 16, expand_out(a21, alpha, c2 + 16, accumulate));
        _mm512_storeu_ps(c3, expand_out(a30, alpha, c3, accumulate));
        _mm512_storeu_ps(c3 + 16, expand_out(a31, alpha, c3 + 16, accumulate));
    }
    for (int64_t i = 0; i < 4; i++)
        expand_row_tail(C + i * ldc, X + i * ldx, Y, ldy, j, N, r, alpha_f, accumulate);
}

/* One row, columns in steps of 16. */
static void expand_row1(float *C, const float *X, const float *Y, int64_t ldy, int64_t N, int64_t r, float alpha_f,
                        int accumulate)
{
    __m512 alpha = _mm512_set1_ps(alpha_f);
    int64_t j = 0;
    for (; j + 16 <= N; j += 16) {
        __m512 a = _mm512_setzero_ps();
        for (int64_t k = 0; k < r; k++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(X[k]), _mm512_loadu_ps(Y + k * ldy + j), a);
        _mm512_storeu_ps(C + j, expand_out(a, alpha, C + j, accumulate));
    }
    expand_row_tail(C, X, Y, ldy, j, N, r, alpha_f, accumulate);
}
#endif

void hyla_lowrank_expand(float *C, int64_t ldc, const float *X, int64_t ldx, const float *Y, int64_t ldy, int64_t M,
                         int64_t N, int64_t r, float alpha, int accumulate)
{
#if defined(__AVX512F__)
    int64_t blocks = (M + 3) / 4;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(M * N * (r + 2))
    for (int64_t b = 0; b < blocks; b++) {
        int64_t i0 = 4 * b;
        if (i0 + 4 <= M) {
            expand_rows4(C + i0 * ldc, ldc, X + i0 * ldx, ldx, Y, ldy, N, r, alpha, accumulate);
            continue;
        }
        for (int64_t i = i0; i < M; i++)
            expand_row1(C + i * ldc, X + i * ldx, Y, ldy, N, r, alpha, accumulate);
    }
#else /* a build without AVX-512: the GEMM seam (its own bits) */
    hyla_gemm(0, 0, M, N, r, alpha, X, ldx, Y, ldy, accumulate ? 1.0f : 0.0f, C, ldc);
#endif
}

/* ---- reduce: Z[M,r] (+)= alpha D[M,K] W[K,r] --------------------------------------------------- */

#if defined(__AVX512F__)
/* Rows i0 .. i0+nr-1 (nr <= 8) of Z at r = 16: one accumulator per row, each row of W loaded once
 * for the rows. */
static inline __attribute__((always_inline)) void reduce_rows_r16(float *Z, const float *D, int64_t ldd,
                                                                  const float *W, int64_t K, int nr, float alpha_f,
                                                                  int accumulate)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < nr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m512 w = _mm512_loadu_ps(W + k * 16);
        __asm__("" : "+v"(w)); /* (one load, not one per FMA) */
#pragma GCC unroll 8 /* (the accumulators stay in registers only unrolled) */
        for (int i = 0; i < nr; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(D[i * ldd + k]), w, acc[i]);
    }
    __m512 alpha = _mm512_set1_ps(alpha_f);
    for (int i = 0; i < nr; i++) {
        float *z = Z + i * 16;
        __m512 out = accumulate ? _mm512_fmadd_ps(alpha, acc[i], _mm512_loadu_ps(z)) : _mm512_mul_ps(alpha, acc[i]);
        _mm512_storeu_ps(z, out);
    }
}
#endif

void hyla_lowrank_reduce(float *Z, const float *D, int64_t ldd, const float *W, int64_t M, int64_t K, int64_t r,
                         float alpha, int accumulate)
{
#if defined(__AVX512F__)
    if (r == 16) {
        int64_t blocks = (M + 7) / 8;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(M * K * r)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t i0 = 8 * b;
            if (i0 + 8 <= M)
                reduce_rows_r16(Z + i0 * 16, D + i0 * ldd, ldd, W, K, 8, alpha, accumulate);
            else
                for (int64_t i = i0; i < M; i++) /* the same arithmetic, one row at a time */
                    reduce_rows_r16(Z + i * 16, D + i * ldd, ldd, W, K, 1, alpha, accumulate);
        }
        return;
    }
#endif
    hyla_gemm(0, 0, M, r, K, alpha, D, ldd, W, r, accumulate ? 1.0f : 0.0f, Z, r); /* other ranks: the GEMM seam */
}

/* ---- gather: G[N,r] += alpha D[M,N]^T X[M,r] -------------------------------------------------- */

#if defined(__AVX512F__)
/* Columns [j0, j1) of G, scalar (the last columns short of 16). */
static void gather_cols_scalar(float *G, const float *D, int64_t ldd, const float *X, int64_t M, int64_t j0,
                               int64_t j1, int64_t r, float alpha)
{
    for (int64_t j = j0; j < j1; j++)
        for (int64_t p = 0; p < r; p++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < M; i++)
                acc = fmaf(D[i * ldd + j], X[i * r + p], acc);
            G[j * r + p] = fmaf(alpha, acc, G[j * r + p]);
        }
}

/* 16 columns j0 .. j0+15 of G at r = 16: one accumulator per column, each row of X loaded once
 * for the 16; D's next rows asked for ahead (its rows are far apart: each is a stride). */
static void gather_cols16_r16(float *G, const float *D, int64_t ldd, const float *X, int64_t M, int64_t j0,
                              float alpha_f)
{
    __m512 acc[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++)
        acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < M; i++) {
        const float *d = D + i * ldd + j0;
        if (i + 8 < M)
            _mm_prefetch((const char *)(d + 8 * ldd), _MM_HINT_T0);
        __m512 x = _mm512_loadu_ps(X + i * 16);
        __asm__("" : "+v"(x)); /* (one load, not one per FMA) */
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(d[c]), x, acc[c]);
    }
    __m512 alpha = _mm512_set1_ps(alpha_f);
    for (int c = 0; c < 16; c++) {
        float *g = G + (j0 + c) * 16;
        _mm512_storeu_ps(g, _mm512_fmadd_ps(alpha, acc[c], _mm512_loadu_ps(g)));
    }
}
#endif

void hyla_lowrank_gather(float *G, const float *D, int64_t ldd, const float *X, int64_t M, int64_t N, int64_t r,
                         float alpha)
{
#if defined(__AVX512F__)
    if (r == 16) {
        int64_t blocks = (N + 15) / 16;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(M * N * r)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t j0 = 16 * b;
            if (j0 + 16 <= N)
                gather_cols16_r16(G, D, ldd, X, M, j0, alpha);
            else
                gather_cols_scalar(G, D, ldd, X, M, j0, N, r, alpha);
        }
        return;
    }
#endif
    hyla_gemm(1, 0, N, r, M, alpha, D, ldd, X, r, 1.0f, G, r); /* other ranks, or no AVX-512: the GEMM seam */
}
