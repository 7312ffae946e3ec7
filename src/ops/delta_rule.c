/* Gated delta rule (spec §3.4 step 7, §4): recurrent (decode) and chunked (prefill) forms.
 *
 * Per value head h (key head h / (Hv/Hk)), state S [dk, dv] (k-index first):
 *   S' = e^{g_t} S;  m = S'^T k_t;  delta = beta_t (v_t - m);  S = S' + k_t delta^T;
 *   o_t = S^T q_t  (updated state).
 * The columns of S are independent: column j only ever sees v[:, j].
 *
 * Threads: OpenMP over value heads; every head is computed by one thread in a fixed order, so
 * results are bit-identical for any thread count.
 *
 * Subnormals are flushed to zero inside every form (core/denormals.h: a fast-decaying head makes
 * them all the time, and each costs ~100 normal operations).
 *
 * Where a fused multiply-add is meant the code says MADD: fmaf when the target has hardware FMA
 * (the build is ISO C, where GCC does not contract a*b+c by itself), else a*b+c, since a
 * software fmaf is ~20x slower. Either way the rounding is fixed for a given build. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/denormals.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "ops/ops.h"

#define CH HYLA_DELTA_CHUNK

#ifdef FP_FAST_FMAF
#define MADD(a, b, c) fmaf(a, b, c)
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* ---- recurrent form (spec §4.1) --------------------------------------------------------------
 * One token at a time, in column blocks of RJ state columns so that the second sweep over a block
 * (decay + read, then write + output) finds it in cache and all temporaries live on the stack.
 * RJ = 128 = a whole head at dv = 128: the first sweep then streams the 64 KB state contiguously
 * from memory (the hardware prefetcher follows it; half-rows of 64 columns it did not: a 0.8B
 * decode step's delta rule 1.0-1.3 -> 0.75-1.05 ms), the second finds it in L2. Each column's
 * arithmetic is the same whatever the block. */

#define RJ 128

/* One token on the column block S[:, j0:j0+nj] of one head. The first sweep only reads S: the
 * decayed state decay * S is formed again in the second sweep (the same product, so the same bits
 * as storing it), which writes S once. */
static void
recurrent_step_cols(float *o /*[nj]*/, float *S /*[dk,dv] at column j0*/, const float *q /*[dk]*/,
                    const float *k /*[dk]*/, const float *v /*[nj]*/, float decay, float b, int64_t dk, int64_t dv,
                    int64_t nj)
{
    float m[RJ], d[RJ], acc[RJ];
    for (int64_t j = 0; j < nj; j++)
        m[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) { /* S' = decay S ; m = S'^T k */
        const float *Si = S + i * dv;
        float ki = k[i];
#pragma omp simd
        for (int64_t j = 0; j < nj; j++)
            m[j] = MADD(ki, decay * Si[j], m[j]);
    }
    for (int64_t j = 0; j < nj; j++) {
        d[j] = b * (v[j] - m[j]);
        acc[j] = 0.0f;
    }
    for (int64_t i = 0; i < dk; i++) { /* S = S' + k delta^T ; o = S^T q */
        float *Si = S + i * dv, ki = k[i], qi = q[i];
#pragma omp simd
        for (int64_t j = 0; j < nj; j++) {
            float s = MADD(ki, d[j], decay * Si[j]);
            Si[j] = s;
            acc[j] = MADD(qi, s, acc[j]);
        }
    }
    for (int64_t j = 0; j < nj; j++)
        o[j] = acc[j];
}

#if defined(__AVX512F__) && defined(__FMA__) && defined(FP_FAST_FMAF)
#include <immintrin.h>
#define RJV (RJ / 16)
/* recurrent_step_cols for a whole block of RJ columns, written out with m, d and acc in registers
 * (gcc 12 kept the arrays on the stack even at a constant trip count): the same operations on each
 * value -- decay * S rounded, then fused multiply-adds (MADD is fmaf here) -- so the same bits. */
static void recurrent_step_full(float *o /*[RJ]*/, float *S /*[dk,dv] at column j0*/, const float *q /*[dk]*/,
                                const float *k /*[dk]*/, const float *v /*[RJ]*/, float decay, float b, int64_t dk,
                                int64_t dv)
{
    __m512 m[RJV], d[RJV], acc[RJV], dec = _mm512_set1_ps(decay);
#pragma GCC unroll 8
    for (int c = 0; c < RJV; c++)
        m[c] = _mm512_setzero_ps(), acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < dk; i++) {
        const float *Si = S + i * dv;
        __m512 ki = _mm512_set1_ps(k[i]);
#pragma GCC unroll 8
        for (int c = 0; c < RJV; c++)
            m[c] = _mm512_fmadd_ps(ki, _mm512_mul_ps(dec, _mm512_loadu_ps(Si + 16 * c)), m[c]);
    }
    __m512 bv = _mm512_set1_ps(b);
#pragma GCC unroll 8
    for (int c = 0; c < RJV; c++)
        d[c] = _mm512_mul_ps(bv, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * c), m[c]));
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv;
        __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
#pragma GCC unroll 8
        for (int c = 0; c < RJV; c++) {
            __m512 s = _mm512_fmadd_ps(ki, d[c], _mm512_mul_ps(dec, _mm512_loadu_ps(Si + 16 * c)));
            _mm512_storeu_ps(Si + 16 * c, s);
            acc[c] = _mm512_fmadd_ps(qi, s, acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < RJV; c++)
        _mm512_storeu_ps(o + 16 * c, acc[c]);
}
#define HAVE_STEP_FULL 1
#endif

static void recurrent_step_block(float *o /*[nj]*/, float *S /*[dk,dv] at column j0*/,
                                 const float *q /*[dk]*/, const float *k /*[dk]*/,
                                 const float *v /*[nj]*/, float decay, float b, int64_t dk,
                                 int64_t dv, int64_t nj)
{
#ifdef HAVE_STEP_FULL
    if (nj == RJ) {
        recurrent_step_full(o, S, q, k, v, decay, b, dk, dv);
        return;
    }
#endif
    recurrent_step_cols(o, S, q, k, v, decay, b, dk, dv, nj);
}

void hyla_delta_rule_head_step(float *o /*[dv]*/, float *S /*[dk,dv]*/, const float *q /*[dk]*/,
                               const float *k /*[dk]*/, const float *v /*[dv]*/, float g, float beta, int64_t dk,
                               int64_t dv)
{
    float decay = expf(g);
    for (int64_t j0 = 0; j0 < dv; j0 += RJ) {
        int64_t nj = dv - j0 < RJ ? dv - j0 : RJ;
        recurrent_step_block(o + j0, S + j0, q, k, v + j0, decay, beta, dk, dv, nj);
    }
}

void hyla_delta_rule_recurrent_fwd(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                   const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                   const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                   const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk,
                                   int64_t Hv, int64_t dk, int64_t dv)
{
    hyla_delta_rule_recurrent_fwd_keep(out, state, NULL, 0, q, k, v, g, beta, T, Hk, Hv, dk, dv);
}

void hyla_delta_rule_recurrent_fwd_keep(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                        float *keep /*[T - 1] x [Hv,dk,dv] at stride keep_stride, or NULL*/,
                                        int64_t keep_stride, const float *q /*[T,Hk,dk]*/,
                                        const float *k /*[T,Hk,dk]*/, const float *v /*[T,Hv,dv]*/,
                                        const float *g /*[T,Hv]*/, const float *beta /*[T,Hv]*/, int64_t T,
                                        int64_t Hk, int64_t Hv, int64_t dk, int64_t dv)
{
    int64_t rep = Hv / Hk; /* value heads per key head (repeat_interleave) */
#pragma omp parallel HYLA_PAR_IF(T * Hv * dk * dv)
    {
        unsigned mxcsr = hyla_flush_denormals_begin(); /* as the chunked form: the same values flushed */
#pragma omp for schedule(static)
        for (int64_t h = 0; h < Hv; h++) {
            float *S = state + h * dk * dv;
            int64_t hk = h / rep;
            for (int64_t t = 0; t < T; t++) {
                const float *qt = q + (t * Hk + hk) * dk, *kt = k + (t * Hk + hk) * dk;
                hyla_delta_rule_head_step(out + (t * Hv + h) * dv, S, qt, kt, v + (t * Hv + h) * dv, g[t * Hv + h],
                                          beta[t * Hv + h], dk, dv);
                if (keep && t < T - 1) /* this head's state after row t (a rollback point; after the last row it is `state`) */
                    memcpy(keep + t * keep_stride + h * dk * dv, S, (size_t)(dk * dv) * sizeof *S);
            }
        }
        hyla_flush_denormals_end(mxcsr);
    }
}

/* ---- chunked form (spec §4.2) ----------------------------------------------------------------
 * Per head and chunk of L <= CH tokens (r, s index tokens inside the chunk), with the state S at
 * the chunk start:
 *   gam_r   = sum_{u<=r} g_u, in double: gam_r - gam_s for nearby r, s then has full relative
 *             accuracy, which an fp32 running sum (HF) loses once |gam| is large.
 *   Gam[r,s] = exp(gam_r - gam_s) (s <= r)
 *   M[r,s]  = beta_r (k_r . k_s) Gam[r,s] (s < r)      P[r,s] = (q_r . k_s) Gam[r,s] (s <= r)
 *   R_r     = beta_r (v_r - e^{gam_r} k_r^T S)
 *   X       = (I + M)^{-1} R          (= V_new = U - W S of the spec, i.e. the recurrent deltas)
 *   O_r     = e^{gam_r} q_r^T S + sum_{s<=r} P[r,s] X_s
 *   S      <- e^{gam_L-1} S + sum_r e^{gam_L-1 - gam_r} k_r X_r^T
 * R folds the spec's U = T diag(beta) V and W = T diag(beta e^gam) K into one right-hand side,
 * so the triangular solve runs once, in place, on [L, dv] (U - W S = T (diag(beta) V -
 * diag(beta e^gam) K S) exactly).
 *
 * Padding: the last chunk has L = T mod CH real tokens. Padding it to CH with q = k = v = 0,
 * beta = g = 0 (spec) adds rows and columns that contribute exact zeros to every product above
 * and leaves gam_{L-1} unchanged, so the kernel simply runs that chunk with L rows; the outputs
 * and the final state are those of the padded computation.
 *
 * Products go through the GEMM seam (hyla_gemm: oneDNN's sgemm by default): four calls per chunk
 * plus the solve's off-diagonal updates (three for a full chunk). Called from inside the parallel region, oneDNN runs each
 * product on the calling thread; with one thread the region is inactive and oneDNN sees
 * omp_get_max_threads() = 1 anyway, so the summation order never depends on the team size.
 * Measured on the 2-core AVX-512 machine (one thread, 64x128x128): oneDNN 150-200 GFLOP/s,
 * register-blocked AVX-512 intrinsics without packing 50-75. Whole kernel, T=512, Hk=4, Hv=8,
 * dk=dv=128 (FLOPs as in the test): 140-150 GFLOP/s on one thread, 265-280 on two, on a quiet
 * machine (oneDNN itself: 184 / 373 on a 2048^3 sgemm).
 * Note: hyla_gemm's opt-in profile counters (core/profile.h) are not thread-safe; with profiling
 * enabled, calls from these worker threads race on them. */

#define SOLVE_BLOCK 16 /* rows per diagonal block of the triangular solve */

/* Per-thread scratch (floats): KQ [2CH,dk] (the chunk's K rows, then its Q rows, contiguous),
 * MP [2CH,CH] (M rows, then P rows), Y [2CH,dv] (R = X rows, then Q S rows). Stacking K and Q
 * lets one GEMM form K K^T and Q K^T, and one K S and Q S. */
static size_t chunk_slot_floats(int64_t dk, int64_t dv)
{
    return (size_t)(2 * CH * (dk + CH + dv));
}

/* Scratch for hyla_delta_rule_chunked_fwd: one slot per OpenMP thread, for the
 * omp_get_max_threads() threads current at this call. The kernel's team never exceeds
 * omp_get_max_threads() at its own call, so size the buffer under the same thread setting as the
 * kernel call (raising omp_set_num_threads in between would overrun it). Concurrent calls (e.g.
 * from inside an outer parallel region, where every inner team's thread 0 uses slot 0) need
 * separate work buffers. */
size_t hyla_delta_rule_chunked_work_floats(int64_t Hv, int64_t dk, int64_t dv)
{
    (void)Hv;
    return (size_t)omp_get_max_threads() * chunk_slot_floats(dk, dv);
}

/* In place: X = (I + M)^{-1} X for unit lower-triangular I + M (M [L,L] strictly lower, row
 * stride CH), X [L,dv]. Blocked forward substitution: rows of a block first subtract the finished
 * rows above with one GEMM, then the block's own triangle row by row. */
static void solve_unit_lower(float *X /*[L,dv]*/, const float *M /*[L,CH]*/, int64_t L, int64_t dv)
{
    for (int64_t b0 = 0; b0 < L; b0 += SOLVE_BLOCK) {
        int64_t b1 = b0 + SOLVE_BLOCK < L ? b0 + SOLVE_BLOCK : L;
        if (b0 > 0)
            hyla_gemm(0, 0, b1 - b0, dv, b0, -1.0f, M + b0 * CH, CH, X, dv, 1.0f, X + b0 * dv,
                      dv);
        for (int64_t r = b0 + 1; r < b1; r++) {
            float *Xr = X + r * dv;
            for (int64_t s = b0; s < r; s++) {
                const float *Xs = X + s * dv;
                float mrs = -M[r * CH + s];
#pragma omp simd
                for (int64_t j = 0; j < dv; j++)
                    Xr[j] = MADD(mrs, Xs[j], Xr[j]);
            }
        }
    }
}

/* One chunk of L tokens of one head. Q, K rows have stride ldqk, V/O rows stride ldvo. */
static void chunk_step(float *O /*[L,ldvo]*/, float *S /*[dk,dv]*/, const float *Q /*[L,ldqk]*/,
                       const float *K /*[L,ldqk]*/, const float *V /*[L,ldvo]*/,
                       const float *g /*[L,Hv]*/, const float *beta /*[L,Hv]*/, int64_t L,
                       int64_t Hv, int64_t dk, int64_t dv, int64_t ldqk, int64_t ldvo,
                       float *slot)
{
    float *KQ = slot, *MP = KQ + 2 * CH * dk, *Y = MP + 2 * CH * CH;
    float *M = MP, *P = MP + L * CH, *X = Y, *QS = Y + L * dv;
    double gam[CH] = {0}; /* L >= 1 */
    float b[CH], eg[CH], fg[CH];

    double acc = 0.0;
    for (int64_t r = 0; r < L; r++) {
        acc += (double)g[r * Hv];
        gam[r] = acc;
        b[r] = beta[r * Hv];
    }
    for (int64_t r = 0; r < L; r++) {
        eg[r] = (float)exp(gam[r]);
        fg[r] = (float)exp(gam[L - 1] - gam[r]);
    }
    float eL = (float)exp(gam[L - 1]);

    for (int64_t r = 0; r < L; r++) {
        memcpy(KQ + r * dk, K + r * ldqk, sizeof(float) * (size_t)dk);
        memcpy(KQ + (L + r) * dk, Q + r * ldqk, sizeof(float) * (size_t)dk);
    }

    /* [K K^T ; Q K^T] -> M = mask(beta K K^T Gam), P = mask(Q K^T Gam) */
    hyla_gemm(0, 1, 2 * L, L, dk, 1.0f, KQ, dk, KQ, dk, 0.0f, MP, CH);
    for (int64_t r = 0; r < L; r++) {
        float *Mr = M + r * CH, *Pr = P + r * CH;
        for (int64_t s = 0; s <= r; s++) {
            float e = expf((float)(gam[r] - gam[s]));
            Pr[s] = Pr[s] * e;
            Mr[s] = (b[r] * Mr[s]) * e; /* the diagonal (s = r) is never read */
        }
        for (int64_t s = r + 1; s < L; s++)
            Pr[s] = 0.0f;
    }

    /* [K S ; Q S]; R = diag(beta) (V - diag(e^gam) K S), then X = (I + M)^{-1} R in place */
    hyla_gemm(0, 0, 2 * L, dv, dk, 1.0f, KQ, dk, S, dv, 0.0f, Y, dv);
    for (int64_t r = 0; r < L; r++) {
        float *Xr = X + r * dv;
        const float *Vr = V + r * ldvo;
#pragma omp simd
        for (int64_t j = 0; j < dv; j++)
            Xr[j] = b[r] * (Vr[j] - eg[r] * Xr[j]);
    }
    solve_unit_lower(X, M, L, dv);

    /* O = diag(e^gam) Q S + P X */
    for (int64_t r = 0; r < L; r++) {
        float *Or = O + r * ldvo;
        const float *QSr = QS + r * dv;
#pragma omp simd
        for (int64_t j = 0; j < dv; j++)
            Or[j] = eg[r] * QSr[j];
    }
    hyla_gemm(0, 0, L, dv, L, 1.0f, P, CH, X, dv, 1.0f, O, ldvo);

    /* S = e^{gam_L-1} S + K^T diag(e^{gam_L-1 - gam}) X */
    for (int64_t r = 0; r < L; r++) {
        float *Xr = X + r * dv;
#pragma omp simd
        for (int64_t j = 0; j < dv; j++)
            Xr[j] *= fg[r];
    }
    hyla_gemm(1, 0, dk, dv, L, 1.0f, KQ, dk, X, dv, eL, S, dv);
}

void hyla_delta_rule_chunked_fwd(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                 const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                 const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                 const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk, int64_t Hv,
                                 int64_t dk, int64_t dv, float *work)
{
    int64_t rep = Hv / Hk;
    size_t slot_floats = chunk_slot_floats(dk, dv);
#pragma omp parallel HYLA_PAR_IF(T * Hv * dk * dv)
    {
        unsigned mxcsr = hyla_flush_denormals_begin(); /* core/denormals.h */
#pragma omp for schedule(static)
        for (int64_t h = 0; h < Hv; h++) {
            float *slot = work + (size_t)omp_get_thread_num() * slot_floats;
            float *S = state + h * dk * dv;
            int64_t hk = h / rep;
            for (int64_t c0 = 0; c0 < T; c0 += CH) {
                int64_t L = T - c0 < CH ? T - c0 : CH;
                chunk_step(out + (c0 * Hv + h) * dv, S, q + (c0 * Hk + hk) * dk,
                           k + (c0 * Hk + hk) * dk, v + (c0 * Hv + h) * dv, g + c0 * Hv + h,
                           beta + c0 * Hv + h, L, Hv, dk, dv, Hk * dk, Hv * dv, slot);
            }
        }
        hyla_flush_denormals_end(mxcsr);
    }
}

/* ---- chunked backward (spec §8.6-8.7) --------------------------------------------------------
 * Per head and chunk, in the notation of the chunked forward above (A = K K^T, B = Q K^T raw;
 * e_r = e^{gam_r}; f_r = e^{gam_L-1 - gam_r}; eL = e^{gam_L-1}; Z = V - diag(e) K S, so that
 * R = diag(beta) Z; T = (I + M)^{-1}), given dO and the gradient dSn of the state after the chunk:
 *   dX   = P^T dO + diag(f) K dSn                    X feeds O and the next state
 *   dR   = T^T dX                                    back substitution with (I + M)^T
 *   dM   = -dR X^T (strictly lower);  dP = dO X^T (lower)
 *   dV   = diag(beta) dR;   dbeta_r = dR_r . Z_r + sum_{s<r} dM_rs A_rs Gam_rs
 *   dA   = dM o beta Gam,   dB = dP o Gam            (elementwise, beta per row)
 *   [dK; dQ] = [-diag(e beta) dR; diag(e) dO] S^T + [diag(f) X dSn^T; 0]
 *            + [dA; dB] K + [dA^T K + dB^T Q; 0]
 *   dS   = eL dSn + [K; Q]^T [-diag(e beta) dR; diag(e) dO]      (the chunk-start state)
 *   dgam_r = e_r (dO_r . (QS)_r - beta_r dR_r . (KS)_r) - f_r (K dSn)_r . X_r
 *            + sum_s G_rs - sum_s G_sr,   G = dM o M + dP o P  (= dGam o Gam)
 *   dgam_L-1 += sum_r f_r (K dSn)_r . X_r + eL <dSn, S>
 *   dg_u = sum_{r >= u} dgam_r                       (gam is the inclusive cumulative sum)
 * This is FLA's chunk_gated_delta_rule_bwd with U - W S folded into R as in the forward: pass 1
 * recomputes the chunk-start states h (W, U and the solve inside), pass 2 sweeps the chunks in
 * reverse with dS (= dh), re-forming each chunk's M, P, K S, Q S and X from its stored start
 * state; "local dv + dh sweep" is dX and the dS update, "dq, dk, dW, dgam from h, dh" the S^T
 * and dSn products, "WY backward" the transposed solve and dM. Padding is handled as in the
 * forward (padded rows would add exact zeros; gam_L-1 is unchanged).
 *
 * Threads: OpenMP over q/k heads; the thread of q/k head hk runs its Hv/Hk value heads in order,
 * the first writing dq, dk and the others adding, so the sum over value heads and every GEMM's
 * summation order are fixed: bit-identical results for any thread count (the GEMMs run on the
 * calling thread, as in the forward). dv, dg, dbeta are per value head and written directly.
 * Parallelism is therefore at most Hk threads (Qwen3-Next / Qwen3.5: Hk = 16).
 *
 * Cost: pass 1 repeats the forward's K K^T, K S, solve and state update; pass 2 runs 12 GEMMs and
 * two triangular solves per chunk. Memory per thread: the n_chunks start states (n_chunks dk dv
 * floats) plus ~CH (4 dk + 9 dv + 7 CH) floats of scratch. Measured on the 2-core AVX-512 machine
 * (oneDNN; T=512, Hk=4, Hv=8, dk=dv=128, 2.07 GFLOP of GEMM-shaped work incl. the recomputation):
 * ~16 ms on one thread (~130 GFLOP/s), ~8-10 ms on two (200-250 GFLOP/s). */

/* Pointers into one thread's scratch; "then" parts start at row L of the chunk. */
typedef struct {
    float *KQ;  /* [2CH,dk] K rows, then Q rows */
    float *AB;  /* [2CH,CH] K K^T, then Q K^T (raw) */
    float *MP;  /* [2CH,CH] M (strictly lower), then P (lower) */
    float *GM;  /* [CH,CH]  Gam (lower) */
    float *KQS; /* [2CH,dv] K S, then Q S */
    float *X;   /* [CH,dv]  deltas X (scaled by f late in the backward) */
    float *DX;  /* [CH,dv]  dX, solved in place into dR */
    float *KD;  /* [CH,dv]  K dSn */
    float *D1;  /* [2CH,dv] -dR, then dO */
    float *D2;  /* [2CH,dv] -diag(e beta) dR, then diag(e) dO */
    float *dAB; /* [2CH,CH] dM -> dA, then dP -> dB */
    float *dKQ; /* [2CH,dk] the chunk's dK, then dQ */
} bwd_scratch;

static size_t bwd_scratch_floats(int64_t dk, int64_t dv)
{
    return (size_t)(4 * CH * dk + 7 * CH * CH + 9 * CH * dv);
}

static bwd_scratch bwd_scratch_carve(float *p, int64_t dk, int64_t dv)
{
    bwd_scratch w;
    w.KQ = p, p += 2 * CH * dk;
    w.AB = p, p += 2 * CH * CH;
    w.MP = p, p += 2 * CH * CH;
    w.GM = p, p += CH * CH;
    w.KQS = p, p += 2 * CH * dv;
    w.X = p, p += CH * dv;
    w.DX = p, p += CH * dv;
    w.KD = p, p += CH * dv;
    w.D1 = p, p += 2 * CH * dv;
    w.D2 = p, p += 2 * CH * dv;
    w.dAB = p, p += 2 * CH * CH;
    w.dKQ = p;
    return w;
}

/* Per-thread slot: the chunk-start states [nc,dk,dv], the running dS [dk,dv], then scratch. */
static size_t bwd_slot_floats(int64_t T, int64_t dk, int64_t dv)
{
    int64_t nc = (T + CH - 1) / CH;
    return (size_t)((nc + 1) * dk * dv) + bwd_scratch_floats(dk, dv);
}

/* One slot per OpenMP thread, for the omp_get_max_threads() threads current at this call: size
 * it under the same thread setting as the kernel call (see hyla_delta_rule_chunked_work_floats). */
size_t hyla_delta_rule_chunked_bwd_work_floats(int64_t T, int64_t Hv, int64_t dk, int64_t dv)
{
    (void)Hv;
    return (size_t)omp_get_max_threads() * bwd_slot_floats(T, dk, dv);
}

/* One chunk's gates: gam in double as in chunk_step, and the derived factors. */
typedef struct {
    int64_t L;
    double gam[CH];
    float b[CH], eg[CH], fg[CH], eL;
} chunk_gates;

static void chunk_gates_load(chunk_gates *cg, const float *g /*[L,Hv]*/,
                             const float *beta /*[L,Hv]*/, int64_t L, int64_t Hv)
{
    double acc = 0.0;
    cg->L = L;
    for (int64_t r = 0; r < L; r++) {
        acc += (double)g[r * Hv];
        cg->gam[r] = acc;
        cg->b[r] = beta[r * Hv];
    }
    for (int64_t r = 0; r < L; r++) {
        cg->eg[r] = (float)exp(cg->gam[r]);
        cg->fg[r] = (float)exp(cg->gam[L - 1] - cg->gam[r]);
    }
    cg->eL = (float)exp(cg->gam[L - 1]);
}

/* In place: Y = (I + M)^{-T} Y for the unit lower-triangular I + M of solve_unit_lower (M [L,L]
 * strictly lower, row stride CH), Y [L,dv]. Blocked back substitution from the last block up:
 * Y_r -= sum_{s>r} M[s,r] Y_s. */
static void solve_unit_lower_t(float *Y /*[L,dv]*/, const float *M /*[L,CH]*/, int64_t L,
                               int64_t dv)
{
    for (int64_t b0 = (L - 1) / SOLVE_BLOCK * SOLVE_BLOCK; b0 >= 0; b0 -= SOLVE_BLOCK) {
        int64_t b1 = b0 + SOLVE_BLOCK < L ? b0 + SOLVE_BLOCK : L;
        if (b1 < L)
            hyla_gemm(1, 0, b1 - b0, dv, L - b1, -1.0f, M + b1 * CH + b0, CH, Y + b1 * dv, dv,
                      1.0f, Y + b0 * dv, dv);
        for (int64_t r = b1 - 2; r >= b0; r--) {
            float *Yr = Y + r * dv;
            for (int64_t s = r + 1; s < b1; s++) {
                const float *Ys = Y + s * dv;
                float msr = -M[s * CH + r];
#pragma omp simd
                for (int64_t j = 0; j < dv; j++)
                    Yr[j] = MADD(msr, Ys[j], Yr[j]);
            }
        }
    }
}

/* A chunk's forward quantities from its start state S, as chunk_step forms them: M, K S and the
 * deltas X; with Q (not NULL) also P, Gam and Q S. */
static void bwd_recompute(const bwd_scratch *w, const chunk_gates *cg, const float *S /*[dk,dv]*/,
                          const float *Q /*[L,ldqk] or NULL*/, const float *K /*[L,ldqk]*/,
                          const float *V /*[L,ldvo]*/, int64_t dk, int64_t dv, int64_t ldqk,
                          int64_t ldvo)
{
    int64_t L = cg->L, nr = Q ? 2 * L : L;
    float *M = w->MP, *P = w->MP + L * CH;
    const float *A = w->AB, *B = w->AB + L * CH;
    for (int64_t r = 0; r < L; r++) {
        memcpy(w->KQ + r * dk, K + r * ldqk, sizeof(float) * (size_t)dk);
        if (Q)
            memcpy(w->KQ + (L + r) * dk, Q + r * ldqk, sizeof(float) * (size_t)dk);
    }
    hyla_gemm(0, 1, nr, L, dk, 1.0f, w->KQ, dk, w->KQ, dk, 0.0f, w->AB, CH);
    for (int64_t r = 0; r < L; r++) {
        for (int64_t s = 0; s <= r; s++) {
            float e = expf((float)(cg->gam[r] - cg->gam[s]));
            M[r * CH + s] = (cg->b[r] * A[r * CH + s]) * e; /* the diagonal is never read */
            if (Q) {
                P[r * CH + s] = B[r * CH + s] * e;
                w->GM[r * CH + s] = e;
            }
        }
        if (Q) /* P^T dO reads all of P */
            for (int64_t s = r + 1; s < L; s++)
                P[r * CH + s] = 0.0f;
    }
    hyla_gemm(0, 0, nr, dv, dk, 1.0f, w->KQ, dk, S, dv, 0.0f, w->KQS, dv);
    for (int64_t r = 0; r < L; r++) {
        float *Xr = w->X + r * dv, br = cg->b[r], er = cg->eg[r];
        const float *Vr = V + r * ldvo, *KSr = w->KQS + r * dv;
#pragma omp simd
        for (int64_t j = 0; j < dv; j++)
            Xr[j] = br * (Vr[j] - er * KSr[j]);
    }
    solve_unit_lower(w->X, M, L, dv);
}

/* dM -> dA and dP -> dB in place (zeroing the masked parts), with their contributions to dgam
 * (G = dM o M + dP o P by row minus by column) and to dbeta (sum_s dM_rs A_rs Gam_rs). */
static void bwd_mask_grads(const bwd_scratch *w, const chunk_gates *cg, double *dgam /*[L]*/,
                           double *dbeta /*[L]*/)
{
    int64_t L = cg->L;
    const float *M = w->MP, *P = w->MP + L * CH, *A = w->AB;
    float *dA = w->dAB, *dB = w->dAB + L * CH;
    for (int64_t r = 0; r < L; r++) {
        double rowG = 0.0, db = 0.0;
#pragma omp simd reduction(+ : rowG, db)
        for (int64_t s = 0; s < r; s++) {
            float gm = w->GM[r * CH + s], dm = dA[r * CH + s], dp = dB[r * CH + s];
            double G = (double)dm * M[r * CH + s] + (double)dp * P[r * CH + s];
            rowG += G;
            dgam[s] -= G;
            db += (double)dm * ((double)A[r * CH + s] * gm);
            dA[r * CH + s] = (dm * cg->b[r]) * gm;
            dB[r * CH + s] = dp * gm;
        }
        dgam[r] += rowG; /* the diagonal of P adds G_rr to row and column: no net effect */
        dbeta[r] += db;
        dA[r * CH + r] = 0.0f; /* dB's diagonal: Gam_rr = 1 */
        for (int64_t s = r + 1; s < L; s++)
            dA[r * CH + s] = 0.0f, dB[r * CH + s] = 0.0f;
    }
}

/* Backward of one chunk of L tokens of one head, after bwd_recompute(Q != NULL) from its start
 * state S. dS: in, the gradient of the state after the chunk; out, of the state before it.
 * Writes dV, dg, dbeta rows and leaves the chunk's dK, dQ in w->dKQ. */
static void bwd_chunk(float *dV /*[L,ldvo]*/, float *dg /*[L,Hv]*/, float *dbeta /*[L,Hv]*/,
                      float *dS /*[dk,dv]*/, const bwd_scratch *w, const chunk_gates *cg,
                      const float *S /*[dk,dv]*/, const float *dO /*[L,ldvo]*/,
                      const float *V /*[L,ldvo]*/, int64_t Hv, int64_t dk, int64_t dv,
                      int64_t ldvo)
{
    int64_t L = cg->L;
    const float *P = w->MP + L * CH, *KS = w->KQS, *QS = w->KQS + L * dv;
    float *dOc = w->D1 + L * dv;
    double dgam[CH], db[CH];

    for (int64_t r = 0; r < L; r++)
        memcpy(dOc + r * dv, dO + r * ldvo, sizeof(float) * (size_t)dv);

    /* dX = diag(f) K dSn + P^T dO; the f_r and eL terms of dgam */
    hyla_gemm(0, 0, L, dv, dk, 1.0f, w->KQ, dk, dS, dv, 0.0f, w->KD, dv);
    double deL = 0.0, sum_fdf = 0.0;
#pragma omp simd reduction(+ : deL)
    for (int64_t i = 0; i < dk * dv; i++)
        deL += (double)dS[i] * S[i];
    for (int64_t r = 0; r < L; r++) {
        const float *KDr = w->KD + r * dv, *Xr = w->X + r * dv;
        float *DXr = w->DX + r * dv, fr = cg->fg[r];
        double df = 0.0;
#pragma omp simd reduction(+ : df)
        for (int64_t j = 0; j < dv; j++) {
            df += (double)KDr[j] * Xr[j];
            DXr[j] = fr * KDr[j];
        }
        dgam[r] = -(double)fr * df;
        sum_fdf += (double)fr * df;
    }
    hyla_gemm(1, 0, L, dv, L, 1.0f, P, CH, dOc, dv, 1.0f, w->DX, dv);

    /* dR = (I + M)^{-T} dX; dV, dbeta (Z part), the e_r terms of dgam; D1, D2 */
    solve_unit_lower_t(w->DX, w->MP, L, dv);
    for (int64_t r = 0; r < L; r++) {
        const float *dR = w->DX + r * dv, *Vr = V + r * ldvo, *KSr = KS + r * dv;
        const float *QSr = QS + r * dv, *dOr = dOc + r * dv;
        float br = cg->b[r], er = cg->eg[r], ebr = er * br;
        float *dVr = dV + r * ldvo, *D1r = w->D1 + r * dv;
        float *D2r = w->D2 + r * dv, *D2q = w->D2 + (L + r) * dv;
        double dz = 0.0, dks = 0.0, dqs = 0.0;
#pragma omp simd reduction(+ : dz, dks, dqs)
        for (int64_t j = 0; j < dv; j++) {
            dz += (double)dR[j] * (Vr[j] - er * KSr[j]);
            dks += (double)dR[j] * KSr[j];
            dqs += (double)dOr[j] * QSr[j];
        }
        db[r] = dz;
        dgam[r] += (double)er * (dqs - (double)br * dks);
#pragma omp simd
        for (int64_t j = 0; j < dv; j++) {
            dVr[j] = br * dR[j];
            D1r[j] = -dR[j];
            D2r[j] = -ebr * dR[j];
            D2q[j] = er * dOr[j];
        }
    }
    dgam[L - 1] += sum_fdf + (double)cg->eL * deL;

    /* [dM; dP] = [-dR; dO] X^T, masked -> [dA; dB] */
    hyla_gemm(0, 1, 2 * L, L, dv, 1.0f, w->D1, dv, w->X, dv, 0.0f, w->dAB, CH);
    bwd_mask_grads(w, cg, dgam, db);

    /* [dK; dQ] = D2 S^T + [diag(f) X dSn^T; 0] + [dA; dB] K + [dA^T K + dB^T Q; 0] */
    hyla_gemm(0, 1, 2 * L, dk, dv, 1.0f, w->D2, dv, S, dv, 0.0f, w->dKQ, dk);
    for (int64_t r = 0; r < L; r++) {
        float *Xr = w->X + r * dv, fr = cg->fg[r];
#pragma omp simd
        for (int64_t j = 0; j < dv; j++)
            Xr[j] *= fr;
    }
    hyla_gemm(0, 1, L, dk, dv, 1.0f, w->X, dv, dS, dv, 1.0f, w->dKQ, dk);
    hyla_gemm(0, 0, 2 * L, dk, L, 1.0f, w->dAB, CH, w->KQ, dk, 1.0f, w->dKQ, dk);
    hyla_gemm(1, 0, L, dk, 2 * L, 1.0f, w->dAB, CH, w->KQ, dk, 1.0f, w->dKQ, dk);

    /* dS <- eL dSn + [K; Q]^T D2 (last use of dSn above) */
    hyla_gemm(1, 0, dk, dv, 2 * L, 1.0f, w->KQ, dk, w->D2, dv, cg->eL, dS, dv);

    double acc = 0.0;
    for (int64_t r = L - 1; r >= 0; r--) {
        acc += dgam[r];
        dg[r * Hv] = (float)acc;
        dbeta[r * Hv] = (float)db[r];
    }
}

/* Both passes for value head h (q/k head hk), into the thread's slot. first: whether h is the
 * first value head of hk (it writes dq, dk; the others add). */
static void bwd_head(float *d_q, float *d_k, float *d_v, float *d_g, float *d_beta,
                     const float *dout, const float *q, const float *k, const float *v,
                     const float *g, const float *beta, const float *S0, const float *dSn, float *dS0,
                     int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t h, int64_t hk,
                     int first, float *slot)
{
    int64_t nc = (T + CH - 1) / CH, ldqk = Hk * dk, ldvo = Hv * dv, sz = dk * dv;
    float *states = slot, *dS = states + nc * sz;
    bwd_scratch w = bwd_scratch_carve(dS + sz, dk, dv);
    chunk_gates cg;

    /* pass 1: chunk-start states (from the initial state: zero, or this head's of S0) */
    if (S0)
        memcpy(states, S0 + h * sz, sizeof(float) * (size_t)sz);
    else
        memset(states, 0, sizeof(float) * (size_t)sz);
    for (int64_t c = 0; c + 1 < nc; c++) {
        int64_t c0 = c * CH; /* every chunk but the last is full */
        chunk_gates_load(&cg, g + c0 * Hv + h, beta + c0 * Hv + h, CH, Hv);
        bwd_recompute(&w, &cg, states + c * sz, NULL, k + c0 * ldqk + hk * dk,
                      v + c0 * ldvo + h * dv, dk, dv, ldqk, ldvo);
        for (int64_t r = 0; r < CH; r++) {
            float *Xr = w.X + r * dv, fr = cg.fg[r];
#pragma omp simd
            for (int64_t j = 0; j < dv; j++)
                Xr[j] *= fr;
        }
        memcpy(states + (c + 1) * sz, states + c * sz, sizeof(float) * (size_t)sz);
        hyla_gemm(1, 0, dk, dv, CH, 1.0f, w.KQ, dk, w.X, dv, cg.eL, states + (c + 1) * sz, dv);
    }

    /* pass 2: reverse sweep from the final state's gradient (zero, or this head's of dSn) */
    if (dSn)
        memcpy(dS, dSn + h * sz, sizeof(float) * (size_t)sz);
    else
        memset(dS, 0, sizeof(float) * (size_t)sz);
    for (int64_t c = nc - 1; c >= 0; c--) {
        int64_t c0 = c * CH, L = T - c0 < CH ? T - c0 : CH;
        const float *S = states + c * sz;
        chunk_gates_load(&cg, g + c0 * Hv + h, beta + c0 * Hv + h, L, Hv);
        bwd_recompute(&w, &cg, S, q + c0 * ldqk + hk * dk, k + c0 * ldqk + hk * dk,
                      v + c0 * ldvo + h * dv, dk, dv, ldqk, ldvo);
        bwd_chunk(d_v + c0 * ldvo + h * dv, d_g + c0 * Hv + h, d_beta + c0 * Hv + h, dS, &w, &cg,
                  S, dout + c0 * ldvo + h * dv, v + c0 * ldvo + h * dv, Hv, dk, dv, ldvo);
        for (int64_t r = 0; r < L; r++) {
            float *dkr = d_k + (c0 + r) * ldqk + hk * dk, *dqr = d_q + (c0 + r) * ldqk + hk * dk;
            const float *sk = w.dKQ + r * dk, *sq = w.dKQ + (L + r) * dk;
            if (first) {
                memcpy(dkr, sk, sizeof(float) * (size_t)dk);
                memcpy(dqr, sq, sizeof(float) * (size_t)dk);
            } else {
#pragma omp simd
                for (int64_t i = 0; i < dk; i++) {
                    dkr[i] += sk[i];
                    dqr[i] += sq[i];
                }
            }
        }
    }
    if (dS0) /* dS is now the gradient of the state before the first chunk */
        memcpy(dS0 + h * sz, dS, sizeof(float) * (size_t)sz);
}

void hyla_delta_rule_chunked_bwd(float *d_q /*[T,Hk,dk]*/, float *d_k /*[T,Hk,dk]*/,
                                 float *d_v /*[T,Hv,dv]*/, float *d_g /*[T,Hv]*/,
                                 float *d_beta /*[T,Hv]*/, const float *dout /*[T,Hv,dv]*/,
                                 const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                 const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                 const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk, int64_t Hv,
                                 int64_t dk, int64_t dv, float *work)
{
    hyla_delta_rule_chunked_bwd_state(d_q, d_k, d_v, d_g, d_beta, NULL, dout, q, k, v, g, beta, NULL, NULL, T, Hk, Hv,
                                      dk, dv, work);
}

void hyla_delta_rule_chunked_bwd_state(float *d_q /*[T,Hk,dk]*/, float *d_k /*[T,Hk,dk]*/,
                                       float *d_v /*[T,Hv,dv]*/, float *d_g /*[T,Hv]*/,
                                       float *d_beta /*[T,Hv]*/, float *d_state0 /*[Hv,dk,dv] or NULL*/,
                                       const float *dout /*[T,Hv,dv]*/, const float *q /*[T,Hk,dk]*/,
                                       const float *k /*[T,Hk,dk]*/, const float *v /*[T,Hv,dv]*/,
                                       const float *g /*[T,Hv]*/, const float *beta /*[T,Hv]*/,
                                       const float *state0 /*[Hv,dk,dv] or NULL*/,
                                       const float *d_state /*[Hv,dk,dv] or NULL*/, int64_t T, int64_t Hk,
                                       int64_t Hv, int64_t dk, int64_t dv, float *work)
{
    if (T <= 0) {
        if (d_state0) /* no rows: the state passes through */
            for (int64_t i = 0; i < Hv * dk * dv; i++)
                d_state0[i] = d_state ? d_state[i] : 0.0f;
        return;
    }
    int64_t rep = Hv / Hk;
    size_t slot_floats = bwd_slot_floats(T, dk, dv);
#pragma omp parallel HYLA_PAR_IF(T * Hv * dk * dv)
    {
        unsigned mxcsr = hyla_flush_denormals_begin(); /* as the forward */
#pragma omp for schedule(static)
        for (int64_t hk = 0; hk < Hk; hk++) {
            float *slot = work + (size_t)omp_get_thread_num() * slot_floats;
            for (int64_t h = hk * rep; h < (hk + 1) * rep; h++)
                bwd_head(d_q, d_k, d_v, d_g, d_beta, dout, q, k, v, g, beta, state0, d_state, d_state0, T, Hk, Hv,
                         dk, dv, h, hk, h == hk * rep, slot);
        }
        hyla_flush_denormals_end(mxcsr);
    }
}
