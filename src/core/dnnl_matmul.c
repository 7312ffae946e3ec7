#include "core/dnnl_matmul.h"

#include <pthread.h>
#include <stddef.h>

static dnnl_engine_t cpu_engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void make_engine(void)
{
    if (dnnl_engine_create(&cpu_engine, dnnl_cpu, 0) != dnnl_success)
        cpu_engine = NULL;
}

dnnl_engine_t hyla_dnnl_engine(void)
{
    pthread_once(&engine_once, make_engine);
    return cpu_engine;
}

dnnl_primitive_t hyla_dnnl_matmul_create(dnnl_engine_t engine, const dnnl_matmul_desc_t *desc, int accumulate,
                                         dnnl_memory_desc_t *scratch_md)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && scratch_md)
        ok = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && accumulate)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, desc, attr, engine, NULL) == dnnl_success;
    if (ok && scratch_md) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        ok = md != NULL;
        if (ok)
            *scratch_md = *md;
    }
    ok = ok && dnnl_primitive_create(&prim, pd) == dnnl_success;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return ok ? prim : NULL;
}
