/* Gradient tests: every fp32 backward kernel of ops/{norm,activation,rope,attention,moe_route,
 * loss}.c against central finite differences of a straightforward double-precision forward
 * written here, plus accumulation (dw +=), aliasing, saved-vs-recomputed and bitwise
 * thread-count invariance checks, plus an attention-backward speed report (printed, not
 * asserted). Exit status is non-zero if any check fails.
 *
 * Method. Each op's forward y = f(inputs) is re-implemented in double. The loss is
 * L = sum_k R_k y_k with fixed random weights R, so dL/dy = R is what the kernel receives as
 * the output gradient. For an input element x_p the reference gradient is
 *     g_fd = sum_k R_k (y_k(x_p + h) - y_k(x_p - h)) / (2h),
 * differencing output by output (outputs that do not depend on x_p cancel exactly).
 *
 * Step h = 2^-14 (~6.1e-5). Inputs are fp32 values of magnitude <= ~10, so x_p +- h is exact in
 * double and the step is exactly 2h. Error of g_fd, relative to the largest gradient (O(1)):
 *   truncation  h^2/6 |f'''| ~ 6.2e-10 |f'''|; the ops are smooth on O(1) inputs (softmax,
 *               rsqrt of a mean of squares ~ 1, sigmoid), |f'''| within ~100x of the largest
 *               gradient: <= ~6e-8;
 *   rounding    each double output is off by <= ~10 u_d |y_k| (u_d = 2^-53), so the sum of
 *               differences is off by <= 1.1e-15 sum|R_k y_k| over the outputs that depend on
 *               x_p, divided by 2h: the worst case here (attention k/v: 25600 outputs with
 *               |R y| < 1) is <= 2.3e-7 (worst-case signs; ~1e-12 for random ones).
 * Both are >= 15x below the fp32 tolerance of the op they apply to (below): g_fd is treated as
 * exact.
 *
 * Tolerance. The error of the fp32 kernel gradient g is measured relative to the tensor's
 * largest gradient, err = max_p |g_p - g_fd,p| / max(max_p |g_p|, floor) (an element whose
 * terms cancel has a large relative but a small absolute error; the terms' magnitude is that of
 * a typical gradient; floor is that magnitude where the exact gradient can vanish, attention at
 * T = 1, else 0). With u = 2^-24, a gradient element that goes through m fp32 elementwise roundings
 * and fp32 reductions of total length N has, relative to the magnitude of its terms, error
 * <= m u (first order) + lambda sqrt(N) u (Higham & Mary's probabilistic bound for recursive
 * summation, which holds with probability >= 1 - 2 exp(-lambda^2/2); lambda = 4: > 0.999).
 * Reductions done in double count N = 1. With m <= 8 for every kernel here (counted next to
 * each op) and a factor kappa = 2 for the ratio of the terms' magnitude to the largest gradient
 * (random O(1) data, no systematic cancellation):
 *     tol(N) = kappa (m + lambda sqrt(N)) u = 2 (8 + 4 sqrt(N)) 2^-24,
 * from 24u = 1.4e-6 (N = 1) to ~200u = 1.2e-5 (attention, N = 500). N is stated per op.
 *
 * Usage: test_op_grads [ignored]   (tests/run.sh passes the oracle case directory). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/ops.h"

static const double U = 0x1p-24;  /* fp32 unit roundoff */
static const double FD_H = 0x1p-14; /* finite-difference step (see above) */
static int failures = 0;
static hyla_rng rng;

static double tol_for(double N) { return 2.0 * (8.0 + 4.0 * sqrt(N)) * U; }

/* ---- data ----------------------------------------------------------------------------- */

static void *xalloc(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
static float *falloc(size_t n) { return xalloc(n * sizeof(float)); }
static double *dalloc(size_t n) { return xalloc(n * sizeof(double)); }
static void fill_normal(float *x, size_t n, double mean, double sd)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mean + sd * hyla_rng_normal(&rng));
}
static double *to_double(const float *x, size_t n)
{
    double *d = dalloc(n);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}
static double sigm(double z) { return 1.0 / (1.0 + exp(-z)); }

static void expect(int cond, const char *what)
{
    printf("%-52s %s\n", what, cond ? "ok" : "FAIL");
    if (!cond)
        failures++;
}
static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ---- finite differences ----------------------------------------------------------------- */

/* dL/d(input `which`)[p] by central differences; implementations below. */
typedef double (*fd_fn)(void *ctx, int which, size_t p);

/* Generic problem: a double forward over whole inputs, y [ny] = fwd(ctx), L = R . y. */
typedef struct {
    void (*fwd)(const void *self, double *y);
    double *in[4]; /* double copies of the inputs, perturbed in place */
    size_t ny;
    const double *R; /* [ny] */
    double *ya, *yb; /* [ny] scratch */
} fd_full;

static double fd_full_grad(void *ctx, int which, size_t p)
{
    fd_full *P = ctx;
    double *X = P->in[which], x0 = X[p];
    X[p] = x0 + FD_H;
    P->fwd(P, P->ya);
    X[p] = x0 - FD_H;
    P->fwd(P, P->yb);
    X[p] = x0;
    double s = 0.0;
    for (size_t k = 0; k < P->ny; k++)
        s += P->R[k] * (P->ya[k] - P->yb[k]);
    return s / (2.0 * FD_H);
}

static void fd_full_init(fd_full *P, void (*fwd)(const void *, double *), size_t ny,
                         const double *R)
{
    memset(P, 0, sizeof *P);
    P->fwd = fwd, P->ny = ny, P->R = R;
    P->ya = dalloc(ny), P->yb = dalloc(ny);
}
static void fd_full_free(fd_full *P)
{
    for (int i = 0; i < 4; i++)
        free(P->in[i]);
    free(P->ya), free(P->yb);
}

/* Kernel gradient G [n] of input `which` against finite differences at `ns` positions (all
 * when ns >= n, else uniformly random ones), error relative to max(max|G|, floor) (see top);
 * floor is the magnitude of the summed terms where the exact gradient may vanish. */
static void check_grad(const char *name, fd_fn fd, void *ctx, int which, const float *G, size_t n,
                       size_t ns, double N, double floor)
{
    double scale = floor, worst = 0.0, tol = tol_for(N);
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        finite &= isfinite(G[i]) != 0;
        scale = fabs(G[i]) > scale ? fabs(G[i]) : scale;
    }
    size_t m = ns < n ? ns : n;
    for (size_t s = 0; s < m && finite && scale > 0; s++) {
        size_t p = ns >= n ? s : (size_t)(hyla_rng_uniform(&rng) * (double)n);
        double g = fd(ctx, which, p), err = fabs(G[p] - g) / scale;
        if (!(err <= tol) && worst <= tol) /* first failure: say where */
            fprintf(stderr, "  %s: element %zu kernel %.9g fd %.9g (rel err %.3g)\n", name, p,
                    G[p], g, err);
        if (!(err <= worst))
            worst = err;
    }
    int ok = finite && scale > 0 && worst <= tol;
    printf("%-52s max rel err %-9.3g tol %-9.3g (N=%-4.0f) %5zu/%-5zu %s\n", name, worst, tol, N,
           m, n, ok ? "ok" : "FAIL");
    if (!ok)
        failures++;
}

/* ---- norms ------------------------------------------------------------------------------ */

typedef struct {
    fd_full fd;  /* in[0] = x, in[1] = w, in[2] = z */
    int64_t n, d;
    double eps, scale;
} norm_prob;

static void rms1p_fwd_d(const void *self, double *y)
{
    const norm_prob *P = self;
    const double *x = P->fd.in[0], *w = P->fd.in[1];
    for (int64_t i = 0; i < P->n; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < P->d; j++)
            ss += x[i * P->d + j] * x[i * P->d + j];
        double r = 1.0 / sqrt(ss / (double)P->d + P->eps);
        for (int64_t j = 0; j < P->d; j++)
            y[i * P->d + j] = x[i * P->d + j] * r * (1.0 + w[j]);
    }
}

static void gnorm_fwd_d(const void *self, double *y)
{
    const norm_prob *P = self;
    const double *x = P->fd.in[0], *w = P->fd.in[1], *z = P->fd.in[2];
    for (int64_t i = 0; i < P->n; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < P->d; j++)
            ss += x[i * P->d + j] * x[i * P->d + j];
        double r = 1.0 / sqrt(ss / (double)P->d + P->eps);
        for (int64_t j = 0; j < P->d; j++) {
            double zz = z[i * P->d + j];
            y[i * P->d + j] = w[j] * x[i * P->d + j] * r * zz * sigm(zz);
        }
    }
}

static void l2n_fwd_d(const void *self, double *y)
{
    const norm_prob *P = self;
    const double *x = P->fd.in[0];
    for (int64_t i = 0; i < P->n; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < P->d; j++)
            ss += x[i * P->d + j] * x[i * P->d + j];
        double r = 1.0 / sqrt(ss + P->eps);
        for (int64_t j = 0; j < P->d; j++)
            y[i * P->d + j] = x[i * P->d + j] * r * P->scale;
    }
}

/* x with row scales between 0.5 and 2 (O(1): keeps |f'''| moderate for the FD step). */
static void fill_rows(float *x, int64_t n, int64_t d)
{
    fill_normal(x, (size_t)(n * d), 0.0, 1.0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++)
            x[i * d + j] *= (float)pow(2.0, -1.0 + 2.0 * (double)i / (double)(n > 1 ? n - 1 : 1));
}

/* RMSNorm1p. dx: elementwise roundings r, dy(1+w) (2), c = r^3 (x.u)/d from a double dot (1),
 * r u, c x, the difference (3): m = 6, N = 1. dw: dy (x r) (2) summed over n rows in fp32
 * (blocks of 32, then block partials): N = n. */
static void test_rmsnorm1p(void)
{
    const int64_t n = 70, d = 48; /* 3 row blocks of the dw reduction, the last partial */
    const float eps = 1e-6f;
    size_t nd = (size_t)(n * d);
    float *x = falloc(nd), *w = falloc(d), *R = falloc(nd), *y = falloc(nd), *rstd = falloc(n);
    float *dx = falloc(nd), *dx2 = falloc(nd), *dw = falloc(d), *dw1 = falloc(d);
    fill_rows(x, n, d);
    fill_normal(w, d, 0.0, 0.1);
    fill_normal(R, nd, 0.0, 1.0);
    hyla_rmsnorm1p_fwd(y, rstd, x, w, n, d, eps);
    hyla_rmsnorm1p_bwd(dx, dw, R, x, w, rstd, n, d, eps); /* dw starts at 0 */
    memcpy(dw1, dw, (size_t)d * sizeof(float));
    hyla_rmsnorm1p_bwd(dx2, dw, R, x, w, NULL, n, d, eps); /* recomputed rstd, dw += */
    expect(same_bits(dx, dx2, nd), "rmsnorm1p_bwd rstd NULL == saved (dx bitwise)");
    /* dw += : the second call adds its 3 block partials to dw1 one by one, so dw = 2 dw1 up to 3
     * roundings of size <= u (|dw1| + sum of the partials' magnitudes); relative to max|dw1|,
     * tol_for(n) covers it. With one block (rows <= 32) the second call adds exactly dw1. */
    double dmax = 0.0, derr = 0.0;
    for (int64_t j = 0; j < d; j++) {
        dmax = fabs(dw1[j]) > dmax ? fabs(dw1[j]) : dmax;
        derr = fabs(dw[j] - 2.0 * dw1[j]) > derr ? fabs(dw[j] - 2.0 * dw1[j]) : derr;
    }
    expect(dmax > 0 && derr <= tol_for((double)n) * dmax,
           "rmsnorm1p_bwd dw accumulates, 3 blocks (2nd call ~ 2x)");
    float *db1 = falloc(d), *db2 = falloc(d); /* zeroed */
    hyla_rmsnorm1p_bwd(dx2, db1, R, x, w, rstd, 32, d, eps); /* the one block's sum */
    for (int c = 0; c < 2; c++)
        hyla_rmsnorm1p_bwd(dx2, db2, R, x, w, rstd, 32, d, eps);
    int dbl = 1;
    for (int64_t j = 0; j < d; j++)
        dbl &= db2[j] == 2.0f * db1[j];
    free(db1), free(db2);
    expect(dbl, "rmsnorm1p_bwd dw accumulates, 1 block (2nd call == 2x)");

    norm_prob P = {.n = n, .d = d, .eps = eps};
    double *Rd = to_double(R, nd);
    fd_full_init(&P.fd, rms1p_fwd_d, nd, Rd);
    P.fd.in[0] = to_double(x, nd), P.fd.in[1] = to_double(w, (size_t)d);
    check_grad("rmsnorm1p dx", fd_full_grad, &P, 0, dx, nd, nd, 1, 0);
    check_grad("rmsnorm1p dw", fd_full_grad, &P, 1, dw1, (size_t)d, (size_t)d, (double)n, 0);
    fd_full_free(&P.fd);
    free(Rd), free(x), free(w), free(R), free(y), free(rstd), free(dx), free(dx2), free(dw),
        free(dw1);
}

/* Gated RMSNorm. dx: as rmsnorm1p plus silu (expf and 2 more: 3): m = 8, N = 1. dz: dy w n s
 * (1 + z (1 - s)) with s from expf: m = 8, N = 1. dw: N = n. */
static void test_gated_rmsnorm(void)
{
    const int64_t n = 40, d = 32;
    const float eps = 1e-6f;
    size_t nd = (size_t)(n * d);
    float *x = falloc(nd), *z = falloc(nd), *w = falloc(d), *R = falloc(nd), *y = falloc(nd),
          *rstd = falloc(n);
    float *dx = falloc(nd), *dz = falloc(nd), *dw = falloc(d), *dx2 = falloc(nd),
          *dz2 = falloc(nd), *dw2 = falloc(d);
    fill_rows(x, n, d);
    fill_normal(z, nd, 0.0, 2.0);
    fill_normal(w, d, 1.0, 0.1);
    fill_normal(R, nd, 0.0, 1.0);
    hyla_gated_rmsnorm_fwd(y, rstd, x, z, w, n, d, eps);
    hyla_gated_rmsnorm_bwd(dx, dz, dw, R, x, z, w, rstd, n, d, eps);
    hyla_gated_rmsnorm_bwd(dx2, dz2, dw2, R, x, z, w, NULL, n, d, eps);
    expect(same_bits(dx, dx2, nd) && same_bits(dz, dz2, nd) && same_bits(dw, dw2, (size_t)d),
           "gated_rmsnorm_bwd rstd NULL == saved (bitwise)");

    norm_prob P = {.n = n, .d = d, .eps = eps};
    double *Rd = to_double(R, nd);
    fd_full_init(&P.fd, gnorm_fwd_d, nd, Rd);
    P.fd.in[0] = to_double(x, nd), P.fd.in[1] = to_double(w, (size_t)d);
    P.fd.in[2] = to_double(z, nd);
    check_grad("gated rmsnorm dx", fd_full_grad, &P, 0, dx, nd, nd, 1, 0);
    check_grad("gated rmsnorm dz", fd_full_grad, &P, 2, dz, nd, nd, 1, 0);
    check_grad("gated rmsnorm dw", fd_full_grad, &P, 1, dw, (size_t)d, (size_t)d, (double)n, 0);
    fd_full_free(&P.fd);
    free(Rd), free(x), free(z), free(w), free(R), free(y), free(rstd), free(dx), free(dz),
        free(dw), free(dx2), free(dz2), free(dw2);
}

/* L2 norm with scale. dx = scale r (dy - r^2 (dy.x) x): double dot, then r, c, c x, the
 * difference, scale r, the product: m = 6, N = 1. */
static void test_l2norm(void)
{
    const int64_t n = 10, d = 32;
    const float eps = 1e-6f, scale = 0.1767767f; /* 1/sqrt(32), as q in the GDN */
    size_t nd = (size_t)(n * d);
    float *x = falloc(nd), *R = falloc(nd), *y = falloc(nd), *rstd = falloc(n), *dx = falloc(nd),
          *dx2 = falloc(nd);
    fill_rows(x, n, d);
    fill_normal(R, nd, 0.0, 1.0);
    hyla_l2norm_fwd(y, rstd, x, n, d, eps, scale);
    hyla_l2norm_bwd(dx, R, x, rstd, n, d, eps, scale);
    memcpy(dx2, R, nd * sizeof(float));
    hyla_l2norm_bwd(dx2, dx2, x, NULL, n, d, eps, scale); /* in place, recomputed rstd */
    expect(same_bits(dx, dx2, nd), "l2norm_bwd in place, rstd NULL == saved (bitwise)");

    norm_prob P = {.n = n, .d = d, .eps = eps, .scale = scale};
    double *Rd = to_double(R, nd);
    fd_full_init(&P.fd, l2n_fwd_d, nd, Rd);
    P.fd.in[0] = to_double(x, nd);
    check_grad("l2norm dx (scale 1/sqrt(32))", fd_full_grad, &P, 0, dx, nd, nd, 1, 0);
    fd_full_free(&P.fd);
    free(Rd), free(x), free(R), free(y), free(rstd), free(dx), free(dx2);
}

/* ---- SwiGLU ------------------------------------------------------------------------------ */

typedef struct {
    fd_full fd; /* in[0] = gate, in[1] = up */
    size_t total;
} swiglu_prob;

static void swiglu_fwd_d(const void *self, double *y)
{
    const swiglu_prob *P = self;
    for (size_t i = 0; i < P->total; i++) {
        double g = P->fd.in[0][i];
        y[i] = g * sigm(g) * P->fd.in[1][i];
    }
}

/* dgate = dh up s (1 + g (1 - s)), s from expf (2u) and 2 roundings, then 6 products/sums:
 * m = 8, N = 1. dup = dh g s: m = 5, N = 1. */
static void test_swiglu(void)
{
    const int64_t n = 7, I = 33;
    size_t t = (size_t)(n * I);
    float *g = falloc(t), *u = falloc(t), *R = falloc(t), *dg = falloc(t), *du = falloc(t);
    fill_normal(g, t, 0.0, 2.0);
    fill_normal(u, t, 0.0, 1.0);
    fill_normal(R, t, 0.0, 1.0);
    hyla_swiglu_bwd(dg, du, R, g, u, n, I);
    swiglu_prob P = {.total = t};
    double *Rd = to_double(R, t);
    fd_full_init(&P.fd, swiglu_fwd_d, t, Rd);
    P.fd.in[0] = to_double(g, t), P.fd.in[1] = to_double(u, t);
    check_grad("swiglu dgate", fd_full_grad, &P, 0, dg, t, t, 1, 0);
    check_grad("swiglu dup", fd_full_grad, &P, 1, du, t, t, 1, 0);
    fd_full_free(&P.fd);
    free(Rd), free(g), free(u), free(R), free(dg), free(du);
}

/* ---- RoPE -------------------------------------------------------------------------------- */

typedef struct {
    fd_full fd; /* in[0] = x */
    const float *cos_t, *sin_t;
    int64_t n, heads, hd, R;
} rope_prob;

static void rope_fwd_d(const void *self, double *y)
{
    const rope_prob *P = self;
    int64_t half = P->R / 2;
    for (int64_t t = 0; t < P->n; t++)
        for (int64_t h = 0; h < P->heads; h++) {
            const double *x = P->fd.in[0] + (t * P->heads + h) * P->hd;
            double *o = y + (t * P->heads + h) * P->hd;
            for (int64_t i = 0; i < P->hd; i++)
                o[i] = x[i];
            for (int64_t i = 0; i < half; i++) {
                double c = P->cos_t[t * half + i], s = P->sin_t[t * half + i];
                o[i] = x[i] * c - x[i + half] * s;
                o[i + half] = x[i + half] * c + x[i] * s;
            }
        }
}

/* dx = a cos + b sin (and b cos - a sin): 2 products, 1 sum: m = 3, N = 2. The pass-through dims
 * are copied: exact. */
static void test_rope(void)
{
    const int64_t n = 5, heads = 3, hd = 24, R = 16; /* partial: R < hd */
    const int64_t pos[5] = {0, 3, 17, 100, 4095};
    size_t nx = (size_t)(n * heads * hd);
    float *ct = falloc((size_t)(n * R / 2)), *st = falloc((size_t)(n * R / 2));
    float *x = falloc(nx), *Rw = falloc(nx), *dx = falloc(nx);
    hyla_rope_table(ct, st, pos, n, R, 1e7);
    fill_normal(x, nx, 0.0, 1.0);
    fill_normal(Rw, nx, 0.0, 1.0);
    memcpy(dx, Rw, nx * sizeof(float));
    hyla_rope_bwd(dx, ct, st, n, heads, hd, R);
    rope_prob P = {.cos_t = ct, .sin_t = st, .n = n, .heads = heads, .hd = hd, .R = R};
    double *Rd = to_double(Rw, nx);
    fd_full_init(&P.fd, rope_fwd_d, nx, Rd);
    P.fd.in[0] = to_double(x, nx);
    check_grad("rope dx (R=16 < hd=24)", fd_full_grad, &P, 0, dx, nx, nx, 2, 0);
    int pass = 1; /* dims R..hd-1 pass the gradient through unchanged */
    for (int64_t i = 0; i < n * heads; i++)
        for (int64_t j = R; j < hd; j++)
            pass &= dx[i * hd + j] == Rw[i * hd + j];
    expect(pass, "rope_bwd identity on dims >= R");
    fd_full_free(&P.fd);
    free(Rd), free(ct), free(st), free(x), free(Rw), free(dx);
}

/* ---- attention --------------------------------------------------------------------------- */

typedef struct {
    double *q, *k, *v, *R; /* [T,Hq,hd], [T,Hkv,hd] x2, [T,Hq,hd] */
    int64_t T, Hq, Hkv, hd;
    double scale;
    double *s, *oa, *ob; /* scratch [T], [hd], [hd] */
} attn_prob;

/* Output row (t, h) in double: softmax over keys 0..t of scale q.k, times v. */
static void attn_row_d(const attn_prob *P, int64_t t, int64_t h, double *o)
{
    int64_t g = h / (P->Hq / P->Hkv), hd = P->hd;
    const double *qi = P->q + (t * P->Hq + h) * hd;
    double mx = -INFINITY, l = 0.0;
    for (int64_t j = 0; j <= t; j++) {
        const double *kj = P->k + (j * P->Hkv + g) * hd;
        double a = 0.0;
        for (int64_t d = 0; d < hd; d++)
            a += qi[d] * kj[d];
        P->s[j] = a * P->scale;
        mx = P->s[j] > mx ? P->s[j] : mx;
    }
    for (int64_t d = 0; d < hd; d++)
        o[d] = 0.0;
    for (int64_t j = 0; j <= t; j++) {
        double p = exp(P->s[j] - mx);
        l += p;
        const double *vj = P->v + (j * P->Hkv + g) * hd;
        for (int64_t d = 0; d < hd; d++)
            o[d] += p * vj[d];
    }
    for (int64_t d = 0; d < hd; d++)
        o[d] /= l;
}

/* which: 0 = q, 1 = k, 2 = v. Only the rows that depend on the element are recomputed: (t, h)
 * for q[t,h,.]; t >= j and the r heads of g for k[j,g,.] and v[j,g,.]. */
static double attn_fd(void *ctx, int which, size_t p)
{
    attn_prob *P = ctx;
    int64_t hd = P->hd, r = P->Hq / P->Hkv, e = (int64_t)p / hd;
    double *X = which == 0 ? P->q : which == 1 ? P->k : P->v, x0 = X[p];
    int64_t t0, t1, h0, h1;
    if (which == 0)
        t0 = t1 = e / P->Hq, h0 = h1 = e % P->Hq;
    else
        t0 = e / P->Hkv, t1 = P->T - 1, h0 = (e % P->Hkv) * r, h1 = h0 + r - 1;
    double s = 0.0;
    for (int64_t t = t0; t <= t1; t++)
        for (int64_t h = h0; h <= h1; h++) {
            X[p] = x0 + FD_H;
            attn_row_d(P, t, h, P->oa);
            X[p] = x0 - FD_H;
            attn_row_d(P, t, h, P->ob);
            X[p] = x0;
            const double *Rr = P->R + (t * P->Hq + h) * hd;
            for (int64_t d = 0; d < hd; d++)
                s += Rr[d] * (P->oa[d] - P->ob[d]);
        }
    return s / (2.0 * FD_H);
}

/* Magnitude of the terms of dq and dk before cancellation: dS_tj = P_tj (dP_tj - D_t) with
 * D_t = sum_j P_tj dP_tj cancels exactly when a row sees a single key (T = 1: dq = dk = 0, and
 * the kernel returns rounding noise of size u |dP|). Returns max over rows of
 * sum_j P_tj (|dP_tj| + |D_t|); the floor for dq is scale * that * rms(k) (a typical term
 * magnitude), for dk with rms(q). */
static double attn_term_mag(attn_prob *P)
{
    int64_t hd = P->hd, r = P->Hq / P->Hkv;
    double best = 0.0;
    for (int64_t t = 0; t < P->T; t++)
        for (int64_t h = 0; h < P->Hq; h++) {
            const double *qi = P->q + (t * P->Hq + h) * hd, *Ri = P->R + (t * P->Hq + h) * hd;
            int64_t g = h / r;
            double mx = -INFINITY, l = 0.0, D = 0.0, A = 0.0;
            for (int64_t j = 0; j <= t; j++) {
                double a = 0.0;
                for (int64_t d = 0; d < hd; d++)
                    a += qi[d] * P->k[(j * P->Hkv + g) * hd + d];
                P->s[j] = a * P->scale;
                mx = P->s[j] > mx ? P->s[j] : mx;
            }
            for (int64_t j = 0; j <= t; j++)
                l += exp(P->s[j] - mx);
            for (int64_t pass = 0; pass < 2; pass++) /* D first, then the magnitudes */
                for (int64_t j = 0; j <= t; j++) {
                    double pj = exp(P->s[j] - mx) / l, dp = 0.0;
                    for (int64_t d = 0; d < hd; d++)
                        dp += Ri[d] * P->v[(j * P->Hkv + g) * hd + d];
                    if (pass == 0)
                        D += pj * dp;
                    else
                        A += pj * (fabs(dp) + fabs(D));
                }
            best = A > best ? A : best;
        }
    return best;
}

static double rms(const double *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m += x[i] * x[i];
    return sqrt(m / (double)n);
}

/* N: P = exp(s - lse) carries the error of the length-hd score dot (and of the forward's lse);
 * dP is another length-hd dot; dk, dv then sum T r rows (dq: T keys) in fp32 tiles. The
 * elementwise chain (exp, dP - D, two products, scale) is m <= 8. N = T r + 2 hd. */
static void test_attention_case(int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, size_t ns)
{
    size_t nq = (size_t)(T * Hq * hd), nk = (size_t)(T * Hkv * hd);
    float scale = (float)(1.0 / sqrt((double)hd));
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *R = falloc(nq), *out = falloc(nq),
          *lse = falloc((size_t)(T * Hq));
    float *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
    float *fw = falloc(hyla_attention_work_floats(T));
    float *bw = falloc(hyla_attention_bwd_work_floats(T, Hq, hd));
    fill_normal(q, nq, 0.0, 1.0);
    fill_normal(k, nk, 0.0, 1.0);
    fill_normal(v, nk, 0.0, 1.0);
    fill_normal(R, nq, 0.0, 1.0);
    hyla_attention_fwd(out, lse, q, k, v, T, 0, Hq, Hkv, hd, scale, fw);
    hyla_attention_bwd(dq, dk, dv, R, out, lse, q, k, v, T, Hq, Hkv, hd, scale, bw);

    attn_prob P = {to_double(q, nq), to_double(k, nk), to_double(v, nk), to_double(R, nq), T, Hq,
                   Hkv, hd, scale, dalloc((size_t)T), dalloc((size_t)hd), dalloc((size_t)hd)};
    double N = (double)(T * (Hq / Hkv) + 2 * hd), A = attn_term_mag(&P);
    double floor[3] = {scale * A * rms(P.k, nk), scale * A * rms(P.q, nq), 0.0};
    char name[96];
    const char *nm[3] = {"dq", "dk", "dv"};
    const float *G[3] = {dq, dk, dv};
    size_t n[3] = {nq, nk, nk};
    for (int w = 0; w < 3; w++) {
        snprintf(name, sizeof name, "attention T=%ld Hq=%ld Hkv=%ld hd=%ld %s", (long)T, (long)Hq,
                 (long)Hkv, (long)hd, nm[w]);
        check_grad(name, attn_fd, &P, w, G[w], n[w], ns, N, floor[w]);
    }
    free(P.q), free(P.k), free(P.v), free(P.R), free(P.s), free(P.oa), free(P.ob);
    free(q), free(k), free(v), free(R), free(out), free(lse), free(dq), free(dk), free(dv),
        free(fw), free(bw);
}

static void test_attention(void)
{
    const int64_t Ts[4] = {1, 7, 64, 100}, hds[2] = {16, 64};
    const int64_t heads[3][2] = {{2, 2}, {4, 2}, {4, 1}}; /* Hq/Hkv = 1, 2, 4 */
    for (int it = 0; it < 4; it++)
        for (int ih = 0; ih < 2; ih++)
            for (int hh = 0; hh < 3; hh++) /* every element for short T, a sample for long */
                test_attention_case(Ts[it], heads[hh][0], heads[hh][1], hds[ih],
                                    Ts[it] <= 7 ? (size_t)-1 : 32);
    test_attention_case(70, 3, 1, 40, 32); /* hd not a multiple of 16 (zero-padded tiles) */
    test_attention_case(20, 2, 1, 256, 32); /* the Qwen3-Next head size */
}

/* A sequence split in two (context parallelism, ops.h: hyla_attention_bwd_past): the later slice's
 * queries over every key up to theirs, the earlier slice's over its own. The later slice's forward
 * (out, lse), dq, and dk / dv of the
 * keys only the later slice's queries see, == the whole sequence's bit for bit (T0 (Hq / Hkv) a
 * multiple of 64: the query tiles fall alike, every tile's terms and sums are the same). dk, dv
 * of the earlier keys are the two slices' parts added: the same fp32 terms (P_ij dout_i and
 * dS_ij q_i, recomputed alike from the same lse and D) summed in another grouping, so each of the
 * whole's and the split's sums is within gamma_n sum|terms| of the exact sum of those terms, n <=
 * T r + 1 (r = Hq / Hkv): |split - whole| <= 2 (T r + 1) u sum|terms| (the double-precision
 * magnitudes here +1%, for the rounding of the terms they stand for). */
static void test_attention_split(int64_t T0, int64_t T1, int64_t Hq, int64_t Hkv, int64_t hd)
{
    int64_t T = T0 + T1, r = Hq / Hkv;
    size_t nq = (size_t)(T * Hq * hd), nk = (size_t)(T * Hkv * hd);
    float scale = (float)(1.0 / sqrt((double)hd));
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *R = falloc(nq), *out = falloc(nq),
          *lse = falloc((size_t)(T * Hq));
    float *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk), *dq2 = falloc(nq), *dk0 = falloc(nk), *dv0 = falloc(nk);
    float *dk1 = falloc(nk), *dv1 = falloc(nk);
    float *fw = falloc(hyla_attention_work_floats(T)), *bw = falloc(hyla_attention_bwd_work_floats(T, Hq, hd));
    fill_normal(q, nq, 0.0, 1.0), fill_normal(k, nk, 0.0, 1.0), fill_normal(v, nk, 0.0, 1.0), fill_normal(R, nq, 0.0, 1.0);
    hyla_attention_fwd(out, lse, q, k, v, T, 0, Hq, Hkv, hd, scale, fw);
    hyla_attention_bwd(dq, dk, dv, R, out, lse, q, k, v, T, Hq, Hkv, hd, scale, bw);
    size_t qo = (size_t)(T0 * Hq * hd);
    hyla_attention_bwd_past(dq2 + qo, dk1, dv1, R + qo, out + qo, lse + T0 * Hq, q + qo, k, v, T1, T0, Hq, Hkv, hd, scale,
                            bw);
    hyla_attention_bwd_past(dq2, dk0, dv0, R, out, lse, q, k, v, T0, 0, Hq, Hkv, hd, scale, bw);
    size_t ko = (size_t)(T0 * Hkv * hd);
    float *out1 = falloc(nq - qo), *lse1 = falloc((size_t)(T1 * Hq)); /* the forward of the later slice alone */
    hyla_attention_fwd(out1, lse1, q + qo, k, v, T1, T0, Hq, Hkv, hd, scale, fw);
    int fwd_ok = memcmp(out1, out + qo, (nq - qo) * sizeof(float)) == 0 &&
                 memcmp(lse1, lse + T0 * Hq, (size_t)(T1 * Hq) * sizeof(float)) == 0;
    free(out1), free(lse1);
    int ok = fwd_ok && memcmp(dq, dq2, nq * sizeof(float)) == 0 && memcmp(dk + ko, dk1 + ko, (nk - ko) * sizeof(float)) == 0 &&
             memcmp(dv + ko, dv1 + ko, (nk - ko) * sizeof(float)) == 0;
    double worst = 0.0, u = 0x1p-24, n = (double)(T * r + 1);
    for (int64_t j = 0; j < T0; j++)
        for (int64_t g = 0; g < Hkv; g++)
            for (int64_t d = 0; d < hd; d++) {
                double mk = 0.0, mv = 0.0; /* sum|dS_ij q_i,d|, sum|P_ij dout_i,d| over the rows that see j */
                for (int64_t t = j; t < T; t++)
                    for (int64_t hh = 0; hh < r; hh++) {
                        int64_t h = g * r + hh;
                        const float *qi = q + (t * Hq + h) * hd, *oi = R + (t * Hq + h) * hd, *outi = out + (t * Hq + h) * hd;
                        const float *kj = k + (j * Hkv + g) * hd, *vj = v + (j * Hkv + g) * hd;
                        double s_ = 0.0, dp = 0.0, D = 0.0;
                        for (int64_t e = 0; e < hd; e++)
                            s_ += (double)qi[e] * kj[e], dp += (double)oi[e] * vj[e], D += (double)oi[e] * outi[e];
                        double P = exp(scale * s_ - lse[t * Hq + h]), dS = scale * P * (dp - D);
                        mk += fabs(dS * qi[d]), mv += fabs(P * oi[d]);
                    }
                size_t at = (size_t)((j * Hkv + g) * hd + d);
                double ek = fabs((double)(dk0[at] + dk1[at]) - dk[at]), ev = fabs((double)(dv0[at] + dv1[at]) - dv[at]);
                double bk = 2.0 * n * u * mk * 1.01 + 1e-30, bv = 2.0 * n * u * mv * 1.01 + 1e-30;
                worst = fmax(worst, fmax(ek / bk, ev / bv));
                ok = ok && ek <= bk && ev <= bv;
            }
    printf("  %s attention split at %ld + %ld (Hq %ld, Hkv %ld, hd %ld): the later slice's forward, dq and the later "
           "keys' dk, dv == whole bit for bit; the earlier keys' within %.3f of their bound\n", ok ? "ok  " : "FAIL", (long)T0, (long)T1, (long)Hq,
           (long)Hkv, (long)hd, worst);
    if (!ok)
        failures++;
    free(q), free(k), free(v), free(R), free(out), free(lse), free(dq), free(dk), free(dv), free(dq2), free(dk0),
        free(dv0), free(dk1), free(dv1), free(fw), free(bw);
}

/* ---- MoE router -------------------------------------------------------------------------- */

typedef struct {
    fd_full fd; /* in[0] = logits; y = [top_w (n k), probs (n E)] */
    const int32_t *idx;
    int64_t n, E, k;
    int renorm;
} route_prob;

static void route_fwd_d(const void *self, double *y)
{
    const route_prob *P = self;
    for (int64_t i = 0; i < P->n; i++) {
        const double *l = P->fd.in[0] + i * P->E;
        double *w = y + i * P->k, *p = y + P->n * P->k + i * P->E, mx = l[0], sum = 0.0, vs = 0.0;
        for (int64_t e = 1; e < P->E; e++)
            mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < P->E; e++)
            sum += (p[e] = exp(l[e] - mx));
        for (int64_t e = 0; e < P->E; e++)
            p[e] /= sum;
        for (int64_t s = 0; s < P->k; s++) /* the top-k indices are constants (spec §8.8) */
            vs += (w[s] = p[P->idx[i * P->k + s]]);
        if (P->renorm)
            for (int64_t s = 0; s < P->k; s++)
                w[s] /= vs;
    }
}

/* Everything per row in double from fp32 probs (relative error u each) and one final rounding:
 * m <= 4, N = 1. */
static void test_moe_route_case(int renorm, int aux)
{
    const int64_t n = 6, E = 16, k = 4;
    size_t ne = (size_t)(n * E), nk = (size_t)(n * k);
    float *logits = falloc(ne), *probs = falloc(ne), *w = falloc(nk), *dw = falloc(nk),
          *dl = falloc(ne);
    int32_t *idx = xalloc(nk * sizeof(int32_t));
    double *auxd = dalloc((size_t)E), *Rd = dalloc(nk + ne);
    fill_normal(logits, ne, 0.0, 1.5);
    fill_normal(dw, nk, 0.0, 1.0);
    for (int64_t e = 0; e < E; e++)
        auxd[e] = aux ? 0.5 * hyla_rng_normal(&rng) : 0.0;
    hyla_moe_route_fwd(idx, w, probs, logits, n, E, k, renorm);
    hyla_moe_route_bwd(dl, dw, idx, probs, aux ? auxd : NULL, n, E, k, renorm);

    for (size_t i = 0; i < nk; i++) /* L = dw . top_w + sum_rows aux . probs[row] */
        Rd[i] = dw[i];
    for (size_t i = 0; i < ne; i++)
        Rd[nk + i] = auxd[i % (size_t)E];
    route_prob P = {.idx = idx, .n = n, .E = E, .k = k, .renorm = renorm};
    fd_full_init(&P.fd, route_fwd_d, nk + ne, Rd);
    P.fd.in[0] = to_double(logits, ne);
    char name[96];
    snprintf(name, sizeof name, "moe route dlogits renorm=%d aux=%d", renorm, aux);
    check_grad(name, fd_full_grad, &P, 0, dl, ne, ne, 1, 0);
    fd_full_free(&P.fd);
    free(logits), free(probs), free(w), free(dw), free(dl), free(idx), free(auxd), free(Rd);
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

typedef struct {
    fd_full fd; /* in[0] = logits; y[i] = loss of row i (0 if ignored) */
    const int32_t *labels;
    int64_t n, V;
} ce_prob;

static void ce_fwd_d(const void *self, double *y)
{
    const ce_prob *P = self;
    for (int64_t i = 0; i < P->n; i++) {
        const double *l = P->fd.in[0] + i * P->V;
        y[i] = 0.0;
        if (P->labels[i] < 0)
            continue;
        double mx = l[0], s = 0.0;
        for (int64_t j = 1; j < P->V; j++)
            mx = l[j] > mx ? l[j] : mx;
        for (int64_t j = 0; j < P->V; j++)
            s += exp(l[j] - mx);
        y[i] = mx + log(s) - l[P->labels[i]];
    }
}

/* expf (2u) in fp32, sum and quotient in double, the onehot subtracted in double, one rounding:
 * m = 4, N = 1. */
static void test_cross_entropy(void)
{
    const int64_t n = 9, V = 50;
    const int32_t labels[9] = {3, -100, 49, 0, -1, 17, 17, -100, 8};
    size_t nv = (size_t)(n * V);
    float *logits = falloc(nv), *dl = falloc(nv), *ip = falloc(nv);
    fill_normal(logits, nv, 0.0, 2.0);
    int64_t count = 0;
    (void)hyla_cross_entropy_fwd(logits, labels, n, V, &count);
    float scale = 1.0f / (float)count; /* mean over labelled rows */
    hyla_cross_entropy_bwd(dl, logits, labels, n, V, scale);
    memcpy(ip, logits, nv * sizeof(float));
    hyla_cross_entropy_bwd(ip, ip, labels, n, V, scale); /* in place */
    expect(same_bits(dl, ip, nv), "cross_entropy_bwd in place == out of place");
    int zero = 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < V && labels[i] < 0; j++)
            zero &= dl[i * V + j] == 0.0f;
    expect(zero, "cross_entropy_bwd ignored rows are 0");

    double *Rd = dalloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        Rd[i] = scale;
    ce_prob P = {.labels = labels, .n = n, .V = V};
    fd_full_init(&P.fd, ce_fwd_d, (size_t)n, Rd);
    P.fd.in[0] = to_double(logits, nv);
    check_grad("cross entropy dlogits (3 ignored rows)", fd_full_grad, &P, 0, dl, nv, nv, 1, 0);
    fd_full_free(&P.fd);
    free(Rd), free(logits), free(dl), free(ip);
}

/* ---- thread-count invariance ------------------------------------------------------------- */

static void test_threads(void)
{
    int max0 = omp_get_max_threads();
    /* rmsnorm1p_bwd: dx rows and the blocked dw reduction */
    const int64_t n = 333, d = 96;
    float *x = falloc((size_t)(n * d)), *w = falloc(d), *dy = falloc((size_t)(n * d));
    float *dx[3], *dw[3];
    fill_rows(x, n, d);
    fill_normal(w, d, 0.0, 0.1);
    fill_normal(dy, (size_t)(n * d), 0.0, 1.0);
    for (int c = 0; c < 3; c++) {
        dx[c] = falloc((size_t)(n * d)), dw[c] = falloc(d);
        omp_set_num_threads(c + 1);
        hyla_rmsnorm1p_bwd(dx[c], dw[c], dy, x, w, NULL, n, d, 1e-6f);
    }
    int ok = 1;
    for (int c = 1; c < 3; c++)
        ok &= same_bits(dx[0], dx[c], (size_t)(n * d)) && same_bits(dw[0], dw[c], (size_t)d);
    expect(ok, "rmsnorm1p_bwd threads 1/2/3 bit-identical");
    for (int c = 0; c < 3; c++)
        free(dx[c]), free(dw[c]);
    free(x), free(w), free(dy);

    /* attention_bwd: T crosses key and row block boundaries; hd padded */
    const int64_t T = 150, Hq = 4, Hkv = 2;
    for (int64_t hd = 40; hd <= 64; hd += 24) {
        size_t nq = (size_t)(T * Hq * hd), nk = (size_t)(T * Hkv * hd);
        float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *R = falloc(nq), *o = falloc(nq),
              *l = falloc((size_t)(T * Hq)), *fw = falloc(hyla_attention_work_floats(T));
        fill_normal(q, nq, 0.0, 1.0), fill_normal(k, nk, 0.0, 1.0);
        fill_normal(v, nk, 0.0, 1.0), fill_normal(R, nq, 0.0, 1.0);
        hyla_attention_fwd(o, l, q, k, v, T, 0, Hq, Hkv, hd, 0.125f, fw);
        float *g[3][3];
        ok = 1;
        for (int c = 0; c < 3; c++) {
            omp_set_num_threads(c + 1);
            float *bw = falloc(hyla_attention_bwd_work_floats(T, Hq, hd));
            g[c][0] = falloc(nq), g[c][1] = falloc(nk), g[c][2] = falloc(nk);
            hyla_attention_bwd(g[c][0], g[c][1], g[c][2], R, o, l, q, k, v, T, Hq, Hkv, hd,
                               0.125f, bw);
            free(bw);
        }
        for (int c = 1; c < 3; c++)
            ok &= same_bits(g[0][0], g[c][0], nq) && same_bits(g[0][1], g[c][1], nk) &&
                  same_bits(g[0][2], g[c][2], nk);
        char name[96];
        snprintf(name, sizeof name, "attention_bwd threads 1/2/3 bit-identical (hd=%ld)", (long)hd);
        expect(ok, name);
        for (int c = 0; c < 3; c++)
            free(g[c][0]), free(g[c][1]), free(g[c][2]);
        free(q), free(k), free(v), free(R), free(o), free(l), free(fw);
    }
    omp_set_num_threads(max0);
}

/* ---- speed (printed, not asserted) ------------------------------------------------------- */

static void bench_attention_bwd(void)
{
    const int64_t T = 512, Hq = 8, Hkv = 2, hd = 128;
    size_t nq = (size_t)(T * Hq * hd), nk = (size_t)(T * Hkv * hd);
    float scale = (float)(1.0 / sqrt((double)hd));
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *R = falloc(nq), *o = falloc(nq),
          *l = falloc((size_t)(T * Hq)), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
    float *fw = falloc(hyla_attention_work_floats(T)),
          *bw = falloc(hyla_attention_bwd_work_floats(T, Hq, hd));
    fill_normal(q, nq, 0.0, 1.0), fill_normal(k, nk, 0.0, 1.0);
    fill_normal(v, nk, 0.0, 1.0), fill_normal(R, nq, 0.0, 1.0);
    hyla_attention_fwd(o, l, q, k, v, T, 0, Hq, Hkv, hd, scale, fw);
    double t0 = omp_get_wtime(); /* warm-up; it is the measurement if slow (sanitizer build) */
    hyla_attention_bwd(dq, dk, dv, R, o, l, q, k, v, T, Hq, Hkv, hd, scale, bw);
    double dt = omp_get_wtime() - t0;
    if (dt < 0.1) {
        const int reps = 5;
        t0 = omp_get_wtime();
        for (int i = 0; i < reps; i++)
            hyla_attention_bwd(dq, dk, dv, R, o, l, q, k, v, T, Hq, Hkv, hd, scale, bw);
        dt = (omp_get_wtime() - t0) / reps;
    }
    /* 5 products (S, dP, dV, dK, dQ) of 2 hd flops per visible (query, key) pair */
    double flops = 5.0 * 2.0 * (double)hd * (double)(T * (T + 1) / 2) * (double)Hq;
    printf("attention bwd speed T=%ld Hq=%ld Hkv=%ld hd=%ld causal, %d threads: %.2f ms, "
           "%.1f GFLOP/s (5-product count)\n",
           (long)T, (long)Hq, (long)Hkv, (long)hd, omp_get_max_threads(), dt * 1e3,
           flops / dt * 1e-9);
    free(q), free(k), free(v), free(R), free(o), free(l), free(dq), free(dk), free(dv), free(fw),
        free(bw);
}

int main(void)
{
    hyla_rng_seed(&rng, 20240607);
    test_rmsnorm1p();
    test_gated_rmsnorm();
    test_l2norm();
    test_swiglu();
    test_rope();
    test_attention();
    test_attention_split(64, 70, 4, 2, 32);
    test_attention_split(128, 64, 2, 2, 64);
    test_attention_split(64, 33, 4, 1, 256);
    for (int renorm = 0; renorm < 2; renorm++)
        for (int aux = 0; aux < 2; aux++)
            test_moe_route_case(renorm, aux);
    test_cross_entropy();
    test_threads();
    bench_attention_bwd();
    if (failures) {
        printf("%d check(s) FAILED\n", failures);
        return 1;
    }
    printf("all gradient checks passed\n");
    return 0;
}
