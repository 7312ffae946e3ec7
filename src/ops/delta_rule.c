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
 * Where a fused multiply-add is meant the code says MADD: fmaf when the target has hardware FMA
 * (the build is ISO C, where GCC does not contract a*b+c by itself), else a*b+c, since a
 * software fmaf is ~20x slower. Either way the rounding is fixed for a given build. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/gemm.h"
#include "ops/ops.h"

#define CH HYLA_DELTA_CHUNK

#ifdef FP_FAST_FMAF
#define MADD(a, b, c) fmaf(a, b, c)
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* ---- recurrent form (spec §4.1) --------------------------------------------------------------
 * One token at a time, in column blocks of RJ state columns so that the two sweeps over a block
 * (decay + read, then write + output) find it in L1 and all temporaries live on the stack. */

#define RJ 64

/* One token on the column block S[:, j0:j0+nj] of one head. */
static void recurrent_step_block(float *o /*[nj]*/, float *S /*[dk,dv] at column j0*/,
                                 const float *q /*[dk]*/, const float *k /*[dk]*/,
                                 const float *v /*[nj]*/, float decay, float b, int64_t dk,
                                 int64_t dv, int64_t nj)
{
    float m[RJ], d[RJ], acc[RJ];
    for (int64_t j = 0; j < nj; j++)
        m[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) { /* S' = decay S ; m = S'^T k */
        float *Si = S + i * dv, ki = k[i];
#pragma omp simd
        for (int64_t j = 0; j < nj; j++) {
            Si[j] = decay * Si[j];
            m[j] = MADD(ki, Si[j], m[j]);
        }
    }
    for (int64_t j = 0; j < nj; j++) {
        d[j] = b * (v[j] - m[j]);
        acc[j] = 0.0f;
    }
    for (int64_t i = 0; i < dk; i++) { /* S += k delta^T ; o = S^T q */
        float *Si = S + i * dv, ki = k[i], qi = q[i];
#pragma omp simd
        for (int64_t j = 0; j < nj; j++) {
            Si[j] = MADD(ki, d[j], Si[j]);
            acc[j] = MADD(qi, Si[j], acc[j]);
        }
    }
    for (int64_t j = 0; j < nj; j++)
        o[j] = acc[j];
}

void hyla_delta_rule_recurrent_fwd(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                   const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                   const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                   const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk,
                                   int64_t Hv, int64_t dk, int64_t dv)
{
    int64_t rep = Hv / Hk; /* value heads per key head (repeat_interleave) */
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < Hv; h++) {
        float *S = state + h * dk * dv;
        int64_t hk = h / rep;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (t * Hk + hk) * dk, *kt = k + (t * Hk + hk) * dk;
            const float *vt = v + (t * Hv + h) * dv;
            float *ot = out + (t * Hv + h) * dv;
            float decay = expf(g[t * Hv + h]), b = beta[t * Hv + h];
            for (int64_t j0 = 0; j0 < dv; j0 += RJ) {
                int64_t nj = dv - j0 < RJ ? dv - j0 : RJ;
                recurrent_step_block(ot + j0, S + j0, qt, kt, vt + j0, decay, b, dk, dv, nj);
            }
        }
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
#pragma omp parallel for schedule(static)
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
}
