/* Activations: SwiGLU (spec §3.7 step 5) forward and backward. Elementwise; any split. */
#include <math.h>

#include "ops/ops.h"
#include "core/parallel.h"
#include "core/sigmoid.h"

void hyla_swiglu_fwd(float *h, const float *gate, const float *up, int64_t n, int64_t I)
{
    int64_t total = n * I;
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(HYLA_SIGMOID_WORK * total)
    for (int64_t i = 0; i < total; i++) /* silu(g) = g * sigmoid(g); -> -0 as g -> -inf */
        h[i] = (gate[i] * hyla_sigmoid(gate[i])) * up[i];
}

/* h = g s(g) u: dh/dg = u s(g) (1 + g (1 - s(g))), dh/du = g s(g). */
static inline __attribute__((always_inline)) void swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate,
                                                              const float *up, int64_t n, int64_t I, int accumulate)
{
    int64_t total = n * I;
#pragma omp parallel for simd schedule(static) HYLA_PAR_IF(HYLA_SIGMOID_WORK * total)
    for (int64_t i = 0; i < total; i++) {
        float g = gate[i], s, om, d = dh[i];
        hyla_sigmoid_pair(g, &s, &om);
        float dg = d * up[i] * s * (1.0f + g * om), du = d * g * s;
        dup[i] = accumulate ? dup[i] + du : du;
        dgate[i] = accumulate ? dgate[i] + dg : dg;
    }
}

void hyla_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n, int64_t I)
{
    swiglu_bwd(dgate, dup, dh, gate, up, n, I, 0);
}

void hyla_swiglu_bwd_acc(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n,
                         int64_t I)
{
    swiglu_bwd(dgate, dup, dh, gate, up, n, I, 1);
}
