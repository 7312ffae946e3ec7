#include "core/floats.h"

#include "core/parallel.h"

void hyla_floats_add(float *restrict dst, const float *restrict src, int64_t n)
{
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(n)
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void hyla_floats_sum(float *out, const float *a, const float *b, int64_t n)
{
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(n)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}
