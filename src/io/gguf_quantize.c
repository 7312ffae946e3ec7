/* Quantizing fp32 rows to ggml block types for the GGUF writer (gguf.h, hyla_ggml_from_f32), the
 * way llama.cpp's reference quantizers do (importance-matrix free, deterministic), so a file hyla
 * writes holds the blocks llama.cpp's own tools write for the same values:
 *   Q8_0  d = max |x| / 127 (f16), q = round(x / d), halves away from zero;
 *   Q6_K  per 16-value sub-block a scale from a weighted least-squares search over 19 candidate
 *         grids (weights x^2, levels -32..31); the 16 scales quantized to int8 against the one of
 *         largest magnitude (d = max / -128, f16), then every value re-rounded against its final
 *         scale d sc. Values are rounded to nearest, ties to even (ggml's nearest_int). */
#include "io/gguf.h"

#include <math.h>
#include <string.h>

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

/* The scale of n values on the levels -nmax .. nmax - 1 minimising sum x^2 (x - scale l)^2 over
 * the grids -(nmax + 0.1 k) / max, k = -9..9 (max: the value of largest magnitude); L = l + nmax. */
static float grid_scale(int n, int nmax, const float *x, signed char *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]), max = x[i];
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (signed char)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
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

void hyla_ggml_from_f32(hyla_ggml_type t, void *dst, const float *src, size_t n)
{
    switch (t) {
    case HYLA_GGML_F32: memcpy(dst, src, 4 * n); break;
    case HYLA_GGML_F16: hyla_dtype_from_f32(dst, src, HYLA_DT_F16, n); break;
    case HYLA_GGML_BF16: hyla_dtype_from_f32(dst, src, HYLA_DT_BF16, n); break;
    case HYLA_GGML_Q8_0: q8_0_from_f32(dst, src, n); break;
    case HYLA_GGML_Q6_K: q6_k_from_f32(dst, src, n); break;
    default: break; /* the writer is only given the types above (hyla_gguf_add_tensor checks) */
    }
}
