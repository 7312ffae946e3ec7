/* GEMM seam benchmark on hyla's shapes, in one run: fp32 oneDNN (dnnl_sgemm) vs OpenBLAS
 * (cblas_sgemm) vs hyla_gemm itself (oneDNN's f32 matmul primitive for more than 16 rows, hyla's
 * skinny kernel below: "hyla_fp32_gflops"), and hyla's bf16 linear (hyla_linear_bf16: oneDNN bf16 matmul, or hyla's skinny
 * kernel for M <= 4) with fp32 accumulation, and bf16 compute's product (hyla_linear_bf16w: this
 * CPU's way, "bf16_products": native = oneDNN's bf16 matmul, widened = bf16 weights widened per
 * 256-row block into the fp32 sgemm; the skinny kernel for M <= 4).
 * Prints one JSON object per shape and a summary;
 * GFLOP/s and % of the machine's peaks, measured in the same run by a register-only loop of 24
 * independent 512-bit FMAs / vdpbf16ps per thread (the most either instruction can retire; the
 * issue's "BF16 dot 800 GFLOP/s" is the datasheet rate, not what this machine retires; override
 * with HYLA_PEAK_GFLOPS / HYLA_PEAK_BF16_GFLOPS).
 * Linear layers are y[M,N] = x[M,K] W[N,K]^T (trans_b). usage: gemm_bench [--peaks] */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bf16.h"
#include "core/gemm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *what;
    int M, N, K;
} shape;

static const uint16_t *A16, *B16; /* A, B as bf16 */
static float *A_rounded, *scratch_w; /* A as bf16 values in fp32 (bf16 compute's activations); bf16w scratch */

static double run(int backend, const shape *s, float *A, float *B, float *C)
{
    double flops = 2.0 * s->M * s->N * s->K, best = 1e30;
    int reps = (int)(2e9 / flops) + 2;
    if (reps > 2000)
        reps = 2000;
    for (int trial = 0; trial < 3; trial++) {
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            if (backend == 0)
                dnnl_sgemm('N', 'T', s->M, s->N, s->K, 1.0f, A, s->K, B, s->K, 0.0f, C, s->N);
            else if (backend == 2)
                hyla_linear_bf16(C, A16, B16, s->M, s->K, s->N, 0);
            else if (backend == 3)
                hyla_linear_bf16w(C, A_rounded, B16, s->M, s->K, s->N, 0, scratch_w);
            else if (backend == 4)
                hyla_linear(C, A, B, s->M, s->K, s->N, 0);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->M, s->N, s->K, 1.0f, A, s->K, B, s->K, 0.0f, C,
                            s->N);
        }
        double dt = (now() - t0) / reps;
        if (dt < best)
            best = dt;
    }
    return flops / best / 1e9;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* GFLOP/s of 24 independent accumulator chains of one instruction on every thread, no memory. */
#define PEAK_ITERS 40000000L
__attribute__((target("avx512f"))) static float fma_chains(void)
{
    __m512 acc[24], x = _mm512_set1_ps(1e-9f);
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_setzero_ps();
    for (long it = 0; it < PEAK_ITERS; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++)
            acc[i] = _mm512_fmadd_ps(x, x, acc[i]);
        __asm__ volatile("" : "+v"(x));
    }
    float s = 0;
    for (int i = 0; i < 24; i++)
        s += _mm512_reduce_add_ps(acc[i]);
    return s;
}
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_chains(void)
{
    __m512 acc[24];
    __m512bh h = (__m512bh)_mm512_set1_epi32(0x30003000);
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_setzero_ps();
    for (long it = 0; it < PEAK_ITERS; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], h, h);
        __asm__ volatile("" : "+v"(h));
    }
    float s = 0;
    for (int i = 0; i < 24; i++)
        s += _mm512_reduce_add_ps(acc[i]);
    return s;
}
/* The best of three passes: on a shared VM a pass can lose its core for a while (seen: 212 to 337
 * GFLOP/s for the same FMA loop within a minute), and the peak is what the machine retires when
 * it has the cores. */
static double instruction_peak(int bf16)
{
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = now(), sink = 0;
#pragma omp parallel reduction(+ : sink)
        sink += bf16 ? dpbf16_chains() : fma_chains();
        double dt = now() - t0;
        if (sink == 12345.0)
            printf(" ");
        double g = (double)omp_get_max_threads() * PEAK_ITERS * 24 * (bf16 ? 64.0 : 32.0) / dt * 1e-9;
        best = g > best ? g : best;
    }
    return best;
}
#else
static double instruction_peak(int bf16) { return bf16 ? 800.0 : 435.0; }
#endif

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--peaks")) { /* the instruction peaks alone, for other benches */
        printf("{\"threads\": %d, \"peak_gflops\": %.0f, \"peak_bf16_gflops\": %.0f, \"bf16_products\": \"%s\"}\n",
               omp_get_max_threads(), instruction_peak(0),
               __builtin_cpu_supports("avx512bf16") ? instruction_peak(1) : 0.0, hyla_bf16w_kind_name());
        return 0;
    }
    const char *peak_env = getenv("HYLA_PEAK_GFLOPS");
    double peak = peak_env ? atof(peak_env) : instruction_peak(0);
    const char *peak16_env = getenv("HYLA_PEAK_BF16_GFLOPS");
    double peak16 = peak16_env ? atof(peak16_env) : (__builtin_cpu_supports("avx512bf16") ? instruction_peak(1) : 800.0);
    const shape shapes[] = {
        {"gdn in_proj_qkv (bench-100m, T=512)", 512, 1024, 512},
        {"attn q_proj (bench-100m)", 512, 1024, 512},
        {"out_proj (bench-100m)", 512, 512, 512},
        {"expert gate_up (128 tokens)", 128, 1024, 512},
        {"expert down (128 tokens)", 128, 512, 512},
        {"shared gate_up (bench-100m)", 512, 2048, 512},
        {"lm_head (bench-100m)", 512, 32000, 512},
        {"in_proj_qkv (bench-387m, T=512)", 512, 2048, 1024},
        {"mlp gate_up (qwen3.5-0.8b, T=512)", 512, 7168, 1024},
        {"mlp down (qwen3.5-0.8b, T=512)", 512, 1024, 3584},
        {"loss head chunk (128 rows x 32768 of the vocabulary)", 128, 32768, 1024},
        {"routed expert gate_up (64 tokens, 0.6B MoE)", 64, 1024, 1024},
        {"decode qkv (M=1, bench-387m)", 1, 2048, 1024},
        {"decode expert gate_up (M=1)", 1, 512, 1024},
        {"decode lm_head (M=1)", 1, 8192, 1024},
    };
    size_t maxA = 0, maxB = 0, maxC = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        if ((size_t)s->M * s->K > maxA) maxA = (size_t)s->M * s->K;
        if ((size_t)s->N * s->K > maxB) maxB = (size_t)s->N * s->K;
        if ((size_t)s->M * s->N > maxC) maxC = (size_t)s->M * s->N;
    }
    float *A = aligned_alloc(64, maxA * 4), *B = aligned_alloc(64, maxB * 4), *C = aligned_alloc(64, maxC * 4);
    for (size_t i = 0; i < maxA; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < maxB; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    uint16_t *a16 = malloc(maxA * 2), *b16 = malloc(maxB * 2);
    for (size_t i = 0; i < maxA; i++) a16[i] = hyla_bf16_from_f32(A[i]);
    for (size_t i = 0; i < maxB; i++) b16[i] = hyla_bf16_from_f32(B[i]);
    A16 = a16, B16 = b16;
    A_rounded = malloc(maxA * 4);
    hyla_bf16_unpack(A_rounded, a16, (int64_t)maxA);
    int64_t maxK = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        maxK = shapes[i].K > maxK ? shapes[i].K : maxK;
    scratch_w = malloc((size_t)hyla_bf16w_scratch_floats(1, maxK) * 4);
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("{\"threads\": %d, \"peak_gflops\": %.0f, \"peak_bf16_gflops\": %.0f, \"bf16_skinny_kernel\": \"%s\", "
           "\"bf16_products\": \"%s\", \"openblas_coretype\": \"%s\", \"shapes\": [\n", omp_get_max_threads(), peak,
           peak16, hyla_bf16_skinny_kernel_name(), hyla_bf16w_kind_name(), core ? core : "(auto)");
    double sum_ratio = 0, sum_bf16 = 0, sum_w = 0, sum_h = 0;
    int n = (int)(sizeof shapes / sizeof *shapes);
    for (int i = 0; i < n; i++) {
        const shape *s = &shapes[i];
        double d = run(0, s, A, B, C), o = run(1, s, A, B, C), h = run(2, s, A, B, C), w = run(3, s, A, B, C);
        double f = run(4, s, A, B, C);
        sum_w += w / d;
        sum_h += f / d;
        sum_ratio += d / o;
        sum_bf16 += h / d;
        printf("  {\"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"onednn_gflops\": %.1f, \"openblas_gflops\": %.1f, "
               "\"onednn_pct_peak\": %.1f, \"openblas_pct_peak\": %.1f, \"onednn_over_openblas\": %.2f, "
               "\"bf16_gflops\": %.1f, \"bf16_pct_bf16_peak\": %.1f, \"bf16_over_fp32\": %.2f, "
               "\"bf16_compute_gflops\": %.1f, \"bf16_compute_over_fp32\": %.2f, \"hyla_fp32_gflops\": %.1f, "
               "\"hyla_fp32_pct_peak\": %.1f, \"hyla_fp32_over_sgemm\": %.2f}%s\n",
               s->what, s->M, s->N, s->K, d, o, 100 * d / peak, 100 * o / peak, d / o, h, 100 * h / peak16, h / d, w,
               w / d, f, 100 * f / peak, f / d, i + 1 < n ? "," : "");
    }
    printf("], \"mean_onednn_over_openblas\": %.2f, \"mean_bf16_over_fp32\": %.2f, \"mean_bf16_compute_over_fp32\": %.2f, "
           "\"mean_hyla_fp32_over_sgemm\": %.2f}\n",
           sum_ratio / n, sum_bf16 / n, sum_w / n, sum_h / n);
    free(a16);
    free(b16);
    free(A);
    free(B);
    free(C);
    free(A_rounded);
    free(scratch_w);
    return 0;
}
