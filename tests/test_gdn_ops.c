/* Gated DeltaNet ops: conv + silu, gates, recurrent and chunked delta rule (spec §3.4, §4).
 *
 * Ground truth is a float64 evaluation on the same fp32 inputs. Every fp32 result is checked
 * against a bound derived below (first-order rounding-error analysis, u = 2^-24), and every pair
 * of fp32 results against the sum of their bounds. Exits non-zero on any failure.
 *
 *  1. recurrent, fast chunked and a plain fp32 chunked reference (the spec's literal algorithm,
 *     padded chunks, explicit T, U, W) for T in {1,2,63,64,65,130,200}, GQA and Hk = Hv,
 *     dk != dv, zero and non-zero initial state;
 *  2. continuation: T1 then T2 tokens with the state carried == T1 + T2 in one call
 *     (bit-exact for the recurrent form and for chunked splits on a chunk boundary);
 *  3. conv + silu with and without history, T < K;
 *  4. gates, including the softplus threshold;
 *  5. bit-identical results with 1 and 2 OpenMP threads;
 *  6. a timing print of the chunked kernel (no assertion).
 *
 * ---- Error bounds for the delta rule (first order in u; the derivation) -----------------------
 * Data (exact, from the float64 run): sigma = max over heads, tokens t = 0..T and columns j of
 * ||S_t[:, j]||_2; nu = max |v|; xi = max |delta| (delta_t = beta_t (v_t - S'^T k_t) is also
 * the chunk's X = V_new row). ||k|| = 1, ||q|| = 1/sqrt(dk) (up to O(u)), beta in (0,1), g <= 0.
 * Tools: an n-term dot product has error <= n u sum|a_i b_i| (any order, FMA or not); by
 * Cauchy-Schwarz sum_i |k_i s_i| <= ||s||; libm expf is within 0.502 ulp (CE = 1.01 u relative);
 * a double exp rounded to float is within u.
 * Propagation: one exact step S -> e^g (I - beta k k^T) S + ... is linear in S with 2-norm gain
 * <= e^g (I - beta k k^T has eigenvalues 1 and 1 - beta), and columns are independent, so an
 * error E in a state column is carried as <= e^{g_t} E, and into an output as <= ||q|| E.
 *
 * Recurrent (per token, per state column, 2-norm):
 *   decay: a = fl(expf(g)) then a*S:                    (CE + 1) u sigma
 *   m = S'^T k (dk terms):                             dk u sigma
 *   delta = beta (v - m): 2 roundings:                 2 u (nu + sigma)     (enters as k delta^T)
 *   S += k delta^T (fma: u sigma; without hardware FMA the product rounds too: + u (nu + sigma))
 *   => e_rec = u ((dk + 7) sigma + 3 nu);  B_S(t) = e^{g_t} B_S(t-1) + e_rec,  B_S(0) = 0;
 *   output o_t = S_t^T q (dk terms): |err| <= (B_S(t) + dk u sigma) / sqrt(dk).
 *
 * Chunked (per chunk of C = 64 positions, per head; M, T = (I+M)^{-1}, P, Gam exact; d_rs =
 * gam_r - gam_s): local errors assuming an exact incoming state, then propagated as above:
 *   K S (dk terms), R_r = beta_r (v_r - e_r (KS)_r):  u ((dk + 4) sigma + 2 nu)
 *   solve (I + M^) X = R^: a triangular solve satisfies (I + M^ + dL) X^ = R^ + dR' with
 *   |dL| <= C u |M|, |dR'| <= C u |R|, |R| <= nu + sigma; M^ - M comes from K K^T (dk u per entry),
 *   Gam (u (|d| + CE), the argument rounded to float then expf) and two products (2u):
 *     chi = kappa u [ (dk + 4) sigma + 2 nu + C (nu + sigma) + (m_c + C) xi ]
 *     kappa = max_r sum_s |T_rs|,
 *     m_c = max_r sum_{s<r} [ dk beta_r Gam_rs + |M_rs| (|d_rs| + C + CE + 3) ]
 *   (the extra C xi covers the reference's explicit T: T^ - T = -T (dM + dL) T, and its products
 *    U = T^ beta V, W = T^ beta e^gam K, W S cost C u kappa nu, C u kappa sigma, dk u kappa sigma).
 *   outputs O_r = e_r q_r^T S + sum_s P_rs X_s:
 *     L_O = u [ sqrt(dk) sigma + (C + 3) sigma / sqrt(dk) ] + p_c chi + u xi (pp_c + (C + 1) p_c)
 *     p_c = max_r sum_{s<=r} |P_rs|,
 *     pp_c = max_r sum_{s<=r} [ sqrt(dk) Gam_rs + |P_rs| (|d_rs| + CE + 2) ]
 *   state S' = e^{gam_L} S + K^T diag(f) X, f_r = e^{gam_L - gam_r}, phi_c = sum_r f_r:
 *     L_S = phi_c chi + (C + 3) u phi_c xi + (C + 2) u sigma
 *   across chunks: B_S <- e^{gam_L} B_S + L_S;  output row r: L_O + e^{gam_r} B_S(in) / sqrt(dk).
 * Both chunked implementations (fast: R folded, blocked in-place solve; reference: literal spec)
 * satisfy this bound; a comparison of two results uses the sum of their bounds. The bounds are
 * worst case (rounding errors of one sign, Cauchy-Schwarz equality); observed errors are 40-1000x
 * smaller (the test prints err/bound). */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/ops.h"

#define C HYLA_DELTA_CHUNK
static const double U = 0x1p-24; /* fp32 unit roundoff */
static const double CE = 1.01;   /* glibc expf: <= 0.502 ulp = 1.004 u relative */
static int failures;

#include "test_alloc.h"

/* Report one check: pass iff err <= bound (NaN fails). */
static void check(const char *what, double err, double bound)
{
    int ok = err <= bound;
    if (!ok) {
        printf("  FAIL %-58s err %.3e > bound %.3e\n", what, err, bound);
        failures++;
    }
}

/* max_i |a_i - b_i| / bound_{i / row}, and max |a_i - b_i|; bound given per row of `row` elems */
static double ratio_f64(double *maxerr, const float *a, const double *b, const double *bound,
                        int64_t n, int64_t row)
{
    double worst = 0.0, me = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= me))
            me = e; /* also catches NaN */
        double r = e / bound[i / row];
        if (!(r <= worst))
            worst = r;
    }
    *maxerr = me;
    return worst;
}

static double ratio_f32(double *maxerr, const float *a, const float *b, const double *bound1,
                        const double *bound2, int64_t n, int64_t row)
{
    double worst = 0.0, me = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= me))
            me = e;
        double r = e / (bound1[i / row] + bound2[i / row]);
        if (!(r <= worst))
            worst = r;
    }
    *maxerr = me;
    return worst;
}

/* ---- delta-rule inputs ----------------------------------------------------------------------- */

typedef struct {
    int64_t T, Hk, Hv, dk, dv;
    float *q, *k;     /* [T,Hk,dk] l2-normalised; q also scaled by 1/sqrt(dk) */
    float *v;         /* [T,Hv,dv] */
    float *g, *beta;  /* [T,Hv]: g in [-3,0), beta in (0,1) */
    float *S0;        /* [Hv,dk,dv] initial state */
} gdn_in;


static gdn_in gdn_make(int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int state,
                       uint64_t seed)
{
    gdn_in in = {T, Hk, Hv, dk, dv, 0, 0, 0, 0, 0, 0};
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    in.q = falloc((size_t)(T * Hk * dk));
    in.k = falloc((size_t)(T * Hk * dk));
    in.v = falloc((size_t)(T * Hv * dv));
    in.g = falloc((size_t)(T * Hv));
    in.beta = falloc((size_t)(T * Hv));
    in.S0 = falloc((size_t)(Hv * dk * dv));
    unit_rows(in.q, T * Hk, dk, 1.0 / sqrt((double)dk), &r);
    unit_rows(in.k, T * Hk, dk, 1.0, &r);
    for (int64_t i = 0; i < T * Hv * dv; i++)
        in.v[i] = (float)unif(&r, -1.0, 1.0);
    for (int64_t i = 0; i < T * Hv; i++) {
        in.g[i] = (float)(-3.0 * (1.0 - hyla_rng_uniform(&r))); /* [-3, 0) */
        in.beta[i] = (float)unif(&r, 0.01, 0.99);
    }
    if (state)
        for (int64_t i = 0; i < Hv * dk * dv; i++)
            in.S0[i] = (float)unif(&r, -0.5, 0.5);
    return in;
}

static void gdn_free(gdn_in *in)
{
    free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta), free(in->S0);
}

/* ---- float64 recurrent ground truth ---------------------------------------------------------- */

typedef struct {
    double *out;             /* [T,Hv,dv] */
    double *S;               /* [Hv,dk,dv] final state */
    double sigma, nu, xi;    /* see the derivation at the top */
} truth;

static truth truth_run(const gdn_in *in)
{
    int64_t T = in->T, Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, rep = Hv / Hk;
    truth tr = {dalloc((size_t)(T * Hv * dv)), dalloc((size_t)(Hv * dk * dv)), 0, 0, 0};
    double *m = dalloc((size_t)dv), *d = dalloc((size_t)dv), *cn = dalloc((size_t)dv);
    for (int64_t i = 0; i < T * Hv * dv; i++)
        tr.nu = fmax(tr.nu, fabs(in->v[i]));
    for (int64_t h = 0; h < Hv; h++) {
        double *S = tr.S + h * dk * dv;
        for (int64_t i = 0; i < dk * dv; i++)
            S[i] = in->S0[h * dk * dv + i];
        for (int64_t t = 0; t <= T; t++) {
            if (t > 0) {
                const float *q = in->q + ((t - 1) * Hk + h / rep) * dk;
                const float *k = in->k + ((t - 1) * Hk + h / rep) * dk;
                const float *v = in->v + ((t - 1) * Hv + h) * dv;
                double a = exp((double)in->g[(t - 1) * Hv + h]), b = in->beta[(t - 1) * Hv + h];
                for (int64_t j = 0; j < dv; j++)
                    m[j] = 0.0;
                for (int64_t i = 0; i < dk * dv; i++)
                    S[i] *= a;
                for (int64_t i = 0; i < dk; i++)
                    for (int64_t j = 0; j < dv; j++)
                        m[j] += k[i] * S[i * dv + j];
                for (int64_t j = 0; j < dv; j++) {
                    d[j] = b * (v[j] - m[j]);
                    tr.xi = fmax(tr.xi, fabs(d[j]));
                }
                for (int64_t i = 0; i < dk; i++)
                    for (int64_t j = 0; j < dv; j++)
                        S[i * dv + j] += k[i] * d[j];
                double *o = tr.out + ((t - 1) * Hv + h) * dv;
                for (int64_t j = 0; j < dv; j++)
                    o[j] = 0.0;
                for (int64_t i = 0; i < dk; i++)
                    for (int64_t j = 0; j < dv; j++)
                        o[j] += q[i] * S[i * dv + j];
            }
            for (int64_t j = 0; j < dv; j++)
                cn[j] = 0.0;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++)
                    cn[j] += S[i * dv + j] * S[i * dv + j];
            for (int64_t j = 0; j < dv; j++)
                tr.sigma = fmax(tr.sigma, sqrt(cn[j]));
        }
    }
    free(m), free(d), free(cn);
    return tr;
}

static void truth_free(truth *tr) { free(tr->out), free(tr->S); }

/* ---- the bounds (formulas at the top) -------------------------------------------------------- */

/* bo [T*Hv]: bound on every output element of token t, head h; bs [Hv]: final-state bound */
static void bound_recurrent(double *bo, double *bs, const gdn_in *in, const truth *tr)
{
    double dk = (double)in->dk, e_rec = U * ((dk + 7.0) * tr->sigma + 3.0 * tr->nu);
    for (int64_t h = 0; h < in->Hv; h++) {
        double B = 0.0;
        for (int64_t t = 0; t < in->T; t++) {
            B = exp((double)in->g[t * in->Hv + h]) * B + e_rec;
            bo[t * in->Hv + h] = (B + dk * U * tr->sigma) / sqrt(dk);
        }
        bs[h] = B;
    }
}

typedef struct {
    double kappa, m_c, p_c, pp_c, phi, gam_last;
    double gam[C];
} chunk_data;

/* Exact chunk matrices (double) for tokens [c0, c0+L) of head h and the sums of the bound. */
static void chunk_stats(chunk_data *cd, const gdn_in *in, int64_t h, int64_t c0, int64_t L)
{
    int64_t Hv = in->Hv, Hk = in->Hk, dk = in->dk, hk = h / (Hv / Hk);
    static double M[C][C], Tm[C][C];
    double acc = 0.0;
    for (int64_t r = 0; r < L; r++) {
        acc += in->g[(c0 + r) * Hv + h];
        cd->gam[r] = acc;
    }
    cd->gam_last = cd->gam[L - 1];
    cd->kappa = cd->m_c = cd->p_c = cd->pp_c = cd->phi = 0.0;
    for (int64_t r = 0; r < L; r++) {
        const float *kr = in->k + ((c0 + r) * Hk + hk) * dk;
        const float *qr = in->q + ((c0 + r) * Hk + hk) * dk;
        double br = in->beta[(c0 + r) * Hv + h], msum = 0.0, psum = 0.0, ppsum = 0.0;
        for (int64_t s = 0; s <= r; s++) {
            const float *ks = in->k + ((c0 + s) * Hk + hk) * dk;
            double kk = 0.0, qk = 0.0, d = cd->gam[r] - cd->gam[s], Gam = exp(d);
            for (int64_t i = 0; i < dk; i++) {
                kk += (double)kr[i] * ks[i];
                qk += (double)qr[i] * ks[i];
            }
            M[r][s] = s < r ? br * kk * Gam : 0.0;
            double P = qk * Gam;
            if (s < r)
                msum += dk * br * Gam + fabs(M[r][s]) * (fabs(d) + C + CE + 3.0);
            psum += fabs(P);
            ppsum += sqrt((double)dk) * Gam + fabs(P) * (fabs(d) + CE + 2.0);
        }
        cd->m_c = fmax(cd->m_c, msum);
        cd->p_c = fmax(cd->p_c, psum);
        cd->pp_c = fmax(cd->pp_c, ppsum);
        cd->phi += exp(cd->gam_last - cd->gam[r]);
    }
    /* T = (I + M)^{-1} by forward substitution, row sums of |T| */
    for (int64_t r = 0; r < L; r++) {
        double rowsum = 0.0;
        for (int64_t j = 0; j <= r; j++) {
            double t = (j == r) ? 1.0 : 0.0;
            for (int64_t s = j; s < r; s++)
                t -= M[r][s] * Tm[s][j];
            Tm[r][j] = t;
            rowsum += fabs(t);
        }
        cd->kappa = fmax(cd->kappa, rowsum);
    }
}

/* Chunked bound for runs [0, split) and [split, T) (split <= 0 or >= T: one run), each chunked
 * by C from its own start, the state carried between the runs. */
static void bound_chunked(double *bo, double *bs, const gdn_in *in, const truth *tr, int64_t split)
{
    double dk = (double)in->dk, sig = tr->sigma, nu = tr->nu, xi = tr->xi, sq = sqrt(dk);
    chunk_data cd;
    for (int64_t h = 0; h < in->Hv; h++) {
        double B = 0.0;
        for (int64_t run = 0; run < 2; run++) {
            int64_t t0 = run == 0 ? 0 : split, t1 = run == 0 ? split : in->T;
            if (split <= 0 || split >= in->T) {
                if (run == 1)
                    break;
                t0 = 0, t1 = in->T;
            }
            for (int64_t c0 = t0; c0 < t1; c0 += C) {
                int64_t L = t1 - c0 < C ? t1 - c0 : C;
                chunk_stats(&cd, in, h, c0, L);
                double chi = cd.kappa * U *
                             ((dk + 4.0) * sig + 2.0 * nu + C * (nu + sig) + (cd.m_c + C) * xi);
                double LO = U * (sq * sig + (C + 3.0) * sig / sq) + cd.p_c * chi +
                            U * xi * (cd.pp_c + (C + 1.0) * cd.p_c);
                double LS = cd.phi * chi + (C + 3.0) * U * cd.phi * xi + (C + 2.0) * U * sig;
                for (int64_t r = 0; r < L; r++)
                    bo[(c0 + r) * in->Hv + h] = LO + exp(cd.gam[r]) * B / sq;
                B = exp(cd.gam_last) * B + LS;
            }
        }
        bs[h] = B;
    }
}

/* ---- plain fp32 chunked reference (spec §4.2 literally: padded chunks, explicit T, U, W) ----- */

static void chunked_ref(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/, const gdn_in *in,
                        int64_t t0, int64_t t1)
{
    int64_t Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, rep = Hv / Hk;
    float *Q = falloc(C * dk), *K = falloc(C * dk), *V = falloc(C * dv), *A = falloc(C * C);
    float *Tm = falloc(C * C), *Um = falloc(C * dv), *W = falloc(C * dk), *Vn = falloc(C * dv);
    float *orig = falloc(C), *gc = falloc(C), *bc = falloc(C), *Sn = falloc(dk * dv);
    double gam[C];
    for (int64_t h = 0; h < Hv; h++) {
        float *S = state + h * dk * dv;
        for (int64_t c0 = t0; c0 < t1; c0 += C) {
            /* pad to C: q = k = v = 0, beta = g = 0 */
            memset(Q, 0, sizeof(float) * C * dk), memset(K, 0, sizeof(float) * C * dk);
            memset(V, 0, sizeof(float) * C * dv), memset(gc, 0, sizeof(float) * C);
            memset(bc, 0, sizeof(float) * C);
            for (int64_t r = 0; r < C && c0 + r < t1; r++) {
                memcpy(Q + r * dk, in->q + ((c0 + r) * Hk + h / rep) * dk, sizeof(float) * dk);
                memcpy(K + r * dk, in->k + ((c0 + r) * Hk + h / rep) * dk, sizeof(float) * dk);
                memcpy(V + r * dv, in->v + ((c0 + r) * Hv + h) * dv, sizeof(float) * dv);
                gc[r] = in->g[(c0 + r) * Hv + h];
                bc[r] = in->beta[(c0 + r) * Hv + h];
            }
            double acc = 0.0; /* 1. gam (double, as the kernel; see delta_rule.c) */
            for (int64_t r = 0; r < C; r++)
                gam[r] = acc += gc[r];
            /* 2-3. A = -M, M[r,s] = beta_r (k_r . k_s) Gam[r,s], s < r */
            for (int64_t r = 0; r < C; r++)
                for (int64_t s = 0; s < C; s++) {
                    float kk = 0.0f;
                    for (int64_t i = 0; i < dk; i++)
                        kk += K[r * dk + i] * K[s * dk + i];
                    A[r * C + s] = s < r ? -((bc[r] * kk) * expf((float)(gam[r] - gam[s]))) : 0.0f;
                }
            /* 4. forward substitution: row i uses its original values and finished rows m < i */
            for (int64_t i = 1; i < C; i++) {
                for (int64_t m = 0; m < i; m++)
                    orig[m] = A[i * C + m];
                for (int64_t j = 0; j < i; j++) {
                    float s = orig[j];
                    for (int64_t m = j + 1; m < i; m++)
                        s += orig[m] * A[m * C + j];
                    A[i * C + j] = s;
                }
            }
            for (int64_t i = 0; i < C * C; i++)
                Tm[i] = A[i] + ((i / C == i % C) ? 1.0f : 0.0f);
            /* 5. U = T diag(beta) V ; W = T diag(beta e^gam) K */
            for (int64_t r = 0; r < C; r++) {
                for (int64_t j = 0; j < dv; j++) {
                    float s = 0.0f;
                    for (int64_t m = 0; m < C; m++)
                        s += Tm[r * C + m] * (bc[m] * V[m * dv + j]);
                    Um[r * dv + j] = s;
                }
                for (int64_t i = 0; i < dk; i++) {
                    float s = 0.0f;
                    for (int64_t m = 0; m < C; m++)
                        s += Tm[r * C + m] * ((bc[m] * (float)exp(gam[m])) * K[m * dk + i]);
                    W[r * dk + i] = s;
                }
            }
            /* 6. V_new = U - W S ; O = diag(e^gam) Q S + (Q K^T . Gam) V_new */
            for (int64_t r = 0; r < C; r++)
                for (int64_t j = 0; j < dv; j++) {
                    float s = 0.0f;
                    for (int64_t i = 0; i < dk; i++)
                        s += W[r * dk + i] * S[i * dv + j];
                    Vn[r * dv + j] = Um[r * dv + j] - s;
                }
            for (int64_t r = 0; r < C && c0 + r < t1; r++) {
                float *o = out + ((c0 + r) * Hv + h) * dv;
                for (int64_t j = 0; j < dv; j++) {
                    float s = 0.0f;
                    for (int64_t i = 0; i < dk; i++)
                        s += Q[r * dk + i] * S[i * dv + j];
                    o[j] = (float)exp(gam[r]) * s;
                }
                for (int64_t s = 0; s <= r; s++) {
                    float qk = 0.0f;
                    for (int64_t i = 0; i < dk; i++)
                        qk += Q[r * dk + i] * K[s * dk + i];
                    float p = qk * expf((float)(gam[r] - gam[s]));
                    for (int64_t j = 0; j < dv; j++)
                        o[j] += p * Vn[s * dv + j];
                }
            }
            /* S = e^{gam_C-1} S + K^T diag(e^{gam_C-1 - gam}) V_new */
            float eL = (float)exp(gam[C - 1]);
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) {
                    float s = 0.0f;
                    for (int64_t r = 0; r < C; r++)
                        s += K[r * dk + i] * ((float)exp(gam[C - 1] - gam[r]) * Vn[r * dv + j]);
                    Sn[i * dv + j] = eL * S[i * dv + j] + s;
                }
            memcpy(S, Sn, sizeof(float) * dk * dv);
        }
    }
    free(Q), free(K), free(V), free(A), free(Tm), free(Um), free(W), free(Vn);
    free(orig), free(gc), free(bc), free(Sn);
}

/* ---- running the library kernels on a token range with a carried state ----------------------- */

enum { RECURRENT, CHUNKED };

static void run_kernel(int form, float *out, float *state, const gdn_in *in, int64_t t0, int64_t t1)
{
    int64_t Hk = in->Hk, Hv = in->Hv, dk = in->dk, dv = in->dv, n = t1 - t0;
    const float *q = in->q + t0 * Hk * dk, *k = in->k + t0 * Hk * dk, *v = in->v + t0 * Hv * dv;
    const float *g = in->g + t0 * Hv, *b = in->beta + t0 * Hv;
    float *o = out + t0 * Hv * dv;
    if (form == RECURRENT) {
        hyla_delta_rule_recurrent_fwd(o, state, q, k, v, g, b, n, Hk, Hv, dk, dv);
    } else {
        float *work = falloc(hyla_delta_rule_chunked_work_floats(Hv, dk, dv));
        hyla_delta_rule_chunked_fwd(o, state, q, k, v, g, b, n, Hk, Hv, dk, dv, work);
        free(work);
    }
}

/* out/state of `form` over [0,T), as runs [0,split) + [split,T) (one run if split <= 0) */
static void run_split(int form, float *out, float *state, const gdn_in *in, int64_t split)
{
    memcpy(state, in->S0, sizeof(float) * (size_t)(in->Hv * in->dk * in->dv));
    if (split > 0 && split < in->T) {
        run_kernel(form, out, state, in, 0, split);
        run_kernel(form, out, state, in, split, in->T);
    } else {
        run_kernel(form, out, state, in, 0, in->T);
    }
}

/* ---- 1 + 2: delta rule accuracy and continuation --------------------------------------------- */

typedef struct {
    const char *name;
    float *out, *S;   /* [T,Hv,dv], [Hv,dk,dv] */
    double *bo, *bs;  /* their bounds */
} result;

static void result_alloc(result *r, const char *name, const gdn_in *in)
{
    r->name = name;
    r->out = falloc((size_t)(in->T * in->Hv * in->dv));
    r->S = falloc((size_t)(in->Hv * in->dk * in->dv));
    r->bo = dalloc((size_t)(in->T * in->Hv));
    r->bs = dalloc((size_t)in->Hv);
}
static void result_free(result *r) { free(r->out), free(r->S), free(r->bo), free(r->bs); }

/* check a result against the truth; returns the worst err/bound */
static double vs_truth(const char *tag, const result *r, const gdn_in *in, const truth *tr)
{
    char what[160];
    int64_t dkdv = in->dk * in->dv, dv = in->dv;
    double e1, e2;
    double r1 = ratio_f64(&e1, r->out, tr->out, r->bo, in->T * in->Hv * dv, dv);
    double r2 = ratio_f64(&e2, r->S, tr->S, r->bs, in->Hv * dkdv, dkdv);
    snprintf(what, sizeof what, "%s %s vs f64: out", tag, r->name);
    check(what, r1, 1.0);
    snprintf(what, sizeof what, "%s %s vs f64: state", tag, r->name);
    check(what, r2, 1.0);
    return fmax(r1, r2);
}

static double vs_other(const char *tag, const result *a, const result *b, const gdn_in *in,
                       double *maxerr)
{
    char what[160];
    int64_t dkdv = in->dk * in->dv, dv = in->dv;
    double e1, e2;
    double r1 = ratio_f32(&e1, a->out, b->out, a->bo, b->bo, in->T * in->Hv * dv, dv);
    double r2 = ratio_f32(&e2, a->S, b->S, a->bs, b->bs, in->Hv * dkdv, dkdv);
    snprintf(what, sizeof what, "%s %s vs %s: out", tag, a->name, b->name);
    check(what, r1, 1.0);
    snprintf(what, sizeof what, "%s %s vs %s: state", tag, a->name, b->name);
    check(what, r2, 1.0);
    *maxerr = fmax(e1, e2);
    return fmax(r1, r2);
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static void test_delta_case(int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int state,
                            uint64_t seed)
{
    char tag[96];
    snprintf(tag, sizeof tag, "T=%lld Hk=%lld Hv=%lld dk=%lld dv=%lld S0=%d", (long long)T,
             (long long)Hk, (long long)Hv, (long long)dk, (long long)dv, state);
    gdn_in in = gdn_make(T, Hk, Hv, dk, dv, state, seed);
    truth tr = truth_run(&in);
    result rec, fast, ref;
    result_alloc(&rec, "recurrent", &in), result_alloc(&fast, "chunked", &in);
    result_alloc(&ref, "chunked-ref", &in);
    run_split(RECURRENT, rec.out, rec.S, &in, 0);
    run_split(CHUNKED, fast.out, fast.S, &in, 0);
    memcpy(ref.S, in.S0, sizeof(float) * (size_t)(Hv * dk * dv));
    chunked_ref(ref.out, ref.S, &in, 0, T);
    bound_recurrent(rec.bo, rec.bs, &in, &tr);
    bound_chunked(fast.bo, fast.bs, &in, &tr, 0);
    bound_chunked(ref.bo, ref.bs, &in, &tr, 0);

    double w = 0.0, e_cr, e_cf;
    w = fmax(w, vs_truth(tag, &rec, &in, &tr));
    w = fmax(w, vs_truth(tag, &fast, &in, &tr));
    w = fmax(w, vs_truth(tag, &ref, &in, &tr));
    w = fmax(w, vs_other(tag, &fast, &rec, &in, &e_cr));
    w = fmax(w, vs_other(tag, &fast, &ref, &in, &e_cf));
    printf("  %-44s |chunked-recurrent| %.2e |chunked-ref| %.2e  worst err/bound %.3f\n", tag,
           e_cr, e_cf, w);
    result_free(&rec), result_free(&fast), result_free(&ref);
    truth_free(&tr), gdn_free(&in);
}

static void test_continuation(int64_t T, int64_t T1, uint64_t seed)
{
    int64_t Hk = 2, Hv = 4, dk = 64, dv = 96, nS = Hv * dk * dv, nO = T * Hv * dv;
    char tag[96];
    snprintf(tag, sizeof tag, "continuation T=%lld+%lld", (long long)T1, (long long)(T - T1));
    gdn_in in = gdn_make(T, Hk, Hv, dk, dv, 1, seed);
    truth tr = truth_run(&in);
    result rec1, rec2, ch1, ch2;
    result_alloc(&rec1, "recurrent 1-call", &in), result_alloc(&rec2, "recurrent 2-call", &in);
    result_alloc(&ch1, "chunked 1-call", &in), result_alloc(&ch2, "chunked 2-call", &in);
    run_split(RECURRENT, rec1.out, rec1.S, &in, 0);
    run_split(RECURRENT, rec2.out, rec2.S, &in, T1);
    run_split(CHUNKED, ch1.out, ch1.S, &in, 0);
    run_split(CHUNKED, ch2.out, ch2.S, &in, T1);
    bound_chunked(ch1.bo, ch1.bs, &in, &tr, 0);
    bound_chunked(ch2.bo, ch2.bs, &in, &tr, T1);

    char what[160];
    snprintf(what, sizeof what, "%s recurrent bit-exact", tag);
    check(what, same_bits(rec1.out, rec2.out, nO) && same_bits(rec1.S, rec2.S, nS) ? 0 : 1, 0);
    if (T1 % C == 0) {
        snprintf(what, sizeof what, "%s chunked bit-exact (chunk boundary)", tag);
        check(what, same_bits(ch1.out, ch2.out, nO) && same_bits(ch1.S, ch2.S, nS) ? 0 : 1, 0);
    }
    double e, w = vs_truth(tag, &ch2, &in, &tr);
    w = fmax(w, vs_other(tag, &ch2, &ch1, &in, &e));
    printf("  %-44s |2-call - 1-call| %.2e  worst err/bound %.3f\n", tag, e, w);
    result_free(&rec1), result_free(&rec2), result_free(&ch1), result_free(&ch2);
    truth_free(&tr), gdn_free(&in);
}

/* Rollback points (a speculative verify): the state kept after row t < T - 1 of one T-row call
 * equals, bit for bit, the state after a call over rows 0..t alone (the same per-row arithmetic);
 * the kept copies sit at the given stride without touching the gaps between them, and nothing is
 * written for the last row (its point is the state itself). */
static void test_keep_rows(int64_t T, uint64_t seed)
{
    int64_t Hk = 2, Hv = 4, dk = 64, dv = 96, nS = Hv * dk * dv, stride = nS + 37;
    gdn_in in = gdn_make(T, Hk, Hv, dk, dv, 1, seed);
    float *out = falloc((size_t)(T * Hv * dv)), *S = falloc((size_t)nS), *S1 = falloc((size_t)nS);
    float *keep = falloc((size_t)(T * stride));
    for (int64_t i = 0; i < T * stride; i++)
        keep[i] = -7.0f; /* the gaps must keep this */
    memcpy(S, in.S0, sizeof(float) * (size_t)nS);
    hyla_delta_rule_recurrent_fwd_keep(out, S, keep, stride, in.q, in.k, in.v, in.g, in.beta, T, Hk, Hv, dk, dv);
    int bad = 0;
    for (int64_t t = 0; t < T; t++) {
        gdn_in part = in;
        part.T = t + 1;
        run_split(RECURRENT, out, S1, &part, 0);
        bad += !same_bits(t < T - 1 ? keep + t * stride : S, S1, nS);
        for (int64_t i = t < T - 1 ? nS : 0; i < stride; i++)
            bad += keep[t * stride + i] != -7.0f;
    }
    char what[96];
    snprintf(what, sizeof what, "rollback points T=%lld: kept state after row t == a t+1-row call, bit for bit", (long long)T);
    check(what, bad, 0);
    if (!bad)
        printf("  %s\n", what);
    free(out), free(S), free(S1), free(keep);
    gdn_free(&in);
}

/* ---- 3: conv + silu ------------------------------------------------------------------------
 * pre = sum_j w x (K products, K-1 additions): |err| <= K u sum_j |w_j x_j|.
 * silu(p) = p / (1 + expf(-p)) for the computed p: expf (CE u), 1 + e (u), division (u) give
 * relative error <= (CE + 2) u < 4 u; |silu'| <= 1.1 carries the pre error. Below p = -88.7
 * expf overflows and silu returns -0, where the exact value is below 89 e^-88.7 < 2^-120.
 *   |y - y64| <= 1.1 K u sum|w x| + 4 u |y64| + 2^-120. */

static double silu64(double p) { return p / (1.0 + exp(-p)); }

static void test_conv_case(int64_t T, int64_t C_, int64_t K, int with_hist, uint64_t seed)
{
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    float *x = falloc((size_t)(T * C_)), *w = falloc((size_t)(C_ * K));
    float *hist = falloc((size_t)(K * C_)), *y = falloc((size_t)(T * C_));
    float *pre = falloc((size_t)(T * C_));
    for (int64_t i = 0; i < T * C_; i++)
        x[i] = (float)unif(&r, -2.0, 2.0);
    for (int64_t i = 0; i < C_ * K; i++)
        w[i] = (float)unif(&r, -1.0, 1.0);
    for (int64_t i = 0; i < K * C_; i++)
        hist[i] = (float)unif(&r, -2.0, 2.0);
    for (int64_t c = 0; c < C_; c++)
        hist[c] = NAN; /* hist row 0 (the oldest of K) must never be read */
    w[0 * K + K - 1] = 60.0f, w[1 * K + K - 1] = -60.0f; /* channels 0, 1: |pre| up to ~120 */
    hyla_conv_silu_fwd(y, pre, x, w, with_hist ? hist : NULL, T, C_, K);

    double wy = 0.0, wp = 0.0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C_; c++) {
            double p = 0.0, absum = 0.0;
            for (int64_t j = 0; j < K; j++) {
                int64_t s = t - (K - 1) + j;
                double xv = s >= 0 ? x[s * C_ + c] : (with_hist ? hist[(K + s) * C_ + c] : 0.0);
                p += (double)w[c * K + j] * xv;
                absum += fabs((double)w[c * K + j] * xv);
            }
            double y64 = silu64(p);
            double bp = K * U * absum, by = 1.1 * bp + 4.0 * U * fabs(y64) + 0x1p-120;
            double ep = fabs(pre[t * C_ + c] - p), ey = fabs(y[t * C_ + c] - y64);
            wp = fmax(wp, ep / fmax(bp, DBL_MIN));
            wy = fmax(wy, ey / by);
            if (!(ep <= bp) || !(ey <= by))
                wy = fmax(wy, INFINITY);
        }
    char what[96];
    snprintf(what, sizeof what, "conv T=%lld C=%lld K=%lld hist=%d", (long long)T, (long long)C_,
             (long long)K, with_hist);
    check(what, fmax(wp, wy), 1.0);
    printf("  %-44s worst err/bound pre %.3f y %.3f\n", what, wp, wy);
    free(x), free(w), free(hist), free(y), free(pre);
}

/* The one-token step (hyla_conv_silu_step) against hyla_conv_silu_fwd with T = 1 and the window
 * moved on by hand, token after token: the same operations per channel, so bit for bit. C spans
 * several channel blocks and a partial one (and both threads' halves). */
static void test_conv_step(int64_t C_, int64_t K, uint64_t seed)
{
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    float *x = falloc((size_t)C_), *w = falloc((size_t)(C_ * K)), *hist = falloc((size_t)(K * C_));
    float *hist_ref = falloc((size_t)(K * C_)), *y = falloc((size_t)C_), *y_ref = falloc((size_t)C_);
    for (int64_t i = 0; i < C_ * K; i++)
        w[i] = (float)unif(&r, -1.0, 1.0);
    for (int64_t i = 0; i < K * C_; i++)
        hist[i] = hist_ref[i] = (float)unif(&r, -2.0, 2.0);
    int bad = 0;
    for (int step = 0; step < 5; step++) {
        for (int64_t c = 0; c < C_; c++)
            x[c] = (float)unif(&r, -2.0, 2.0);
        hyla_conv_silu_fwd(y_ref, NULL, x, w, hist_ref, 1, C_, K);
        memmove(hist_ref, hist_ref + C_, (size_t)((K - 1) * C_) * sizeof(float));
        memcpy(hist_ref + (K - 1) * C_, x, (size_t)C_ * sizeof(float));
        hyla_conv_silu_step(y, x, w, hist, C_, K);
        bad |= memcmp(y, y_ref, (size_t)C_ * sizeof(float)) != 0;
        bad |= memcmp(hist, hist_ref, (size_t)(K * C_) * sizeof(float)) != 0;
    }
    char what[96];
    snprintf(what, sizeof what, "conv step C=%lld K=%lld == fwd T=1 (5 tokens)", (long long)C_, (long long)K);
    check(what, bad ? INFINITY : 0.0, 0.0);
    printf("  %-44s %s\n", what, bad ? "DIFFERS" : "bit-identical");
    free(x), free(w), free(hist), free(hist_ref), free(y), free(y_ref);
}

/* ---- 4: gates -------------------------------------------------------------------------------
 * s = a + dt_bias rounds (u |s|); softplus has relative condition s sigma(s) / sp(s) <=
 * max(1, |s|); expf (CE u) enters log1pf with condition <= 1; log1pf itself is budgeted at
 * 2 ulp (4 u); expf(A_log) (CE u) and the product (u):
 *   |g - g64| <= |g64| u (max(1, |s|) + 2 CE + 5);   for s > 20: sp = s, |g - g64| <= |g64| 3.01 u
 *   (the float and double s may fall on different sides of 20: |sp(20) - 20| = 2e-9, < u 20).
 * beta = 1 / (1 + expf(-b)): (CE + 2) u < 4 u relative, plus 2^-120 where expf overflows. */

static void test_gates(uint64_t seed)
{
    int64_t n = 64, Hv = 6;
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    float *a = falloc((size_t)(n * Hv)), *b = falloc((size_t)(n * Hv)), *A_log = falloc((size_t)Hv);
    float *dt = falloc((size_t)Hv), *g = falloc((size_t)(n * Hv)), *beta = falloc((size_t)(n * Hv));
    for (int64_t h = 0; h < Hv; h++) {
        A_log[h] = (float)unif(&r, -2.0, 2.0);
        dt[h] = (float)unif(&r, -3.0, 3.0);
    }
    for (int64_t i = 0; i < n * Hv; i++) {
        a[i] = (float)unif(&r, -12.0, 12.0);
        b[i] = (float)unif(&r, -15.0, 15.0);
    }
    /* threshold path: s = a + dt_bias = 25, 100, 1e4 (log1pf(expf(s)) would be inf past 88.7) */
    float big[4] = {25.0f, 100.0f, 1e4f, 19.5f};
    for (int64_t i = 0; i < 4; i++)
        a[i * Hv + 1] = big[i] - dt[1];
    b[5] = -100.0f, b[6] = 100.0f;
    hyla_gdn_gates_fwd(g, beta, a, b, A_log, dt, n, Hv);

    double wg = 0.0, wb = 0.0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < Hv; h++) {
            int64_t ih = i * Hv + h;
            double s = (double)a[ih] + (double)dt[h];
            double sp = s > 20.0 ? s : log1p(exp(s));
            double g64 = -exp((double)A_log[h]) * sp, b64 = 1.0 / (1.0 + exp(-(double)b[ih]));
            double bg = fabs(g64) * U * (fmax(1.0, fabs(s)) + 2.0 * CE + 5.0);
            double bb = 4.0 * U * b64 + 0x1p-120;
            double eg = fabs(g[ih] - g64), eb = fabs(beta[ih] - b64);
            wg = (eg <= bg) ? fmax(wg, eg / bg) : INFINITY;
            wb = (eb <= bb) ? fmax(wb, eb / bb) : INFINITY;
            if (!(eg <= bg) || !(eb <= bb))
                printf("  gates: row %lld head %lld s %.6g g %.9g (f64 %.9g) "
                       "beta %.9g (f64 %.9g)\n",
                       (long long)i, (long long)h, s, g[ih], g64, beta[ih], b64);
        }
    check("gates g", wg, 1.0);
    check("gates beta", wb, 1.0);
    printf("  %-44s worst err/bound g %.3f beta %.3f\n", "gates (incl. softplus threshold)", wg,
           wb);
    free(a), free(b), free(A_log), free(dt), free(g), free(beta);
}

/* ---- 5: thread-count invariance -------------------------------------------------------------- */

static void test_threads(void)
{
    int64_t T = 200, Hk = 2, Hv = 4, dk = 64, dv = 96;
    int64_t nO = T * Hv * dv, nS = Hv * dk * dv;
    int nmax = omp_get_max_threads();
    gdn_in in = gdn_make(T, Hk, Hv, dk, dv, 1, 77);
    gdn_in in1 = gdn_make(T, 1, 1, dk, dv, 1, 78); /* one head: a team larger than the work */
    float *o[2][3], *s[2][3];
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        for (int f = 0; f < 3; f++) {
            const gdn_in *x = f == 2 ? &in1 : &in;
            o[run][f] = falloc((size_t)nO), s[run][f] = falloc((size_t)nS);
            run_split(f == 0 ? RECURRENT : CHUNKED, o[run][f], s[run][f], x, 0);
        }
    }
    omp_set_num_threads(nmax);
    int ok = 1;
    for (int f = 0; f < 3; f++)
        ok &= same_bits(o[0][f], o[1][f], (size_t)nO) && same_bits(s[0][f], s[1][f], (size_t)nS);

    /* conv and gates */
    int64_t Tc = 100, Cc = 300, K = 4;
    hyla_rng r;
    hyla_rng_seed(&r, 79);
    float *x = falloc((size_t)(Tc * Cc)), *w = falloc((size_t)(Cc * K));
    float *hist = falloc((size_t)(K * Cc));
    for (int64_t i = 0; i < Tc * Cc; i++)
        x[i] = (float)unif(&r, -2, 2);
    for (int64_t i = 0; i < Cc * K; i++)
        w[i] = (float)unif(&r, -1, 1);
    for (int64_t i = 0; i < K * Cc; i++)
        hist[i] = (float)unif(&r, -2, 2);
    float *y[2], *gg[2], *bb[2];
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        y[run] = falloc((size_t)(Tc * Cc));
        gg[run] = falloc((size_t)(Tc * Cc)), bb[run] = falloc((size_t)(Tc * Cc));
        hyla_conv_silu_fwd(y[run], NULL, x, w, hist, Tc, Cc, K);
        /* gates on [Tc-1, Cc] rows: a = x, b = x shifted by a row, A_log = w, dt_bias = hist */
        hyla_gdn_gates_fwd(gg[run], bb[run], x, x + Cc, w, hist, Tc - 1, Cc);
    }
    omp_set_num_threads(nmax);
    ok &= same_bits(y[0], y[1], (size_t)(Tc * Cc));
    ok &= same_bits(gg[0], gg[1], (size_t)(Tc * Cc)) && same_bits(bb[0], bb[1], (size_t)(Tc * Cc));
    check("1 vs 2 threads bit-identical (recurrent, chunked, conv, gates)", ok ? 0 : 1, 0);
    printf("  %-44s %s\n", "1 vs 2 threads bit-identical", ok ? "yes" : "NO");
    for (int run = 0; run < 2; run++) {
        for (int f = 0; f < 3; f++)
            free(o[run][f]), free(s[run][f]);
        free(y[run]), free(gg[run]), free(bb[run]);
    }
    free(x), free(w), free(hist);
    gdn_free(&in), gdn_free(&in1);
}

/* ---- 6: timing ------------------------------------------------------------------------------- */

/* matmul FLOPs per chunk and head of the chunked kernel: K K^T and Q K^T (2 C^2 dk each),
 * K S, Q S, K^T X (2 C dk dv each), P X (2 C^2 dv), the triangular solve (C^2 dv) */
static double chunk_flops(int64_t dk, int64_t dv)
{
    return 4.0 * C * C * dk + 3.0 * C * C * dv + 6.0 * C * dk * dv;
}

#ifdef __SANITIZE_ADDRESS__
enum { TIMING_REPS = 1 }; /* sanitizer build: timings are meaningless, keep the run short */
#else
enum { TIMING_REPS = 4 };
#endif

static void timing(void)
{
    int64_t T = 512, Hk = 4, Hv = 8, dk = 128, dv = 128;
    gdn_in in = gdn_make(T, Hk, Hv, dk, dv, 0, 99);
    float *out = falloc((size_t)(T * Hv * dv)), *S = falloc((size_t)(Hv * dk * dv));
    int nmax = omp_get_max_threads();
    double flops = (double)Hv * (double)((T + C - 1) / C) * chunk_flops(dk, dv);
    for (int nt = 1; nt <= nmax && nt <= 2; nt++) {
        omp_set_num_threads(nt);
        float *work = falloc(hyla_delta_rule_chunked_work_floats(Hv, dk, dv));
        double best_c = INFINITY, best_r = INFINITY;
        for (int rep = 0; rep < TIMING_REPS; rep++) {
            memset(S, 0, sizeof(float) * (size_t)(Hv * dk * dv));
            double t0 = omp_get_wtime();
            hyla_delta_rule_chunked_fwd(out, S, in.q, in.k, in.v, in.g, in.beta, T, Hk, Hv, dk, dv,
                                        work);
            best_c = fmin(best_c, omp_get_wtime() - t0);
        }
        for (int rep = 0; rep < TIMING_REPS / 2; rep++) {
            memset(S, 0, sizeof(float) * (size_t)(Hv * dk * dv));
            double t0 = omp_get_wtime();
            hyla_delta_rule_recurrent_fwd(out, S, in.q, in.k, in.v, in.g, in.beta, T, Hk, Hv, dk,
                                          dv);
            best_r = fmin(best_r, omp_get_wtime() - t0);
        }
        printf("  timing T=512 Hk=4 Hv=8 dk=dv=128, %d thread(s): chunked %.3f ms (%.1f GFLOP/s)",
               nt, best_c * 1e3, flops / best_c * 1e-9);
        if (TIMING_REPS >= 2)
            printf(", recurrent %.3f ms", best_r * 1e3);
        printf("\n");
        free(work);
    }
    omp_set_num_threads(nmax);
    free(out), free(S);
    gdn_free(&in);
}

int main(void)
{
    printf("test_gdn_ops: delta rule (chunked vs recurrent vs f64 vs fp32 reference)\n");
    static const int64_t Ts[] = {1, 2, 63, 64, 65, 130, 200};
    /* {Hk, Hv, dk, dv}: GQA with dk != dv; Hk = Hv with odd sizes; the model's 128 x 128 heads
     * (fewer lengths: the float64 and fp32 references dominate the sanitizer build's time) */
    static const int64_t shapes[][4] = {{2, 4, 64, 96}, {3, 3, 20, 36}, {1, 2, 128, 128}};
    uint64_t seed = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            if (si == 2 && Ts[ti] != 1 && Ts[ti] != 65 && Ts[ti] != 200)
                continue;
            for (int state = 0; state < 2; state++)
                test_delta_case(Ts[ti], shapes[si][0], shapes[si][1], shapes[si][2],
                                shapes[si][3], state, seed++);
        }
    printf("test_gdn_ops: continuation\n");
    test_continuation(200, 70, 101);
    test_continuation(200, 64, 102);
    test_continuation(130, 1, 103);
    test_continuation(65, 64, 104);
    test_continuation(63, 62, 105);
    test_keep_rows(1, 106);
    test_keep_rows(5, 107);
    printf("test_gdn_ops: conv + silu, gates\n");
    for (int hist = 0; hist < 2; hist++) {
        test_conv_case(1, 37, 4, hist, 201);
        test_conv_case(3, 37, 4, hist, 202);
        test_conv_case(9, 37, 4, hist, 203);
        test_conv_case(5, 8, 2, hist, 204);
    }
    test_conv_step(6144 + 37, 4, 205);
    test_conv_step(300, 2, 206);
    test_gates(301);
    printf("test_gdn_ops: threads\n");
    test_threads();
    timing();
    if (failures) {
        printf("test_gdn_ops: %d FAILURE(S)\n", failures);
        return 1;
    }
    printf("test_gdn_ops: all passed\n");
    return 0;
}
