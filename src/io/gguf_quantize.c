/* Quantizing fp32 rows to ggml block types for the GGUF writer (gguf.h, hyla_ggml_from_f32), the
 * way llama.cpp's reference quantizers do (importance-matrix free, deterministic), so a file hyla
 * writes holds the blocks llama.cpp's own tools write for the same values:
 *   Q8_0  d = max |x| / 127 (f16), q = round(x / d), halves away from zero;
 *   Q6_K  per 16-value sub-block a scale from a weighted least-squares search over 19 candidate
 *         grids (weights x^2, levels -32..31); the 16 scales quantized to int8 against the one of
 *         largest magnitude (d = max / -128, f16), then every value re-rounded against its final
 *         scale d sc. Values are rounded to nearest, ties to even (ggml's nearest_int);
 *   Q4_K / Q5_K  per 32-value sub-block a scale and min (grid_scale_min, squared errors), 6-bit
 *         fractions of the largest of each;
 *   Q3_K  per 16 a scale from a weighted least-squares refinement of levels -4..3 (q3_scale), the 16
 *         scales as 6-bit fractions of the one of largest magnitude (d = max / -32);
 *   Q2_K  per 16 a scale and min on levels 0..3 (grid_scale_min, absolute errors, weights |x|), 4-bit
 *         fractions of the largest of each. */
#include "io/gguf.h"

#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "io/safetensors.h"

#define GROUP_MAX_EPS 1e-15f

static void q8_0_from_f32(unsigned char *dst, const float *src, size_t n)
{
    for (size_t b = 0; b < n / HYLA_Q8_0_BLOCK; b++, src += HYLA_Q8_0_BLOCK, dst += 2 + HYLA_Q8_0_BLOCK) {
        float amax = 0;
        for (int i = 0; i < HYLA_Q8_0_BLOCK; i++)
            amax = fmaxf(amax, fabsf(src[i]));
        float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        hyla_dtype_from_f32(dst, &d, HYLA_DT_F16, 1);
        for (int i = 0; i < HYLA_Q8_0_BLOCK; i++)
            dst[2 + i] = (unsigned char)(signed char)roundf(src[i] * id); /* half away from zero */
    }
}

static inline int nearest(float v) { return (int)nearbyintf(v); } /* ties to even, as ggml's nearest_int */

static inline int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The first grid of a signed scale search, -nmax / max (max: the value of largest magnitude, in *max):
 * L[i] = the level of x[i] on it (-nmax .. nmax - 1) plus `offset`, and the sums weighted by x^2 of x l
 * (*sumlx) and l^2 (*suml2). 0 when every |x| < GROUP_MAX_EPS (L zeroed; no scale). */
static int signed_grid_first(int n, int nmax, const float *x, signed char *L, int offset, float *max, float *sumlx,
                             float *suml2)
{
    float amax = 0;
    *max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]), *max = x[i];
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -nmax / *max;
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (signed char)(l + offset);
        float w = x[i] * x[i];
        *sumlx += w * x[i] * l;
        *suml2 += w * l * l;
    }
    return 1;
}

/* The scale of n values on the levels -nmax .. nmax - 1 minimising sum x^2 (x - scale l)^2 over
 * the grids -(nmax + 0.1 k) / max, k = -9..9 (max: the value of largest magnitude); L = l + nmax. */
static float grid_scale(int n, int nmax, const float *x, signed char *L)
{
    float max, sumlx, suml2, iscale;
    if (!signed_grid_first(n, nmax, x, L, nmax, &max, &sumlx, &suml2))
        return 0;
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0)
            continue;
        iscale = -(nmax + 0.1f * k) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (signed char)(nmax + clamp(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's make_q3_quants with its refinement: the scale of n values on the levels -nmax .. nmax - 1
 * (L = l + nmax) from the grid -nmax / max, then up to 5 sweeps that move a value to the level its
 * leave-one-out least-squares scale gives it when that raises sumlx^2 / suml2 (weights x^2). */
static float q3_scale(int n, int nmax, const float *x, signed char *L)
{
    float max, sumlx, suml2;
    if (!signed_grid_first(n, nmax, x, L, 0, &max, &sumlx, &suml2))
        return 0;
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i], slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int l = clamp(nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (l != L[i]) {
                    slx += w * x[i] * l;
                    sl2 += w * l * l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (signed char)l, sumlx = slx, suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (signed char)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The scale and min (returned as -min >= 0 in *neg_min) of n values on the levels 0 .. nmax,
 * minimising sum w |x - (scale l + min)|^2 (mad: sum w |x - (scale l + min)|) over nstep + 1 grids
 * (rmin + rdelta k + nmax) / (max - min), each refined by the weighted least-squares scale and min of
 * its levels (min <= 0). */
static float grid_scale_min(int n, int nmax, const float *x, const float *w, unsigned char *L, float *neg_min,
                            unsigned char *Laux, float rmin, float rdelta, int nstep, int mad)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (unsigned char)clamp(nearest(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (mad ? fabsf(diff) : diff * diff);
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * k + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp(nearest(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (unsigned char)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                err += w[i] * (mad ? fabsf(diff) : diff * diff);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

static float half_to_f32(const unsigned char *p)
{
    float f;
    hyla_dtype_to_f32(&f, p, HYLA_DT_F16, 1);
    return f;
}

static void q6_k_from_f32(unsigned char *dst, const float *x, size_t n)
{
    for (size_t b = 0; b < n / HYLA_QK_K; b++, x += HYLA_QK_K, dst += 210) {
        signed char L[HYLA_QK_K], *sc = (signed char *)(dst + 192);
        float scales[16], max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = grid_scale(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs)
                max_abs = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(dst, 0, 210);
        if (max_abs < GROUP_MAX_EPS)
            continue; /* all zero, d = 0 */
        float iscale = -128.0f / max_scale, d = 1 / iscale;
        hyla_dtype_from_f32(dst + 208, &d, HYLA_DT_F16, 1);
        for (int j = 0; j < 16; j++)
            sc[j] = (signed char)(nearest(iscale * scales[j]) < 127 ? nearest(iscale * scales[j]) : 127);
        float dh = half_to_f32(dst + 208);
        for (int j = 0; j < 16; j++) {
            float dj = dh * sc[j];
            if (!dj)
                continue;
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (signed char)(clamp(nearest(x[16 * j + i] / dj), -32, 31) + 32);
        }
        unsigned char *ql = dst, *qh = dst + 128;
        for (int j = 0; j < HYLA_QK_K; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                const unsigned char *q = (const unsigned char *)L + j + l;
                ql[l] = (unsigned char)((q[0] & 0xF) | ((q[64] & 0xF) << 4));
                ql[l + 32] = (unsigned char)((q[32] & 0xF) | ((q[96] & 0xF) << 4));
                qh[l] = (unsigned char)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
            }
    }
}

/* Q4_K (nmax 15, 144-byte blocks) and Q5_K (nmax 31, 176): per 32-value sub-block a scale and
 * min from grid_scale_min (weights mean(|x|^2)^(1/2) + |x|), the 8 scales and 8 mins as 6-bit
 * fractions of their largest (d, dmin in f16), every value re-rounded against d sc and dmin m. */
static void k4_from_f32(unsigned char *dst, const float *x, size_t n, int nmax)
{
    size_t bytes = nmax == 15 ? 144 : 176;
    for (size_t b = 0; b < n / HYLA_QK_K; b++, x += HYLA_QK_K, dst += bytes) {
        unsigned char L[HYLA_QK_K], Laux[32], *sc = dst + 4;
        float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++)
                sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++)
                w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = nmax == 15
                            ? grid_scale_min(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20, 0)
                            : grid_scale_min(32, 31, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 0);
            max_scale = scales[j] > max_scale ? scales[j] : max_scale;
            max_min = mins[j] > max_min ? mins[j] : max_min;
        }
        memset(dst, 0, bytes);
        float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < 8; j++) {
            unsigned char ls = (unsigned char)nearest(inv_scale * scales[j]), lm = (unsigned char)nearest(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = (unsigned char)((ls & 0xF) | ((lm & 0xF) << 4));
                sc[j - 4] |= (unsigned char)((ls >> 4) << 6);
                sc[j] |= (unsigned char)((lm >> 4) << 6);
            }
        }
        float d = max_scale / 63.0f, dmin = max_min / 63.0f;
        hyla_dtype_from_f32(dst, &d, HYLA_DT_F16, 1);
        hyla_dtype_from_f32(dst + 2, &dmin, HYLA_DT_F16, 1);
        float dh = half_to_f32(dst), dminh = half_to_f32(dst + 2);
        uint8_t s8[8], m8[8];
        hyla_k4_scales(sc, s8, m8); /* the 6-bit values as stored */
        for (int j = 0; j < 8; j++) {
            float dj = dh * (float)s8[j];
            if (!dj)
                continue;
            float dm = dminh * (float)m8[j];
            for (int i = 0; i < 32; i++)
                L[32 * j + i] = (unsigned char)clamp(nearest((x[32 * j + i] + dm) / dj), 0, nmax);
        }
        if (nmax == 15) {
            unsigned char *q = dst + 16;
            for (int j = 0; j < HYLA_QK_K; j += 64, q += 32)
                for (int l = 0; l < 32; l++)
                    q[l] = (unsigned char)(L[j + l] | (L[j + l + 32] << 4));
        } else {
            unsigned char *qh = dst + 16, *ql = dst + 48, m1 = 1, m2 = 2;
            for (int j = 0; j < HYLA_QK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2)
                for (int l = 0; l < 32; l++) {
                    int l1 = L[j + l], l2 = L[j + l + 32];
                    if (l1 > 15)
                        l1 -= 16, qh[l] |= m1;
                    if (l2 > 15)
                        l2 -= 16, qh[l] |= m2;
                    ql[l] = (unsigned char)(l1 | (l2 << 4));
                }
        }
    }
}

/* Q2_K / Q3_K: 256 levels 0..3 into 64 bytes (value 128 h + 32 s + l at bits 2 s of qs[32 h + l]). */
static void pack_2bit(unsigned char *qs, const unsigned char *L)
{
    for (int j = 0; j < HYLA_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] =
                (unsigned char)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* Q3_K (110-byte blocks: hmask[32], qs[64], scales[12], d): ggml's quantize_row_q3_K_ref. */
static void q3_k_from_f32(unsigned char *dst, const float *x, size_t n)
{
    for (size_t b = 0; b < n / HYLA_QK_K; b++, x += HYLA_QK_K, dst += 110) {
        signed char L[HYLA_QK_K];
        unsigned char *hm = dst, *qs = dst + 32, *sc = dst + 96;
        float scales[16], max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = q3_scale(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax)
                amax = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(dst, 0, 110);
        if (max_scale) {
            float iscale = -32.f / max_scale, d = 1 / iscale;
            for (int j = 0; j < 16; j++) {
                int l = clamp((signed char)nearest(iscale * scales[j]), -32, 31) + 32;
                sc[j % 8] |= (unsigned char)((l & 0xF) << (j < 8 ? 0 : 4));
                sc[8 + j % 4] |= (unsigned char)((l >> 4) << (2 * (j / 4)));
            }
            hyla_dtype_from_f32(dst + 108, &d, HYLA_DT_F16, 1);
        }
        float dh = half_to_f32(dst + 108);
        signed char s[16];
        hyla_k3_scales(sc, (int8_t *)s);
        for (int j = 0; j < 16; j++) {
            float dj = dh * s[j];
            if (!dj)
                continue;
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (signed char)(clamp(nearest(x[16 * j + i] / dj), -4, 3) + 4);
        }
        for (int j = 0; j < HYLA_QK_K; j++) /* the third bit of value j: bit j / 32 of hmask[j % 32] */
            if (L[j] > 3)
                hm[j % 32] |= (unsigned char)(1 << (j / 32)), L[j] -= 4;
        pack_2bit(qs, (const unsigned char *)L);
    }
}

/* Q2_K (84-byte blocks: scales[16] (scale | min << 4), qs[64], d, dmin): ggml's quantize_row_q2_K_ref. */
static void q2_k_from_f32(unsigned char *dst, const float *x, size_t n)
{
    for (size_t b = 0; b < n / HYLA_QK_K; b++, x += HYLA_QK_K, dst += 84) {
        unsigned char L[HYLA_QK_K], Laux[16], *sc = dst, *qs = dst + 16;
        float w[16], mins[16], scales[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(x[16 * j + l]);
            scales[j] = grid_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            max_scale = scales[j] > max_scale ? scales[j] : max_scale;
            max_min = mins[j] > max_min ? mins[j] : max_min;
        }
        memset(dst, 0, 84);
        if (max_scale > 0) {
            float iscale = 15.f / max_scale, d = max_scale / 15.f;
            for (int j = 0; j < 16; j++)
                sc[j] = (unsigned char)nearest(iscale * scales[j]);
            hyla_dtype_from_f32(dst + 80, &d, HYLA_DT_F16, 1);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min, dmin = max_min / 15.f;
            for (int j = 0; j < 16; j++)
                sc[j] |= (unsigned char)(nearest(iscale * mins[j]) << 4);
            hyla_dtype_from_f32(dst + 82, &dmin, HYLA_DT_F16, 1);
        }
        float dh = half_to_f32(dst + 80), dminh = half_to_f32(dst + 82);
        for (int j = 0; j < 16; j++) {
            float dj = dh * (sc[j] & 0xF);
            if (!dj)
                continue;
            float dm = dminh * (sc[j] >> 4);
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (unsigned char)clamp(nearest((x[16 * j + i] + dm) / dj), 0, 3);
        }
        pack_2bit(qs, (const unsigned char *)L);
    }
}

static void from_f32_serial(hyla_ggml_type t, unsigned char *dst, const float *src, size_t n)
{
    switch (t) {
    case HYLA_GGML_F32: memcpy(dst, src, 4 * n); break;
    case HYLA_GGML_F16: hyla_dtype_from_f32(dst, src, HYLA_DT_F16, n); break;
    case HYLA_GGML_BF16: hyla_dtype_from_f32(dst, src, HYLA_DT_BF16, n); break;
    case HYLA_GGML_Q8_0: q8_0_from_f32(dst, src, n); break;
    case HYLA_GGML_Q6_K: q6_k_from_f32(dst, src, n); break;
    case HYLA_GGML_Q4_K: k4_from_f32(dst, src, n, 15); break;
    case HYLA_GGML_Q5_K: k4_from_f32(dst, src, n, 31); break;
    case HYLA_GGML_Q3_K: q3_k_from_f32(dst, src, n); break;
    case HYLA_GGML_Q2_K: q2_k_from_f32(dst, src, n); break;
    default: break; /* the writer is only given the types above (hyla_gguf_add_tensor checks) */
    }
}

/* Blocks are quantized independently, so pieces of QUANT_PIECE blocks go to the threads and the bytes
 * do not depend on their number (the K-quants' searches cost ~100 operations a value: a 0.8B model's
 * Q4_K_M export from its F32 GGUF took 35 s on one thread). */
#define QUANT_PIECE 256
void hyla_ggml_from_f32(hyla_ggml_type t, void *dst, const float *src, size_t n)
{
    size_t bv = (size_t)hyla_ggml_block_values(t), bb = (size_t)hyla_ggml_block_bytes(t);
    if (t == HYLA_GGML_F32 || t == HYLA_GGML_F16 || t == HYLA_GGML_BF16 || !bv) {
        from_f32_serial(t, dst, src, n);
        return;
    }
    size_t blocks = n / bv, pieces = (blocks + QUANT_PIECE - 1) / QUANT_PIECE;
#pragma omp parallel for schedule(dynamic, 1) HYLA_PAR_IF(pieces > 1 ? 100 * n : 0)
    for (size_t p = 0; p < pieces; p++) {
        size_t b0 = p * QUANT_PIECE, nb = blocks - b0 < QUANT_PIECE ? blocks - b0 : QUANT_PIECE;
        from_f32_serial(t, (unsigned char *)dst + b0 * bb, src + b0 * bv, nb * bv);
    }
}
