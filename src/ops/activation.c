/* Activations: SwiGLU on a fused gate|up row (spec §3.7 step 5). Elementwise; any split. */
#include <math.h>

#include "ops/ops.h"

void hyla_swiglu_fwd(float *h /*[n,I]*/, const float *gu /*[n,2I]*/, int64_t n, int64_t I)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *g = gu + i * 2 * I, *u = g + I;
        float *hi = h + i * I;
        for (int64_t j = 0; j < I; j++) /* silu(g) = g * sigmoid(g); -> -0 as g -> -inf */
            hi[j] = (g[j] / (1.0f + expf(-g[j]))) * u[j];
    }
}
