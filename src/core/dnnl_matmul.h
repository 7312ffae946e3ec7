/* oneDNN's CPU engine and making a matmul primitive, shared by the bf16 products (gemm_bf16.c) and the fp32 forward
 * (gemm_matmul.c). */
#ifndef HYLA_CORE_DNNL_MATMUL_H
#define HYLA_CORE_DNNL_MATMUL_H

#include <dnnl.h>

/* The process's oneDNN CPU engine, made on first use (thread-safe); NULL if oneDNN cannot make one. */
dnnl_engine_t hyla_dnnl_engine(void);

/* The primitive for desc, or NULL where oneDNN has none. accumulate: the product is added to dst
 * (a sum post-op). scratch_md non-NULL: the scratchpad is the caller's to pass at each execution
 * (user mode: the primitive may then run on any thread, on several at once) and its descriptor is
 * returned there; NULL: oneDNN's library scratchpad (a primitive runs only on the thread that made it). */
dnnl_primitive_t hyla_dnnl_matmul_create(dnnl_engine_t engine, const dnnl_matmul_desc_t *desc, int accumulate,
                                         dnnl_memory_desc_t *scratch_md);

#endif
