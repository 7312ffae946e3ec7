/* The GEMM seam: every matrix product in hyla goes through here.
 *
 * Row-major single-precision C[M,N] = alpha * op(A) * op(B) + beta * C, where op(A) is [M,K]
 * (A stored [M,K] with lda, or [K,M] if trans_a) and op(B) is [K,N] (B stored [K,N] with ldb,
 * or [N,K] if trans_b). Linear layers y = x W^T are hyla_gemm(0, 1, ...).
 *
 * Backend chosen at build time (see Makefile: HYLA_GEMM=dnnl|openblas); bench/gemm_bench
 * measures both on hyla's shapes. Threads come from OpenMP. */
#ifndef HYLA_CORE_GEMM_H
#define HYLA_CORE_GEMM_H

#include <stdint.h>

void hyla_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc);

/* y[n_rows, out] = x[n_rows, in] W[out, in]^T (+ y if accumulate) */
void hyla_linear(float *y, const float *x, const float *W, int64_t n_rows, int64_t in,
                 int64_t out, int accumulate);

const char *hyla_gemm_backend_name(void);

/* C[M,N] = A[M,K] B[N,K]^T (+ C if accumulate) by oneDNN's f32 matmul primitive (core/gemm_matmul.c):
 * what hyla_gemm runs for a linear layer's forward of more than 16 rows and at least 2^22 multiply-adds
 * (hyla_gemm_nt_takes_matmul; alpha 1, beta 0 or 1) in the oneDNN build. Returns 0, or -1 where the
 * primitive cannot be made (hyla_gemm then takes sgemm, the same way every time for that shape). At a
 * given thread count each element's sum order depends on the shape only: the same bits every call and
 * for rows split across calls; inside a parallel region, a one-thread process's bits. */
int hyla_gemm_nt_matmul(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                        int accumulate, float *C, int64_t ldc);
void hyla_gemm_nt_set_matmul(int on); /* tests and benchmarks: 0 sends those products to sgemm, 1 (default) back */
int hyla_gemm_nt_takes_matmul(int64_t M, int64_t N, int64_t K); /* does hyla_gemm(0, 1, M, N, K, 1, ...) take it? */

/* bf16 linear layer, fp32 accumulation and output (core/gemm_bf16.c):
 * y[n_rows, out] (+)= x[n_rows, in] W[out, in]^T, x and W bf16 bit patterns. Rows up to
 * HYLA_BF16_SKINNY_M (decode) go through hyla's own kernel (AVX-512 BF16 where the CPU has it),
 * more through oneDNN's bf16 matmul. Error against exact arithmetic: <= in * 2^-24 * sum|x w|. */
#define HYLA_BF16_SKINNY_M 4
void hyla_linear_bf16(float *y, const uint16_t *x, const uint16_t *W, int64_t n_rows, int64_t in, int64_t out,
                      int accumulate);
const char *hyla_bf16_skinny_kernel_name(void); /* "avx512bf16" or "scalar" */
/* The general bf16 product with fp32 accumulation: C[M,N] (+)= op(A)[M,K] op(B)[K,N], operands
 * dense bf16 (A stored [M,K], or [K,M] if trans_a; B stored [K,N], or [N,K] if trans_b), C
 * fp32. hyla_linear_bf16 is (0, 1); the backward of a linear layer uses (0, 0) for dx = dy W
 * and (1, 0) for dW = dy^T x. Same error bound as hyla_linear_bf16. */
void hyla_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B,
                    int accumulate, float *C);

/* bf16 compute's products (core/gemm_bf16w.c): bf16 weights W[N,K], activations x[M,K] / dy[M,N]
 * given as fp32 buffers holding bf16 values, fp32 accumulation, by one of two ways chosen once per
 * process by the CPU (hyla_bf16w_native: oneDNN's bf16 matmul on CPUs whose vdpbf16ps outruns
 * fp32 FMA, else the weights widened into the fp32 sgemm; HYLA_BF16_PRODUCTS=native|widened|auto
 * overrides):
 *   hyla_linear_bf16w:    y[M,N] (+)= x W^T
 *   hyla_linear_bf16w_dx: dx[M,K] += dy W (native: any fp32 dy, packed to bf16 with
 *                         hyla_bf16_pack's rounding, so dy and its hyla_bf16_round give the same dx)
 * scratch: hyla_bf16w_scratch_floats(M, K) floats. (The weight gradient dy^T x of such buffers
 * is a plain hyla_gemm: both are fp32 buffers.) */
int64_t hyla_bf16w_scratch_floats(int64_t M, int64_t K);
int hyla_bf16w_native(void);
/* HYLA_BF16_PRODUCTS's values: "native" 1, "widened" 0, "auto" / empty / NULL -1, anything else -2 */
int hyla_bf16w_parse_kind(const char *text);
const char *hyla_bf16w_kind_name(void); /* "native" or "widened" */
void hyla_bf16w_set_kind(int native);   /* tests and benchmarks: 1 native, 0 widened, -1 the CPU's choice */
void hyla_linear_bf16w(float *y, const float *x, const uint16_t *W, int64_t M, int64_t K, int64_t N, int accumulate,
                       float *scratch);
void hyla_linear_bf16w_dx(float *dx, const float *dy, const uint16_t *W, int64_t M, int64_t K, int64_t N, float *scratch);

/* Products with one side of small rank r (LoRA's adapters; core/gemm_lowrank.c):
 *   hyla_lowrank_expand: C[M,N] = alpha X[M,r] Y[r,N] (+ C if accumulate), rows ldc / ldx / ldy apart
 *   hyla_lowrank_reduce: Z[M,r] = alpha D[M,K] W[K,r] (+ Z if accumulate), D's rows ldd apart, W and Z dense
 *   hyla_lowrank_gather: G[N,r] += alpha D[M,N]^T X[M,r], D's rows ldd apart, X and G dense
 * With AVX-512 (reduce and gather: at r = 16) each element is one FMA chain over the contraction in order,
 * then alpha times it added by one more FMA: results independent of the thread count and of M.
 * Otherwise they are hyla_gemm. */
void hyla_lowrank_expand(float *C, int64_t ldc, const float *X, int64_t ldx, const float *Y, int64_t ldy, int64_t M,
                         int64_t N, int64_t r, float alpha, int accumulate);
void hyla_lowrank_reduce(float *Z, const float *D, int64_t ldd, const float *W, int64_t M, int64_t K, int64_t r,
                         float alpha, int accumulate);
void hyla_lowrank_gather(float *G, const float *D, int64_t ldd, const float *X, int64_t M, int64_t N, int64_t r,
                         float alpha);

/* Non-zero while the calling thread is inside the GEMM library. The library may allocate its
 * own packing buffers; tests that assert "no allocation inside a step" exclude those. */
extern _Thread_local int hyla_in_gemm_library;

#endif
