/* bfloat16 <-> float32: the top 16 bits of a float32; rounding to nearest even. */
#ifndef HYLA_CORE_BF16_H
#define HYLA_CORE_BF16_H

#include <stdint.h>
#include <string.h>

/* Round a float32 bit pattern to bfloat16, nearest even on the 16 dropped bits (a carry into the
 * exponent is correct, overflow past the largest finite value lands exactly on inf). NaN keeps
 * its sign and top payload and stays a NaN. */
static inline uint16_t hyla_bf16_from_bits(uint32_t x)
{
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        uint16_t h = (uint16_t)(x >> 16);
        return (h & 0x7f) ? h : (uint16_t)(h | 0x40);
    }
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline uint16_t hyla_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return hyla_bf16_from_bits(u);
}

static inline float hyla_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Whole arrays (core/bf16.c), rounding as hyla_bf16_from_f32, split over threads when large:
 * pack: dst[i] = bf16(src[i]); unpack: dst[i] = src[i] widened (exact); round: x[i] = bf16(x[i])
 * widened back, in place (an fp32 buffer holding bf16 values). */
void hyla_bf16_pack(uint16_t *dst, const float *src, int64_t n);
void hyla_bf16_unpack(float *dst, const uint16_t *src, int64_t n);
void hyla_bf16_round(float *x, int64_t n);
/* hyla_bf16_pack / unpack on the calling thread alone (a block inside a caller's parallel loop,
 * or a thread that is not an OpenMP team's). */
void hyla_bf16_pack_serial(uint16_t *dst, const float *src, int64_t n);
void hyla_bf16_unpack_serial(float *dst, const uint16_t *src, int64_t n);

#endif
