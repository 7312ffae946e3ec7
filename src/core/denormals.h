/* Flush subnormal floats to zero in the calling thread, for a kernel's duration.
 *
 * An fp32 operation that takes or makes a subnormal (|x| < 2^-126) costs a microcode assist on
 * x86, ~100x a normal one. The delta rule meets them all the time on real models: a head with a
 * fast decay has e^{gam_r - gam_s} and e^{gam_r} below 2^-126 within a chunk, and every product
 * with them is subnormal (measured: the chunked forward at Qwen3.5-0.8B's dims, 16 heads x 128 x
 * 128, 512 tokens, 7 ms per layer with decays of e^-0.1 per token, 48-67 ms with e^-1.5..e^-5).
 * FTZ/DAZ (MXCSR bits 15 and 6) make such values 0: a change of at most 2^-126 in a term, far
 * below the rounding of the O(1) values beside it, and fixed for a given input (so results stay
 * bit-identical run to run and for any thread count). The mode is per thread; callers set it in
 * each thread of their parallel region and restore it after. Elsewhere than SSE: a no-op. */
#ifndef HYLA_CORE_DENORMALS_H
#define HYLA_CORE_DENORMALS_H

#if defined(__SSE__)
#include <xmmintrin.h>
static inline unsigned hyla_flush_denormals_begin(void)
{
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u); /* FTZ | DAZ */
    return old;
}
static inline void hyla_flush_denormals_end(unsigned old) { _mm_setcsr(old); }
#else
static inline unsigned hyla_flush_denormals_begin(void) { return 0; }
static inline void hyla_flush_denormals_end(unsigned old) { (void)old; }
#endif

#endif
