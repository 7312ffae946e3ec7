/* Products with bf16 weights and activations held as bf16 values in fp32 buffers (gemm.h,
 * hyla_linear_bf16w / hyla_linear_bf16w_dx): what bf16 compute runs.
 *
 * On this machine vdpbf16ps retires half the flops of fp32 FMA (159 vs 331 GFLOP/s on 2 cores,
 * build/bench/gemm_bench), so a compute-bound product of bf16 operands is fastest as an fp32
 * GEMM of the same values: the weights are widened (exactly) a block of NB rows at a time into
 * the caller's scratch and multiplied by the fp32 sgemm; the activations already are bf16
 * values. Products of bf16 values are exact in fp32, so this computes the bf16 product with fp32
 * accumulation (the error bound of hyla_gemm_bf16), summed in sgemm's order. Decode-sized M
 * (<= HYLA_BF16_SKINNY_M) is bound by reading the weights instead: its rows are packed to bf16
 * and go through the skinny vdpbf16ps kernel, which reads the bf16 weights once. */
#include "core/gemm.h"

#include "core/bf16.h"

#define NB 256 /* weight rows widened at once */

int64_t hyla_bf16w_scratch_floats(int64_t M, int64_t K)
{
    int64_t skinny = (HYLA_BF16_SKINNY_M * K + 1) / 2;
    return (M <= HYLA_BF16_SKINNY_M ? skinny : 0) + NB * K;
}

void hyla_linear_bf16w(float *y, const float *x, const uint16_t *W, int64_t M, int64_t K, int64_t N, int accumulate,
                       float *scratch)
{
    if (M <= 0 || N <= 0)
        return;
    if (M <= HYLA_BF16_SKINNY_M) {
        uint16_t *x16 = (uint16_t *)(void *)scratch;
        hyla_bf16_pack(x16, x, M * K);
        hyla_linear_bf16(y, x16, W, M, K, N, accumulate);
        return;
    }
    for (int64_t n0 = 0; n0 < N; n0 += NB) {
        int64_t nb = N - n0 < NB ? N - n0 : NB;
        hyla_bf16_unpack(scratch, W + n0 * K, nb * K);
        hyla_gemm(0, 1, M, nb, K, 1.0f, x, K, scratch, K, accumulate ? 1.0f : 0.0f, y + n0, N);
    }
}

void hyla_linear_bf16w_dx(float *dx, const float *dy, const uint16_t *W, int64_t M, int64_t K, int64_t N, float *scratch)
{
    for (int64_t n0 = 0; n0 < N && M > 0; n0 += NB) { /* dx += dy[:, n0:n0+nb] W[n0:n0+nb, :], blocks in order */
        int64_t nb = N - n0 < NB ? N - n0 : NB;
        hyla_bf16_unpack(scratch, W + n0 * K, nb * K);
        hyla_gemm(0, 0, M, K, nb, 1.0f, dy + n0, N, scratch, K, 1.0f, dx, K);
    }
}
