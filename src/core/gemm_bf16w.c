/* Products with bf16 weights and activations held as bf16 values in fp32 buffers (gemm.h,
 * hyla_linear_bf16w / hyla_linear_bf16w_dx): what bf16 compute runs. Two ways, one per machine
 * (hyla_bf16w_native):
 *
 * - widened: the weights are widened (exactly) a block of NB rows at a time into the caller's
 *   scratch and multiplied by the fp32 sgemm; the activations already are bf16 values. Fastest
 *   where vdpbf16ps retires no more flops than fp32 FMA: the Intel Xeon this project first ran
 *   on retired half (159 vs 331 GFLOP/s on 2 cores, build/bench/gemm_bench --peaks).
 * - native: the activations (bf16 values, so exactly) are packed to bf16 a block at a time and
 *   multiplied by oneDNN's bf16 matmul (vdpbf16ps). AMD Zen 4 / Zen 5 retire twice the flops of
 *   FMA with it (1,028-1,051 vs 515-528 GFLOP/s on 2 cores of a Zen 5 here; the products of
 *   bench/gemm_bench's real shapes ran 750-890 GFLOP/s against 225-410 widened).
 *
 * Products of bf16 values are exact in fp32, so both compute the bf16 product with fp32
 * accumulation (the error bound of hyla_gemm_bf16); they differ only in the order of the fp32
 * sums. Both are deterministic at a given thread count, and on the tested shapes independent of it
 * (oneDNN's bf16 matmul gave the same bits on 1, 2 and 3 threads; test_gemm checks 1 == 2; the
 * widened forward's fp32 product may change with the thread count on some narrow shapes, as sgemm's
 * can), so bit-identity between remat policies, units, ranks (--threads 1) and resumed runs holds on
 * either. Decode-sized M
 * (<= HYLA_BF16_SKINNY_M) is bound by reading the weights: its rows are packed to bf16 and go
 * through the skinny vdpbf16ps kernel either way. */
#include "core/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/parallel.h"

#define NB 256 /* weight rows widened at once */
#define MB 512 /* native: activation rows packed at once (MB * K / 2 floats = NB * K: the same scratch) */

int64_t hyla_bf16w_scratch_floats(int64_t M, int64_t K)
{
    int64_t skinny = (HYLA_BF16_SKINNY_M * K + 1) / 2;
    return (M <= HYLA_BF16_SKINNY_M ? skinny : 0) + NB * K;
}

int hyla_bf16w_parse_kind(const char *text)
{
    if (!text || !*text || !strcmp(text, "auto"))
        return -1;
    return !strcmp(text, "native") ? 1 : !strcmp(text, "widened") ? 0 : -2;
}

static int choose_native(void)
{
    const char *env = getenv("HYLA_BF16_PRODUCTS");
    int kind = hyla_bf16w_parse_kind(env);
    if (kind >= 0)
        return kind;
    if (kind == -2) /* the CLI refuses it before any product; a program using the library is told here */
        fprintf(stderr, "hyla: HYLA_BF16_PRODUCTS=%s is not native, widened or auto; using auto\n", env);
#if defined(__x86_64__) && defined(__GNUC__)
    /* by the CPU, not by a timing (a timing could choose differently from one run to the next and
     * break bit-identity between a run and its resume): AMD's AVX-512 BF16 (Zen 4 and later) */
    return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static int native_kind = -1; /* decided once per process; a benign race: every thread computes the same */

int hyla_bf16w_native(void)
{
    if (native_kind < 0)
        native_kind = choose_native();
    return native_kind;
}

void hyla_bf16w_set_kind(int native) { native_kind = native < 0 ? -1 : !!native; }

const char *hyla_bf16w_kind_name(void) { return hyla_bf16w_native() ? "native" : "widened"; }

/* dst[rows, cols] (dense) = bf16(src[rows, cols] with row stride ld), rounded as hyla_bf16_pack */
static void pack_block(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(rows * cols)
    for (int64_t i = 0; i < rows; i++)
        hyla_bf16_pack_serial(dst + i * cols, src + i * ld, cols);
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
    if (hyla_bf16w_native()) { /* y[m0:m0+mb, :] (+)= x16[mb, K] W^T, MB rows at a time */
        uint16_t *x16 = (uint16_t *)(void *)scratch;
        for (int64_t m0 = 0; m0 < M; m0 += MB) {
            int64_t mb = M - m0 < MB ? M - m0 : MB;
            hyla_bf16_pack(x16, x + m0 * K, mb * K);
            hyla_linear_bf16(y + m0 * N, x16, W, mb, K, N, accumulate);
        }
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
    if (M <= 0 || N <= 0)
        return;
    if (hyla_bf16w_native()) {
        /* dx[m0:m0+mb, :] += dy16[mb, n0:n0+cb] W[n0:n0+cb, :], column blocks in order; a block of
         * dy is mb x cb bf16 = at most NB * K floats of scratch */
        uint16_t *dy16 = (uint16_t *)(void *)scratch;
        for (int64_t m0 = 0; m0 < M; m0 += MB) {
            int64_t mb = M - m0 < MB ? M - m0 : MB;
            int64_t cb = 2 * NB * K / mb; /* >= K, as mb <= MB = 2 NB */
            cb = cb >= 64 ? cb / 32 * 32 : cb;
            for (int64_t n0 = 0; n0 < N; n0 += cb) {
                int64_t nb = N - n0 < cb ? N - n0 : cb;
                pack_block(dy16, dy + m0 * N + n0, mb, nb, N);
                hyla_gemm_bf16(0, 0, mb, K, nb, dy16, W + n0 * K, 1, dx + m0 * K);
            }
        }
        return;
    }
    for (int64_t n0 = 0; n0 < N; n0 += NB) { /* dx += dy[:, n0:n0+nb] W[n0:n0+nb, :], blocks in order */
        int64_t nb = N - n0 < NB ? N - n0 : NB;
        hyla_bf16_unpack(scratch, W + n0 * K, nb * K);
        hyla_gemm(0, 0, M, K, nb, 1.0f, dy + n0, N, scratch, K, 1.0f, dx, K);
    }
}
