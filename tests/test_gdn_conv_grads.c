/* Backward of the Gated DeltaNet's conv + SiLU and gates (spec §8.4-8.5); the delta rule's is
 * test_gdn_grads.c.
 *
 *  1. conv + silu and gates backward vs central finite differences of float64 forwards written
 *     here (parameter gradients accumulate onto non-zero buffers; the softplus threshold, large
 *     |b| and several channel blocks are covered);
 *  2. the conv over a sequence split in two (context parallelism) == the whole: dx bit for bit,
 *     dw within its derived bound.
 * Every check exits non-zero on failure. Inputs are fp32; every reference is float64 evaluated on
 * the same fp32 values, so the only differences are the kernel's rounding and the FD error.
 * The finite differences and their allowance FD: tests/grad_bounds.h.
 *
 * ---- fp32 bounds (first order in u = 2^-24; |error of an n-term sum| <= n u sum|terms|) -------
 * Conv, per channel (pre_t = sum_j w_j x_{t-K+1+j}, Pabs_t = sum_j |w_j x_{t-K+1+j}|):
 *   pre: K u Pabs;  silu'(p) evaluated in fp32 (expf 1.01 u, sigma 3.01 u, 1 - sigma 7.02 u,
 *   then p (1 - sigma), 1 + ., sigma .): <= 14 u (1 + |p|);  |silu''| <= 1/2, |silu'| <= 1.1:
 *     E_t = |dy_t| (K u Pabs_t / 2 + 14 u (1 + |pre_t|)) + 1.1 u |dy_t|        (error of dpre_t)
 *   dx_s = sum_j dpre_{s+K-1-j} w_j:  sum_j |w_j| E + 1.1 K u sum_j |dy w_j|
 *   dw_j = dw0 + sum_t dpre_t x_{t-K+1+j} (double sum, then 2 fp32 roundings):
 *     sum_t |x| E_t + 2 u (|dw0| + 1.1 sum_t |dy x|)
 * Gates (s = fl(a + dt_bias); sigma(s) relative 3.01 u + u |s|; expf 1.01 u; 2 products):
 *   da: (7 + |s|) u |da|;  db = dbeta sigma (1 - sigma), 1 - sigma without cancellation: 13 u |db|
 *   g = -e^A softplus(s) (log1pf(expf) relative (2.01 + |s|) u, above 20 u): (7 + |s|) u |g|
 *   dA_log = dA0 + sum_i dg g: sum_i (7 + |s_i|) u |dg g| + 2 u (|dA0| + sum_i |dg g|)
 *   ddt_bias = dd0 + sum_i da:  sum_i (7 + |s_i|) u |da| + 2 u (|dd0| + sum_i |da|) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/ops.h"

#include "grad_bounds.h"
#include "test_alloc.h"

/* ==== 1. conv + silu ========================================================================== */

static double silu64(double p) { return p / (1.0 + exp(-p)); }

/* loss of channel c: sum_t dy[t,c] silu(pre[t,c]) (zero history); *mag = sum |terms| */
static double conv_loss(const double *x, const double *w, const double *dy, int64_t T, int64_t Cc,
                        int64_t K, int64_t c, double *mag)
{
    double L = 0.0, Lm = 0.0;
    for (int64_t t = 0; t < T; t++) {
        double p = 0.0;
        for (int64_t j = 0; j < K; j++) {
            int64_t s = t - (K - 1) + j;
            if (s >= 0)
                p += w[c * K + j] * x[s * Cc + c];
        }
        double term = dy[t * Cc + c] * silu64(p);
        L += term, Lm += fabs(term);
    }
    if (mag)
        *mag = Lm;
    return L;
}

static void test_conv_case(int64_t T, int64_t Cc, int64_t K, uint64_t seed)
{
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    int64_t nx = T * Cc, nw = Cc * K;
    float *x = falloc((size_t)nx), *w = falloc((size_t)nw), *dy = falloc((size_t)nx);
    float *dx = falloc((size_t)nx), *dw = falloc((size_t)nw), *dw0 = falloc((size_t)nw);
    double *xd = dalloc((size_t)nx), *wd = dalloc((size_t)nw), *dyd = dalloc((size_t)nx);
    double *ref_x = dalloc((size_t)nx), *ref_w = dalloc((size_t)nw);
    double *bx = dalloc((size_t)nx), *bw = dalloc((size_t)nw), *E = dalloc((size_t)nx);
    for (int64_t i = 0; i < nx; i++) {
        xd[i] = x[i] = (float)unif(&r, -3, 3);
        dyd[i] = dy[i] = (float)unif(&r, -1, 1);
    }
    for (int64_t i = 0; i < nw; i++) {
        wd[i] = w[i] = (float)unif(&r, -1, 1);
        dw0[i] = dw[i] = (float)unif(&r, -1, 1);
    }
    fill_nan(dx, (size_t)nx);
    hyla_conv_silu_bwd(dx, dw, dy, x, w, T, Cc, K);

    double Lmag_max = 0.0;
    for (int64_t c = 0; c < Cc; c++) {
        /* FD */
        for (int64_t s = 0; s < T; s++) {
            double *p = &xd[s * Cc + c], x0 = *p, lm;
            *p = x0 + FDH;
            double lp = conv_loss(xd, wd, dyd, T, Cc, K, c, &lm);
            *p = x0 - FDH;
            double ln = conv_loss(xd, wd, dyd, T, Cc, K, c, NULL);
            *p = x0;
            ref_x[s * Cc + c] = (lp - ln) / (2 * FDH);
            Lmag_max = fmax(Lmag_max, lm);
        }
        for (int64_t j = 0; j < K; j++) {
            double *p = &wd[c * K + j], w0 = *p;
            *p = w0 + FDH;
            double lp = conv_loss(xd, wd, dyd, T, Cc, K, c, NULL);
            *p = w0 - FDH;
            double ln = conv_loss(xd, wd, dyd, T, Cc, K, c, NULL);
            *p = w0;
            ref_w[c * K + j] = dw0[c * K + j] + (lp - ln) / (2 * FDH);
        }
        /* bounds (derivation at the top) */
        for (int64_t t = 0; t < T; t++) {
            double pre = 0.0, pabs = 0.0, ady = fabs(dyd[t * Cc + c]);
            for (int64_t j = 0; j < K; j++) {
                int64_t s = t - (K - 1) + j;
                if (s >= 0) {
                    pre += wd[c * K + j] * xd[s * Cc + c];
                    pabs += fabs(wd[c * K + j] * xd[s * Cc + c]);
                }
            }
            E[t * Cc + c] = ady * (K * U * pabs / 2 + 14 * U * (1 + fabs(pre))) + 1.1 * U * ady;
        }
        for (int64_t s = 0; s < T; s++) {
            double b = 0.0;
            for (int64_t j = 0; j < K; j++) {
                int64_t t = s + K - 1 - j;
                if (t < T)
                    b += fabs(wd[c * K + j]) * E[t * Cc + c] +
                         1.1 * K * U * fabs(dyd[t * Cc + c] * wd[c * K + j]);
            }
            bx[s * Cc + c] = b;
        }
        for (int64_t j = 0; j < K; j++) {
            double b = 0.0, sabs = 0.0;
            for (int64_t t = K - 1 - j; t < T; t++) {
                double xs = fabs(xd[(t - (K - 1) + j) * Cc + c]);
                b += xs * E[t * Cc + c];
                sabs += 1.1 * fabs(dyd[t * Cc + c]) * xs;
            }
            bw[c * K + j] = b + 2 * U * (fabs(dw0[c * K + j]) + sabs);
        }
    }
    double fd_abs = 0x1p-50 * Lmag_max / FDH, fd_rel = 1e-8;
    for (int64_t i = 0; i < nx; i++)
        bx[i] += fd_abs + fd_rel * (1 + fabs(ref_x[i]));
    for (int64_t i = 0; i < nw; i++)
        bw[i] += fd_abs + fd_rel * (1 + fabs(ref_w[i]));
    cmp_res rx = compare(dx, ref_x, bx, nx), rw = compare(dw, ref_w, bw, nw);
    char tag[96];
    snprintf(tag, sizeof tag, "conv T=%lld C=%lld K=%lld", (long long)T, (long long)Cc,
             (long long)K);
    printf("  %-34s err/bound dx %.1e dw %.1e | max rel err dx %.1e dw %.1e\n", tag, rx.ratio,
           rw.ratio, rx.rel, rw.rel);
    check(tag, fmax(rx.ratio, rw.ratio));
    free(x), free(w), free(dy), free(dx), free(dw), free(dw0), free(xd), free(wd), free(dyd);
    free(ref_x), free(ref_w), free(bx), free(bw), free(E);
}

/* ==== 1. gates ================================================================================ */

static double softplus64(double s) { return s > 20.0 ? s : log1p(exp(s)); }

static double gate_g(double a, double A_log, double dt) { return -exp(A_log) * softplus64(a + dt); }

static void test_gates(int64_t n, int64_t Hv, uint64_t seed)
{
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    int64_t N = n * Hv;
    float *a = falloc((size_t)N), *b = falloc((size_t)N), *dg = falloc((size_t)N);
    float *dbeta = falloc((size_t)N), *da = falloc((size_t)N), *db = falloc((size_t)N);
    float *A_log = falloc((size_t)Hv), *dt = falloc((size_t)Hv);
    float *dA = falloc((size_t)Hv), *dD = falloc((size_t)Hv), *dA0 = falloc((size_t)Hv),
          *dD0 = falloc((size_t)Hv);
    double *ref_a = dalloc((size_t)N), *ref_b = dalloc((size_t)N), *ba = dalloc((size_t)N),
           *bb = dalloc((size_t)N);
    double *ref_A = dalloc((size_t)Hv), *ref_D = dalloc((size_t)Hv), *bA = dalloc((size_t)Hv),
           *bD = dalloc((size_t)Hv);
    for (int64_t h = 0; h < Hv; h++) {
        A_log[h] = (float)unif(&r, -1, 1.5);
        dt[h] = (float)unif(&r, -1, 1);
        dA0[h] = dA[h] = (float)unif(&r, -1, 1);
        dD0[h] = dD[h] = (float)unif(&r, -1, 1);
    }
    for (int64_t i = 0; i < N; i++) {
        int64_t h = i % Hv;
        double av = unif(&r, -8, 8);
        if (i % 7 == 3)
            av = unif(&r, 20.5, 30) - dt[h]; /* above the softplus threshold */
        if (fabs((double)(float)av + dt[h] - 20.0) < 0.01)
            av += 0.1; /* keep FD off the threshold's kink */
        a[i] = (float)av;
        b[i] = (float)(i % 5 == 2 ? unif(&r, -40, 40) : unif(&r, -6, 6)); /* incl. saturation */
        dg[i] = (float)unif(&r, -1, 1);
        dbeta[i] = (float)unif(&r, -1, 1);
    }
    fill_nan(da, (size_t)N), fill_nan(db, (size_t)N);
    hyla_gdn_gates_bwd(da, db, dA, dD, dg, dbeta, a, b, A_log, dt, n, Hv);

    double maxmag = 0.0;
    for (int64_t h = 0; h < Hv; h++) {
        double sA = 0.0, sD = 0.0, absA = 0.0, absD = 0.0, magA = 0.0;
        for (int64_t i = 0; i < n; i++) {
            int64_t ih = i * Hv + h;
            double s = (double)(float)(a[ih] + dt[h]);
            /* a: only g[ih] depends on it */
            double gp = gate_g(a[ih] + FDH, A_log[h], dt[h]);
            double gn = gate_g(a[ih] - FDH, A_log[h], dt[h]);
            ref_a[ih] = dg[ih] * (gp - gn) / (2 * FDH);
            double bp = 1 / (1 + exp(-(b[ih] + FDH))), bn = 1 / (1 + exp(-(b[ih] - FDH)));
            ref_b[ih] = dbeta[ih] * (bp - bn) / (2 * FDH);
            double g0 = gate_g(a[ih], A_log[h], dt[h]);
            maxmag = fmax(maxmag, fabs(dg[ih] * g0) + fabs(dbeta[ih]));
            ba[ih] = (7 + fabs(s)) * U * fabs(ref_a[ih]);
            bb[ih] = 13 * U * fabs(ref_b[ih]);
            sA += fabs(dg[ih] * g0) * (7 + fabs(s)) * U, absA += fabs(dg[ih] * g0);
            sD += fabs(ref_a[ih]) * (7 + fabs(s)) * U, absD += fabs(ref_a[ih]);
            magA += fabs(dg[ih] * g0);
        }
        /* A_log, dt_bias: every row of head h */
        double lp = 0.0, ln = 0.0, dp = 0.0, dn = 0.0;
        for (int64_t i = 0; i < n; i++) {
            int64_t ih = i * Hv + h;
            lp += dg[ih] * gate_g(a[ih], A_log[h] + FDH, dt[h]);
            ln += dg[ih] * gate_g(a[ih], A_log[h] - FDH, dt[h]);
            dp += dg[ih] * gate_g(a[ih], A_log[h], dt[h] + FDH);
            dn += dg[ih] * gate_g(a[ih], A_log[h], dt[h] - FDH);
        }
        ref_A[h] = dA0[h] + (lp - ln) / (2 * FDH);
        ref_D[h] = dD0[h] + (dp - dn) / (2 * FDH);
        bA[h] = sA + 2 * U * (fabs(dA0[h]) + absA);
        bD[h] = sD + 2 * U * (fabs(dD0[h]) + absD);
        maxmag = fmax(maxmag, magA);
    }
    double fd_abs = 0x1p-50 * maxmag / FDH, fd_rel = 1e-8;
    for (int64_t i = 0; i < N; i++) {
        ba[i] += fd_abs + fd_rel * (1 + fabs(ref_a[i]));
        bb[i] += fd_abs + fd_rel * (1 + fabs(ref_b[i]));
    }
    for (int64_t h = 0; h < Hv; h++) {
        bA[h] += fd_abs + fd_rel * (1 + fabs(ref_A[h]));
        bD[h] += fd_abs + fd_rel * (1 + fabs(ref_D[h]));
    }
    cmp_res ra = compare(da, ref_a, ba, N), rb = compare(db, ref_b, bb, N);
    cmp_res rA = compare(dA, ref_A, bA, Hv), rD = compare(dD, ref_D, bD, Hv);
    printf("  %-34s err/bound da %.1e db %.1e dA_log %.1e ddt_bias %.1e | max rel err %.1e %.1e "
           "%.1e %.1e\n",
           "gates (incl. softplus threshold)", ra.ratio, rb.ratio, rA.ratio, rD.ratio, ra.rel,
           rb.rel, rA.rel, rD.rel);
    check("gates", fmax(fmax(ra.ratio, rb.ratio), fmax(rA.ratio, rD.ratio)));
    free(a), free(b), free(dg), free(dbeta), free(da), free(db), free(A_log), free(dt);
    free(dA), free(dD), free(dA0), free(dD0), free(ref_a), free(ref_b), free(ba), free(bb);
    free(ref_A), free(ref_D), free(bA), free(bD);
}

/* ==== 2. The conv over a sequence split in two (context parallelism, ops.h: hyla_conv_silu_bwd_hist):
 * the later slice reads the K rows before it as history and hands back d_hist, the first taps'
 * part of those rows' dx, which the earlier slice's sums continue: dx == the whole sequence's bit
 * for bit (every row's taps in the one order). dw is a sum over rows, so the two slices' parts
 * rounded apart differ from the whole: each part's double sum rounds once to fp32 and the two
 * add once more, <= 3 u sum|dpre x| per element (u = 2^-24; the double sums' own error is below
 * 2^-40 of that). */
static void test_conv_split(int64_t T0, int64_t T1, int64_t Cc, int64_t K, uint64_t seed)
{
    hyla_rng r;
    hyla_rng_seed(&r, seed);
    int64_t T = T0 + T1, nx = T * Cc, nw = Cc * K;
    float *x = falloc((size_t)nx), *w = falloc((size_t)nw), *dy = falloc((size_t)nx), *dx = falloc((size_t)nx);
    float *dw = falloc((size_t)nw), *dx2 = falloc((size_t)nx), *dw0 = falloc((size_t)nw), *dw1 = falloc((size_t)nw);
    float *dh = falloc((size_t)((K - 1) * Cc)), *pre = falloc((size_t)nx), *y = falloc((size_t)nx);
    for (int64_t i = 0; i < nx; i++)
        x[i] = (float)unif(&r, -3, 3), dy[i] = (float)unif(&r, -1, 1);
    for (int64_t i = 0; i < nw; i++)
        w[i] = (float)unif(&r, -1, 1);
    memset(dw, 0, (size_t)nw * sizeof(float)), memset(dw0, 0, (size_t)nw * sizeof(float));
    memset(dw1, 0, (size_t)nw * sizeof(float));
    hyla_conv_silu_bwd(dx, dw, dy, x, w, T, Cc, K);
    fill_nan(dx2, (size_t)nx);
    const float *hist = x + (T0 - K) * Cc; /* the K rows before the later slice */
    hyla_conv_silu_bwd_hist(dx2 + T0 * Cc, dw1, dh, NULL, dy + T0 * Cc, x + T0 * Cc, w, hist, T1, Cc, K);
    hyla_conv_silu_bwd_hist(dx2, dw0, NULL, dh, dy, x, w, NULL, T0, Cc, K);
    int ok = same_bits(dx, dx2, nx);
    /* the bound on dw: sum_t |dpre_t x_{t-K+1+j}| from the whole sequence's pre (forward) */
    hyla_conv_silu_fwd(y, pre, x, w, NULL, T, Cc, K);
    double worst = 0.0;
    for (int64_t c = 0; c < Cc; c++)
        for (int64_t j = 0; j < K; j++) {
            double mag = 0.0;
            for (int64_t t = K - 1 - j; t < T; t++) {
                double p = pre[t * Cc + c], sg = 1.0 / (1.0 + exp(-p)), dsilu = sg * (1.0 + p * (1.0 - sg));
                mag += fabs(dy[t * Cc + c] * dsilu * x[(t - K + 1 + j) * Cc + c]);
            }
            double err = fabs((double)(dw0[c * K + j] + dw1[c * K + j]) - (double)dw[c * K + j]);
            double bound = 3.0 * 0x1p-24 * mag * 1.01; /* (+1%: dpre itself is the kernel's fp32 value) */
            worst = fmax(worst, err / bound);
            ok = ok && err <= bound;
        }
    printf("  %s conv split at %lld + %lld (C %lld, K %lld): dx == whole bit for bit, dw within %.2f of its bound\n",
           ok ? "ok  " : "FAIL", (long long)T0, (long long)T1, (long long)Cc, (long long)K, worst);
    if (!ok)
        failures++;
    free(x), free(w), free(dy), free(dx), free(dw), free(dx2), free(dw0), free(dw1), free(dh), free(pre), free(y);
}

int main(void)
{
    printf("test_gdn_conv_grads: conv + silu, gates vs finite differences\n");
    test_conv_case(1, 37, 4, 11);
    test_conv_case(3, 37, 4, 12);
    test_conv_case(9, 130, 4, 13);
    test_conv_case(70, 130, 4, 14);
    test_conv_case(6, 70, 2, 15);
    test_gates(64, 5, 21);

    printf("test_gdn_conv_grads: the conv over a sequence split in two (history in, d_hist out)\n");
    test_conv_split(37, 29, 70, 4, 310);
    test_conv_split(4, 5, 9, 4, 311);
    test_conv_split(64, 64, 130, 2, 312);
    if (failures) {
        printf("test_gdn_conv_grads: %d FAILURE(S)\n", failures);
        return 1;
    }
    printf("test_gdn_conv_grads: all passed\n");
    return 0;
}
