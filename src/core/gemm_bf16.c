/* bf16 linear layers with fp32 accumulation (see gemm.h, hyla_linear_bf16).
 *
 * M <= HYLA_BF16_SKINNY_M (decode): hyla's own kernel, one output element per (row, column),
 * summed in a fixed order by one thread; with AVX-512 BF16 (vdpbf16ps: 32 bf16 products per
 * instruction into 16 fp32 lanes) where the CPU has it, else scalar. Reading W once for all M
 * rows is the whole cost, so it runs at memory bandwidth.
 * Larger M: oneDNN's bf16 matmul primitive (fp32 accumulation and output; an `accumulate` call
 * adds with a sum post-op), one primitive per shape and calling thread kept in a small cache (with
 * oneDNN's library scratchpad a primitive runs only on the thread that created it).
 * Products of two bf16 values are exact in fp32 (8 + 8 significant bits), so both paths differ
 * from exact arithmetic only by fp32 summation: |error| <= K u sum_k |x_k w_k|, u = 2^-24. */
#include "core/gemm.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/dnnl_matmul.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "core/stream_prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_AVX512BF16_KERNEL 1
#endif

/* ---- skinny kernel ---------------------------------------------------------------------------- */

static float dot_bf16_scalar(const uint16_t *x, const uint16_t *w, int64_t K)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++)
        acc += hyla_bf16_to_f32(x[k]) * hyla_bf16_to_f32(w[k]);
    return acc;
}

#ifdef HAVE_AVX512BF16_KERNEL
/* Each weight line is asked for into the L2 32 KB ahead and into the L1 2 KB ahead
 * (core/stream_prefetch.h): on the Intel Xeon VM 0.8B bf16 decode 19.09 -> 20.10 tok/s against
 * the one prefetch into the L2 8 KB ahead (bench/ab_decode.sh, 30 alternating windows). On the Zen 5 a
 * 256 MB matrix read at 85-91 GB/s in the DRAM's fast phases with one 8 KB ahead where 4 KB read 82-84
 * (plain reads 80-89), level in slow phases; 50 alternating rounds. */

__attribute__((target("avx512f,avx512bf16"))) static float dot_bf16_avx512(const uint16_t *x, const uint16_t *w,
                                                                            int64_t K)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        /* W streams from memory once: ask for its lines ahead (the next rows' at a row's end; past
         * the matrix's end a prefetch is a no-op that cannot fault). On the first machine a large
         * matrix read at ~24 GB/s with one, ~19 without, against 22-29 for a plain stream. Not
         * non-temporal (quant_avx512.c says why): it was ahead on the Zen 5 VM (0.8B bf16 decode in
         * 3 of 4 pairs), but on the Intel Xeon VM the same decode ran 2.28x faster into the L2
         * (7.55 -> 17.23 tok/s, bench/ab_decode.sh). */
        hyla_prefetch_stream(w + k);
        __m512i a = _mm512_loadu_si512((const void *)(x + k)), b = _mm512_loadu_si512((const void *)(w + k));
        acc = _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
    }
    float s = _mm512_reduce_add_ps(acc);
    for (; k < K; k++)
        s += hyla_bf16_to_f32(x[k]) * hyla_bf16_to_f32(w[k]);
    return s;
}

/* The same dot product for m <= 4 rows of x (stride K) against one weight row at once: each chunk of
 * w is loaded once and feeds m independent accumulator chains (a verify of 3 rows had run 3 chains
 * one after another, each re-reading w). Every row's arithmetic is dot_bf16_avx512's exactly. */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
dots_bf16_avx512(float *out, const uint16_t *x, const uint16_t *w, int64_t K, int m)
{
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        hyla_prefetch_stream(w + k);
        __m512i b = _mm512_loadu_si512((const void *)(w + k));
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            if (i < m)
                acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_loadu_si512((const void *)(x + i * K + k)), (__m512bh)b);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        if (i < m) {
            float s = _mm512_reduce_add_ps(acc[i]);
            for (int64_t j = k; j < K; j++)
                s += hyla_bf16_to_f32(x[i * K + j]) * hyla_bf16_to_f32(w[j]);
            out[i] = s;
        }
}

__attribute__((target("avx512f,avx512bf16"))) static void rows_bf16_avx512(float *out, const uint16_t *x,
                                                                           const uint16_t *w, int64_t K, int64_t M)
{
    for (int64_t i0 = 0; i0 < M; i0 += 4) {
        switch (M - i0 < 4 ? M - i0 : 4) { /* constant row counts: the accumulators stay in registers */
        case 1: dots_bf16_avx512(out + i0, x + i0 * K, w, K, 1); break;
        case 2: dots_bf16_avx512(out + i0, x + i0 * K, w, K, 2); break;
        case 3: dots_bf16_avx512(out + i0, x + i0 * K, w, K, 3); break;
        default: dots_bf16_avx512(out + i0, x + i0 * K, w, K, 4); break;
        }
    }
}
#endif

typedef float (*dot_fn)(const uint16_t *, const uint16_t *, int64_t);

static dot_fn pick_dot(void)
{
#ifdef HAVE_AVX512BF16_KERNEL
    if (__builtin_cpu_supports("avx512bf16"))
        return dot_bf16_avx512;
#endif
    return dot_bf16_scalar;
}

static void linear_bf16_skinny(float *y, const uint16_t *x, const uint16_t *W, int64_t M, int64_t K, int64_t N,
                               int accumulate)
{
    static dot_fn dot;
    if (!dot)
        dot = pick_dot();
#ifdef HAVE_AVX512BF16_KERNEL
    if (dot == dot_bf16_avx512) { /* all M rows against each weight row at once */
#pragma omp parallel for schedule(static) HYLA_PAR_IF(M * N * K)
        for (int64_t n = 0; n < N; n++) {
            float v[HYLA_BF16_SKINNY_M];
            rows_bf16_avx512(v, x, W + n * K, K, M);
            for (int64_t i = 0; i < M; i++)
                y[i * N + n] = accumulate ? y[i * N + n] + v[i] : v[i];
        }
        return;
    }
#endif
#pragma omp parallel for schedule(static) HYLA_PAR_IF(M * N * K)
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < M; i++) {
            float v = dot(x + i * K, W + n * K, K);
            y[i * N + n] = accumulate ? y[i * N + n] + v : v;
        }
}

const char *hyla_bf16_skinny_kernel_name(void)
{
    return pick_dot() == dot_bf16_scalar ? "scalar" : "avx512bf16";
}

/* ---- oneDNN matmul ------------------------------------------------------------------------------ */

#define PRIM_CACHE 64

typedef struct {
    int64_t M, N, K;
    int trans_a, trans_b, accumulate;
    pthread_t owner; /* a primitive runs only on the thread that made it (oneDNN's library scratchpad) */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t src, wei, dst;
} prim_entry;

static struct {
    pthread_mutex_t lock;
    dnnl_stream_t stream;
    prim_entry entries[PRIM_CACHE];
    int n, next; /* filled entries; next slot to evict (round robin) */
} matmul_cache = {PTHREAD_MUTEX_INITIALIZER, NULL, {{0}}, 0, 0};

static int make_primitive(prim_entry *e, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b, int accumulate)
{
    dnnl_dims_t sd = {M, K}, wd = {K, N}, dd = {M, N};
    /* A transposed operand is the other row-major format of the same logical matrix: A stored
     * [K, M] is the [M, K] source in format "ba", B stored [N, K] (a linear layer's W) is the
     * [K, N] weights in format "ba" */
    if (dnnl_memory_desc_init_by_tag(&e->src, 2, sd, dnnl_bf16, trans_a ? dnnl_ba : dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->wei, 2, wd, dnnl_bf16, trans_b ? dnnl_ba : dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&e->dst, 2, dd, dnnl_f32, dnnl_ab) != dnnl_success)
        return -1;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &e->src, &e->wei, NULL, &e->dst) != dnnl_success)
        return -1;
    e->prim = hyla_dnnl_matmul_create(hyla_dnnl_engine(), &md, accumulate, NULL);
    if (!e->prim)
        return -1;
    e->M = M, e->N = N, e->K = K, e->trans_a = trans_a, e->trans_b = trans_b, e->accumulate = accumulate;
    e->owner = pthread_self();
    return 0;
}

static prim_entry *find_primitive(int64_t M, int64_t N, int64_t K, int trans_a, int trans_b, int accumulate)
{
    for (int i = 0; i < matmul_cache.n; i++) {
        prim_entry *e = &matmul_cache.entries[i];
        if (e->M == M && e->N == N && e->K == K && e->trans_a == trans_a && e->trans_b == trans_b &&
            e->accumulate == accumulate && pthread_equal(e->owner, pthread_self()))
            return e;
    }
    prim_entry *e = &matmul_cache.entries[matmul_cache.n < PRIM_CACHE ? matmul_cache.n++ : matmul_cache.next];
    if (matmul_cache.n == PRIM_CACHE)
        matmul_cache.next = (matmul_cache.next + 1) % PRIM_CACHE;
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    e->prim = NULL;
    return make_primitive(e, M, N, K, trans_a, trans_b, accumulate) == 0 ? e : NULL;
}

static void gemm_bf16_dnnl(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *x,
                           const uint16_t *W, int accumulate, float *y)
{
    pthread_mutex_lock(&matmul_cache.lock);
    hyla_in_gemm_library = 1;
    dnnl_engine_t engine = hyla_dnnl_engine();
    int ok = engine && (matmul_cache.stream ||
                        dnnl_stream_create(&matmul_cache.stream, engine, dnnl_stream_default_flags) == dnnl_success);
    prim_entry *e = ok ? find_primitive(M, N, K, trans_a, trans_b, accumulate) : NULL;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, NULL}, {DNNL_ARG_WEIGHTS, NULL}, {DNNL_ARG_DST, NULL}};
    const dnnl_memory_desc_t *mds[3] = {e ? &e->src : NULL, e ? &e->wei : NULL, e ? &e->dst : NULL};
    void *ptrs[3] = {(void *)x, (void *)W, y};
    ok = ok && e;
    for (int i = 0; ok && i < 3; i++)
        ok = dnnl_memory_create(&args[i].memory, mds[i], engine, ptrs[i]) == dnnl_success;
    if (ok)
        ok = dnnl_primitive_execute(e->prim, matmul_cache.stream, 3, args) == dnnl_success &&
             dnnl_stream_wait(matmul_cache.stream) == dnnl_success;
    for (int i = 0; i < 3; i++)
        if (args[i].memory)
            dnnl_memory_destroy(args[i].memory);
    hyla_in_gemm_library = 0;
    pthread_mutex_unlock(&matmul_cache.lock);
    HYLA_ASSERT(ok); /* shapes are valid by construction; a failure here is a oneDNN setup problem */
}

void hyla_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B,
                    int accumulate, float *C)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* an empty sum */
        if (!accumulate)
            memset(C, 0, (size_t)(M * N) * sizeof *C);
        return;
    }
    int profiled = hyla_prof.enabled && !omp_in_parallel(); /* counters are not thread-safe */
    double t0 = profiled ? hyla_now() : 0.0;
    if (M <= HYLA_BF16_SKINNY_M && !trans_a && trans_b)
        linear_bf16_skinny(C, A, B, M, K, N, accumulate);
    else
        gemm_bf16_dnnl(trans_a, trans_b, M, N, K, A, B, accumulate, C);
    if (profiled) {
        hyla_prof.gemm_seconds += hyla_now() - t0;
        hyla_prof.gemm_flops += 2.0 * (double)M * (double)N * (double)K;
    }
}

void hyla_linear_bf16(float *y, const uint16_t *x, const uint16_t *W, int64_t n_rows, int64_t in, int64_t out,
                      int accumulate)
{
    hyla_gemm_bf16(0, 1, n_rows, out, in, x, W, accumulate, y);
}
