/* Backward of the Gated DeltaNet's chunked delta rule (spec §8.6-8.7); conv + SiLU and the gates
 * are test_gdn_conv_grads.c (its item 1; the numbers below go on from it).
 *
 *  2. chunked delta-rule backward (zero initial state, zero final-state gradient) vs
 *     (a) central finite differences of a float64 RECURRENT forward (spec §4.1) for
 *         T in {1, 5, 63, 64, 65, 130}, Hk = 1, Hv = 2 and Hk = Hv = 2, dk = 4, dv = 6, with the
 *         float64 recurrent backward also checked against the same differences;
 *     (b) a float64 recurrent backward (spec §8.6) at T = 200, dk = dv = 32 (and dk = dv = 128);
 *     even value heads decay fast, odd ones slowly (cross-chunk terms matter); outputs and the
 *     work buffer start as NaN, so unwritten outputs and reads of unwritten scratch fail;
 *  3. bit-identical results with 1 and 2 OpenMP threads;
 *  5. (below 4 in the file) a sequence split at a chunk boundary == the whole, bit for bit;
 *  4. a timing print of the chunked backward at T=512, Hk=4, Hv=8, dk=dv=128 (no assertion).
 * Every check exits non-zero on failure. Inputs are fp32; every reference is float64 evaluated on
 * the same fp32 values, so the only differences are the kernel's rounding and the FD error.
 * The finite differences and their allowance FD: tests/grad_bounds.h.
 *
 * ---- fp32 bounds (first order in u = 2^-24; |error of an n-term sum| <= n u sum|terms|) -------
 * Chunked delta rule: running error bound (Wilkinson), evaluated per element in float64 from the
 * exact chunk matrices (Gam, A = K K^T, M, P, T = (I + M)^{-1}) and the exact chunk-start state
 * S and dSn of every chunk. First order in u; an n-term fp32 sum whose terms carry relative
 * errors <= e has error <= (n u + e) x (sum of |terms|), so relative errors add along a chain.
 * Magnitudes |W|~ (>= |W|, and the error of W is <= eps |W|~) follow the kernel's formulas with
 * absolute values, e.g. |KS|~ = |K| |S| + ||k|| F, |R|~ = beta (|V| + e |KS|~), |dM|~ =
 * |dR|~ |X|~^T, |dgam_r|~ = e_r (|dO_r|.|QS_r|~ + beta_r |dR_r|~.|KS_r|~) + ... ; Y_i is that of
 * gradient element i (dg: the suffix sum of the |dgam|~; dq, dk: summed over the value heads of
 * the q/k head).
 * Triangular-solve growth: the computed y of (I + M) y = b satisfies (I + M + E) y = b + db,
 * |E| <= C u |I + M|, |db| <= e_b |b|~, and M carries the errors of K K^T and Gam (dk u, dgam u):
 *   |X|~  = |T| |R|~ + |T| (I + |M|) |X|,       |dR|~ = |T|^T |dX|~ + |T|^T (I + |M|)^T |dR|
 * (X, dR exact; |dX|~ = |P|^T |dO| + diag(f) |K dSn|~).
 * Carried errors: the exact chunk map S -> S_next (and dSn -> dS) has column 2-norm gain <= 1
 * (products of e^g (I - beta k k^T)), so the column-j error of the computed chunk-start state is
 * <= eps F_j, F = sum over earlier chunks of the column norms of their update magnitudes
 * (eL |S| + |K|^T diag(f) |X|~), and that of dSn <= eps FD_j, FD = sum over later chunks of
 * (eL |dSn| + |K|^T diag(e beta) |dR|~ + |Q|^T diag(e) |dO|); they enter through S, dSn as
 * ||k|| F_j, ||q|| F_j (products with k, q), F_j (elementwise) and column norms in <dSn, S>.
 * Stage count: the longest chain passes K S (dk), the forward solve (C), the state update (C),
 * K dSn (dk) and the dS update (2C), P^T dO (C), the transposed solve (C), [dM; dP] (dv),
 * [dA; dB] K and its transpose (2C), the S^T / dSn^T products (dv), the dot products over dv
 * (dv), K K^T (dk): at most 4 dk + 3 dv + 9 C; the expf's add (dgam + CE) u (argument
 * gam_r - gam_s rounded to float, dgam = max gam_0 - gam_L-1), the elementwise steps <= 24 u:
 *   |Y^_i - Y_i| <= eps Y_i,   eps = u (4 dk + 3 dv + 9 C + dgam + CE + 24)
 * (plus the FD allowance where the reference is FD). Worst case: every rounding of one sign and
 * |T| in place of T. With strongly coupled chunks (slow decay AND large beta at small dk, row
 * sums of |M| ~ 20) the |T| (I + |M|) |T| products make it 10^4 x looser than with realistic
 * ones; the slowly decaying test heads therefore write gently (see dr_make). Observed errors
 * are 40-10^5 x below the bound (the test prints err/bound and max|Y^ - Y| / max|Y|). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/ops.h"

#define C HYLA_DELTA_CHUNK
#include "grad_bounds.h"
#include "test_alloc.h"

/* ==== 2. delta rule =========================================================================== */

typedef struct {
    int64_t T, Hk, Hv, dk, dv;
    float *q, *k;         /* [T,Hk,dk] l2-normalised; q also scaled by 1/sqrt(dk) */
    float *v, *dout;      /* [T,Hv,dv] */
    float *g, *beta;      /* [T,Hv]: g in [-2,0) (see dr_make), beta in (0,1) */
    double *qd, *kd, *vd, *gd, *bd, *od; /* float64 copies (the FD perturbs these) */
} dr_in;


static double *to_f64(const float *x, int64_t n)
{
    double *y = dalloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

static dr_in dr_make(int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, uint64_t seed)
{
    dr_in in = {T, Hk, Hv, dk, dv, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    int64_t nqk = T * Hk * dk, nv = T * Hv * dv, ng = T * Hv;
    in.q = falloc((size_t)nqk), in.k = falloc((size_t)nqk);
    in.v = falloc((size_t)nv), in.dout = falloc((size_t)nv);
    in.g = falloc((size_t)ng), in.beta = falloc((size_t)ng);
    unit_rows(in.q, T * Hk, dk, 1.0 / sqrt((double)dk), &r);
    unit_rows(in.k, T * Hk, dk, 1.0, &r);
    for (int64_t i = 0; i < nv; i++) {
        in.v[i] = (float)unif(&r, -1, 1);
        in.dout[i] = (float)unif(&r, -1, 1);
    }
    /* even value heads decay fast (g uniform in [-2, 0): a chunk decays by ~e^-64) and write
     * strongly (beta in (0.01, 0.99)); odd ones decay slowly (g log-uniform in [-0.05, -0.001],
     * as with the model's small dt: the chunk-start state and dSn carry real weight across
     * chunks) and write gently (beta in (0.01, 0.2), keeping I + M near I) */
    for (int64_t i = 0; i < ng; i++) {
        int slow = (i % Hv) % 2 == 1;
        in.g[i] = (float)(slow ? -exp(unif(&r, log(1e-3), log(0.05)))
                               : -2.0 * (1.0 - hyla_rng_uniform(&r)));
        in.beta[i] = (float)unif(&r, 0.01, slow ? 0.2 : 0.99);
    }
    in.qd = to_f64(in.q, nqk), in.kd = to_f64(in.k, nqk), in.vd = to_f64(in.v, nv);
    in.od = to_f64(in.dout, nv), in.gd = to_f64(in.g, ng), in.bd = to_f64(in.beta, ng);
    return in;
}

static void dr_free(dr_in *in)
{
    free(in->q), free(in->k), free(in->v), free(in->dout), free(in->g), free(in->beta);
    free(in->qd), free(in->kd), free(in->vd), free(in->od), free(in->gd), free(in->bd);
}

/* float64 recurrent forward (spec §4.1) from a zero state; returns sum dout . out, *mag the sum
 * of |dout_t,j out_t,j|. S: [dk,dv] scratch. */
static double rec_loss(const dr_in *in, double *S, double *mag)
{
    int64_t T = in->T, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, rep = Hv / Hk;
    double L = 0.0, Lm = 0.0, m[512];
    for (int64_t h = 0; h < Hv; h++) {
        memset(S, 0, sizeof(double) * (size_t)(dk * dv));
        for (int64_t t = 0; t < T; t++) {
            const double *q = in->qd + (t * Hk + h / rep) * dk;
            const double *k = in->kd + (t * Hk + h / rep) * dk;
            const double *v = in->vd + (t * Hv + h) * dv, *dO = in->od + (t * Hv + h) * dv;
            double a = exp(in->gd[t * Hv + h]), b = in->bd[t * Hv + h];
            for (int64_t j = 0; j < dv; j++)
                m[j] = 0.0;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) {
                    S[i * dv + j] *= a;
                    m[j] += k[i] * S[i * dv + j];
                }
            for (int64_t j = 0; j < dv; j++)
                m[j] = b * (v[j] - m[j]); /* delta */
            for (int64_t j = 0; j < dv; j++) {
                double o = 0.0;
                for (int64_t i = 0; i < dk; i++) { /* S += k delta^T, o = S^T q: column j */
                    S[i * dv + j] += k[i] * m[j];
                    o += q[i] * S[i * dv + j];
                }
                L += dO[j] * o, Lm += fabs(dO[j] * o);
            }
        }
    }
    if (mag)
        *mag = Lm;
    return L;
}

/* float64 recurrent backward (spec §8.6); dq, dk summed over the value heads of a q/k head. */
typedef struct {
    double *dq, *dk, *dv, *dg, *db; /* like the kernel's outputs */
} rec_grads;

static rec_grads rec_alloc(const dr_in *in)
{
    int64_t T = in->T;
    rec_grads gr = {dalloc((size_t)(T * in->Hk * in->dk)), dalloc((size_t)(T * in->Hk * in->dk)),
                    dalloc((size_t)(T * in->Hv * in->dv)), dalloc((size_t)(T * in->Hv)),
                    dalloc((size_t)(T * in->Hv))};
    return gr;
}

static void rec_free(rec_grads *g)
{
    free(g->dq), free(g->dk), free(g->dv), free(g->dg), free(g->db);
}

/* What the bound needs from the exact run: per head and chunk the chunk-start state and dSn (the
 * gradient of the state after the chunk from later tokens). */
typedef struct {
    double *Sc, *dSc; /* [Hv, n_chunks, dk, dv] */
} rec_chunks;

static rec_chunks rec_chunks_alloc(const dr_in *in)
{
    size_t n = (size_t)(in->Hv * ((in->T + C - 1) / C) * in->dk * in->dv);
    rec_chunks rc = {dalloc(n), dalloc(n)};
    return rc;
}

static rec_grads rec_backward(const dr_in *in, rec_chunks *rc)
{
    int64_t T = in->T, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, rep = Hv / Hk;
    int64_t sz = dk * dv, nc = (T + C - 1) / C;
    rec_grads gr = rec_alloc(in);
    double *St = dalloc((size_t)((T + 1) * sz)), *dS = dalloc((size_t)sz), *Sp = dalloc((size_t)sz);
    double *e = dalloc((size_t)dv), *dd = dalloc((size_t)dv), *dm = dalloc((size_t)dv);
    for (int64_t h = 0; h < Hv; h++) {
        int64_t hk = h / rep;
        /* forward: St[t] = state after t tokens */
        memset(St, 0, sizeof(double) * (size_t)sz);
        for (int64_t t = 0; t < T; t++) {
            const double *k = in->kd + (t * Hk + hk) * dk, *v = in->vd + (t * Hv + h) * dv;
            double a = exp(in->gd[t * Hv + h]), b = in->bd[t * Hv + h];
            double *S0 = St + t * sz, *S1 = St + (t + 1) * sz;
            for (int64_t j = 0; j < dv; j++) {
                double mj = 0.0;
                for (int64_t i = 0; i < dk; i++)
                    mj += k[i] * a * S0[i * dv + j];
                e[j] = b * (v[j] - mj);
            }
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++)
                    S1[i * dv + j] = a * S0[i * dv + j] + k[i] * e[j];
        }
        if (rc)
            for (int64_t c = 0; c < nc; c++)
                memcpy(rc->Sc + (h * nc + c) * sz, St + c * C * sz, sizeof(double) * (size_t)sz);
        /* backward */
        memset(dS, 0, sizeof(double) * (size_t)sz);
        for (int64_t t = T - 1; t >= 0; t--) {
            const double *q = in->qd + (t * Hk + hk) * dk, *k = in->kd + (t * Hk + hk) * dk;
            const double *v = in->vd + (t * Hv + h) * dv, *dO = in->od + (t * Hv + h) * dv;
            double a = exp(in->gd[t * Hv + h]), b = in->bd[t * Hv + h];
            const double *S1 = St + (t + 1) * sz, *S0 = St + t * sz;
            double *dq = gr.dq + (t * Hk + hk) * dk, *dk_ = gr.dk + (t * Hk + hk) * dk;
            if (rc && (t == T - 1 || t % C == C - 1)) /* last token of chunk t / C */
                memcpy(rc->dSc + (h * nc + t / C) * sz, dS, sizeof(double) * (size_t)sz);
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++)
                    dS[i * dv + j] += q[i] * dO[j];
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++)
                    dq[i] += S1[i * dv + j] * dO[j];
            for (int64_t i = 0; i < sz; i++)
                Sp[i] = a * S0[i];
            for (int64_t j = 0; j < dv; j++) {
                double mj = 0.0, dj = 0.0;
                for (int64_t i = 0; i < dk; i++) {
                    mj += Sp[i * dv + j] * k[i];
                    dj += dS[i * dv + j] * k[i];
                }
                e[j] = v[j] - mj;
                dd[j] = dj;
            }
            double dbeta = 0.0;
            for (int64_t j = 0; j < dv; j++) {
                dbeta += dd[j] * e[j];
                gr.dv[(t * Hv + h) * dv + j] = b * dd[j];
                dm[j] = -b * dd[j];
            }
            gr.db[t * Hv + h] = dbeta;
            for (int64_t i = 0; i < dk; i++) {
                double s1 = 0.0, s2;
                for (int64_t j = 0; j < dv; j++)
                    s1 += dS[i * dv + j] * b * e[j];
                dk_[i] += s1;
                for (int64_t j = 0; j < dv; j++)
                    dS[i * dv + j] += k[i] * dm[j]; /* dS' */
                s2 = 0.0;
                for (int64_t j = 0; j < dv; j++)
                    s2 += Sp[i * dv + j] * dm[j];
                dk_[i] += s2;
            }
            double dgt = 0.0;
            for (int64_t i = 0; i < sz; i++)
                dgt += dS[i] * Sp[i];
            gr.dg[t * Hv + h] = dgt;
            for (int64_t i = 0; i < sz; i++)
                dS[i] *= a;
        }
    }
    free(St), free(dS), free(Sp), free(e), free(dd), free(dm);
    return gr;
}

/* One chunk's exact (float64) matrices, for tokens [c0, c0+L) of value head h. */
typedef struct {
    int64_t L;
    double e[C], f[C], b[C], eL, dgam;
    double G[C][C], A[C][C], M[C][C], P[C][C], Ti[C][C]; /* Gam, K K^T, M, P, T = (I+M)^-1 */
} chunk_mats;

static void chunk_mats_make(chunk_mats *cm, const dr_in *in, int64_t h, int64_t c0, int64_t L)
{
    int64_t Hk = in->Hk, Hv = in->Hv, dk = in->dk, hk = h / (Hv / Hk);
    double gam[C] = {0}, acc = 0.0; /* L >= 1 */
    cm->L = L;
    for (int64_t r = 0; r < L; r++) {
        gam[r] = acc += in->gd[(c0 + r) * Hv + h];
        cm->b[r] = in->bd[(c0 + r) * Hv + h];
    }
    for (int64_t r = 0; r < L; r++) {
        cm->e[r] = exp(gam[r]);
        cm->f[r] = exp(gam[L - 1] - gam[r]);
    }
    cm->eL = exp(gam[L - 1]);
    cm->dgam = gam[0] - gam[L - 1];
    for (int64_t r = 0; r < L; r++) {
        const double *kr = in->kd + ((c0 + r) * Hk + hk) * dk;
        const double *qr = in->qd + ((c0 + r) * Hk + hk) * dk;
        for (int64_t s = 0; s < L; s++) {
            const double *ks = in->kd + ((c0 + s) * Hk + hk) * dk;
            double kk = 0.0, qk = 0.0;
            for (int64_t i = 0; i < dk; i++)
                kk += kr[i] * ks[i], qk += qr[i] * ks[i];
            cm->G[r][s] = s <= r ? exp(gam[r] - gam[s]) : 0.0;
            cm->A[r][s] = kk;
            cm->M[r][s] = s < r ? cm->b[r] * kk * cm->G[r][s] : 0.0;
            cm->P[r][s] = qk * cm->G[r][s];
        }
    }
    for (int64_t r = 0; r < L; r++) /* T = (I + M)^{-1} by forward substitution */
        for (int64_t j = 0; j < L; j++) {
            double t = (j == r) ? 1.0 : 0.0;
            for (int64_t s = j; s < r; s++)
                t -= cm->M[r][s] * cm->Ti[s][j];
            cm->Ti[r][j] = j <= r ? t : 0.0;
        }
}

/* max over rows and columns of the sums of |X| */
static double row_col_max(double (*X)[C], int64_t L)
{
    double out = 0.0;
    for (int64_t r = 0; r < L; r++) {
        double rs = 0.0, cs = 0.0;
        for (int64_t s = 0; s < L; s++)
            rs += fabs(X[r][s]), cs += fabs(X[s][r]);
        out = fmax(out, fmax(rs, cs));
    }
    return out;
}

/* The bound (derivation at the top): eps and the per-element magnitude Y of every gradient. */
typedef struct {
    double eps, kappa, m;
    rec_grads Y;
} dr_bound;

/* Magnitudes |W|~ of one chunk's quantities (derivation at the top), from the exact chunk-start
 * state S and dSn [dk,dv] and the floors F, FD [dv] (the column-norm error bounds of the computed
 * S and dSn, in units of eps). X and dR include the solve growth. */
typedef struct {
    double *KS, *QS, *KD;  /* [C,dv] |K S|~, |Q S|~, |K dSn|~ */
    double *X, *dR;        /* [C,dv] |X|~ = |T| |R|~ + |T| (I+|M|) |X|,  |dR|~ likewise */
    double *xe, *dre, *t1; /* [C,dv] exact X, exact dR, scratch */
} chunk_mag;

static void chunk_mags(chunk_mag *w, const chunk_mats *cm, const dr_in *in, int64_t h, int64_t c0,
                       const double *S, const double *F, const double *dSn, const double *FD)
{
    int64_t L = cm->L, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, hk = h / (Hv / Hk);
    const double *K = in->kd + (c0 * Hk + hk) * dk, *Q = in->qd + (c0 * Hk + hk) * dk;
    const double *V = in->vd + (c0 * Hv + h) * dv, *dO = in->od + (c0 * Hv + h) * dv;
    int64_t lk = Hk * dk, lv = Hv * dv; /* row strides */
    double *R = w->t1;
    for (int64_t r = 0; r < L; r++) {
        double kn = 0.0, qn = 0.0;
        for (int64_t i = 0; i < dk; i++)
            kn += K[r * lk + i] * K[r * lk + i], qn += Q[r * lk + i] * Q[r * lk + i];
        kn = sqrt(kn), qn = sqrt(qn);
        for (int64_t j = 0; j < dv; j++) {
            double ks = 0.0, aks = 0.0, aqs = 0.0, kd = 0.0, akd = 0.0;
            for (int64_t i = 0; i < dk; i++) {
                double kri = K[r * lk + i], qri = Q[r * lk + i];
                ks += kri * S[i * dv + j], aks += fabs(kri * S[i * dv + j]);
                aqs += fabs(qri * S[i * dv + j]);
                kd += kri * dSn[i * dv + j], akd += fabs(kri * dSn[i * dv + j]);
            }
            w->KS[r * dv + j] = aks + kn * F[j];
            w->QS[r * dv + j] = aqs + qn * F[j];
            w->KD[r * dv + j] = akd + kn * FD[j];
            R[r * dv + j] = cm->b[r] * (V[r * lv + j] - cm->e[r] * ks);
            w->dre[r * dv + j] = cm->f[r] * kd; /* dX exact, first part */
        }
    }
    for (int64_t r = 0; r < L; r++) /* exact X = T R; |X|~ first part |T| |R|~ */
        for (int64_t j = 0; j < dv; j++) {
            double x = 0.0, ax = 0.0;
            for (int64_t s = 0; s <= r; s++) {
                x += cm->Ti[r][s] * R[s * dv + j];
                ax += fabs(cm->Ti[r][s]) * cm->b[s] *
                      (fabs(V[s * lv + j]) + cm->e[s] * w->KS[s * dv + j]);
            }
            w->xe[r * dv + j] = x, w->X[r * dv + j] = ax;
        }
    for (int64_t r = 0; r < L; r++) /* t1 = (I + |M|) |X| */
        for (int64_t j = 0; j < dv; j++) {
            double y = fabs(w->xe[r * dv + j]);
            for (int64_t s = 0; s < r; s++)
                y += fabs(cm->M[r][s]) * fabs(w->xe[s * dv + j]);
            R[r * dv + j] = y;
        }
    for (int64_t r = 0; r < L; r++) /* |X|~ += |T| t1 */
        for (int64_t j = 0; j < dv; j++)
            for (int64_t s = 0; s <= r; s++)
                w->X[r * dv + j] += fabs(cm->Ti[r][s]) * R[s * dv + j];
    /* exact dX = P^T dO + diag(f) K dSn (in dre), dR = T^T dX; |dR|~ = |T|^T |dX|~ + ... */
    for (int64_t s = 0; s < L; s++)
        for (int64_t j = 0; j < dv; j++) {
            double x = w->dre[s * dv + j], ax = cm->f[s] * w->KD[s * dv + j];
            for (int64_t r = s; r < L; r++)
                x += cm->P[r][s] * dO[r * lv + j], ax += fabs(cm->P[r][s] * dO[r * lv + j]);
            w->dre[s * dv + j] = x, R[s * dv + j] = ax;
        }
    for (int64_t r = 0; r < L; r++)
        for (int64_t j = 0; j < dv; j++) {
            double ar = 0.0;
            for (int64_t s = r; s < L; s++)
                ar += fabs(cm->Ti[s][r]) * R[s * dv + j];
            w->dR[r * dv + j] = ar;
        }
    for (int64_t r = L - 1; r >= 0; r--) /* exact dR in place: back substitution */
        for (int64_t j = 0; j < dv; j++) {
            double x = w->dre[r * dv + j];
            for (int64_t s = r + 1; s < L; s++)
                x -= cm->M[s][r] * w->dre[s * dv + j];
            w->dre[r * dv + j] = x;
        }
    for (int64_t r = 0; r < L; r++) /* t1 = (I + |M|)^T |dR| */
        for (int64_t j = 0; j < dv; j++) {
            double y = fabs(w->dre[r * dv + j]);
            for (int64_t s = r + 1; s < L; s++)
                y += fabs(cm->M[s][r]) * fabs(w->dre[s * dv + j]);
            R[r * dv + j] = y;
        }
    for (int64_t r = 0; r < L; r++) /* |dR|~ += |T|^T t1 */
        for (int64_t j = 0; j < dv; j++)
            for (int64_t s = r; s < L; s++)
                w->dR[r * dv + j] += fabs(cm->Ti[s][r]) * R[s * dv + j];
}

/* Column 2-norms of the magnitudes of the chunk's state update (eL |S| + |K|^T diag(f) |X|~)
 * and dS update (eL |dSn| + |K|^T diag(e beta) |dR|~ + |Q|^T diag(e) |dO|): the chunk's own
 * contributions to the errors of the next state and of the previous dSn (units of eps). */
static void chunk_update_norms(double *lS /*[dv]*/, double *lD /*[dv]*/, const chunk_mag *w,
                               const chunk_mats *cm, const dr_in *in, int64_t h, int64_t c0,
                               const double *S, const double *dSn)
{
    int64_t L = cm->L, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, hk = h / (Hv / Hk);
    const double *K = in->kd + (c0 * Hk + hk) * dk, *Q = in->qd + (c0 * Hk + hk) * dk;
    const double *dO = in->od + (c0 * Hv + h) * dv;
    int64_t lk = Hk * dk, lv = Hv * dv;
    for (int64_t j = 0; j < dv; j++) {
        double ns = 0.0, nd = 0.0;
        for (int64_t i = 0; i < dk; i++) {
            double xs = cm->eL * fabs(S[i * dv + j]), xd = cm->eL * fabs(dSn[i * dv + j]);
            for (int64_t r = 0; r < L; r++) {
                xs += cm->f[r] * fabs(K[r * lk + i]) * w->X[r * dv + j];
                xd += cm->e[r] * (cm->b[r] * fabs(K[r * lk + i]) * w->dR[r * dv + j] +
                                  fabs(Q[r * lk + i] * dO[r * lv + j]));
            }
            ns += xs * xs, nd += xd * xd;
        }
        lS[j] = sqrt(ns), lD[j] = sqrt(nd);
    }
}

/* Gradient magnitudes of one chunk: the kernel's formulas (kernel comment) with |.|, the
 * magnitudes of chunk_mags and |S| + F, |dSn| + FD (elementwise: |dS_ij| <= column norm).
 * Writes Y's dv, dg, dbeta rows of head h and adds its dq, dk terms. */
static void grad_mags(rec_grads *Y, const chunk_mag *w, const chunk_mats *cm, const dr_in *in,
                      int64_t h, int64_t c0, const double *S, const double *F, const double *dSn,
                      const double *FD)
{
    int64_t L = cm->L, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, hk = h / (Hv / Hk);
    static double adM[C][C], adP[C][C];
#define KABS(r, i) fabs(in->kd[((c0 + (r)) * Hk + hk) * dk + (i)])
#define QABS(r, i) fabs(in->qd[((c0 + (r)) * Hk + hk) * dk + (i)])
#define OABS(r, j) fabs(in->od[((c0 + (r)) * Hv + h) * dv + (j)])
#define AS(i, j) (fabs(S[(i) * dv + (j)]) + F[j])
#define AD(i, j) (fabs(dSn[(i) * dv + (j)]) + FD[j])
    for (int64_t r = 0; r < L; r++) /* dM = -dR X^T, dP = dO X^T */
        for (int64_t s = 0; s < L; s++) {
            double m = 0.0, p = 0.0;
            for (int64_t j = 0; j < dv; j++)
                m += w->dR[r * dv + j] * w->X[s * dv + j], p += OABS(r, j) * w->X[s * dv + j];
            adM[r][s] = s < r ? m : 0.0;
            adP[r][s] = s <= r ? p : 0.0;
        }
    double last = 0.0, dgam[C] = {0};
    for (int64_t r = 0; r < L; r++) {
        double *yq = Y->dq + ((c0 + r) * Hk + hk) * dk, *yk = Y->dk + ((c0 + r) * Hk + hk) * dk;
        const double *vr = in->vd + ((c0 + r) * Hv + h) * dv;
        for (int64_t i = 0; i < dk; i++) {
            double q = 0.0, k = 0.0;
            for (int64_t j = 0; j < dv; j++) { /* [dK; dQ] = D2 S^T + [diag(f) X dSn^T; 0] */
                q += cm->e[r] * OABS(r, j) * AS(i, j);
                k += cm->e[r] * cm->b[r] * w->dR[r * dv + j] * AS(i, j) +
                     cm->f[r] * w->X[r * dv + j] * AD(i, j);
            }
            for (int64_t s = 0; s < L; s++) { /* + [dA; dB] K + [dA^T K + dB^T Q; 0] */
                q += adP[r][s] * cm->G[r][s] * KABS(s, i);
                k += (adM[r][s] * cm->b[r] * cm->G[r][s] + adM[s][r] * cm->b[s] * cm->G[s][r]) *
                         KABS(s, i) +
                     adP[s][r] * cm->G[s][r] * QABS(s, i);
            }
            yq[i] += q, yk[i] += k;
        }
        double yb = 0.0, g = 0.0, fdf = 0.0;
        for (int64_t j = 0; j < dv; j++) {
            Y->dv[((c0 + r) * Hv + h) * dv + j] = cm->b[r] * w->dR[r * dv + j];
            yb += w->dR[r * dv + j] * (fabs(vr[j]) + cm->e[r] * w->KS[r * dv + j]);
            g += cm->e[r] * (OABS(r, j) * w->QS[r * dv + j] +
                             cm->b[r] * w->dR[r * dv + j] * w->KS[r * dv + j]);
            fdf += cm->f[r] * w->KD[r * dv + j] * w->X[r * dv + j];
        }
        for (int64_t s = 0; s < L; s++) {
            yb += adM[r][s] * fabs(cm->A[r][s]) * cm->G[r][s];
            if (s != r) /* G by row and by column; the diagonal cancels exactly */
                g += adM[r][s] * fabs(cm->M[r][s]) + adP[r][s] * fabs(cm->P[r][s]) +
                     adM[s][r] * fabs(cm->M[s][r]) + adP[s][r] * fabs(cm->P[s][r]);
        }
        Y->db[(c0 + r) * Hv + h] = yb;
        dgam[r] = g + fdf;
        last += fdf;
    }
    for (int64_t j = 0; j < dv; j++) { /* <dSn, S>: the errors of S, dSn enter by columns */
        double sd = 0.0, ns = 0.0, nd = 0.0;
        for (int64_t i = 0; i < dk; i++) {
            double sij = S[i * dv + j], dij = dSn[i * dv + j];
            sd += fabs(sij * dij), ns += sij * sij, nd += dij * dij;
        }
        last += cm->eL * (sd + F[j] * sqrt(nd) + FD[j] * sqrt(ns));
    }
    dgam[L - 1] += last;
    double acc = 0.0;
    for (int64_t r = L - 1; r >= 0; r--)
        Y->dg[(c0 + r) * Hv + h] = acc += dgam[r];
#undef KABS
#undef QABS
#undef OABS
#undef AS
#undef AD
}

static dr_bound dr_bounds(const dr_in *in, const rec_chunks *rc)
{
    int64_t T = in->T, Hv = in->Hv, dk = in->dk, dv = in->dv, sz = dk * dv;
    int64_t nc = (T + C - 1) / C;
    static chunk_mats cm;
    dr_bound b = {0, 1.0, 0, rec_alloc(in)};
    double dgam = 0.0;
    double *F = dalloc((size_t)((nc + 1) * dv)), *FD = dalloc((size_t)((nc + 1) * dv));
    double *lS = dalloc((size_t)dv), *lD = dalloc((size_t)dv);
    chunk_mag w;
    double *wbuf = dalloc((size_t)(8 * C * dv)), *zero = dalloc((size_t)dv);
    w.KS = wbuf, w.QS = wbuf + C * dv, w.KD = wbuf + 2 * C * dv, w.X = wbuf + 3 * C * dv;
    w.dR = wbuf + 4 * C * dv, w.xe = wbuf + 5 * C * dv, w.dre = wbuf + 6 * C * dv;
    w.t1 = wbuf + 7 * C * dv;
    for (int64_t h = 0; h < Hv; h++) {
        const double *Sc = rc->Sc + h * nc * sz, *dSc = rc->dSc + h * nc * sz;
        /* floors: F[c] = sum of the earlier chunks' state-update norms (the exact chunk map has
         * column 2-norm gain <= 1), FD[c] = sum of the later chunks' dS-update norms */
        memset(F, 0, sizeof(double) * (size_t)((nc + 1) * dv));
        memset(FD, 0, sizeof(double) * (size_t)((nc + 1) * dv));
        for (int64_t c = 0; c < nc; c++) {
            int64_t c0 = c * C, L = T - c0 < C ? T - c0 : C;
            chunk_mats_make(&cm, in, h, c0, L);
            chunk_mags(&w, &cm, in, h, c0, Sc + c * sz, zero, dSc + c * sz, zero);
            chunk_update_norms(lS, lD, &w, &cm, in, h, c0, Sc + c * sz, dSc + c * sz);
            for (int64_t j = 0; j < dv; j++)
                F[(c + 1) * dv + j] = F[c * dv + j] + lS[j];
            b.kappa = fmax(b.kappa, row_col_max(cm.Ti, L));
            b.m = fmax(b.m, row_col_max(cm.M, L));
            dgam = fmax(dgam, cm.dgam);
        }
        for (int64_t c = nc - 1; c > 0; c--) { /* FD[c]: error of chunk c's dSn */
            int64_t c0 = c * C, L = T - c0 < C ? T - c0 : C;
            chunk_mats_make(&cm, in, h, c0, L);
            chunk_mags(&w, &cm, in, h, c0, Sc + c * sz, zero, dSc + c * sz, zero);
            chunk_update_norms(lS, lD, &w, &cm, in, h, c0, Sc + c * sz, dSc + c * sz);
            for (int64_t j = 0; j < dv; j++)
                FD[(c - 1) * dv + j] = FD[c * dv + j] + lD[j];
        }
        for (int64_t c = 0; c < nc; c++) {
            int64_t c0 = c * C, L = T - c0 < C ? T - c0 : C;
            chunk_mats_make(&cm, in, h, c0, L);
            chunk_mags(&w, &cm, in, h, c0, Sc + c * sz, F + c * dv, dSc + c * sz, FD + c * dv);
            grad_mags(&b.Y, &w, &cm, in, h, c0, Sc + c * sz, F + c * dv, dSc + c * sz, FD + c * dv);
        }
    }
    b.eps = U * (4.0 * dk + 3.0 * dv + 9.0 * C + dgam + CE + 24);
    free(F), free(FD), free(lS), free(lD), free(wbuf), free(zero);
    return b;
}

static void bound_free(dr_bound *b) { rec_free(&b->Y); }

typedef struct {
    float *dq, *dk, *dv, *dg, *db;
} dr_out;

static dr_out dr_kernel(const dr_in *in)
{
    int64_t T = in->T, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv;
    dr_out o = {falloc((size_t)(T * Hk * dk)), falloc((size_t)(T * Hk * dk)),
                falloc((size_t)(T * Hv * dv)), falloc((size_t)(T * Hv)), falloc((size_t)(T * Hv))};
    fill_nan(o.dq, (size_t)(T * Hk * dk)), fill_nan(o.dk, (size_t)(T * Hk * dk));
    fill_nan(o.dv, (size_t)(T * Hv * dv)), fill_nan(o.dg, (size_t)(T * Hv));
    fill_nan(o.db, (size_t)(T * Hv));
    size_t nwork = hyla_delta_rule_chunked_bwd_work_floats(T, Hv, dk, dv);
    float *work = falloc(nwork);
    fill_nan(work, nwork); /* the kernel must not read scratch it has not written */
    hyla_delta_rule_chunked_bwd(o.dq, o.dk, o.dv, o.dg, o.db, in->dout, in->q, in->k, in->v, in->g,
                                in->beta, T, Hk, Hv, dk, dv, work);
    free(work);
    return o;
}

static void dr_out_free(dr_out *o)
{
    free(o->dq), free(o->dk), free(o->dv), free(o->dg), free(o->db);
}

/* The five gradients of a rec_grads, with their element counts. */
static void grads5(const double *p[5], int64_t n[5], const rec_grads *g, const dr_in *in)
{
    p[0] = g->dq, p[1] = g->dk, p[2] = g->dv, p[3] = g->dg, p[4] = g->db;
    n[0] = n[1] = in->T * in->Hk * in->dk;
    n[2] = in->T * in->Hv * in->dv;
    n[3] = n[4] = in->T * in->Hv;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* Compare the kernel's five gradients with a float64 reference (the recurrent backward or the
 * finite differences): element i against eps Y_i + FD, FD = fd_abs + fd_rel max(Y) (the FD
 * allowance of the tensor; 0 against the recurrent backward). */
static void dr_compare(const char *tag, const dr_out *o, const rec_grads *ref, const dr_in *in,
                       const dr_bound *b, double fd_abs, double fd_rel)
{
    const float *got[5] = {o->dq, o->dk, o->dv, o->dg, o->db};
    const double *want[5], *Y[5];
    int64_t n[5];
    grads5(want, n, ref, in);
    grads5(Y, n, &b->Y, in);
    double *bound = dalloc((size_t)(n[0] > n[2] ? n[0] : n[2]));
    cmp_res res[5];
    double worst = 0.0;
    for (int f = 0; f < 5; f++) {
        double fd = fd_abs + fd_rel * max_abs(Y[f], n[f]);
        for (int64_t i = 0; i < n[f]; i++)
            bound[i] = b->eps * Y[f][i] + fd;
        res[f] = compare(got[f], want[f], bound, n[f]);
        worst = fmax(worst, res[f].ratio);
    }
    printf("  %-34s err/bound q %.1e k %.1e v %.1e g %.1e beta %.1e | max rel err %.1e %.1e "
           "%.1e %.1e %.1e\n",
           tag, res[0].ratio, res[1].ratio, res[2].ratio, res[3].ratio, res[4].ratio, res[0].rel,
           res[1].rel, res[2].rel, res[3].rel, res[4].rel);
    check(tag, worst);
    free(bound);
}

/* Central differences of rec_loss for every input element into a rec_grads-shaped result;
 * *lmag: max over evaluations of sum |terms|. */
static rec_grads dr_fd(dr_in *in, double *lmag)
{
    int64_t T = in->T, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv;
    rec_grads fd = rec_alloc(in);
    double *S = dalloc((size_t)(dk * dv)), m;
    double *src[5] = {in->qd, in->kd, in->vd, in->gd, in->bd};
    double *dst[5] = {fd.dq, fd.dk, fd.dv, fd.dg, fd.db};
    int64_t n[5] = {T * Hk * dk, T * Hk * dk, T * Hv * dv, T * Hv, T * Hv};
    *lmag = 0.0;
    for (int f = 0; f < 5; f++)
        for (int64_t i = 0; i < n[f]; i++) {
            double x0 = src[f][i];
            src[f][i] = x0 + FDH;
            double lp = rec_loss(in, S, &m);
            *lmag = fmax(*lmag, m);
            src[f][i] = x0 - FDH;
            double ln = rec_loss(in, S, &m);
            src[f][i] = x0;
            dst[f][i] = (lp - ln) / (2 * FDH);
        }
    free(S);
    return fd;
}

static void test_dr_fd(int64_t T, int64_t Hk, int64_t Hv, uint64_t seed)
{
    int64_t dk = 4, dv = 6;
    dr_in in = dr_make(T, Hk, Hv, dk, dv, seed);
    rec_chunks rc = rec_chunks_alloc(&in);
    rec_grads rb = rec_backward(&in, &rc);
    dr_bound b = dr_bounds(&in, &rc);
    double lmag;
    rec_grads fd = dr_fd(&in, &lmag);
    double fd_abs = 0x1p-50 * lmag / FDH, fd_rel = 1e-8;
    dr_out o = dr_kernel(&in);
    char tag[96];
    /* the float64 reference itself vs FD, against the FD allowance alone */
    snprintf(tag, sizeof tag, "T=%lld Hk=%lld Hv=%lld: f64 rec vs FD", (long long)T,
             (long long)Hk, (long long)Hv);
    const double *r5[5], *f5[5], *Y[5];
    int64_t n[5];
    grads5(r5, n, &rb, &in), grads5(f5, n, &fd, &in), grads5(Y, n, &b.Y, &in);
    double worst = 0.0;
    for (int f = 0; f < 5; f++) {
        double allow = fd_abs + fd_rel * max_abs(Y[f], n[f]);
        for (int64_t i = 0; i < n[f]; i++) {
            double e = fabs(r5[f][i] - f5[f][i]);
            worst = fmax(worst, e == e ? e / allow : INFINITY);
        }
    }
    printf("  %-34s err/FD-allowance %.1e\n", tag, worst);
    check(tag, worst);
    snprintf(tag, sizeof tag, "T=%lld Hk=%lld Hv=%lld: chunked vs FD", (long long)T,
             (long long)Hk, (long long)Hv);
    dr_compare(tag, &o, &fd, &in, &b, fd_abs, fd_rel);
    dr_out_free(&o), rec_free(&rb), rec_free(&fd), bound_free(&b), dr_free(&in);
    free(rc.Sc), free(rc.dSc);
}

static void test_dr_rec(int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, uint64_t seed)
{
    dr_in in = dr_make(T, Hk, Hv, dk, dv, seed);
    rec_chunks rc = rec_chunks_alloc(&in);
    rec_grads rb = rec_backward(&in, &rc);
    dr_bound b = dr_bounds(&in, &rc);
    dr_out o = dr_kernel(&in);
    char tag[96];
    snprintf(tag, sizeof tag, "T=%lld Hk=%lld Hv=%lld dk=%lld dv=%lld vs f64", (long long)T,
             (long long)Hk, (long long)Hv, (long long)dk, (long long)dv);
    dr_compare(tag, &o, &rb, &in, &b, 0.0, 0.0);
    printf("  %-34s (kappa %.2f, m %.2f, eps %.2e)\n", "", b.kappa, b.m, b.eps);
    dr_out_free(&o), rec_free(&rb), bound_free(&b), dr_free(&in);
    free(rc.Sc), free(rc.dSc);
}

/* ==== 3. thread invariance ==================================================================== */

static void test_threads(void)
{
    int nmax = omp_get_max_threads(), ok = 1;
    /* delta rule: GQA with two q/k heads, and a single head (a team larger than the work) */
    static const int64_t shapes[2][5] = {{200, 2, 4, 32, 48}, {130, 1, 1, 16, 24}};
    for (int si = 0; si < 2; si++) {
        dr_in in = dr_make(shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3],
                           shapes[si][4], 500 + (uint64_t)si);
        dr_out o[2];
        for (int run = 0; run < 2; run++) {
            omp_set_num_threads(run == 0 ? 1 : 2);
            o[run] = dr_kernel(&in);
        }
        int64_t nqk = in.T * in.Hk * in.dk, nv = in.T * in.Hv * in.dv, ng = in.T * in.Hv;
        ok &= same_bits(o[0].dq, o[1].dq, nqk) && same_bits(o[0].dk, o[1].dk, nqk) &&
              same_bits(o[0].dv, o[1].dv, nv) && same_bits(o[0].dg, o[1].dg, ng) &&
              same_bits(o[0].db, o[1].db, ng);
        dr_out_free(&o[0]), dr_out_free(&o[1]), dr_free(&in);
    }
    /* conv (several channel blocks) and gates */
    int64_t T = 100, Cc = 300, K = 4, Hv = 48;
    hyla_rng r;
    hyla_rng_seed(&r, 79);
    float *x = falloc((size_t)(T * Cc)), *w = falloc((size_t)(Cc * K));
    float *dy = falloc((size_t)(T * Cc));
    for (int64_t i = 0; i < T * Cc; i++)
        x[i] = (float)unif(&r, -3, 3), dy[i] = (float)unif(&r, -1, 1);
    for (int64_t i = 0; i < Cc * K; i++)
        w[i] = (float)unif(&r, -1, 1);
    float *dx[2], *dw[2], *da[2], *db[2], *dA[2], *dD[2];
    int64_t ng = (T * Cc) / Hv * Hv;
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        dx[run] = falloc((size_t)(T * Cc)), dw[run] = falloc((size_t)(Cc * K));
        hyla_conv_silu_bwd(dx[run], dw[run], dy, x, w, T, Cc, K);
        /* gates on [ng/Hv, Hv] rows: a = x, b = dy * 10, dg = dy, dbeta = x / 3 */
        da[run] = falloc((size_t)ng), db[run] = falloc((size_t)ng);
        dA[run] = falloc((size_t)Hv), dD[run] = falloc((size_t)Hv);
        float *b10 = falloc((size_t)ng);
        for (int64_t i = 0; i < ng; i++)
            b10[i] = dy[i] * 10.0f;
        hyla_gdn_gates_bwd(da[run], db[run], dA[run], dD[run], dy, x, x, b10, w, w + Hv, ng / Hv,
                           Hv);
        free(b10);
    }
    omp_set_num_threads(nmax);
    ok &= same_bits(dx[0], dx[1], T * Cc) && same_bits(dw[0], dw[1], Cc * K);
    ok &= same_bits(da[0], da[1], ng) && same_bits(db[0], db[1], ng) &&
          same_bits(dA[0], dA[1], Hv) && same_bits(dD[0], dD[1], Hv);
    printf("  %-34s %s\n", "1 vs 2 threads bit-identical", ok ? "yes" : "NO");
    check("1 vs 2 threads bit-identical (delta rule, conv, gates)", ok ? 0.0 : INFINITY);
    for (int run = 0; run < 2; run++)
        free(dx[run]), free(dw[run]), free(da[run]), free(db[run]), free(dA[run]), free(dD[run]);
    free(x), free(w), free(dy);
}

/* ==== 4. timing =============================================================================== */

/* GEMM-shaped FLOPs the backward executes per head: pass 1 on every chunk but the last (K K^T,
 * K S, the solve, the state update), pass 2 on every chunk ([K;Q] K^T, [K;Q] S, the solve,
 * K dSn, P^T dO, the transposed solve, [dM;dP], D2 S^T, X dSn^T, two [dA;dB] products, dS). */
static double bwd_flops_per_head(int64_t T, int64_t dk, int64_t dv)
{
    double c = C, nc = (double)((T + C - 1) / C);
    double p1 = c * c * (2.0 * dk + dv) + 4.0 * c * dk * dv;
    double p2 = c * c * (12.0 * dk + 8.0 * dv) + 16.0 * c * dk * dv;
    return (nc - 1) * p1 + nc * p2;
}

#ifdef __SANITIZE_ADDRESS__
enum { TIMING_REPS = 1 }; /* sanitizer build: timings are meaningless, keep the run short */
#else
enum { TIMING_REPS = 4 };
#endif

static void timing(void)
{
    int64_t T = 512, Hk = 4, Hv = 8, dk = 128, dv = 128;
    dr_in in = dr_make(T, Hk, Hv, dk, dv, 99);
    int nmax = omp_get_max_threads();
    double flops = (double)Hv * bwd_flops_per_head(T, dk, dv);
    float *dq = falloc((size_t)(T * Hk * dk)), *dk_ = falloc((size_t)(T * Hk * dk));
    float *dv_ = falloc((size_t)(T * Hv * dv)), *dg = falloc((size_t)(T * Hv)),
          *db = falloc((size_t)(T * Hv));
    for (int nt = 1; nt <= nmax && nt <= 2; nt++) {
        omp_set_num_threads(nt);
        float *work = falloc(hyla_delta_rule_chunked_bwd_work_floats(T, Hv, dk, dv));
        double best = INFINITY;
        for (int rep = 0; rep < TIMING_REPS; rep++) {
            double t0 = omp_get_wtime();
            hyla_delta_rule_chunked_bwd(dq, dk_, dv_, dg, db, in.dout, in.q, in.k, in.v, in.g,
                                        in.beta, T, Hk, Hv, dk, dv, work);
            best = fmin(best, omp_get_wtime() - t0);
        }
        printf("  timing bwd T=512 Hk=4 Hv=8 dk=dv=128, %d thread(s): %.3f ms (%.1f GFLOP/s, "
               "%.2f GFLOP)\n",
               nt, best * 1e3, flops / best * 1e-9, flops * 1e-9);
        free(work);
    }
    omp_set_num_threads(nmax);
    free(dq), free(dk_), free(dv_), free(dg), free(db);
    dr_free(&in);
}

/* 5. A sequence split at a chunk boundary (context parallelism, ops.h:
 * hyla_delta_rule_chunked_bwd_state): the later part's backward from the state the earlier
 * part's forward ends in, then the earlier part's from the later one's initial-state gradient,
 * == the whole sequence's backward, bit for bit: the pieces run the same chunks with the same
 * arithmetic: the forward's chunk update (chunk_step) and the backward's state recompute form
 * K^T diag(f) X and eL S with the same products in the same order, so the state handed over is
 * the one the whole backward reaches at the boundary, and the reverse sweep's dS likewise. */
static void test_dr_split(int64_t T1, int64_t T2, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, uint64_t seed)
{
    int64_t T = T1 + T2, kd = Hk * dk, vd = Hv * dv, sz = Hv * dk * dv;
    dr_in in = dr_make(T, Hk, Hv, dk, dv, seed);
    dr_out whole = dr_kernel(&in);
    float *S = falloc((size_t)sz), *dS = falloc((size_t)sz), *dS0 = falloc((size_t)sz), *o = falloc((size_t)(T1 * vd));
    float *fwork = falloc(hyla_delta_rule_chunked_work_floats(Hv, dk, dv));
    memset(S, 0, (size_t)sz * sizeof(float));
    hyla_delta_rule_chunked_fwd(o, S, in.q, in.k, in.v, in.g, in.beta, T1, Hk, Hv, dk, dv, fwork);
    float *dq = falloc((size_t)(T * kd)), *dk_ = falloc((size_t)(T * kd)), *dv_ = falloc((size_t)(T * vd));
    float *dg = falloc((size_t)(T * Hv)), *db = falloc((size_t)(T * Hv));
    float *work = falloc(hyla_delta_rule_chunked_bwd_work_floats(T, Hv, dk, dv));
    /* the later part first (from S, zero final gradient), then the earlier (from zero, dS) */
    hyla_delta_rule_chunked_bwd_state(dq + T1 * kd, dk_ + T1 * kd, dv_ + T1 * vd, dg + T1 * Hv, db + T1 * Hv, dS,
                                      in.dout + T1 * vd, in.q + T1 * kd, in.k + T1 * kd, in.v + T1 * vd, in.g + T1 * Hv,
                                      in.beta + T1 * Hv, S, NULL, T2, Hk, Hv, dk, dv, work);
    hyla_delta_rule_chunked_bwd_state(dq, dk_, dv_, dg, db, dS0, in.dout, in.q, in.k, in.v, in.g, in.beta, NULL, dS, T1,
                                      Hk, Hv, dk, dv, work);
    int ok = same_bits(dq, whole.dq, T * kd) && same_bits(dk_, whole.dk, T * kd) && same_bits(dv_, whole.dv, T * vd) &&
             same_bits(dg, whole.dg, T * Hv) && same_bits(db, whole.db, T * Hv);
    /* the state gradient is live: a non-zero dS (the slow heads carry it across the boundary), and
     * dS0 is the gradient of a zero initial state (finite, checked against a small FD below) */
    double dS_norm = 0.0;
    for (int64_t i = 0; i < sz; i++)
        dS_norm += fabs(dS[i]);
    ok = ok && dS_norm > 0.0 && isfinite(dS_norm);
    printf("  %s split at %lld + %lld (Hk %lld, Hv %lld, dk %lld, dv %lld) == whole, bit for bit; |dS| at the "
           "boundary %.3g\n", ok ? "ok  " : "FAIL", (long long)T1, (long long)T2, (long long)Hk, (long long)Hv,
           (long long)dk, (long long)dv, dS_norm);
    if (!ok)
        failures++;
    free(S), free(dS), free(dS0), free(o), free(fwork), free(dq), free(dk_), free(dv_), free(dg), free(db), free(work);
    dr_out_free(&whole);
    dr_free(&in);
}
int main(void)
{
    printf("test_gdn_grads: chunked delta rule vs FD of the f64 recurrent forward\n");
    static const int64_t Ts[] = {1, 5, 63, 64, 65, 130};
    uint64_t seed = 100;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        test_dr_fd(Ts[ti], 1, 2, seed++);
        test_dr_fd(Ts[ti], 2, 2, seed++);
    }
    printf("test_gdn_grads: chunked delta rule vs the f64 recurrent backward\n");
    test_dr_rec(200, 1, 2, 32, 32, 200);
    test_dr_rec(200, 2, 2, 32, 32, 201);
    test_dr_rec(130, 1, 2, 128, 128, 202);

    printf("test_gdn_grads: a sequence split in slices (initial state, state gradients)\n");
    test_dr_split(64, 70, 1, 2, 32, 32, 300);
    test_dr_split(128, 128, 2, 4, 32, 32, 301);
    test_dr_split(64, 1, 2, 2, 128, 128, 302);

    printf("test_gdn_grads: threads\n");
    test_threads();
    timing();
    if (failures) {
        printf("test_gdn_grads: %d FAILURE(S)\n", failures);
        return 1;
    }
    printf("test_gdn_grads: all passed\n");
    return 0;
}
