/* Gated DeltaNet pieces around the delta rule (spec §3.4 steps 3-4, §5): the causal depthwise
 * conv + SiLU over [q|k|v] and the decay / write-strength gates.
 *
 * Both are elementwise over rows (tokens); each output element is computed by one thread in a
 * fixed order, so results do not depend on the thread count. All arithmetic is fp32 (libm
 * expf / log1pf), as in HF's torch path. */
#include <math.h>

#include "core/error.h"
#include "ops/ops.h"
#include "core/parallel.h"
#include "core/sigmoid.h"

/* ---- conv + silu ---------------------------------------------------------------------------- */

/* Input row at time s (may be negative) for the conv window:
 * s >= 0: x[s]; s < 0: hist row K + s (hist holds the K newest raw inputs, oldest first, so
 * s = -1 is hist[K-1]); NULL when there is no history (zero padding). */
static const float *conv_row(const float *x /*[T,C]*/, const float *hist /*[K,C] or NULL*/,
                             int64_t s, int64_t C, int64_t K)
{
    if (s >= 0)
        return x + s * C;
    return hist ? hist + (K + s) * C : NULL;
}

#define CONV_FWD_CB 256 /* channels per block of the conv forward: their taps transposed on the stack */
#define CONV_MAX_K 64 /* = model/config.h HYLA_MAX_CONV_KERNEL, the largest kernel a config may have */

/* Rows t0..t1-1 of the channel block c0 .. c0 + nc: taps j = 0..K-1 in order from 0 (oldest input
 * first) into a local accumulator (pre), then the SiLU into y. Tap j of channel c is
 * wj[c * cs + j * js]: the constant strides of the two callers let each loop vectorise. The
 * accumulator had been y's row itself, whose first touch (a read for ownership from memory) then
 * stalled the taps; with it on the stack and the next rows of x asked for CONV_PREFETCH_ROWS ahead,
 * 18 layers of 512 tokens x 6,144 channels 57 -> 36 ms on 2 threads, the same bits. */
#define CONV_PREFETCH_ROWS 4
static inline __attribute__((always_inline)) void
conv_block(float *restrict y, float *pre, const float *x, const float *restrict wj, int64_t cs, int64_t js,
           const float *hist, int64_t t0, int64_t t1, int64_t c0, int64_t nc, int64_t C, int64_t K)
{
    float sum[CONV_FWD_CB];
    for (int64_t t = t0; t < t1; t++) {
        if (t + CONV_PREFETCH_ROWS < t1)
            for (int64_t c = 0; c < nc; c += 16)
                __builtin_prefetch(x + (t + CONV_PREFETCH_ROWS) * C + c0 + c);
        for (int64_t c = 0; c < nc; c++)
            sum[c] = 0.0f;
        for (int64_t j = 0; j < K; j++) {
            const float *xs = conv_row(x, hist, t - (K - 1) + j, C, K);
            if (!xs)
                continue; /* zero padding contributes exactly 0 */
            xs += c0;
#pragma omp simd
            for (int64_t c = 0; c < nc; c++)
                sum[c] += wj[c * cs + j * js] * xs[c];
        }
        if (pre)
            for (int64_t c = 0; c < nc; c++)
                pre[t * C + c0 + c] = sum[c];
        float *yt = y + t * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < nc; c++)
            yt[c] = hyla_silu(sum[c]); /* -0 for very negative inputs */
    }
}

void hyla_conv_silu_fwd(float *y /*[T,C]*/, float *pre /*[T,C] or NULL*/, const float *x /*[T,C]*/,
                        const float *w /*[C,K]*/, const float *hist /*[K,C] or NULL*/, int64_t T,
                        int64_t C, int64_t K)
{
    HYLA_ASSERT(K <= CONV_MAX_K);
    /* Blocks of CONV_FWD_CB channels x a range of rows; the block's taps are transposed to
     * wt[j][c] so the tap loop reads both operands contiguously (w[c * K + j] is a stride-K
     * gather). A decoded token (T = 1) uses each tap once: it reads them in place (the transpose
     * had cost as much as the taps: 18 layers of 6,144 channels 123-140 -> 88-93 us from cache). Per
     * element the arithmetic is the same either way. */
    int64_t n_cb = (C + CONV_FWD_CB - 1) / CONV_FWD_CB, row_block = 64, n_rb = (T + row_block - 1) / row_block;
    /* work: K taps and the SiLU (its exp in double, ~32 operations) per element -- a decoded token's
     * 6,144 channels are worth both threads (their weights and window come from memory) */
#pragma omp parallel for schedule(static) HYLA_PAR_IF(T * C * (K + 32))
    for (int64_t task = 0; task < n_cb * n_rb; task++) {
        int64_t c0 = (task % n_cb) * CONV_FWD_CB, nc = C - c0 < CONV_FWD_CB ? C - c0 : CONV_FWD_CB;
        int64_t t0 = (task / n_cb) * row_block, t1 = T - t0 < row_block ? T : t0 + row_block;
        if (T == 1) {
            conv_block(y, pre, x, w + c0 * K, K, 1, hist, t0, t1, c0, nc, C, K);
            continue;
        }
        float wt[CONV_MAX_K][CONV_FWD_CB];
        for (int64_t j = 0; j < K; j++)
            for (int64_t c = 0; c < nc; c++)
                wt[j][c] = w[(c0 + c) * K + j];
        conv_block(y, pre, x, &wt[0][0], 1, CONV_FWD_CB, hist, t0, t1, c0, nc, C, K);
    }
}

/* Channels c0 .. c0 + nc (nc <= CONV_FWD_CB) of hyla_conv_silu_step. */
static void conv_step_block(float *y /*[C]*/, const float *x /*[C]*/, const float *w /*[C,K]*/,
                            float *hist /*[K,C] in/out*/, int64_t C, int64_t K, int64_t c0, int64_t nc)
{
    const float *restrict wc = w + c0 * K;
    float sum[CONV_FWD_CB];
    for (int64_t c = 0; c < nc; c++)
        sum[c] = 0.0f;
    for (int64_t j = 0; j + 1 < K; j++) { /* tap j reads window row j + 1, which becomes row j */
        float *restrict hj = hist + j * C + c0;
        const float *restrict hn = hist + (j + 1) * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) {
            sum[c] += wc[c * K + j] * hn[c];
            hj[c] = hn[c];
        }
    }
    float *restrict hl = hist + (K - 1) * C + c0, *restrict yc = y + c0;
    const float *restrict xc = x + c0;
#pragma omp simd
    for (int64_t c = 0; c < nc; c++) {
        sum[c] += wc[c * K + K - 1] * xc[c];
        hl[c] = xc[c];
        yc[c] = hyla_silu(sum[c]);
    }
}

void hyla_conv_silu_step(float *y /*[C]*/, const float *x /*[C]*/, const float *w /*[C,K]*/,
                         float *hist /*[K,C] in/out*/, int64_t C, int64_t K)
{
    int64_t n_cb = (C + CONV_FWD_CB - 1) / CONV_FWD_CB;
    /* work: as hyla_conv_silu_fwd's for one row */
#pragma omp parallel for schedule(static) HYLA_PAR_IF(C * (K + 32))
    for (int64_t cb = 0; cb < n_cb; cb++) {
        int64_t c0 = cb * CONV_FWD_CB;
        conv_step_block(y, x, w, hist, C, K, c0, C - c0 < CONV_FWD_CB ? C - c0 : CONV_FWD_CB);
    }
}

void hyla_conv_silu_step_range(float *y /*[C]*/, const float *x /*[C]*/, const float *w /*[C,K]*/,
                               float *hist /*[K,C] in/out*/, int64_t C, int64_t K, int64_t c0, int64_t c1)
{
    for (; c0 < c1; c0 += CONV_FWD_CB)
        conv_step_block(y, x, w, hist, C, K, c0, c1 - c0 < CONV_FWD_CB ? c1 - c0 : CONV_FWD_CB);
}

/* ---- gates ---------------------------------------------------------------------------------- */

/* torch.nn.functional.softplus with beta = 1, threshold = 20 (fp32) */
static float softplus20(float s) { return s > 20.0f ? s : log1pf(expf(s)); }

__attribute__((noinline)) void hyla_gdn_gates_row(float *g /*[Hv]*/, float *beta /*[Hv]*/, const float *a /*[Hv]*/,
                                                 const float *b /*[Hv]*/, const float *A_log /*[Hv]*/,
                                                 const float *dt_bias /*[Hv]*/, int64_t Hv)
{
    for (int64_t h = 0; h < Hv; h++) {
        g[h] = -expf(A_log[h]) * softplus20(a[h] + dt_bias[h]);
        beta[h] = hyla_sigmoid(b[h]);
    }
}

void hyla_gdn_gates_fwd(float *g /*[n,Hv]*/, float *beta /*[n,Hv]*/, const float *a /*[n,Hv]*/,
                        const float *b /*[n,Hv]*/, const float *A_log /*[Hv]*/,
                        const float *dt_bias /*[Hv]*/, int64_t n, int64_t Hv)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(16 * n * Hv)
    for (int64_t i = 0; i < n; i++)
        hyla_gdn_gates_row(g + i * Hv, beta + i * Hv, a + i * Hv, b + i * Hv, A_log, dt_bias, Hv);
}

/* ---- backward ------------------------------------------------------------------------------- */

/* silu'(u) = sigma(u) (1 + u (1 - sigma(u))) */
static float silu_grad(float u)
{
    float s, om;
    hyla_sigmoid_pair(u, &s, &om);
    return s * (1.0f + u * om);
}

#define CONV_CB 64 /* channels per parallel block of the conv backward */

/* One pass over the rows per block of CONV_CB channels, one thread: at row t, (1) dpre[t] = dy
 * silu'(pre) with pre recomputed as in the forward (taps in order, rows before the first from
 * hist or zero), kept in a ring of the last K rows; (2) dw[c,j] += dpre[t,c] x[t-K+1+j,c], each
 * tap's sum over t in order in double; (3) dx[s,c] = sum_j dpre[s+K-1-j,c] w[c,j] for s = t-K+1,
 * whose K rows of dpre are now all in the ring; the last K-1 rows after the loop, their sums
 * started from dx_tail (the taps of the rows after this slice come first in tap order); (4)
 * d_hist: the same sums for the K-1 rows before the slice over the taps that reach into it, from
 * the first K-1 rows of dpre. Every sum has one fixed order, so results do not depend on the
 * thread count. One pass instead of three: rows 24 KB apart (6,144 channels), revisited after the
 * whole slice, had fallen out of the caches (their lines share a few sets) -- 18 layers of 512
 * tokens 110 -> 79 ms on 2 threads, and with x's and dy's rows asked for CONV_PREFETCH_ROWS ahead
 * 54 ms; the same bits. dx must not alias dy or x. */
static inline void conv_dx_row(float *restrict dxs, const float (*ring)[CONV_CB], const float (*wt)[CONV_CB],
                               const float *tail, int64_t s, int64_t T, int64_t K, int64_t nc)
{
    float sum[CONV_CB];
    for (int64_t c = 0; c < nc; c++)
        sum[c] = tail ? tail[c] : 0.0f;
    for (int64_t j = 0; j < K; j++) { /* taps in order, as one sum per element */
        int64_t t = s + K - 1 - j;
        if (t >= T)
            continue;
        const float *dp = ring[t % K];
#pragma omp simd
        for (int64_t c = 0; c < nc; c++)
            sum[c] += dp[c] * wt[j][c];
    }
    for (int64_t c = 0; c < nc; c++)
        dxs[c] = sum[c];
}

void hyla_conv_silu_bwd_hist(float *dx /*[T,C]*/, float *dw /*[C,K] +=*/, float *d_hist /*[K-1,C] or NULL*/,
                             const float *dx_tail /*[K-1,C] or NULL*/, const float *dy /*[T,C]*/,
                             const float *x /*[T,C]*/, const float *w /*[C,K]*/, const float *hist /*[K,C] or NULL*/,
                             int64_t T, int64_t C, int64_t K)
{
    HYLA_ASSERT(K <= CONV_MAX_K); /* (dx_tail's row for row s is s + K - 1 - T: in range for any T) */
    int64_t nblk = (C + CONV_CB - 1) / CONV_CB;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(T * C * K)
    for (int64_t bi = 0; bi < nblk; bi++) {
        int64_t c0 = bi * CONV_CB, nc = C - c0 < CONV_CB ? C - c0 : CONV_CB;
        double acc[CONV_MAX_K][CONV_CB];
        float pre[CONV_CB], wt[CONV_MAX_K][CONV_CB]; /* the block's taps, transposed (contiguous loads) */
        float ring[CONV_MAX_K][CONV_CB], first[CONV_MAX_K][CONV_CB]; /* dpre: the last K rows; the first K-1 */
        for (int64_t j = 0; j < K; j++)
            for (int64_t c = 0; c < nc; c++)
                wt[j][c] = w[(c0 + c) * K + j], acc[j][c] = 0.0;
        for (int64_t t = 0; t < T; t++) {
            if (t + CONV_PREFETCH_ROWS < T)
                for (int64_t c = 0; c < nc; c += 16) {
                    __builtin_prefetch(x + (t + CONV_PREFETCH_ROWS) * C + c0 + c);
                    __builtin_prefetch(dy + (t + CONV_PREFETCH_ROWS) * C + c0 + c);
                }
            for (int64_t c = 0; c < nc; c++)
                pre[c] = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                const float *xs = conv_row(x, hist, t - (K - 1) + j, C, K);
                if (!xs)
                    continue;
                xs += c0;
#pragma omp simd
                for (int64_t c = 0; c < nc; c++)
                    pre[c] += wt[j][c] * xs[c];
            }
            const float *dyt = dy + t * C + c0;
            float *dp = ring[t % K];
#pragma omp simd
            for (int64_t c = 0; c < nc; c++)
                dp[c] = dyt[c] * silu_grad(pre[c]);
            if (t < K - 1)
                for (int64_t c = 0; c < nc; c++)
                    first[t][c] = dp[c];
            for (int64_t j = 0; dw && j < K; j++) { /* dw NULL: a frozen kernel */
                const float *xs = conv_row(x, hist, t - (K - 1) + j, C, K); /* (none before row 0 without hist) */
                if (!xs)
                    continue;
                xs += c0;
#pragma omp simd
                for (int64_t c = 0; c < nc; c++)
                    acc[j][c] += (double)dp[c] * xs[c];
            }
            if (t >= K - 1)
                conv_dx_row(dx + (t - (K - 1)) * C + c0, ring, wt, NULL, t - (K - 1), T, K, nc);
        }
        for (int64_t s = T - (K - 1) > 0 ? T - (K - 1) : 0; s < T; s++) {
            int64_t tail = s - (T - (K - 1)); /* row of dx_tail, if >= 0 */
            conv_dx_row(dx + s * C + c0, ring, wt, dx_tail && tail >= 0 ? dx_tail + tail * C + c0 : NULL, s, T, K, nc);
        }
        for (int64_t j = 0; dw && j < K; j++)
            for (int64_t c = 0; c < nc; c++)
                dw[(c0 + c) * K + j] += (float)acc[j][c];
        for (int64_t i = 0; d_hist && i < K - 1; i++) { /* row i - (K - 1): taps j <= i reach rows i - j >= 0 */
            for (int64_t c = 0; c < nc; c++)
                pre[c] = 0.0f;
            for (int64_t j = 0; j <= i && i - j < T; j++) {
#pragma omp simd
                for (int64_t c = 0; c < nc; c++)
                    pre[c] += first[i - j][c] * wt[j][c];
            }
            for (int64_t c = 0; c < nc; c++)
                d_hist[i * C + c0 + c] = pre[c];
        }
    }
}

void hyla_conv_silu_bwd(float *dx /*[T,C]*/, float *dw /*[C,K] +=*/, const float *dy /*[T,C]*/,
                        const float *x /*[T,C]*/, const float *w /*[C,K]*/, int64_t T, int64_t C,
                        int64_t K)
{
    hyla_conv_silu_bwd_hist(dx, dw, NULL, NULL, dy, x, w, NULL, T, C, K);
}

/* Spec §8.4: dA_log += sum_i dg g; da = dg (-exp(A_log) softplus'(s)), s = a + dt_bias,
 * softplus' = sigma(s) (1 above the threshold 20, where softplus(s) = s); ddt_bias += sum_i da;
 * db = dbeta beta (1 - beta). Elementwise part over rows, then the two reductions per head with
 * rows summed in order (double), so nothing depends on the thread count. */
void hyla_gdn_gates_bwd(float *da /*[n,Hv]*/, float *db /*[n,Hv]*/, float *dA_log /*[Hv] +=*/,
                        float *ddt_bias /*[Hv] +=*/, const float *dg /*[n,Hv]*/,
                        const float *dbeta /*[n,Hv]*/, const float *a /*[n,Hv]*/,
                        const float *b /*[n,Hv]*/, const float *A_log /*[Hv]*/,
                        const float *dt_bias /*[Hv]*/, int64_t n, int64_t Hv)
{
#pragma omp parallel for schedule(static) HYLA_PAR_IF(16 * n * Hv)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t h = 0; h < Hv; h++) {
            int64_t ih = i * Hv + h;
            float s = a[ih] + dt_bias[h], sig, om;
            hyla_sigmoid_pair(s, &sig, &om);
            da[ih] = dg[ih] * (-expf(A_log[h]) * (s > 20.0f ? 1.0f : sig));
            hyla_sigmoid_pair(b[ih], &sig, &om);
            db[ih] = dbeta[ih] * (sig * om);
        }
    }
#pragma omp parallel for schedule(static) HYLA_PAR_IF(16 * n * Hv)
    for (int64_t h = 0; h < Hv; h++) {
        float eA = expf(A_log[h]);
        double sA = 0.0, sdt = 0.0;
        for (int64_t i = 0; i < n; i++) {
            int64_t ih = i * Hv + h;
            float g = -eA * softplus20(a[ih] + dt_bias[h]); /* as in the forward */
            sA += (double)dg[ih] * g;
            sdt += da[ih];
        }
        if (dA_log) /* NULL: frozen (LoRA training) */
            dA_log[h] += (float)sA;
        if (ddt_bias)
            ddt_bias[h] += (float)sdt;
    }
}
