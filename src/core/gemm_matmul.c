/* fp32 linear layers y = x W^T through oneDNN's f32 matmul primitive (see gemm.h,
 * hyla_gemm_nt_matmul).
 *
 * Why not dnnl_sgemm: with B transposed (a linear layer's W stored [out, in]) oneDNN's sgemm ran
 * the 0.8B model's forward shapes at 283-391 GFLOP/s on 2 Zen 5 cores, the 248K-vocabulary loss
 * head's 128-row chunks at ~200 and a routed expert's ~64 rows at ~145, where its matmul primitive
 * (brgemm kernels, the weights described as format "ba") ran 400-480 on every one of them.
 *
 * Determinism: at a given thread count the primitive sums each output element in an order fixed by
 * the shape: the same bits every call, a row's result independent of the rows beside it (rows split
 * into two calls give the same bits), and inside a parallel region (the fp32 experts' loop, one thread
 * each) what a one-thread process computes; tests/test_gemm.c checks the three. Between 1 and 2
 * threads the bits agreed on the 0.8B and MoE shapes but not on every shape (a short, narrow product
 * such as [17 x 1024 x 300] has its K split over the threads), as with sgemm: bit-identity across
 * processes needs the same thread count (README), and remat policies, units, ranks under --threads 1
 * and resumed runs hold as they did with sgemm.
 *
 * Primitives are not kept here: oneDNN's own primitive cache returns one for a shape seen before in
 * ~2 us (~80 us to create it new), so routed experts' changing row counts cost nothing to track. The
 * scratchpad is the caller's thread's (user scratchpad mode), so a primitive may run on any thread and
 * on several at once; each thread's scratch is grown as needed and kept (0.26-0.53 MB on these shapes). */
#include "core/gemm.h"

#include <dnnl.h>
#include <stdlib.h>

#include "core/dnnl_matmul.h"
#include "core/error.h"

static _Thread_local dnnl_stream_t thread_stream;
static _Thread_local void *thread_scratch;
static _Thread_local size_t thread_scratch_bytes;

static void *scratch_of_thread(size_t bytes)
{
    if (bytes <= thread_scratch_bytes)
        return thread_scratch;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    free(thread_scratch);
    thread_scratch = p, thread_scratch_bytes = bytes;
    return p;
}

/* the primitive for C[M,N] (+)= A[M,K] B[N,K]^T with these leading dimensions; NULL where oneDNN has
 * none (the caller then multiplies another way, the same way every time for this shape) */
static dnnl_primitive_t primitive_for(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                                      int accumulate, dnnl_engine_t engine, dnnl_memory_desc_t md[4])
{
    dnnl_dims_t sd = {M, K}, wd = {K, N}, dd = {M, N};
    dnnl_dims_t ss = {lda, 1}, ws = {1, ldb}, ds = {ldc, 1}; /* W [N, K] row-major is the [K, N] weights "ba" */
    if (dnnl_memory_desc_init_by_strides(&md[0], 2, sd, dnnl_f32, ss) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&md[1], 2, wd, dnnl_f32, ws) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&md[2], 2, dd, dnnl_f32, ds) != dnnl_success)
        return NULL;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) != dnnl_success)
        return NULL;
    return hyla_dnnl_matmul_create(engine, &desc, accumulate, &md[3]);
}

int hyla_gemm_nt_matmul(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                        int accumulate, float *C, int64_t ldc)
{
    dnnl_engine_t engine = hyla_dnnl_engine();
    if (!engine || (!thread_stream && dnnl_stream_create(&thread_stream, engine, dnnl_stream_default_flags) != dnnl_success))
        return -1;
    dnnl_memory_desc_t md[4];
    dnnl_primitive_t prim = primitive_for(M, N, K, lda, ldb, ldc, accumulate, engine, md);
    if (!prim)
        return -1;
    size_t scratch_bytes = dnnl_memory_desc_get_size(&md[3]);
    void *ptrs[4] = {(void *)A, (void *)B, C, scratch_bytes ? scratch_of_thread(scratch_bytes) : NULL};
    const int arg_ids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    dnnl_exec_arg_t args[4] = {{0}};
    int nargs = scratch_bytes ? 4 : 3;
    int ok = !scratch_bytes || ptrs[3];
    for (int i = 0; ok && i < nargs; i++) {
        args[i].arg = arg_ids[i];
        ok = dnnl_memory_create(&args[i].memory, &md[i], engine, ptrs[i]) == dnnl_success;
    }
    if (ok) /* from here C is being written: a failure cannot be handed to another way */
        HYLA_ASSERT(dnnl_primitive_execute(prim, thread_stream, nargs, args) == dnnl_success &&
                    dnnl_stream_wait(thread_stream) == dnnl_success);
    for (int i = 0; i < nargs; i++)
        if (args[i].memory)
            dnnl_memory_destroy(args[i].memory);
    dnnl_primitive_destroy(prim);
    return ok ? 0 : -1;
}
