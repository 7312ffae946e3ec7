/* Elementwise helpers over float buffers that the ops of several floors share. */
#ifndef HYLA_CORE_FLOATS_H
#define HYLA_CORE_FLOATS_H

#include <stdint.h>

/* dst[0..n) += src[0..n): a gradient's contributions summed into its slot. Elementwise, so the
 * result does not depend on the thread count; large buffers (a slot of a 512-token layer is
 * 2-13 MB) are split over the threads, where one thread alone had left the other waiting. */
void hyla_floats_add(float *dst, const float *src, int64_t n);

/* out[0..n) = a + b (a residual connection), split over the threads the same way. */
void hyla_floats_sum(float *out, const float *a, const float *b, int64_t n);

#endif
