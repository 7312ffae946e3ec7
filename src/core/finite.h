/* Finiteness checks for loaded weights and training numbers. */
#ifndef HYLA_CORE_FINITE_H
#define HYLA_CORE_FINITE_H

#include <math.h>
#include <stddef.h>

/* Index of the first NaN or infinity in x[0 .. n), or n if there is none. */
static inline size_t hyla_first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

#endif
