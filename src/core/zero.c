#include "core/zero.h"

#include <stdint.h>
#include <string.h>
#include <xmmintrin.h>

#include "core/parallel.h"

enum { ZERO_STREAM_MIN = 1 << 20, ZERO_BLOCK = 1 << 16 }; /* floats: below 4 MB, memset */

void hyla_zero_floats(float *x, size_t n)
{
    if (n < ZERO_STREAM_MIN || (uintptr_t)x % sizeof(float)) { /* small, or not float-aligned: nothing to stream */
        memset(x, 0, n * sizeof(float));
        return;
    }
    size_t head = (size_t)((16 - ((uintptr_t)x & 15)) & 15) / sizeof(float); /* to a 16-byte boundary */
    memset(x, 0, head * sizeof(float));
    float *a = x + head;
    size_t m = n - head, blocks = (m + ZERO_BLOCK - 1) / ZERO_BLOCK;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(m)
    for (size_t b = 0; b < blocks; b++) {
        size_t j0 = b * ZERO_BLOCK, j1 = j0 + ZERO_BLOCK < m ? j0 + ZERO_BLOCK : m, j = j0;
        for (; j + 4 <= j1; j += 4)
            _mm_stream_ps(a + j, _mm_setzero_ps());
        for (; j < j1; j++)
            a[j] = 0.0f;
    }
    _mm_sfence(); /* the streamed stores are ordered before what follows */
}
