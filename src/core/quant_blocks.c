/* ggml block formats (quant.h): the type table and dequantization, each block exactly as ggml's
 * dequantize_row_* computes it (the same products in the same order; tests/test_quant.c checks the
 * values bit for bit against the `gguf` package's own dequantizers). */
#include <string.h>

#include "core/quant.h"
#include "core/quant_kernels.h"

int hyla_ggml_type_supported(uint32_t t)
{
    switch (t) {
    case HYLA_GGML_F32: case HYLA_GGML_F16: case HYLA_GGML_BF16: case HYLA_GGML_Q8_0: case HYLA_GGML_Q4_0:
    case HYLA_GGML_Q4_1: case HYLA_GGML_Q5_0: case HYLA_GGML_Q5_1: case HYLA_GGML_IQ4_NL:
    case HYLA_GGML_Q2_K: case HYLA_GGML_Q3_K: case HYLA_GGML_Q4_K: case HYLA_GGML_Q5_K: case HYLA_GGML_Q6_K:
    case HYLA_GGML_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

const char *hyla_ggml_type_name(hyla_ggml_type t)
{
    switch (t) {
    case HYLA_GGML_F32: return "F32";
    case HYLA_GGML_F16: return "F16";
    case HYLA_GGML_BF16: return "BF16";
    case HYLA_GGML_Q8_0: return "Q8_0";
    case HYLA_GGML_Q4_0: return "Q4_0";
    case HYLA_GGML_Q4_1: return "Q4_1";
    case HYLA_GGML_Q5_0: return "Q5_0";
    case HYLA_GGML_Q5_1: return "Q5_1";
    case HYLA_GGML_IQ4_NL: return "IQ4_NL";
    case HYLA_GGML_IQ4_XS: return "IQ4_XS";
    case HYLA_GGML_Q2_K: return "Q2_K";
    case HYLA_GGML_Q3_K: return "Q3_K";
    case HYLA_GGML_Q4_K: return "Q4_K";
    case HYLA_GGML_Q5_K: return "Q5_K";
    case HYLA_GGML_Q6_K: return "Q6_K";
    }
    return "?";
}

int64_t hyla_ggml_block_values(hyla_ggml_type t)
{
    switch (t) {
    case HYLA_GGML_F32: case HYLA_GGML_F16: case HYLA_GGML_BF16: return 1;
    case HYLA_GGML_Q8_0: case HYLA_GGML_Q4_0: case HYLA_GGML_Q4_1: case HYLA_GGML_Q5_0: case HYLA_GGML_Q5_1:
    case HYLA_GGML_IQ4_NL:
        return 32;
    case HYLA_GGML_Q2_K: case HYLA_GGML_Q3_K: case HYLA_GGML_Q4_K: case HYLA_GGML_Q5_K: case HYLA_GGML_Q6_K:
    case HYLA_GGML_IQ4_XS:
        return HYLA_QK_K;
    }
    return 0;
}

int64_t hyla_ggml_block_bytes(hyla_ggml_type t)
{
    switch (t) {
    case HYLA_GGML_F32: return 4;
    case HYLA_GGML_F16: case HYLA_GGML_BF16: return 2;
    case HYLA_GGML_Q8_0: return 34;
    case HYLA_GGML_Q4_0: case HYLA_GGML_IQ4_NL: return 18;
    case HYLA_GGML_Q4_1: return 20;
    case HYLA_GGML_Q5_0: return 22;
    case HYLA_GGML_Q5_1: return 24;
    case HYLA_GGML_IQ4_XS: return 136;
    case HYLA_GGML_Q2_K: return 84;
    case HYLA_GGML_Q3_K: return 110;
    case HYLA_GGML_Q4_K: return 144;
    case HYLA_GGML_Q5_K: return 176;
    case HYLA_GGML_Q6_K: return 210;
    }
    return 0;
}

size_t hyla_ggml_bytes(hyla_ggml_type t, size_t n)
{
    int64_t bv = hyla_ggml_block_values(t);
    return bv ? n / (size_t)bv * (size_t)hyla_ggml_block_bytes(t) : 0;
}

/* ---- dequantization (ggml's dequantize_row_*, product for product) ----------------------------- */

static inline float bf16(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void q8_0_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(signed char)b[2 + j] * d;
}

static void q4_0_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b);
    const unsigned char *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void q4_1_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b), m = hyla_half_at(b + 2);
    const unsigned char *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

static void q5_0_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b);
    uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
    const unsigned char *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int xh0 = (int)(((qh >> j) << 4) & 0x10), xh1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)(((qs[j] & 0x0F) | xh0) - 16) * d;
        y[j + 16] = (float)(((qs[j] >> 4) | xh1) - 16) * d;
    }
}

static void q5_1_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b), m = hyla_half_at(b + 2);
    uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
    const unsigned char *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int xh0 = (int)(((qh >> j) << 4) & 0x10), xh1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)((qs[j] & 0x0F) | xh0) * d + m;
        y[j + 16] = (float)((qs[j] >> 4) | xh1) * d + m;
    }
}

/* IQ4_NL / IQ4_XS: a 4-bit index q into ggml's non-linear table kvalues_iq4nl (hyla_iq4_values) */
const int8_t hyla_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void iq4_nl_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b);
    const unsigned char *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * hyla_iq4_values[qs[j] & 0xF];
        y[j + 16] = d * hyla_iq4_values[qs[j] >> 4];
    }
}

/* IQ4_XS: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]: sub-block j of 32 values has the 6-bit
 * scale ls = nibble j % 2 of scales_l[j / 2] | bits 2 j, 2 j + 1 of scales_h << 4, and its values
 * d (ls - 32) table[q], q as IQ4_NL's (the low nibbles of its 16 bytes the first 16 values). */
static void iq4_xs_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b);
    const unsigned char *qs = b + 8;
    for (int j = 0; j < 8; j++, y += 32, qs += 16) {
        float dl = d * hyla_iq4_xs_scale(b, j);
        for (int i = 0; i < 16; i++) {
            y[i] = dl * hyla_iq4_values[qs[i] & 0xF];
            y[i + 16] = dl * hyla_iq4_values[qs[i] >> 4];
        }
    }
}

void hyla_k4_scales(const unsigned char *packed, uint8_t sc[8], uint8_t m[8])
{
    uint32_t w[4];
    hyla_k4_scales_words(packed, w);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(w[j / 4] >> (8 * (j % 4)));
        m[j] = (uint8_t)(w[2 + j / 4] >> (8 * (j % 4)));
    }
}

/* Q2_K: scales[16] (low nibble a 16-value group's scale, high nibble its min), qs[64] (2 bits a value:
 * the 128-value half h, group g (0..7) of 16 values takes bits 2 (g / 2) of qs[32 h + 16 (g % 2) + l]), d,
 * dmin. */
static void q2_k_block(float *y, const unsigned char *b)
{
    const unsigned char *sc = b, *q = b + 16;
    float d = hyla_half_at(b + 80), dmin = hyla_half_at(b + 82);
    int is = 0;
    for (int n = 0; n < HYLA_QK_K; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; half++, is++) {
                float dl = d * (sc[is] & 0xF), ml = dmin * (sc[is] >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * ((q[16 * half + l] >> shift) & 3) - ml;
            }
}

/* Q3_K's 16 6-bit scales (12 packed bytes; ggml's kmask shuffle), minus 32: low 4 bits of scale j from
 * byte j % 8 (j < 8 its low nibble, else its high), the top 2 bits from byte 8 + j % 4, bits 2 (j / 4). */
void hyla_k3_scales(const unsigned char *packed, int8_t sc[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = (packed[j % 8] >> (j < 8 ? 0 : 4)) & 0xF, hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* Q3_K: hmask[32] (the third bit, set = no offset: bit h of hmask[l] for value group h), qs[64] (low 2
 * bits, laid out as Q2_K's), scales[12] (hyla_k3_scales), d; x = d sc (q - (high bit ? 0 : 4)). */
static void q3_k_block(float *y, const unsigned char *b)
{
    const unsigned char *hm = b, *q = b + 32;
    int8_t sc[16];
    hyla_k3_scales(b + 96, sc);
    float d = hyla_half_at(b + 108);
    int is = 0;
    unsigned m = 1;
    for (int n = 0; n < HYLA_QK_K; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2, m <<= 1)
            for (int half = 0; half < 2; half++, is++) {
                float dl = d * sc[is];
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (((q[16 * half + l] >> shift) & 3) - (hm[16 * half + l] & m ? 0 : 4));
            }
}

static void q4_k_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b), dmin = hyla_half_at(b + 2);
    const unsigned char *q = b + 16;
    uint8_t sc[8], m[8];
    hyla_k4_scales(b + 4, sc, m);
    for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
        float d1 = d * sc[is], m1 = dmin * m[is], d2 = d * sc[is + 1], m2 = dmin * m[is + 1];
        for (int l = 0; l < 32; l++)
            y[l] = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++)
            y[32 + l] = d2 * (q[l] >> 4) - m2;
    }
}

static void q5_k_block(float *y, const unsigned char *b)
{
    float d = hyla_half_at(b), dmin = hyla_half_at(b + 2);
    const unsigned char *qh = b + 16, *ql = b + 48;
    uint8_t sc[8], m[8];
    hyla_k4_scales(b + 4, sc, m);
    unsigned u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2, y += 64) {
        float d1 = d * sc[is], m1 = dmin * m[is], d2 = d * sc[is + 1], m2 = dmin * m[is + 1];
        for (int l = 0; l < 32; l++)
            y[l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            y[32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
}

static void q6_k_block(float *y, const unsigned char *b)
{
    const unsigned char *ql = b, *qh = b + 128;
    const signed char *sc = (const signed char *)(b + 192);
    float d = hyla_half_at(b + 208);
    for (int n = 0; n < HYLA_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
}

void hyla_ggml_to_f32(hyla_ggml_type t, float *dst, const void *src, int64_t n)
{
    const unsigned char *p = src;
    int64_t bv = hyla_ggml_block_values(t), bb = hyla_ggml_block_bytes(t);
    switch (t) {
    case HYLA_GGML_F32: memcpy(dst, src, (size_t)n * 4); return;
    case HYLA_GGML_F16: for (int64_t i = 0; i < n; i++) dst[i] = hyla_half_at(p + 2 * i); return;
    case HYLA_GGML_BF16: for (int64_t i = 0; i < n; i++) dst[i] = bf16(p + 2 * i); return;
    default: break;
    }
    void (*block)(float *, const unsigned char *) = NULL;
    switch (t) {
    case HYLA_GGML_Q8_0: block = q8_0_block; break;
    case HYLA_GGML_Q4_0: block = q4_0_block; break;
    case HYLA_GGML_Q4_1: block = q4_1_block; break;
    case HYLA_GGML_Q5_0: block = q5_0_block; break;
    case HYLA_GGML_Q5_1: block = q5_1_block; break;
    case HYLA_GGML_IQ4_NL: block = iq4_nl_block; break;
    case HYLA_GGML_IQ4_XS: block = iq4_xs_block; break;
    case HYLA_GGML_Q2_K: block = q2_k_block; break;
    case HYLA_GGML_Q3_K: block = q3_k_block; break;
    case HYLA_GGML_Q4_K: block = q4_k_block; break;
    case HYLA_GGML_Q5_K: block = q5_k_block; break;
    default: block = q6_k_block; break;
    }
    for (int64_t i = 0; i < n / bv; i++)
        block(dst + i * bv, p + i * bb);
}
