/* Core op tests: every fp32 kernel of ops/{norm,activation,rope,attention,moe_route,loss}.c
 * against a straightforward double-precision evaluation written here, plus bitwise
 * thread-count invariance, plus an attention speed report (printed, not asserted).
 *
 * Tolerances are derived, not tuned. u = 2^-24 is the fp32 unit roundoff; a result that goes
 * through m fp32 roundings (each |rel err| <= u) is off by at most ~m u relative; a length-n
 * reduction of terms t_i has |err| <= n u sum|t_i| (gamma_n, first order). glibc's expf/logf
 * are accurate to < 1 ulp (<= 2u relative). The double reference's own error (2^-53 per
 * operation) is below 2^-29 u per step and is ignored except where noted. Every tolerance is
 * stated next to its check. A check fails if |got - ref| > tol or either is NaN.
 *
 * Usage: test_core_ops [ignored]   (tests/run.sh passes the oracle case directory). */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exact_sum.h"
#include "core/exp_nonpos.h"
#include "core/sigmoid.h"
#include "core/rng.h"
#include "ops/ops.h"

#include "op_check.h"

static double silu_d(double z) { return z / (1.0 + exp(-z)); }

/* ---- norms ---------------------------------------------------------------------------- */

static void test_norms(void)
{
    const int64_t n = 24, d = 1000; /* d not a multiple of any vector width */
    const float eps = 1e-6f;
    float *x = falloc(n * d), *w = falloc(d), *z = falloc(n * d), *y = falloc(n * d),
          *y2 = falloc(n * d), *rstd = falloc(n);
    fill_normal(x, n * d, 1.0);
    for (int64_t i = 0; i < n; i++) /* row scales 1e-3 .. 1e3 */
        for (int64_t j = 0; j < d; j++)
            x[i * d + j] *= (float)pow(10.0, -3.0 + 6.0 * (double)i / (double)(n - 1));
    fill_normal(w, d, 0.1);
    fill_normal(z, n * d, 4.0);

    /* RMSNorm1p. Roundings: rstd (1, the double sum of squares is exact to d 2^-53), x*rstd,
     * 1+w, the product: 4 -> |err| <= 4u |y| (+u slack for the double steps): tol 5u|y|.
     * rstd itself: one rounding -> tol u |rstd| (1 + 2^-29 d) ~ 1.0001 u |rstd|. */
    hyla_rmsnorm1p_fwd(y, rstd, x, w, n, d, eps);
    chk c = chk_begin("rmsnorm1p y"), cr = chk_begin("rmsnorm1p rstd");
    for (int64_t i = 0; i < n; i++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        double r = 1.0 / sqrt(ss / d + eps);
        chk_val(&cr, rstd[i], r, 1.0001 * U * r);
        for (int64_t j = 0; j < d; j++) {
            double ref = x[i * d + j] * r * (1.0 + w[j]);
            chk_val(&c, y[i * d + j], ref, 5 * U * fabs(ref));
        }
    }
    chk_end(&c);
    chk_end(&cr);
    memcpy(y2, x, (size_t)(n * d) * sizeof *x); /* y aliasing x: same bits as out of place */
    hyla_rmsnorm1p_fwd(y2, NULL, y2, w, n, d, eps);
    expect(memcmp(y, y2, (size_t)(n * d) * sizeof *y) == 0, "rmsnorm1p in place == out of place");

    /* Gated RMSNorm. Roundings: rstd, x*rstd, w*(.), silu (expf 2u, 1+e u, z/(1+e) u; the
     * relative error of e passes through 1+e with factor e/(1+e) <= 1), final product:
     * 3 + 4 + 1 = 8 -> tol 10u|y|. Underflow: silu(z) for z < -87 flushes to -0 while the true
     * value is < 1e-36 in magnitude: absolute floor 1e-30 (|w x rstd| < 1e6 here). */
    hyla_gated_rmsnorm_fwd(y, rstd, x, z, w, n, d, eps);
    c = chk_begin("gated rmsnorm y");
    for (int64_t i = 0; i < n; i++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        double r = 1.0 / sqrt(ss / d + eps);
        for (int64_t j = 0; j < d; j++) {
            double ref = w[j] * (x[i * d + j] * r) * silu_d(z[i * d + j]);
            chk_val(&c, y[i * d + j], ref, 10 * U * fabs(ref) + 1e-30);
        }
    }
    chk_end(&c);

    /* L2 norm with scale. Roundings: rstd, x*rstd, *scale: 3 -> tol 4u|y|. */
    const float scale = (float)(1.0 / sqrt(128.0));
    hyla_l2norm_fwd(y, rstd, x, n, d, 1e-6f, scale);
    c = chk_begin("l2norm y (scale 1/sqrt(128))");
    for (int64_t i = 0; i < n; i++) {
        double ss = 0;
        for (int64_t j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        double r = 1.0 / sqrt(ss + 1e-6);
        for (int64_t j = 0; j < d; j++) {
            double ref = x[i * d + j] * r * (double)scale;
            chk_val(&c, y[i * d + j], ref, 4 * U * fabs(ref));
        }
    }
    chk_end(&c);
    memcpy(y2, x, (size_t)(n * d) * sizeof *x);
    hyla_l2norm_fwd(y2, NULL, y2, n, d, 1e-6f, scale);
    expect(memcmp(y, y2, (size_t)(n * d) * sizeof *y) == 0, "l2norm in place == out of place");
    free(x), free(w), free(z), free(y), free(y2), free(rstd);
}

/* ---- SwiGLU --------------------------------------------------------------------------- */

static void test_swiglu(void)
{
    const int64_t n = 7, I = 333;
    float *g = falloc(n * I), *u = falloc(n * I), *h = falloc(n * I);
    fill_normal(g, n * I, 4.0);
    fill_normal(u, n * I, 4.0);
    hyla_swiglu_fwd(h, g, u, n, I);
    /* silu = g sigmoid(g) (core/sigmoid.h): exp of -|g| (1u), 1+e (u), reciprocal (u), e * r
     * for g < 0 (u), *g (u), then *up (u): 6 roundings -> tol 7u|h|; floor 1e-30 for silu
     * underflow (|g| > 87, |up| < 40 here). */
    chk c = chk_begin("swiglu");
    for (int64_t i = 0; i < n * I; i++) {
        double ref = silu_d(g[i]) * u[i];
        chk_val(&c, h[i], ref, 7 * U * fabs(ref) + 1e-30);
    }
    chk_end(&c);
    free(g), free(u), free(h);
}

/* ---- RoPE ----------------------------------------------------------------------------- */

/* Distance in ulps between two finite floats of the same sign. */
static long ulp_dist(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return labs((long)ia - (long)ib);
}

static void test_rope(void)
{
    /* (1) Golden values from HF (torch 2, fp32): inv_freq = 1/(1e7 ** (arange(0,64,2)/64)),
     * freqs = inv_freq @ pos, .cos()/.sin(). Both sides take cos/sin of the same fp32 angle,
     * HF's fp32 cos/sin within 1 ulp, ours correctly rounded (double, then one rounding): they
     * may differ by at most 1 ulp. Computing the angle in double instead would move cos by
     * ~1e-2 at p = 1e5. */
    static const struct { int64_t pos; int i; float c, s; } gold[] = {
        {99999, 0, -0x1.050e62p-1f, 0x1.b87276p-1f},   {99999, 1, -0x1.c1354ep-1f, -0x1.eb595ep-2f},
        {99999, 9, 0x1.f8672ap-1f, 0x1.5f7db8p-3f},    {99999, 31, 0x1.ffee0ep-1f, 0x1.0f1c34p-6f},
        {100000, 0, -0x1.ffac38p-1f, 0x1.24daaap-5f},  {100000, 1, -0x1.cea1b6p-2f, -0x1.c8c49ap-1f},
        {100000, 9, 0x1.f76e12p-1f, 0x1.7524dap-3f},   {100000, 31, 0x1.ffee0ep-1f, 0x1.0f1ce6p-6f},
    };
    enum { NG = sizeof gold / sizeof gold[0] };
    int64_t gpos[NG];
    float gc[NG * 32], gs[NG * 32];
    for (int g = 0; g < NG; g++)
        gpos[g] = gold[g].pos;
    hyla_rope_table(gc, gs, gpos, NG, 64, 1e7);
    long worst = 0;
    for (int g = 0; g < NG; g++) {
        long dc = ulp_dist(gc[g * 32 + gold[g].i], gold[g].c);
        long ds = ulp_dist(gs[g * 32 + gold[g].i], gold[g].s);
        worst = dc > worst ? dc : worst;
        worst = ds > worst ? ds : worst;
    }
    printf("rope table vs HF fp32 golden: max %ld ulp\n", worst);
    expect(worst <= 1, "rope table vs HF fp32 golden (<= 1 ulp)");

    /* (2) Against exact double cos(p theta^(-2i/R)). The fp32 recipe perturbs the angle a:
     * e = fl(2i/R) (rel u, which scales theta^e by e ln(theta) u), powf, 1/x and p*inv_freq
     * (u each; p < 2^24 is exact): |da| <= |a| (e ln(theta) + 3) u; then cos/sin are
     * 1-Lipschitz and rounded once: tol = |a| (e ln(theta) + 3) u * 1.01 + u. */
    const int64_t R = 64, half = R / 2, np = 9;
    const double theta = 1e7;
    int64_t pos[9] = {0, 1, 2, 17, 255, 4096, 32767, 99999, 100000};
    float *ct = falloc(np * half), *st = falloc(np * half);
    hyla_rope_table(ct, st, pos, np, R, theta);
    chk c = chk_begin("rope table vs exact (theta 1e7, p <= 1e5)");
    for (int64_t t = 0; t < np; t++)
        for (int64_t i = 0; i < half; i++) {
            double e = 2.0 * i / R, a = pos[t] * pow(theta, -e);
            double tol = fabs(a) * (e * log(theta) + 3) * U * 1.01 + U;
            chk_val(&c, ct[t * half + i], cos(a), tol);
            chk_val(&c, st[t * half + i], sin(a), tol);
        }
    chk_end(&c);

    /* (3) Application: out[i] = x1 c - x2 s, out[i+R/2] = x2 c + x1 s with the table's fp32
     * c, s as exact inputs: two products and a sum, gamma_2 = 2u/(1-2u) relative to
     * |x1 c| + |x2 s|. Dims R..hd must pass through bit-exact. Partial (R=32 of hd=48) and
     * full (R = hd = 16). */
    const int64_t cfgs[2][3] = {{48, 32, 3}, {16, 16, 2}}; /* hd, R, heads */
    for (int cf = 0; cf < 2; cf++) {
        int64_t hd = cfgs[cf][0], Rr = cfgs[cf][1], H = cfgs[cf][2], hr = Rr / 2;
        float *x = falloc(np * H * hd), *x0 = falloc(np * H * hd);
        float *c2 = falloc(np * hr), *s2 = falloc(np * hr);
        fill_normal(x0, np * H * hd, 1.0);
        memcpy(x, x0, (size_t)(np * H * hd) * sizeof *x);
        hyla_rope_table(c2, s2, pos, np, Rr, theta);
        hyla_rope_fwd(x, c2, s2, np, H, hd, Rr);
        chk ca = chk_begin(cf == 0 ? "rope apply (R=32 < hd=48)" : "rope apply (R = hd = 16)");
        int pass_ok = 1;
        const double g2 = 2 * U / (1 - 2 * U);
        for (int64_t t = 0; t < np; t++)
            for (int64_t h = 0; h < H; h++) {
                const float *a = x0 + (t * H + h) * hd, *o = x + (t * H + h) * hd;
                for (int64_t i = 0; i < hr; i++) {
                    double cc = c2[t * hr + i], ss = s2[t * hr + i];
                    double x1 = a[i], x2 = a[i + hr];
                    chk_val(&ca, o[i], x1 * cc - x2 * ss, g2 * (fabs(x1 * cc) + fabs(x2 * ss)));
                    chk_val(&ca, o[i + hr], x2 * cc + x1 * ss, g2 * (fabs(x2 * cc) + fabs(x1 * ss)));
                }
                pass_ok &= memcmp(o + Rr, a + Rr, (size_t)(hd - Rr) * sizeof *o) == 0;
            }
        chk_end(&ca);
        expect(pass_ok, "rope pass-through dims unchanged");
        free(x), free(x0), free(c2), free(s2);
    }
    free(ct), free(st);
}

/* ---- attention ------------------------------------------------------------------------ */

/* Double-precision causal GQA attention; out [T,Hq,hd], lse [T,Hq]. Also returns per (t,h)
 * A = scale max_j sum_d |q_d k_jd| (score conditioning) and vmax = max_j,d |v| over the
 * visible keys, for the tolerance. */
static void attention_ref(double *out, double *lse, double *A, double *vmax, const float *q,
                          const float *k, const float *v, int64_t T, int64_t past, int64_t Hq,
                          int64_t Hkv, int64_t hd, double scale)
{
    int64_t S = past + T, r = Hq / Hkv;
    double *s = malloc((size_t)S * sizeof *s);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            const float *qt = q + (t * Hq + h) * hd;
            int64_t g = h / r, nv = past + t + 1;
            double mx = -INFINITY, a = 0, vm = 0;
            for (int64_t j = 0; j < nv; j++) {
                const float *kj = k + (j * Hkv + g) * hd;
                double dot = 0, ab = 0;
                for (int64_t d = 0; d < hd; d++) {
                    dot += (double)qt[d] * kj[d];
                    ab += fabs((double)qt[d] * kj[d]);
                }
                s[j] = dot * scale;
                mx = s[j] > mx ? s[j] : mx;
                a = ab * scale > a ? ab * scale : a;
                for (int64_t d = 0; d < hd; d++)
                    vm = fabs(v[(j * Hkv + g) * hd + d]) > vm ? fabs(v[(j * Hkv + g) * hd + d]) : vm;
            }
            double l = 0;
            for (int64_t j = 0; j < nv; j++)
                l += exp(s[j] - mx);
            double *o = out + (t * Hq + h) * hd;
            for (int64_t d = 0; d < hd; d++) {
                double acc = 0;
                for (int64_t j = 0; j < nv; j++)
                    acc += exp(s[j] - mx) * v[(j * Hkv + g) * hd + d];
                o[d] = acc / l;
            }
            lse[t * Hq + h] = mx + log(l);
            A[t * Hq + h] = a;
            vmax[t * Hq + h] = vm;
        }
    free(s);
}

static void test_attention_case(int64_t T, int64_t past, int64_t Hq, int64_t Hkv, int64_t hd,
                                double qk_amp)
{
    int64_t S = past + T;
    float scale = (float)(1.0 / sqrt((double)hd));
    float *q = falloc(T * Hq * hd), *k = falloc(S * Hkv * hd), *v = falloc(S * Hkv * hd);
    float *out = falloc(T * Hq * hd), *out2 = falloc(T * Hq * hd), *lse = falloc(T * Hq);
    float *work = falloc(hyla_attention_work_floats(S));
    double *ro = malloc((size_t)(T * Hq * hd) * sizeof *ro), *rl = malloc((size_t)(T * Hq) * sizeof *rl);
    double *A = malloc((size_t)(T * Hq) * sizeof *A), *vm = malloc((size_t)(T * Hq) * sizeof *vm);
    fill_uniform(q, T * Hq * hd, qk_amp);
    fill_uniform(k, S * Hkv * hd, qk_amp);
    fill_normal(v, S * Hkv * hd, 1.0);
    hyla_attention_fwd(out, lse, q, k, v, T, past, Hq, Hkv, hd, scale, work);
    attention_ref(ro, rl, A, vm, q, k, v, T, past, Hq, Hkv, hd, scale);

    /* Per (t,h), with S keys visible at most, nb = ceil(S/64) key blocks, A and vmax above.
     * The kernel's exp (att_exp) is within 1.02 ulp <= 2.04u relative: count 3u.
     *  score error   ds <= (hd + 1) u A              (length-hd fma dot, then *scale)
     *  weight error  each unnormalised weight exp(s_j - m) is off relatively by
     *                ew <= ds + 2A u + 3u            (ds; rounding of s_j - m, |s_j - m| <= 2A; exp)
     *                     + nb (2A + 5) u            (online rescaling: per block corr = exp(m_old
     *                                                 - m_new) with the same error terms, and one
     *                                                 rounding of l*corr and of o*corr)
     *  out = sum_j p_j v_j / sum_j p_j: a relative weight error ew moves out by <= 2 ew vmax
     *  (numerator and denominator); the fp32 sums of <= S terms add S u vmax each (P.V, l);
     *  the final 1/l and product 2u vmax:
     *                tol_out = vmax u (2 (ew/u) + 2 S + 2)
     *  lse = m + log(l): tol_lse = ew + S u + 2u (logf) + u |lse| (final add).
     * For hd = 128, |q|,|k| <= 1: A ~ 3, tol_out ~ 1e-4 vmax; a wrong mask, GQA map or scale
     * moves out by >= ~1/S ~ 1e-2. */
    chk co = chk_begin("attention out"), cl = chk_begin("attention lse");
    int64_t nb = (S + 63) / 64;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            double a = A[t * Hq + h], ew_u = (hd + 1) * a + 2 * a + 3 + nb * (2 * a + 5);
            double tol_o = vm[t * Hq + h] * U * (2 * ew_u + 2 * S + 2);
            double tol_l = U * (ew_u + S + 2 + fabs(rl[t * Hq + h]));
            for (int64_t d = 0; d < hd; d++)
                chk_val(&co, out[(t * Hq + h) * hd + d], ro[(t * Hq + h) * hd + d], tol_o);
            chk_val(&cl, lse[t * Hq + h], rl[t * Hq + h], tol_l);
        }
    char name[96];
    snprintf(name, sizeof name, "attention T=%ld past=%ld Hq=%ld Hkv=%ld hd=%ld out", (long)T,
             (long)past, (long)Hq, (long)Hkv, (long)hd);
    co.name = name;
    chk_end(&co);
    snprintf(name, sizeof name, "attention T=%ld past=%ld Hq=%ld Hkv=%ld hd=%ld lse", (long)T,
             (long)past, (long)Hq, (long)Hkv, (long)hd);
    cl.name = name;
    chk_end(&cl);
    /* lse = NULL must not change out */
    hyla_attention_fwd(out2, NULL, q, k, v, T, past, Hq, Hkv, hd, scale, work);
    if (memcmp(out, out2, (size_t)(T * Hq * hd) * sizeof *out) != 0)
        expect(0, "attention out with lse=NULL identical");
    free(q), free(k), free(v), free(out), free(out2), free(lse), free(work);
    free(ro), free(rl), free(A), free(vm);
}

static void test_attention(void)
{
    /* T, past, Hq, Hkv, hd, |q|,|k| amplitude. Covers T in {1,5,64,100}, past > 0, Hq/Hkv in
     * {1,2,4} (and 8, 3), hd not a multiple of the vector width (20, 72), Qwen's 256, several
     * key blocks, row blocks that end mid-position. */
    static const struct { int64_t T, past, Hq, Hkv, hd; double amp; } cases[] = {
        {1, 0, 2, 2, 64, 1.0},    {1, 150, 4, 1, 128, 1.0}, {5, 0, 4, 2, 20, 2.0},
        {5, 3, 2, 1, 128, 1.0},   {64, 0, 8, 2, 128, 1.0},  {64, 64, 4, 4, 256, 0.5},
        {100, 0, 4, 1, 72, 1.5},  {100, 37, 8, 4, 128, 1.0},
        {7, 20, 16, 2, 64, 1.0},  {33, 5, 3, 1, 32, 1.0}, /* Qwen3-Next's r = 8; r = 3 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_attention_case(cases[i].T, cases[i].past, cases[i].Hq, cases[i].Hkv, cases[i].hd,
                            cases[i].amp);
}

/* ---- MoE routing ---------------------------------------------------------------------- */

static const float *cmp_p;
static int cmp_desc_idx(const void *a, const void *b) /* prob descending, index ascending */
{
    int ia = *(const int *)a, ib = *(const int *)b;
    if (cmp_p[ia] != cmp_p[ib])
        return cmp_p[ia] > cmp_p[ib] ? -1 : 1;
    return ia - ib;
}

static void test_moe_route_case(int64_t n, int64_t E, int64_t k, int renorm)
{
    float *lg = falloc(n * E), *p = falloc(n * E), *w = falloc(n * k);
    int32_t *idx = malloc((size_t)(n * k) * sizeof *idx);
    int *ord = malloc((size_t)E * sizeof *ord);
    fill_normal(lg, n * E, 2.0);
    /* row 0: deliberate ties, 3 and 7 tie at the max, 20 and 5 tie below -> 3, 7, 5, 20 */
    lg[3] = lg[7] = 10.0f;
    lg[20] = lg[5] = 9.0f;
    for (int64_t e = 0; e < E; e++) /* row 1: all equal -> 0, 1, ..., k-1 */
        lg[E + e] = 0.25f;
    lg[2 * E + 1] = 1e4f; /* row 2: one dominant logit (stability) */
    hyla_moe_route_fwd(idx, w, p, lg, n, E, k, renorm);

    /* probs: exp argument l - mx rounded (rel u |l - mx| <= D u, D = max_e |l_e - mx|), expf
     * (2u), sum in double (error negligible, but it carries the terms' errors: (D + 2)u),
     * final rounding u: tol_p = p (2D + 5) u.  Renormed weights p / sum(top p): twice the
     * probs' error plus one rounding: tol_w = w (4D + 11) u; without renorm w must equal
     * probs[idx] bit for bit. Indices must equal the (desc, index asc) sort of the returned
     * probs exactly. */
    chk cp = chk_begin(renorm ? "moe route probs (renorm)" : "moe route probs (no renorm)");
    chk cw = chk_begin(renorm ? "moe route top_w (renorm)" : "moe route top_w (no renorm)");
    int idx_ok = 1, w_exact = 1;
    for (int64_t i = 0; i < n; i++) {
        const float *l = lg + i * E;
        double mx = -INFINITY, D = 0, sum = 0;
        for (int64_t e = 0; e < E; e++)
            mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) {
            D = fabs(l[e] - mx) > D ? fabs(l[e] - mx) : D;
            sum += exp(l[e] - mx);
        }
        for (int64_t e = 0; e < E; e++) {
            double ref = exp(l[e] - mx) / sum;
            chk_val(&cp, p[i * E + e], ref, ref * (2 * D + 5) * U);
        }
        for (int e = 0; e < E; e++)
            ord[e] = e;
        cmp_p = p + i * E;
        qsort(ord, (size_t)E, sizeof *ord, cmp_desc_idx);
        double tsum = 0;
        for (int64_t s = 0; s < k; s++) {
            idx_ok &= idx[i * k + s] == ord[s];
            tsum += exp(l[ord[s]] - mx) / sum;
        }
        for (int64_t s = 0; s < k; s++) {
            double pr = exp(l[ord[s]] - mx) / sum;
            if (renorm)
                chk_val(&cw, w[i * k + s], pr / tsum, pr / tsum * (4 * D + 11) * U);
            else
                w_exact &= w[i * k + s] == p[i * E + ord[s]];
        }
    }
    int ties_ok = idx[0] == 3 && idx[1] == 7 && idx[2] == 5 && idx[3] == 20;
    for (int64_t s = 0; s < k; s++)
        ties_ok &= idx[k + s] == s;
    ties_ok &= idx[2 * k] == 1;
    chk_end(&cp);
    if (renorm)
        chk_end(&cw);
    else
        expect(w_exact, "moe route top_w == probs[idx] (no renorm)");
    expect(idx_ok, "moe route top_idx == sorted order");
    expect(ties_ok, "moe route ties to the lower index");
    free(lg), free(p), free(w), free(idx), free(ord);
}

/* ---- losses --------------------------------------------------------------------------- */

static void test_cross_entropy(void)
{
    const int64_t n = 37, V = 1000;
    float *lg = falloc(n * V);
    int32_t lab[37];
    fill_normal(lg, n * V, 3.0);
    for (int64_t j = 0; j < V; j++) /* row 4: large offset (stability) */
        lg[4 * V + j] += 1000.0f;
    for (int64_t i = 0; i < n; i++)
        lab[i] = (int32_t)(hyla_rng_next(&rng) % (uint64_t)V);
    lab[0] = -100, lab[5] = -1, lab[17] = -100, lab[36] = -100; /* ignored */
    int64_t cnt = -1;
    double got = hyla_cross_entropy_fwd(lg, lab, n, V, &cnt);

    /* Per row, -logp = mx + log(sum exp(l - mx)) - l[y]: the exp arguments are rounded
     * (rel u |l - mx| <= D_i u) and expf adds 2u, so the double sum is off relatively by
     * (D_i + 2)u and its log absolutely by the same; the double adds cost 2^-53 (|mx| + |l_y|
     * + |log sum|) each (4 of them). Summed over rows. */
    double ref = 0, tol = 0;
    int64_t rcnt = 0;
    for (int64_t i = 0; i < n; i++) {
        if (lab[i] < 0)
            continue;
        const float *l = lg + i * V;
        double mx = -INFINITY, D = 0, s = 0;
        for (int64_t j = 0; j < V; j++)
            mx = l[j] > mx ? l[j] : mx;
        for (int64_t j = 0; j < V; j++) {
            s += exp(l[j] - mx);
            D = fabs(l[j] - mx) > D ? fabs(l[j] - mx) : D;
        }
        ref += mx + log(s) - l[lab[i]];
        tol += (D + 2) * U + 4 * 0x1p-53 * (fabs(mx) + fabs(l[lab[i]]) + log(s));
        rcnt++;
    }
    chk c = chk_begin("cross entropy sum");
    chk_val(&c, got, ref, tol);
    chk_end(&c);
    expect(cnt == rcnt, "cross entropy count (ignored labels < 0)");
    free(lg);
}

/* core/exp_nonpos.h against the double exp: every 331st float of [-104, 0] (3.5 million
 * arguments, subnormal results included: an ulp there is the subnormal spacing 2^-149), and its
 * edges. Evaluated in double within 1e-11 relative and rounded once, it is the correctly rounded
 * value but within 1e-11 of a rounding tie: at most 0.5 ulp + 1e-4. */
static void test_exp_nonpos(void)
{
    double worst = 0;
    float at = 0;
    int64_t n = 0;
    for (float x = HYLA_EXP_NONPOS_MIN; x <= 0.0f; n++) {
        double ref = exp((double)x), ulp = ref < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb(ref) - 23);
        double err = fabs((double)hyla_exp_nonpos(x) - ref) / ulp;
        if (err > worst)
            worst = err, at = x;
        for (int s = 0; s < 331 && x <= 0.0f; s++)
            x = nextafterf(x, 1.0f);
    }
    expect(worst <= 0.5 + 1e-4, "exp_nonpos: correctly rounded (<= 0.5 ulp + 1e-4) against the double exp");
    expect(hyla_exp_nonpos(0.0f) == 1.0f && hyla_exp_nonpos(-0.0f) == 1.0f, "exp_nonpos(0) == 1");
    expect(hyla_exp_nonpos(-104.5f) == 0.0f && hyla_exp_nonpos(-INFINITY) == 0.0f, "exp_nonpos below -104 == 0");
    expect(isnan(hyla_exp_nonpos(NAN)), "exp_nonpos(NaN) is NaN");
    /* the logistic function from it: within 0.5 ulp + 1e-4 of 1 / (1 + exp(-x)) in double */
    double worst_s = 0;
    for (float x = -110.0f; x <= 110.0f; x += 0.0137f) {
        float s, om;
        hyla_sigmoid_pair(x, &s, &om);
        double ref = 1.0 / (1.0 + exp(-(double)x)), ref_om = 1.0 / (1.0 + exp((double)x));
        double e1 = ref > 0 ? fabs(s - ref) / (ref < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb(ref) - 23)) : fabs(s);
        double e2 = ref_om > 0 ? fabs(om - ref_om) / (ref_om < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb(ref_om) - 23)) : fabs(om);
        worst_s = fmax(worst_s, fmax(e1, e2));
    }
    expect(worst_s <= 0.5 + 1e-4, "sigmoid pair: sigma and 1 - sigma within 0.5 ulp + 1e-4");
    float s_nan, om_nan;
    hyla_sigmoid_pair(NAN, &s_nan, &om_nan);
    expect(isnan(s_nan) && isnan(om_nan) && hyla_sigmoid(200.0f) == 1.0f && hyla_sigmoid(-200.0f) == 0.0f,
           "sigmoid: NaN stays NaN, saturates to 1 and 0");
    printf("  exp_nonpos: %lld arguments in [-104, 0], worst %.4f ulp (at %g); sigmoid pair worst %.4f ulp\n",
           (long long)n, worst, at, worst_s);
}

static void test_aux_loss(void)
{
    /* Three "layers" of routing streamed into counts/psum, against the direct formula over the
     * concatenated rows: f[s,e] = mean_rows 1[idx[row,s] = e], Pbar[e] = mean_rows probs,
     * aux = E sum_{s,e} f[s,e] Pbar[e]. Both in double over nonnegative terms, so each side is
     * within (#operations) 2^-53 relative: tol = (N k + 3E + 16) 2^-53 |aux| for N rows. */
    enum { L = 3, N1 = 20, E = 16, K = 4 };
    float *lg = falloc(L * N1 * E), *p = falloc(L * N1 * E), *w = falloc(L * N1 * K);
    int32_t *idx = malloc(L * N1 * K * sizeof *idx);
    double counts[E] = {0}, psum[E] = {0};
    fill_normal(lg, L * N1 * E, 1.5);
    for (int l = 0; l < L; l++) {
        hyla_moe_route_fwd(idx + l * N1 * K, w + l * N1 * K, p + l * N1 * E, lg + l * N1 * E, N1,
                           E, K, 1);
        hyla_aux_loss_accumulate(counts, psum, idx + l * N1 * K, p + l * N1 * E, N1, E, K);
    }
    double got = hyla_aux_loss_finish(counts, psum, L * N1, E);
    const int Nt = L * N1;
    double ref = 0;
    for (int s = 0; s < K; s++)
        for (int e = 0; e < E; e++) {
            double f = 0, pb = 0;
            for (int r = 0; r < Nt; r++) {
                f += idx[r * K + s] == e;
                pb += p[r * E + e];
            }
            ref += (f / Nt) * (pb / Nt);
        }
    ref *= E;
    chk c = chk_begin("aux loss (3 layers streamed)");
    chk_val(&c, got, ref, (Nt * K + 3 * E + 16) * 0x1p-53 * fabs(ref));
    chk_end(&c);
    free(lg), free(p), free(w), free(idx);
}

/* ---- thread invariance ---------------------------------------------------------------- */

static void test_threads(int max_threads)
{
    const int64_t T = 100, past = 37, Hq = 8, Hkv = 2, hd = 128, S = past + T;
    const int64_t n = 64, d = 1000, V = 500;
    float *q = falloc(T * Hq * hd), *k = falloc(S * Hkv * hd), *v = falloc(S * Hkv * hd);
    float *x = falloc(n * d), *w = falloc(d), *lg = falloc(n * V);
    float *o[3], *ol[3], *y[3];
    float *work = falloc(hyla_attention_work_floats(S));
    double ce[3];
    int32_t lab[64];
    fill_uniform(q, T * Hq * hd, 1.0);
    fill_uniform(k, S * Hkv * hd, 1.0);
    fill_normal(v, S * Hkv * hd, 1.0);
    fill_normal(x, n * d, 1.0);
    fill_normal(w, d, 0.1);
    fill_normal(lg, n * V, 2.0);
    for (int64_t i = 0; i < n; i++)
        lab[i] = i % 7 == 3 ? -100 : (int32_t)((i * 37) % V);
    const int nth[3] = {1, 2, 3};
    for (int c = 0; c < 3; c++) {
        omp_set_num_threads(nth[c]);
        o[c] = falloc(T * Hq * hd), ol[c] = falloc(T * Hq), y[c] = falloc(n * d);
        hyla_attention_fwd(o[c], ol[c], q, k, v, T, past, Hq, Hkv, hd, 0.0884f, work);
        hyla_rmsnorm1p_fwd(y[c], NULL, x, w, n, d, 1e-6f);
        ce[c] = hyla_cross_entropy_fwd(lg, lab, n, V, NULL);
    }
    omp_set_num_threads(max_threads);
    int ok_a = 1, ok_r = 1, ok_c = 1;
    for (int c = 1; c < 3; c++) {
        ok_a &= memcmp(o[0], o[c], (size_t)(T * Hq * hd) * sizeof(float)) == 0 &&
                memcmp(ol[0], ol[c], (size_t)(T * Hq) * sizeof(float)) == 0;
        ok_r &= memcmp(y[0], y[c], (size_t)(n * d) * sizeof(float)) == 0;
        ok_c &= memcmp(&ce[0], &ce[c], sizeof(double)) == 0;
    }
    expect(ok_a, "threads 1/2/3 bit-identical: attention");
    expect(ok_r, "threads 1/2/3 bit-identical: rmsnorm1p");
    expect(ok_c, "threads 1/2/3 bit-identical: cross entropy");
    for (int c = 0; c < 3; c++)
        free(o[c]), free(ol[c]), free(y[c]);
    free(q), free(k), free(v), free(x), free(w), free(lg), free(work);
}

/* ---- speed (report only) -------------------------------------------------------------- */

static void bench_attention(void)
{
    const int64_t T = 512, Hq = 8, Hkv = 2, hd = 128;
#if defined(__SANITIZE_ADDRESS__)
    const int reps = 1;
#else
    const int reps = 5;
#endif
    float *q = falloc(T * Hq * hd), *k = falloc(T * Hkv * hd), *v = falloc(T * Hkv * hd);
    float *o = falloc(T * Hq * hd), *l = falloc(T * Hq), *work = falloc(hyla_attention_work_floats(T));
    fill_uniform(q, T * Hq * hd, 1.0);
    fill_uniform(k, T * Hkv * hd, 1.0);
    fill_normal(v, T * Hkv * hd, 1.0);
    float scale = (float)(1.0 / sqrt((double)hd));
    hyla_attention_fwd(o, l, q, k, v, T, 0, Hq, Hkv, hd, scale, work); /* warm-up */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        hyla_attention_fwd(o, l, q, k, v, T, 0, Hq, Hkv, hd, scale, work);
        double dt = omp_get_wtime() - t0;
        best = dt < best ? dt : best;
    }
    double flops = 2.0 * 2.0 * (double)T * (double)T / 2.0 * (double)hd * (double)Hq;
    printf("attention speed T=%ld Hq=%ld Hkv=%ld hd=%ld causal, %d threads: %.2f ms, %.1f GFLOP/s\n",
           (long)T, (long)Hq, (long)Hkv, (long)hd, omp_get_max_threads(), best * 1e3,
           flops / best * 1e-9);
    free(q), free(k), free(v), free(o), free(l), free(work);
}

/* core/exact_sum.h: the sum of non-negative doubles spanning the whole exponent range
 * (subnormals to 2^1000) is the same bit for bit in any order and in any split into partial sums
 * merged afterwards (what FSDP's ranks do with the gradient norm), and agrees with a long double
 * reference summed smallest first: within 2 ulp of the double result (the value is built from
 * 32-bit digits, each conversion exact, their sum rounded at most once per digit kept). */
static void test_exact_sum(void)
{
    enum { N = 4000 };
    static double x[N];
    for (int i = 0; i < N; i++) {
        int e = (int)(hyla_rng_uniform(&rng) * 2080.0) - 1070; /* 2^-1070 .. 2^1010 */
        x[i] = ldexp(hyla_rng_uniform(&rng), e);
    }
    x[0] = 4.9406564584124654e-324; /* the least subnormal */
    hyla_exact_sum a, b, parts[3];
    hyla_exact_sum_init(&a);
    hyla_exact_sum_init(&b);
    for (int p = 0; p < 3; p++)
        hyla_exact_sum_init(&parts[p]);
    for (int i = 0; i < N; i++) {
        hyla_exact_sum_add(&a, x[i]);
        hyla_exact_sum_add(&b, x[N - 1 - i]);
        hyla_exact_sum_add(&parts[(i * 7) % 3], x[i]);
    }
    for (int p = 0; p < 3; p++)
        hyla_exact_sum_normalize(&parts[p]);
    hyla_exact_sum_merge(&parts[2], &parts[0]);
    hyla_exact_sum_merge(&parts[2], &parts[1]);
    double va = hyla_exact_sum_value(&a), vb = hyla_exact_sum_value(&b), vp = hyla_exact_sum_value(&parts[2]);
    expect(memcmp(&va, &vb, sizeof va) == 0 && memcmp(&va, &vp, sizeof va) == 0,
           "exact sum: forward == backward == merged parts");
    /* reference: the sum of squares of small normals (no huge terms) against long double */
    hyla_exact_sum c;
    hyla_exact_sum_init(&c);
    long double ref = 0;
    for (int i = 0; i < N; i++) {
        double v = hyla_rng_normal(&rng);
        hyla_exact_sum_add(&c, v * v);
        ref += (long double)v * v;
    }
    double vc = hyla_exact_sum_value(&c);
    expect(fabsl((long double)vc - ref) <= 2 * DBL_EPSILON * (double)ref, "exact sum vs long double (2 ulp)");
    hyla_exact_sum_add(&c, INFINITY);
    expect(isinf(hyla_exact_sum_value(&c)), "exact sum with an infinite term is infinite");
    printf("  exact sum: %d terms over 2^-1074..2^1010 bit-identical in 3 orders / splits; |sum - long double| %.3g\n", N,
           (double)fabsl((long double)vc - ref));
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    int max_threads = omp_get_max_threads();
    hyla_rng_seed(&rng, 20240613);
    test_norms();
    test_swiglu();
    test_rope();
    test_attention();
    test_moe_route_case(9, 32, 6, 1);
    test_moe_route_case(9, 32, 6, 0);
    test_moe_route_case(8, 512, 10, 1); /* Qwen3-Next sizes */
    test_exp_nonpos();
    test_cross_entropy();
    test_aux_loss();
    test_exact_sum();
    test_threads(max_threads);
    bench_attention();
    if (failures) {
        printf("test_core_ops: %d FAILED\n", failures);
        return 1;
    }
    printf("test_core_ops: all passed\n");
    return 0;
}
