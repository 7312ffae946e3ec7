/* Activations: SwiGLU (spec §3.7 step 5) forward and backward. Elementwise; any split. */
#include <math.h>

#include "ops/ops.h"
#include "core/parallel.h"

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void hyla_swiglu_fwd(float *h, const float *gate, const float *up, int64_t n, int64_t I)
{
    int64_t total = n * I;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(8 * total)
    for (int64_t i = 0; i < total; i++) /* silu(g) = g * sigmoid(g); -> -0 as g -> -inf */
        h[i] = (gate[i] * sigmoidf(gate[i])) * up[i];
}

/* h = g s(g) u: dh/dg = u s(g) (1 + g (1 - s(g))), dh/du = g s(g). */
void hyla_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n, int64_t I)
{
    int64_t total = n * I;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(8 * total)
    for (int64_t i = 0; i < total; i++) {
        float g = gate[i], s = sigmoidf(g), d = dh[i];
        float dg = d * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] = d * g * s;
        dgate[i] = dg;
    }
}
