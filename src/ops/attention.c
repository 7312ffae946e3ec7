/* Causal GQA softmax attention, forward (spec §3.5 step 5), flash-style.
 *
 * Work is split into tasks (query head h, block of HYLA_ATT_BQ query rows); each task is done
 * by one thread, walking the visible keys in blocks of HYLA_ATT_BK with an online softmax
 * (running max m, running sum l, output rescaled when the max grows). The arithmetic of a task
 * does not depend on which thread runs it or on how many there are, so results are bitwise
 * thread-count invariant. The output rows themselves are the accumulators, so no scratch is
 * needed beyond small fixed-size stack arrays; hyla_attention_work_floats() is 0.
 *
 * Rounding vs the two-pass softmax: scores are dots of length hd (fmaf, vector order), the
 * online rescaling adds one rounding per key block, the P.V sum has S terms. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "ops/ops.h"

#define HYLA_ATT_BQ 16 /* query rows per task */
#define HYLA_ATT_BK 64 /* keys per block */

size_t hyla_attention_work_floats(int64_t S) { return 0; }

/* s[j] = scale * q . k_j for j < nk, four queries at a time sharing each key load. */
static void att_scores(float s[][HYLA_ATT_BK] /*[nq][BK]*/, const float *const *qr /*[nq]->[hd]*/,
                       int nq, const float *k /*[nk, ld]*/, int64_t ld, int nk, int64_t hd,
                       float scale)
{
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *q0 = qr[i], *q1 = qr[i + 1], *q2 = qr[i + 2], *q3 = qr[i + 3];
        for (int j = 0; j < nk; j++) {
            const float *kj = k + j * ld;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
            for (int64_t d = 0; d < hd; d++) {
                a0 = fmaf(q0[d], kj[d], a0);
                a1 = fmaf(q1[d], kj[d], a1);
                a2 = fmaf(q2[d], kj[d], a2);
                a3 = fmaf(q3[d], kj[d], a3);
            }
            s[i][j] = a0 * scale;
            s[i + 1][j] = a1 * scale;
            s[i + 2][j] = a2 * scale;
            s[i + 3][j] = a3 * scale;
        }
    }
    for (; i < nq; i++) {
        const float *q0 = qr[i];
        for (int j = 0; j < nk; j++) {
            const float *kj = k + j * ld;
            float a0 = 0.0f;
#pragma omp simd reduction(+ : a0)
            for (int64_t d = 0; d < hd; d++)
                a0 = fmaf(q0[d], kj[d], a0);
            s[i][j] = a0 * scale;
        }
    }
}

/* o += sum_j p[j] v_j over j < nk (p[j] = 0 beyond a row's causal limit). */
static void att_pv(float *o /*[hd]*/, const float *p /*[nk]*/, const float *v /*[nk, ld]*/,
                   int64_t ld, int nk, int64_t hd)
{
    int j = 0;
    for (; j + 4 <= nk; j += 4) {
        const float *v0 = v + j * ld, *v1 = v0 + ld, *v2 = v1 + ld, *v3 = v2 + ld;
        float p0 = p[j], p1 = p[j + 1], p2 = p[j + 2], p3 = p[j + 3];
#pragma omp simd
        for (int64_t d = 0; d < hd; d++)
            o[d] = fmaf(p3, v3[d], fmaf(p2, v2[d], fmaf(p1, v1[d], fmaf(p0, v0[d], o[d]))));
    }
    for (; j < nk; j++) {
        const float *vj = v + j * ld;
        float pj = p[j];
#pragma omp simd
        for (int64_t d = 0; d < hd; d++)
            o[d] = fmaf(pj, vj[d], o[d]);
    }
}

/* One task: query head h (kv head g), query rows t0 .. t0+nq-1. */
static void att_task(float *out, float *lse, const float *q, const float *k, const float *v,
                     int64_t t0, int nq, int64_t past, int64_t h, int64_t g, int64_t Hq,
                     int64_t Hkv, int64_t hd, float scale)
{
    float s[HYLA_ATT_BQ][HYLA_ATT_BK]; /* scores, then probabilities */
    float m[HYLA_ATT_BQ], l[HYLA_ATT_BQ];
    const float *qr[HYLA_ATT_BQ];
    float *orow[HYLA_ATT_BQ];
    for (int i = 0; i < nq; i++) {
        qr[i] = q + ((t0 + i) * Hq + h) * hd;
        orow[i] = out + ((t0 + i) * Hq + h) * hd;
        memset(orow[i], 0, (size_t)hd * sizeof(float));
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    int64_t ld = Hkv * hd;
    int64_t kend = past + t0 + nq; /* keys visible to the last row: 0 .. kend-1 */
    for (int64_t j0 = 0; j0 < kend; j0 += HYLA_ATT_BK) {
        int nk = (int)(kend - j0 < HYLA_ATT_BK ? kend - j0 : HYLA_ATT_BK);
        const float *kb = k + j0 * ld + g * hd, *vb = v + j0 * ld + g * hd;
        att_scores(s, qr, nq, kb, ld, nk, hd, scale);
        for (int i = 0; i < nq; i++) {
            int64_t lim = past + t0 + i + 1 - j0; /* visible keys of row i in this block */
            int n_vis = (int)(lim < 0 ? 0 : lim < nk ? lim : nk);
            float mx = m[i];
            for (int j = 0; j < n_vis; j++)
                mx = s[i][j] > mx ? s[i][j] : mx;
            float corr = expf(m[i] - mx); /* 0 on the first block (m = -inf) */
            float sum = 0.0f;
            for (int j = 0; j < n_vis; j++) {
                s[i][j] = expf(s[i][j] - mx);
                sum += s[i][j];
            }
            for (int j = n_vis; j < nk; j++)
                s[i][j] = 0.0f;
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            if (corr != 1.0f)
                for (int64_t d = 0; d < hd; d++)
                    orow[i][d] *= corr;
            att_pv(orow[i], s[i], vb, ld, n_vis, hd);
        }
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        for (int64_t d = 0; d < hd; d++)
            orow[i][d] *= inv;
        if (lse)
            lse[(t0 + i) * Hq + h] = m[i] + logf(l[i]);
    }
}

void hyla_attention_fwd(float *out /*[T,Hq,hd]*/, float *lse /*[T,Hq] or NULL*/,
                        const float *q /*[T,Hq,hd]*/, const float *k /*[S,Hkv,hd]*/,
                        const float *v /*[S,Hkv,hd]*/, int64_t T, int64_t past, int64_t Hq,
                        int64_t Hkv, int64_t hd, float scale, float *work)
{
    HYLA_ASSERT(T >= 0 && past >= 0 && Hkv > 0 && Hq % Hkv == 0 && hd > 0);
    int64_t r = Hq / Hkv;
    int64_t nqb = (T + HYLA_ATT_BQ - 1) / HYLA_ATT_BQ;
    /* later query blocks have more keys: hand them out first */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < nqb * Hq; task++) {
        int64_t qb = nqb - 1 - task / Hq, h = task % Hq;
        int64_t t0 = qb * HYLA_ATT_BQ;
        int nq = (int)(T - t0 < HYLA_ATT_BQ ? T - t0 : HYLA_ATT_BQ);
        att_task(out, lse, q, k, v, t0, nq, past, h, h / r, Hq, Hkv, hd, scale);
    }
}
