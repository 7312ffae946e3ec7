/* Little-endian integer fields of hyla's binary file headers (token files, routing files). */
#ifndef HYLA_IO_LE_H
#define HYLA_IO_LE_H

#include <stdint.h>

static inline uint32_t hyla_le_get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t hyla_le_get64(const unsigned char *p)
{
    return (uint64_t)hyla_le_get32(p) | (uint64_t)hyla_le_get32(p + 4) << 32;
}
static inline void hyla_le_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static inline void hyla_le_put64(unsigned char *p, uint64_t v)
{
    hyla_le_put32(p, (uint32_t)v);
    hyla_le_put32(p + 4, (uint32_t)(v >> 32));
}

#endif
