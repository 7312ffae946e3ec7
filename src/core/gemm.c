#include "core/gemm.h"

#include <omp.h>

#if defined(HYLA_GEMM_OPENBLAS)
#include <cblas.h>
#else
#include <dnnl.h>
#endif

#include "core/error.h"
#include "core/profile.h"

_Thread_local int hyla_in_gemm_library;

void hyla_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc)
{
    if (M == 0 || N == 0)
        return;
    int profiled = hyla_prof.enabled && !omp_in_parallel(); /* counters are not thread-safe */
    double t0 = profiled ? hyla_now() : 0.0;
    hyla_in_gemm_library++;
#if defined(HYLA_GEMM_OPENBLAS)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
                B, (int)ldb, beta, C, (int)ldc);
#else
    dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                  lda, B, ldb, beta, C, ldc);
    HYLA_ASSERT(st == dnnl_success);
#endif
    hyla_in_gemm_library--;
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
