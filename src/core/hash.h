/* A 64-bit content hash (FNV-1a): identifies a data file by its bytes, not by its path. Not
 * cryptographic. */
#ifndef HYLA_CORE_HASH_H
#define HYLA_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t hyla_hash64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

#endif
