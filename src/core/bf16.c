/* Array conversions between fp32 and bf16 (bf16.h). Branch-free forms of hyla_bf16_from_bits so
 * the compiler vectorises them; the scalar function stays the definition (tests compare). */
#include "core/bf16.h"

#include "core/parallel.h"

static inline uint32_t round_bits(uint32_t x)
{
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet = (x >> 16) | ((x & 0x007f0000u) ? 0u : 0x40u); /* a NaN stays a NaN */
    return (x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
}

void hyla_bf16_pack(uint16_t *dst, const float *src, int64_t n)
{
    const uint32_t *u = (const uint32_t *)(const void *)src;
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(n)
    for (int64_t i = 0; i < n; i++)
        dst[i] = (uint16_t)round_bits(u[i]);
}

void hyla_bf16_pack_serial(uint16_t *dst, const float *src, int64_t n)
{
    const uint32_t *u = (const uint32_t *)(const void *)src;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dst[i] = (uint16_t)round_bits(u[i]);
}

void hyla_bf16_unpack_serial(float *dst, const uint16_t *src, int64_t n)
{
    uint32_t *u = (uint32_t *)(void *)dst;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        u[i] = (uint32_t)src[i] << 16;
}

void hyla_bf16_unpack(float *dst, const uint16_t *src, int64_t n)
{
    uint32_t *u = (uint32_t *)(void *)dst;
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(n)
    for (int64_t i = 0; i < n; i++)
        u[i] = (uint32_t)src[i] << 16;
}

void hyla_bf16_round(float *x, int64_t n)
{
    uint32_t *u = (uint32_t *)(void *)x;
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(n)
    for (int64_t i = 0; i < n; i++)
        u[i] = round_bits(u[i]) << 16;
}
