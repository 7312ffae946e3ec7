/* The quantized-weight product kernels alone (core/quant.c, core/quant_avx512.c), against the
 * machine's peaks measured in the same run:
 *   decode  y[1, R] = x[1, K] W[R, K]^T with W far larger than the caches (R x K values of each
 *           type, 1 GiB by default: the Intel VM has a 300 MB L3): GB/s of stored weight bytes and % of
 *           the DRAM read bandwidth (bench/dram_bandwidth.h) -- the figure a decode step's weight reads
 *           can reach;
 *   prefill y[M, R] = x[M, K] W[R, K]^T, M = 512, at a projection's shape: GMAC/s and % of the
 *           int8 VNNI peak (a register-only loop of 12 independent vpdpbusd chains per thread: 64
 *           multiply-adds per instruction).
 * W holds random values quantized by hyla's reference quantizers (io/gguf_quantize.c), in
 * anonymous memory mapped as hyla maps its buffers (core/pages.c). Best of REPS passes (a shared
 * VM loses its cores for a while). usage: quant_bench [REPS=5] [TYPE] [DECODE_MIB=1024] [PIECES=1]
 * (one JSON object; TYPE: only that one, e.g. Q4_K, or "all"; DECODE_MIB: the decode matrix's size, e.g. 16 for one
 * that the L3 holds -- the kernel's arithmetic rather than the memory's rate; PIECES: the decode product
 * as that many calls on slices of the rows, e.g. 200 for a decode step's 1.3 MB matrices).
 * HYLA_INT8_ACTIVATIONS=0: the decode kernels with fp32 activations (as for the CLI) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pages.h"
#include "core/quant.h"
#include "core/rng.h"
#include "dram_bandwidth.h"
#include "io/gguf.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VNNI_ITERS 80000000L
#define VNNI_CHAINS 12
/* VNNI_CHAINS independent vpdpbusd chains, no memory: what one thread can retire (12 chains cover
 * the latency; gcc 12 keeps 24 of them on the stack, which measured half the rate). */
__attribute__((target("avx512f,avx512vnni"))) static int vnni_chains(void)
{
    __m512i acc[VNNI_CHAINS], a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
    for (int i = 0; i < VNNI_CHAINS; i++)
        acc[i] = _mm512_setzero_si512();
    for (long it = 0; it < VNNI_ITERS; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < VNNI_CHAINS; i++)
            acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
        __asm__ volatile("" : "+v"(a));
    }
    int s = 0;
    for (int i = 0; i < VNNI_CHAINS; i++)
        s += _mm512_reduce_add_epi32(acc[i]);
    return s;
}
static double vnni_peak_gmacs(void)
{
    if (!__builtin_cpu_supports("avx512vnni"))
        return 0.0;
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = omp_get_wtime();
        long sink = 0;
#pragma omp parallel reduction(+ : sink)
        sink += vnni_chains();
        double dt = omp_get_wtime() - t0, g = (double)omp_get_max_threads() * VNNI_ITERS * VNNI_CHAINS * 64 / dt * 1e-9;
        if (sink == 12345)
            printf(" ");
        best = g > best ? g : best;
    }
    return best;
}
#else
static double vnni_peak_gmacs(void) { return 0.0; }
#endif

/* A [rows, K] matrix of type t: `distinct` rows quantized from random values, repeated (the
 * reference quantizers take ~10 us a row; the kernels read every row from memory either way). */
static hyla_qmat make_matrix(hyla_ggml_type t, int64_t rows, int64_t K, int64_t distinct, unsigned char **store)
{
    size_t rb = hyla_ggml_bytes(t, (size_t)K);
    *store = hyla_pages_map((size_t)rows * rb);
    float *v = malloc((size_t)K * sizeof(float));
    hyla_rng rng;
    hyla_rng_seed(&rng, 7);
    for (int64_t r = 0; r < distinct; r++) {
        for (int64_t k = 0; k < K; k++)
            v[k] = (float)hyla_rng_normal(&rng) * 0.02f;
        hyla_ggml_from_f32(t, *store + (size_t)r * rb, v, (size_t)K);
    }
    for (int64_t r = distinct; r < rows; r++)
        memcpy(*store + (size_t)r * rb, *store + (size_t)(r % distinct) * rb, rb);
    free(v);
    hyla_qmat W = {.type = t, .rows = rows, .cols = K};
    W.row = malloc((size_t)rows * sizeof *W.row);
    for (int64_t r = 0; r < rows; r++)
        W.row[r] = *store + (size_t)r * rb;
    return W;
}

/* Best of reps passes of y[M, W->rows] = x W^T, as `pieces` calls on consecutive slices of W's rows
 * (pieces > 1: a decode step's many small matrices, each call starting its stream cold). */
static double best_seconds(const hyla_qmat *W, float *y, const float *x, int64_t M, float *scratch, int reps,
                           int64_t pieces)
{
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = omp_get_wtime();
        for (int64_t p = 0; p < pieces; p++) {
            int64_t r0 = W->rows * p / pieces, r1 = W->rows * (p + 1) / pieces;
            hyla_linear_q(y + r0, x, W, r0, M, W->cols, r1 - r0, scratch);
        }
        double dt = omp_get_wtime() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *int8 = getenv("HYLA_INT8_ACTIVATIONS"); /* 0: fp32 activations in decode, as the CLI */
    if (int8 && !strcmp(int8, "0"))
        hyla_quant_int8_activations = 0;
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "quant_bench: REPS must be 1..100000, got '%s'\n", argv[1]);
        return 1;
    }
    const hyla_ggml_type types[] = {HYLA_GGML_Q8_0, HYLA_GGML_Q4_K, HYLA_GGML_Q5_K, HYLA_GGML_Q6_K, HYLA_GGML_Q3_K,
                                    HYLA_GGML_Q2_K};
    double decode_mib = argc > 3 ? atof(argv[3]) : 1024;
    if (!(decode_mib >= 0.0625 && decode_mib <= 4096)) {
        fprintf(stderr, "quant_bench: DECODE_MIB must be 0.0625..4096, got '%s'\n", argv[3]);
        return 1;
    }
    int64_t pieces = argc > 4 ? atoll(argv[4]) : 1;
    if (pieces < 1 || pieces > 100000) {
        fprintf(stderr, "quant_bench: PIECES must be 1..100000, got '%s'\n", argv[4]);
        return 1;
    }
    const int64_t K = 1024, decode_bytes = (int64_t)(decode_mib * 1048576), M = 512, R_prefill = 4096;
    double dram = dram_read_gbs(), vnni = vnni_peak_gmacs();
    printf("{\"threads\": %d, \"dram_gbs\": %.1f, \"vnni_peak_gmacs\": %.0f, \"kernels\": [", omp_get_max_threads(), dram,
           vnni);
    int printed = 0;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        hyla_ggml_type t = types[i];
        if (argc > 2 && strcmp(argv[2], "all") && strcmp(argv[2], hyla_ggml_type_name(t)))
            continue;
        int64_t R = decode_bytes / (int64_t)hyla_ggml_bytes(t, (size_t)K);
        unsigned char *store;
        int64_t R_alloc = R > R_prefill ? R : R_prefill; /* the prefill's shape needs R_prefill rows */
        hyla_qmat W = make_matrix(t, R_alloc, K, 512, &store);
        W.rows = R;
        /* y: the decode's R outputs, or the prefill's M x R_prefill */
        int64_t y_floats = M * R_prefill > R ? M * R_prefill : R;
        float *x = malloc((size_t)M * K * sizeof(float)), *y = malloc((size_t)y_floats * sizeof(float));
        float *scratch = malloc((size_t)hyla_linear_q_scratch_floats(M, K) * sizeof(float));
        hyla_rng rng;
        hyla_rng_seed(&rng, 3);
        for (int64_t k = 0; k < M * K; k++)
            x[k] = (float)hyla_rng_normal(&rng);
        double dec = best_seconds(&W, y, x, 1, scratch, reps, pieces);
        double gbs = (double)hyla_qmat_bytes(&W) / dec * 1e-9;
        W.rows = R_prefill; /* the prefill shape: the first R_prefill rows */
        double pre = best_seconds(&W, y, x, M, scratch, reps, 1);
        double gmacs = (double)M * R_prefill * K / pre * 1e-9;
        printf("%s\n {\"type\": \"%s\", \"decode_rows\": %ld, \"decode_pieces\": %ld, \"K\": %ld, \"decode_ms\": %.3f, \"decode_gbs\": %.1f, "
               "\"decode_pct_of_dram\": %.1f, \"prefill_shape\": [%ld, %ld, %ld], \"prefill_ms\": %.2f, "
               "\"prefill_gmacs\": %.1f, \"prefill_pct_of_vnni_peak\": %.1f}",
               printed++ ? "," : "", hyla_ggml_type_name(t), (long)R, (long)pieces, (long)K, dec * 1e3, gbs, 100 * gbs / dram, (long)M,
               (long)R_prefill, (long)K, pre * 1e3, gmacs, vnni > 0 ? 100 * gmacs / vnni : 0.0);
        fflush(stdout);
        W.rows = R;
        hyla_pages_unmap(store, (size_t)R_alloc * hyla_ggml_bytes(t, (size_t)K));
        free(W.row), free(x), free(y), free(scratch);
    }
    printf("\n]}\n");
    return 0;
}
