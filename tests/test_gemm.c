/* The GEMM seam's products and bf16 conversions (core/gemm*.c, core/bf16.h) against a
 * double-precision evaluation written here: fp32 linear layers (oneDNN's matmul primitive, sgemm,
 * hyla's skinny kernel), bf16 products with fp32 accumulation in every layout, bf16 compute's
 * products both ways, the low-rank (LoRA) products, and the bf16 array conversions against their scalar definition; plus the
 * bit-identities across thread counts, parallel regions and row splits that runs rely on.
 * Tolerances are derived next to each check (tests/op_check.h: u = 2^-24).
 *
 * Usage: test_gemm [ignored]   (tests/run.sh passes the oracle case directory). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "op_check.h"

/* ---- fp32 linear layers y = x W^T (core/gemm.c, gemm_matmul.c) ---------------------------------
 * Both ways hyla_gemm can take for more than 16 rows (oneDNN's matmul primitive, the default, and
 * sgemm) and the skinny kernel below that, against float64: each fp32 product is rounded once and the
 * K-term sum adds K roundings (plus one with C's old value when accumulating), so
 * |err| <= (K + 2) u (sum_k |x_k w_k| + |c_old|). Strided operands (lda, ldb, ldc wider than the
 * matrix) are included. The primitive's result must be the same bits when called again, the same inside
 * a parallel region (where the fp32 experts call it, one thread each) as in a one-thread process, and
 * the same for the rows split across two calls (a loss head's chunks, a prompt split into pieces):
 * bit-identity between remat policies, units, ranks run with --threads 1 and chunkings rests on it.
 * Between 1 and 2 threads it may differ for some shapes (oneDNN splits a short, narrow product's K
 * over the threads: [17 x 1024 x 300] here), as sgemm's results may: that is reported, not required
 * (README: bit-identity across processes needs the same thread count). */
static void test_gemm_nt(void)
{
    /* M, K, N: the skinny kernel; sgemm below the primitive's size; the primitive at 17 rows, rows split
     * in two unequal parts, a K that no vector width divides */
    const int64_t dims[][3] = {{3, 70, 33}, {40, 64, 50}, {17, 1024, 300}, {64, 513, 200}, {129, 1024, 40}, {300, 100, 777}};
    int shapes = 0, same_1_2 = 0;
    for (int way = 0; way < 2; way++) {
        hyla_gemm_nt_set_matmul(way == 0);
        chk c = chk_begin(way == 0 ? "gemm fp32 x W^T, matmul primitive, vs float64; again, nested == 1 thread, split"
                                   : "gemm fp32 x W^T, sgemm, vs float64");
        for (int di = 0; di < 6; di++)
            for (int acc = 0; acc < 2; acc++) {
                int64_t M = dims[di][0], K = dims[di][1], N = dims[di][2];
                int64_t lda = K + 3 * acc, ldb = K + 5 * acc, ldc = N + 2 * acc; /* strided when accumulating */
                float *x = falloc(M * lda), *W = falloc(N * ldb), *y = falloc(M * ldc), *y0 = falloc(M * ldc);
                float *y1 = falloc(M * ldc), *y2 = falloc(M * ldc), *y3 = falloc(M * ldc), *y4 = falloc(M * ldc);
                fill_normal(x, M * lda, 1.0);
                fill_normal(W, N * ldb, 0.1);
                for (int64_t i = 0; i < M * ldc; i++)
                    y[i] = y0[i] = acc ? (float)hyla_rng_normal(&rng) : NAN; /* NaN: must be overwritten */
                memcpy(y1, y, (size_t)(M * ldc) * 4), memcpy(y2, y, (size_t)(M * ldc) * 4), memcpy(y3, y, (size_t)(M * ldc) * 4);
                memcpy(y4, y, (size_t)(M * ldc) * 4);
                float beta = acc ? 1.0f : 0.0f;
                hyla_gemm(0, 1, M, N, K, 1.0f, x, lda, W, ldb, beta, y, ldc);
                if (way == 0 && hyla_gemm_nt_takes_matmul(M, N, K)) {
                    int threads = omp_get_max_threads();
                    omp_set_num_threads(1);
                    hyla_gemm(0, 1, M, N, K, 1.0f, x, lda, W, ldb, beta, y1, ldc);
                    omp_set_num_threads(threads);
#pragma omp parallel num_threads(2)
                    if (omp_get_thread_num() == omp_get_num_threads() - 1)
                        hyla_gemm(0, 1, M, N, K, 1.0f, x, lda, W, ldb, beta, y2, ldc);
                    int64_t half = M / 2; /* both parts through the primitive too, or no split */
                    if (!hyla_gemm_nt_takes_matmul(half, N, K) || !hyla_gemm_nt_takes_matmul(M - half, N, K))
                        half = M;
                    hyla_gemm(0, 1, half, N, K, 1.0f, x, lda, W, ldb, beta, y3, ldc);
                    if (M > half)
                        hyla_gemm(0, 1, M - half, N, K, 1.0f, x + half * lda, lda, W, ldb, beta, y3 + half * ldc, ldc);
                    hyla_gemm(0, 1, M, N, K, 1.0f, x, lda, W, ldb, beta, y4, ldc);
                    size_t bytes = (size_t)(M * ldc) * 4;
                    if (memcmp(y, y4, bytes) || memcmp(y1, y2, bytes) || memcmp(y, y3, bytes)) {
                        fprintf(stderr, "  %s: [%lld x %lld x %lld] differs: again %d, nested vs 1 thread %d, split %d\n",
                                c.name, (long long)M, (long long)K, (long long)N, !!memcmp(y, y4, bytes),
                                !!memcmp(y1, y2, bytes), !!memcmp(y, y3, bytes));
                        c.bad++;
                    }
                    shapes++, same_1_2 += !memcmp(y, y1, bytes);
                }
                for (int64_t i = 0; i < M; i++)
                    for (int64_t n = 0; n < N; n++) {
                        double ref = acc ? y0[i * ldc + n] : 0.0, mag = acc ? fabs(y0[i * ldc + n]) : 0.0;
                        for (int64_t k = 0; k < K; k++) {
                            double t = (double)x[i * lda + k] * W[n * ldb + k];
                            ref += t, mag += fabs(t);
                        }
                        chk_val(&c, y[i * ldc + n], ref, (double)(K + 2) * U * mag + 1e-30);
                    }
                free(x), free(W), free(y), free(y0), free(y1), free(y2), free(y3), free(y4);
            }
        chk_end(&c);
    }
    hyla_gemm_nt_set_matmul(1);
    printf("  matmul primitive: 1 thread == %d threads on %d of %d products (reported)\n", omp_get_max_threads(), same_1_2,
           shapes);
}

/* ---- bf16 linear (core/gemm_bf16.c) ------------------------------------------------------------
 * y = x W^T with bf16 inputs and fp32 accumulation, against float64 on the same bf16 values.
 * Each product of two bf16 numbers is exact in fp32 (8 + 8 significant bits), so the only error
 * is fp32 summation over K terms (and, accumulating, one more rounding with y's old value):
 * |err| <= (K + 1) u (sum_k |x_k w_k| + |y_old|). Shapes cover the skinny path (M <= 4, K not a
 * multiple of 32: the vector tail) and oneDNN's matmul (M > 4), both modes. */
static void test_linear_bf16(void)
{
    const int64_t Ms[] = {1, 3, 4, 5, 64, 300}, Ks[] = {1, 31, 64, 513}, Ns[] = {7, 100};
    chk c = chk_begin("linear bf16 (skinny + oneDNN) vs float64");
    for (int mi = 0; mi < 6; mi++)
        for (int ki = 0; ki < 4; ki++)
            for (int ni = 0; ni < 2; ni++)
                for (int acc = 0; acc < 2; acc++) {
                    int64_t M = Ms[mi], K = Ks[ki], N = Ns[ni];
                    uint16_t *x = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2);
                    float *y = malloc((size_t)(M * N) * 4), *y0 = malloc((size_t)(M * N) * 4);
                    for (int64_t i = 0; i < M * K; i++)
                        x[i] = hyla_bf16_from_f32((float)hyla_rng_normal(&rng));
                    for (int64_t i = 0; i < N * K; i++)
                        w[i] = hyla_bf16_from_f32((float)(0.1 * hyla_rng_normal(&rng)));
                    for (int64_t i = 0; i < M * N; i++)
                        y[i] = y0[i] = acc ? (float)hyla_rng_normal(&rng) : NAN; /* NaN: must be overwritten */
                    hyla_linear_bf16(y, x, w, M, K, N, acc);
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t n = 0; n < N; n++) {
                            double ref = acc ? y0[i * N + n] : 0.0, mag = acc ? fabs(y0[i * N + n]) : 0.0;
                            for (int64_t k = 0; k < K; k++) {
                                double t = (double)hyla_bf16_to_f32(x[i * K + k]) * hyla_bf16_to_f32(w[n * K + k]);
                                ref += t;
                                mag += fabs(t);
                            }
                            chk_val(&c, y[i * N + n], ref, (double)(K + 1) * U * mag + 1e-30);
                        }
                    free(x), free(w), free(y), free(y0);
                }
    chk_end(&c);
    printf("  bf16 skinny kernel: %s\n", hyla_bf16_skinny_kernel_name());
}

/* ---- general bf16 GEMM: the backward's layouts --------------------------------------------------
 * C (+)= op(A) op(B) for (trans_a, trans_b) = (0, 1) forward, (0, 0) dx = dy W, (1, 0) dW = dy^T x,
 * against float64 on the same bf16 values; the bound of test_linear_bf16 (exact products, fp32
 * summation of K terms plus the accumulated value). */
static void test_gemm_bf16(void)
{
    const int64_t dims[][3] = {{1, 7, 33}, {4, 100, 64}, {5, 9, 1}, {64, 48, 300}, {257, 31, 70}};
    const int layouts[][2] = {{0, 1}, {0, 0}, {1, 0}};
    chk c = chk_begin("gemm bf16 (0,1) (0,0) (1,0) vs float64");
    for (int di = 0; di < 5; di++)
        for (int li = 0; li < 3; li++)
            for (int acc = 0; acc < 2; acc++) {
                int64_t M = dims[di][0], N = dims[di][1], K = dims[di][2];
                int ta = layouts[li][0], tb = layouts[li][1];
                uint16_t *A = malloc((size_t)(M * K) * 2), *B = malloc((size_t)(K * N) * 2);
                float *C = malloc((size_t)(M * N) * 4), *C0 = malloc((size_t)(M * N) * 4);
                for (int64_t i = 0; i < M * K; i++)
                    A[i] = hyla_bf16_from_f32((float)hyla_rng_normal(&rng));
                for (int64_t i = 0; i < K * N; i++)
                    B[i] = hyla_bf16_from_f32((float)hyla_rng_normal(&rng));
                for (int64_t i = 0; i < M * N; i++)
                    C[i] = C0[i] = acc ? (float)hyla_rng_normal(&rng) : NAN;
                hyla_gemm_bf16(ta, tb, M, N, K, A, B, acc, C);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double ref = acc ? C0[i * N + j] : 0.0, mag = acc ? fabs(C0[i * N + j]) : 0.0;
                        for (int64_t k = 0; k < K; k++) {
                            double a = hyla_bf16_to_f32(ta ? A[k * M + i] : A[i * K + k]);
                            double b = hyla_bf16_to_f32(tb ? B[j * K + k] : B[k * N + j]);
                            ref += a * b;
                            mag += fabs(a * b);
                        }
                        chk_val(&c, C[i * N + j], ref, (double)(K + 1) * U * mag + 1e-30);
                    }
                free(A), free(B), free(C), free(C0);
            }
    chk_end(&c);
}

/* ---- bf16 compute's products (core/gemm_bf16w.c): bf16 weights, activations as bf16 values in
 * fp32 buffers; y = x W^T (skinny M <= 4 and blocked paths: N across several 256-row weight blocks
 * widened; M across 512-row blocks and dy across column blocks native) and dx += dy W, against
 * float64 on the same values, with test_linear_bf16's bound, both ways (native and widened, whatever
 * this CPU would choose). Each way's result must not depend on the thread count (bit-identity between
 * a process with --threads 1 and one with more rests on it; seen to hold for oneDNN's bf16 matmul). */
static void test_linear_bf16w(void)
{
    const int64_t dims[][3] = {{1, 300, 33}, {4, 600, 64}, {5, 257, 48}, {70, 513, 96}, {600, 1500, 40}};
    for (int native = 0; native < 2; native++) {
    hyla_bf16w_set_kind(native);
    chk c = chk_begin(native ? "linear bf16w native (x W^T, dy W) vs float64, 1 thread == 2"
                             : "linear bf16w widened (x W^T, dy W) vs float64, 1 thread == 2");
    for (int di = 0; di < 5; di++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t M = dims[di][0], N = dims[di][1], K = dims[di][2];
            float *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4), *y0 = malloc((size_t)(M * N) * 4);
            float *dy = malloc((size_t)(M * N) * 4), *dx = malloc((size_t)(M * K) * 4), *dx0 = malloc((size_t)(M * K) * 4);
            float *scratch = malloc((size_t)hyla_bf16w_scratch_floats(M, K) * 4);
            uint16_t *W = malloc((size_t)(N * K) * 2);
            for (int64_t i = 0; i < M * K; i++) {
                x[i] = hyla_bf16_to_f32(hyla_bf16_from_f32((float)hyla_rng_normal(&rng)));
                dx[i] = dx0[i] = (float)hyla_rng_normal(&rng);
            }
            for (int64_t i = 0; i < N * K; i++)
                W[i] = hyla_bf16_from_f32((float)(0.1 * hyla_rng_normal(&rng)));
            for (int64_t i = 0; i < M * N; i++) {
                y[i] = y0[i] = acc ? (float)hyla_rng_normal(&rng) : NAN;
                dy[i] = hyla_bf16_to_f32(hyla_bf16_from_f32((float)hyla_rng_normal(&rng)));
            }
            float *y1 = malloc((size_t)(M * N) * 4), *dx1 = malloc((size_t)(M * K) * 4);
            memcpy(y1, y, (size_t)(M * N) * 4), memcpy(dx1, dx, (size_t)(M * K) * 4);
            hyla_linear_bf16w(y, x, W, M, K, N, acc, scratch);
            hyla_linear_bf16w_dx(dx, dy, W, M, K, N, scratch);
            int threads = omp_get_max_threads();
            omp_set_num_threads(1);
            hyla_linear_bf16w(y1, x, W, M, K, N, acc, scratch);
            hyla_linear_bf16w_dx(dx1, dy, W, M, K, N, scratch);
            omp_set_num_threads(threads);
            /* (widened, one row: the fp32 sgemm's [1 x N] x [N x K] is a GEMV that splits its sum over the
             * threads; a run is still deterministic at a given thread count) */
            int one_row_sgemm = !native && M == 1;
            if (memcmp(y, y1, (size_t)(M * N) * 4) || (!one_row_sgemm && memcmp(dx, dx1, (size_t)(M * K) * 4))) {
                fprintf(stderr, "  %s: [%lld x %lld x %lld] differs between 1 and %d threads\n", c.name, (long long)M,
                        (long long)K, (long long)N, threads);
                c.bad++;
            }
            free(y1), free(dx1);
            for (int64_t i = 0; i < M; i++) {
                for (int64_t n = 0; n < N; n++) {
                    double ref = acc ? y0[i * N + n] : 0.0, mag = acc ? fabs(y0[i * N + n]) : 0.0;
                    for (int64_t k = 0; k < K; k++) {
                        double t = (double)x[i * K + k] * hyla_bf16_to_f32(W[n * K + k]);
                        ref += t, mag += fabs(t);
                    }
                    chk_val(&c, y[i * N + n], ref, (double)(K + 1) * U * mag + 1e-30);
                }
                for (int64_t k = 0; k < K; k++) {
                    double ref = dx0[i * K + k], mag = fabs(dx0[i * K + k]);
                    for (int64_t n = 0; n < N; n++) {
                        double t = (double)dy[i * N + n] * hyla_bf16_to_f32(W[n * K + k]);
                        ref += t, mag += fabs(t);
                    }
                    chk_val(&c, dx[i * K + k], ref, (double)(N + 1) * U * mag + 1e-30);
                }
            }
            free(x), free(y), free(y0), free(dy), free(dx), free(dx0), free(scratch), free(W);
        }
    chk_end(&c);
    }
    hyla_bf16w_set_kind(-1);
    printf("  bf16 compute's products on this CPU: %s\n", hyla_bf16w_kind_name());
}

/* ---- low-rank products (core/gemm_lowrank.c) ----------------------------------------------------
 * expand C (+)= alpha X Y over r terms, reduce Z (+)= alpha D W over N terms and gather
 * G += alpha D^T X over M terms against float64:
 * one FMA chain (one rounding per term) and one more rounding for alpha and C's old value, so
 * |err| <= (terms + 2) u (|alpha| sum |x y| + |c_old|). Strided operands; 1 thread == 2 bit for
 * bit; with AVX-512 each row of C also equals its own one-row call (a decoded token's adapter
 * output is the prompt row's). Ranks 16 (reduce's and gather's kernels), 8 and 32 (their GEMM fallback). */
static void chk_lowrank(chk *c, float got, const float *a, int64_t as, const float *b, int64_t bs, int64_t n,
                        float alpha, double old)
{
    double sum = 0.0, mag = 0.0;
    for (int64_t k = 0; k < n; k++) {
        double t = (double)a[k * as] * b[k * bs];
        sum += t, mag += fabs(t);
    }
    chk_val(c, got, alpha * sum + old, (double)(n + 2) * U * (fabs(alpha) * mag + fabs(old)) + 1e-30);
}

static void test_lowrank(void)
{
    const int64_t dims[][3] = {{1, 33, 16}, {5, 70, 16}, {9, 130, 8}, {37, 300, 16}, {64, 1000, 32}, {13, 48, 16}};
    chk c = chk_begin("low-rank expand / reduce / gather vs float64, 1 thread == 2, rows alone == together");
    for (int di = 0; di < 6; di++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t M = dims[di][0], N = dims[di][1], r = dims[di][2];
            int64_t ldc = N + 3, ldx = r + 5, ldy = N + 7, ldd = N + 2;
            float alpha = 0.75f;
            size_t cb = (size_t)(M * ldc) * 4, gb = (size_t)(N * r) * 4;
            float *C = malloc(cb), *C0 = malloc(cb), *C1 = malloc(cb);
            float *X = malloc((size_t)(M * ldx) * 4), *Y = malloc((size_t)(r * ldy) * 4);
            float *D = malloc((size_t)(M * ldd) * 4);
            float *Xd = malloc((size_t)(M * r) * 4), *G = malloc(gb), *G0 = malloc(gb);
            float *G1 = malloc(gb), *W = malloc(gb), *Z = malloc((size_t)(M * r) * 4);
            float *Z0 = malloc((size_t)(M * r) * 4), *Z1 = malloc((size_t)(M * r) * 4);
            for (int64_t i = 0; i < N * r; i++)
                W[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < M * r; i++)
                Z[i] = Z0[i] = Z1[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < M * ldc; i++)
                C[i] = C0[i] = C1[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < M * ldx; i++)
                X[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < r * ldy; i++)
                Y[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < M * ldd; i++)
                D[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < M * r; i++)
                Xd[i] = (float)hyla_rng_normal(&rng);
            for (int64_t i = 0; i < N * r; i++)
                G[i] = G0[i] = G1[i] = (float)hyla_rng_normal(&rng);
            hyla_lowrank_expand(C, ldc, X, ldx, Y, ldy, M, N, r, alpha, acc);
            hyla_lowrank_gather(G, D, ldd, Xd, M, N, r, alpha);
            hyla_lowrank_reduce(Z, D, ldd, W, M, N, r, alpha, acc);
            int threads = omp_get_max_threads();
            omp_set_num_threads(1);
            hyla_lowrank_expand(C1, ldc, X, ldx, Y, ldy, M, N, r, alpha, acc);
            hyla_lowrank_gather(G1, D, ldd, Xd, M, N, r, alpha);
            hyla_lowrank_reduce(Z1, D, ldd, W, M, N, r, alpha, acc);
            omp_set_num_threads(threads);
            if (memcmp(C, C1, (size_t)(M * ldc) * 4) || memcmp(G, G1, (size_t)(N * r) * 4) ||
                memcmp(Z, Z1, (size_t)(M * r) * 4)) {
                fprintf(stderr, "  %s: [%lld x %lld, r %lld] differs between 1 and %d threads\n", c.name, (long long)M,
                        (long long)N, (long long)r, threads);
                c.bad++;
            }
#if defined(__AVX512F__)
            memcpy(C1, C0, (size_t)(M * ldc) * 4);
            for (int64_t i = 0; i < M; i++)
                hyla_lowrank_expand(C1 + i * ldc, ldc, X + i * ldx, ldx, Y, ldy, 1, N, r, alpha, acc);
            memcpy(Z1, Z0, (size_t)(M * r) * 4);
            for (int64_t i = 0; i < M; i++)
                hyla_lowrank_reduce(Z1 + i * r, D + i * ldd, ldd, W, 1, N, r, alpha, acc);
            if (memcmp(C, C1, (size_t)(M * ldc) * 4) || (r == 16 && memcmp(Z, Z1, (size_t)(M * r) * 4))) {
                fprintf(stderr, "  %s: [%lld x %lld, r %lld] rows alone differ from rows together\n", c.name,
                        (long long)M, (long long)N, (long long)r);
                c.bad++;
            }
#endif
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < ldc; j++) {
                    if (j >= N) /* past the matrix: untouched */
                        chk_val(&c, C[i * ldc + j], C0[i * ldc + j], 0.0);
                    else
                        chk_lowrank(&c, C[i * ldc + j], X + i * ldx, 1, Y + j, ldy, r, alpha,
                                    acc ? C0[i * ldc + j] : 0.0);
                }
            for (int64_t j = 0; j < N; j++)
                for (int64_t p = 0; p < r; p++)
                    chk_lowrank(&c, G[j * r + p], D + j, ldd, Xd + p, r, M, alpha, G0[j * r + p]);
            for (int64_t i = 0; i < M; i++)
                for (int64_t p = 0; p < r; p++)
                    chk_lowrank(&c, Z[i * r + p], D + i * ldd, 1, W + p, r, N, alpha, acc ? Z0[i * r + p] : 0.0);
            free(C), free(C0), free(C1), free(X), free(Y), free(D), free(Xd), free(G), free(G0), free(G1);
            free(W), free(Z), free(Z0), free(Z1);
        }
    chk_end(&c);
}

/* ---- bf16 array conversions: exactly the scalar definition (core/bf16.h) -----------------------
 * Every bf16 pattern unpacks to its float and packs back to itself (NaNs keep their payload's top
 * bits and stay NaNs); random fp32 bit patterns (every exponent, NaNs and infinities included)
 * and the rounding boundaries (ties, carries into the exponent, the overflow edge) pack and round
 * as hyla_bf16_from_bits does. */
static void test_bf16_arrays(void)
{
    enum { N = 65536 + 4096 };
    uint16_t *h = malloc(N * 2), *h2 = malloc(N * 2);
    float *f = malloc(N * 4), *r = malloc(N * 4);
    int bad = 0;
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    hyla_bf16_unpack(f, h, 65536);
    hyla_bf16_pack(h2, f, 65536);
    for (int i = 0; i < 65536; i++) {
        uint32_t u;
        memcpy(&u, &f[i], 4);
        bad += u != (uint32_t)h[i] << 16;                     /* unpacking is exact */
        bad += h2[i] != hyla_bf16_from_bits(u);               /* packing is the definition */
        bad += (h[i] & 0x7fff) <= 0x7f80 && h2[i] != h[i];     /* every non-NaN comes back */
    }
    uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x00008000u,
                        0x80018000u, 0x7f800001u, 0xff800000u, 0x7fc00000u, 0x00000000u};
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        if (i < 12)
            u = edges[i];
        else {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            u = (uint32_t)(state >> 32);
        }
        memcpy(&f[i], &u, 4);
    }
    hyla_bf16_pack(h2, f, N);
    memcpy(r, f, N * 4);
    hyla_bf16_round(r, N);
    for (int i = 0; i < N; i++) {
        uint32_t u, ru;
        memcpy(&u, &f[i], 4);
        memcpy(&ru, &r[i], 4);
        bad += h2[i] != hyla_bf16_from_bits(u) || ru != (uint32_t)hyla_bf16_from_bits(u) << 16;
    }
    printf("  bf16 pack/unpack/round vs the scalar definition: %d mismatches %s\n", bad, bad ? "FAIL" : "ok");
    failures += bad != 0;
    free(h), free(h2), free(f), free(r);
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    hyla_rng_seed(&rng, 20240614);
    test_gemm_nt();
    test_linear_bf16();
    test_gemm_bf16();
    test_linear_bf16w();
    test_lowrank();
    test_bf16_arrays();
    if (failures) {
        printf("test_gemm: %d FAILED\n", failures);
        return 1;
    }
    printf("test_gemm: all passed\n");
    return 0;
}
