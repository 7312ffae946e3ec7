#include "core/gemm.h"
#include "core/parallel.h"

#include <omp.h>

#if defined(HYLA_GEMM_OPENBLAS)
#include <cblas.h>
#else
#include <dnnl.h>
#endif

#include "core/error.h"
#include "core/profile.h"

_Thread_local int hyla_in_gemm_library;

/* Skinny products (decode: a handful of rows against a weight matrix) are memory-bound; the BLAS
 * libraries pack operands into freshly allocated buffers on every such call, which costs more
 * than the product. hyla's own kernel streams each weight row once for all (<= 16) input rows.
 * C[M,N] = alpha * A[M,K] B[N,K]^T + beta * C, each element summed by one thread in a fixed order. */
#define HYLA_SKINNY_M 16 /* decode, a verify of N + 1 rows, a few slots' verify */
#ifdef __AVX512F__
#include <immintrin.h>
/* AVX-512: one weight row against all M rows at once (one load of each weight chunk, M
 * independent accumulator chains), the row PREFETCH_ROWS ahead requested from memory as the
 * row starts. Each element: 16 lane sums over k in order (the tail masked), then one fixed
 * horizontal reduction, whatever M is: a row's result does not depend on the rows beside it. */
#define PREFETCH_ROWS 4
static inline __attribute__((always_inline)) void skinny_row(int M, int64_t K, const float *A, int64_t lda,
                                                             const float *w, float *acc_out /*[M]*/)
{
    __m512 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv = _mm512_loadu_ps(w + k);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            if (i < M)
                acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(A + i * lda + k), wv, acc[i]);
    }
    if (k < K) {
        __mmask16 mask = (__mmask16)((1u << (K - k)) - 1u);
        __m512 wv = _mm512_maskz_loadu_ps(mask, w + k);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            if (i < M)
                acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, A + i * lda + k), wv, acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        if (i < M)
            acc_out[i] = _mm512_reduce_add_ps(acc[i]);
}
#endif

static void gemm_skinny_nt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float beta, float *C, int64_t ldc)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(M * N * K)
    for (int64_t n = 0; n < N; n++) {
        const float *w = B + n * ldb;
        float acc[HYLA_SKINNY_M];
#ifdef __AVX512F__
        if (n + PREFETCH_ROWS < N)
            for (int64_t b = 0; b < K; b += 16)
                _mm_prefetch((const char *)(w + PREFETCH_ROWS * ldb + b), _MM_HINT_T0);
        for (int64_t i0 = 0; i0 < M; i0 += 4) { /* groups of 4 rows; the weight row is in L1 after the first */
            const float *a = A + i0 * lda;
            float *o = acc + i0;
            switch (M - i0 < 4 ? M - i0 : 4) { /* constant trip counts: the accumulators stay in registers */
            case 1: skinny_row(1, K, a, lda, w, o); break;
            case 2: skinny_row(2, K, a, lda, w, o); break;
            case 3: skinny_row(3, K, a, lda, w, o); break;
            default: skinny_row(4, K, a, lda, w, o); break;
            }
        }
#else
        for (int64_t i = 0; i < M; i++) {
            const float *x = A + i * lda;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t k = 0; k < K; k++)
                s += x[k] * w[k];
            acc[i] = s;
        }
#endif
        for (int64_t i = 0; i < M; i++) {
            float *c = C + i * ldc + n;
            *c = alpha * acc[i] + (beta == 0.0f ? 0.0f : beta * *c);
        }
    }
}

/* y = x W^T with more than HYLA_SKINNY_M rows through oneDNN's matmul primitive (gemm_matmul.c)
 * from NT_MATMUL_MIN_MACS multiply-adds on: below, making it (~2 us from oneDNN's cache) and its
 * memory objects cost more than it gains (the delta rule's [128 x 64 x 128] chunk products ran
 * 11.4 us against sgemm's 10.8; from [256 x 256 x 256] on it was the faster, 2 Zen 5 cores). A choice
 * by shape alone, the same in every run. Tests and benchmarks may switch it off to compare. */
#define NT_MATMUL_MIN_MACS ((int64_t)1 << 22)
static int nt_matmul = 1;

void hyla_gemm_nt_set_matmul(int on)
{
    nt_matmul = on;
}

int hyla_gemm_nt_takes_matmul(int64_t M, int64_t N, int64_t K)
{
#if defined(HYLA_GEMM_OPENBLAS)
    (void)M, (void)N, (void)K;
    return 0;
#else
    return nt_matmul && M > HYLA_SKINNY_M && M * N * K >= NT_MATMUL_MIN_MACS;
#endif
}

void hyla_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc)
{
    if (M == 0 || N == 0)
        return;
    int profiled = hyla_prof.enabled && !omp_in_parallel(); /* counters are not thread-safe */
    double t0 = profiled ? hyla_now() : 0.0;
    if (M <= HYLA_SKINNY_M && !trans_a && trans_b) {
        gemm_skinny_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        goto done;
    }
    hyla_in_gemm_library++;
    int by_matmul = !trans_a && trans_b && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
                    hyla_gemm_nt_takes_matmul(M, N, K) && /* (never in the OpenBLAS build) */
                    hyla_gemm_nt_matmul(M, N, K, A, lda, B, ldb, beta == 1.0f, C, ldc) == 0;
    if (!by_matmul) {
#if defined(HYLA_GEMM_OPENBLAS)
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M,
                    (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
        dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                      C, ldc);
        HYLA_ASSERT(st == dnnl_success);
#endif
    }
    hyla_in_gemm_library--;
done:
    if (profiled) {
        hyla_prof.gemm_seconds += hyla_now() - t0;
        hyla_prof.gemm_flops += 2.0 * (double)M * (double)N * (double)K;
    }
}

void hyla_linear(float *y, const float *x, const float *W, int64_t n_rows, int64_t in,
                 int64_t out, int accumulate)
{
    hyla_gemm(0, 1, n_rows, out, in, 1.0f, x, in, W, in, accumulate ? 1.0f : 0.0f, y, out);
}

const char *hyla_gemm_backend_name(void)
{
#if defined(HYLA_GEMM_OPENBLAS)
    return "openblas";
#else
    return "onednn";
#endif
}
