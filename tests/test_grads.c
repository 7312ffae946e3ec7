/* Whole-model gradients and the executor's invariants.
 *
 *  1. Every parameter's gradient (ce + coef * aux, aux on) against PyTorch float64 autograd
 *     (tests/reference, grads_65.safetensors) on every tiny reference model.
 *  2. Every remat policy x remat unit gives loss and gradients BIT-IDENTICAL to `none`
 *     (recomputation re-runs the same kernels on the same inputs), offloading ones included
 *     (through a real file-backed host store and its I/O thread).
 *     The same in bf16 compute (hyla_model_set_compute_bf16), against its own `none`.
 *  3. No allocation inside a step: malloc/calloc/realloc are interposed and counted while
 *     a step runs (after a warm-up step). Calls made from inside the GEMM library are excluded:
 *     oneDNN's sgemm packs its operands into buffers it allocates itself for some shapes; every
 *     other allocation, hyla's own and OpenMP's, counts.
 *
 * Gradient tolerance (derived like the logits bound in test_reference.c): the backward doubles
 * the chain of fp32 rounding stages (S = 2 * (16 per layer + 8)), each of relative error
 * sqrt(n_max) u, amplified by at most kappa = 8, relative to the scale of the gradient tensor:
 *     max |g_hyla - g_ref| <= S * sqrt(n_max) * u * kappa * max|g_ref(tensor)|
 *                             + same * 1e-2 * max|g_ref(all)|   (entries of near-zero tensors). */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "model/model.h"
#include "core/gemm.h"
#include "engine/executor.h"

#include "case_files.h"
#include "check.h"


/* ---- allocation counting (not under ASan, which owns malloc) ------------------------------ */
#if defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 0
#else
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static volatile int counting;
static volatile long n_allocs;
void *malloc(size_t n)
{
    if (counting && !hyla_in_gemm_library)
        __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    if (counting && !hyla_in_gemm_library)
        __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    if (counting && !hyla_in_gemm_library)
        __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_realloc(p, n);
}
#endif

static float *compute_grads(const hyla_model *m, const int32_t *tokens, int64_t T, const char *policy_s,
                            hyla_remat_unit unit, double *loss_out, size_t *act_bytes)
{
    hyla_policy p;
    if (hyla_policy_parse(&p, policy_s)) {
        CHECK(0, "policy %s: %s", policy_s, hyla_error_message());
        return NULL;
    }
    hyla_executor ex;
    hyla_host_store *store = NULL;
    if (hyla_executor_init(&ex, m, &p, unit, 1, T, HYLA_DELTA_CHUNKED, 0)) {
        CHECK(0, "executor init: %s", hyla_error_message());
        return NULL;
    }
    if (ex.host_bytes && (hyla_host_store_open(&store, NULL, 0) || hyla_executor_attach_store(&ex, store))) {
        CHECK(0, "host store: %s", hyla_error_message());
        hyla_executor_free(&ex);
        hyla_host_store_close(store);
        return NULL;
    }
    float *g = calloc(m->table.total_floats, sizeof(float));
    hyla_step_loss l;
    float ce_scale = (float)(1.0 / (double)(T - 1)), aux_scale = (float)m->cfg.router_aux_loss_coef;
    CHECK(hyla_executor_step(&ex, tokens, NULL, g, ce_scale, aux_scale, &l) == HYLA_OK, "%s: step: %s", policy_s,
          hyla_error_message());
    *loss_out = l.ce_sum / (double)(T - 1) + (isnan(l.aux_loss) ? 0.0 : m->cfg.router_aux_loss_coef * l.aux_loss);
    if (act_bytes)
        *act_bytes = ex.ckpt_bytes + ex.work_bytes + ex.xfer_bytes[0] + ex.xfer_bytes[1];
#if COUNT_ALLOCS
    /* a second and third step with allocations counted */
    memset(g, 0, m->table.total_floats * sizeof(float));
    n_allocs = 0;
    counting = 1;
    int st = hyla_executor_step(&ex, tokens, NULL, g, ce_scale, aux_scale, &l);
    counting = 0;
    CHECK(st == HYLA_OK, "%s: step: %s", policy_s, hyla_error_message());
    CHECK(n_allocs == 0, "policy %s unit %s: %ld allocations inside a step", policy_s, hyla_remat_unit_name(unit),
          (long)n_allocs);
#endif
    hyla_executor_free(&ex);
    hyla_host_store_close(store);
    return g;
}


static void check_vs_reference(const hyla_model *m, const char *dir, const char *name, const float *g)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/grads_65.safetensors", dir);
    hyla_st_set ref;
    if (hyla_st_open_file(&ref, path)) {
        CHECK(0, "%s: %s", name, hyla_error_message());
        return;
    }
    double gmax_all = case_max_abs(&ref);
    double S = 2.0 * (16.0 * (double)m->cfg.n_layers + 8.0), rel = S * 16.0 * 0x1.0p-24 * 8.0;
    double worst = 0;
    size_t compared = 0;
    for (size_t h = 0; h < m->table.n_hf; h++) {
        const hyla_hf_tensor *ht = &m->table.hf[h];
        if (!strncmp(ht->name, "mtp.", 4)) { /* no MTP loss in this step: no gradient reaches the head */
            int64_t count = ht->rows * ht->row_len, nonzero = 0;
            float *mine = malloc((size_t)count * sizeof(float));
            case_hf_grad(m, g, h, mine);
            for (int64_t i = 0; i < count; i++)
                nonzero += mine[i] != 0.0f;
            CHECK(nonzero == 0, "%s: %lld non-zero gradient entries for %s", name, (long long)nonzero, ht->name);
            free(mine);
            continue;
        }
        const hyla_st_tensor *t = hyla_st_find(&ref, ht->name);
        CHECK(t != NULL, "%s: reference has no gradient for %s", name, ht->name);
        if (!t)
            continue;
        int64_t count = ht->rows * ht->row_len;
        float *mine = malloc((size_t)count * sizeof(float));
        float *want = malloc((size_t)count * sizeof(float));
        case_hf_grad(m, g, h, mine);
        memcpy(want, t->data, (size_t)count * sizeof(float));
        double tmax = 0, dmax = 0;
        for (int64_t i = 0; i < count; i++) {
            tmax = fmax(tmax, fabs(want[i]));
            double d = fabs((double)mine[i] - want[i]);
            if (!(d <= dmax))
                dmax = d;
        }
        double tol = rel * tmax + rel * 1e-2 * gmax_all;
        CHECK(dmax <= tol, "%s: gradient of %s differs by %.3g (tensor max %.3g, tol %.3g)", name, ht->name, dmax, tmax, tol);
        if (tol > 0 && dmax / tol > worst)
            worst = dmax / tol;
        compared++;
        free(mine);
        free(want);
    }
    printf("  %-14s %zu parameter gradients vs autograd: worst error = %.2f of tolerance\n", name, compared, worst);
    hyla_st_close(&ref);
}

static const char *const policies[] = {"full", "minimal", "minimal_with_context", "save_qkv_proj", "save_out_proj",
                                       "save_dot_except_mlp", "save_dot_except_mlpwi",
                                       "custom:gdn_core=device,router_logits=device,attention_out=device,ffn_input=device",
                                       "qkv_proj_offloaded", "minimal_offloaded",
                                       "custom:decoder_layer_input=offload,gdn_core=device,context=offload,moe_mlpwo=offload,"
                                       "gdn_conv=offload,ffn_input=offload,router_logits=offload,attention_out=offload"};

static void check_policies(const hyla_model *m, const char *name, const int32_t *tokens, int64_t T, const float *g_none,
                           double loss_none, size_t bytes_none)
{
    size_t n = m->table.total_floats, bytes_minimal = 0, bytes_full_layer = 0, bytes_full_block = 0;
    for (int unit = 0; unit < 3; unit++) {
        for (size_t p = 0; p < sizeof policies / sizeof *policies + 1; p++) {
            const char *pol = p < sizeof policies / sizeof *policies ? policies[p] : "none";
            if (unit == 0 && !strcmp(pol, "none"))
                continue;
            double loss;
            size_t bytes;
            float *g = compute_grads(m, tokens, T, pol, (hyla_remat_unit)unit, &loss, &bytes);
            if (!g)
                continue;
            CHECK(loss == loss_none, "%s %s/%s: loss %.9g != none %.9g", name, pol, hyla_remat_unit_name(unit), loss, loss_none);
            CHECK(!memcmp(g, g_none, n * sizeof(float)), "%s %s/%s: gradients not bit-identical to none", name, pol,
                  hyla_remat_unit_name(unit));
            if (unit == 0 && !strcmp(pol, "minimal"))
                bytes_minimal = bytes;
            if (!strcmp(pol, "full") && unit < 2)
                *(unit == 0 ? &bytes_full_layer : &bytes_full_block) = bytes;
            if (unit == 0 || (unit == 1 && !strcmp(pol, "full")))
                printf("  %-14s %-24.24s unit %-5s activation arenas %8zu bytes (%.0f%% of none)\n", name, pol,
                       hyla_remat_unit_name(unit), bytes, 100.0 * bytes / bytes_none);
            free(g);
        }
    }
    /* activation memory ordered as the policies promise: none >= minimal >= full, and per-layer
     * remat below block remat whenever a block holds more than one layer */
    int multi_layer_block = 0;
    for (int b = 0; b < m->sched.n_blocks; b++)
        multi_layer_block |= m->sched.blocks[b].n_layers > 1;
    CHECK(bytes_none >= bytes_minimal && bytes_minimal >= bytes_full_layer, "%s: activation bytes none %zu, minimal %zu, "
          "full %zu not ordered", name, bytes_none, bytes_minimal, bytes_full_layer);
    CHECK(multi_layer_block ? bytes_full_layer < bytes_full_block : bytes_full_layer <= bytes_full_block,
          "%s: full/layer %zu bytes vs full/block %zu", name, bytes_full_layer, bytes_full_block);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    const char *models[] = {"next_moe_8l", "next_moe_6l", "q35_dense", "q35_moe", "irregular", "all_linear", "all_attention"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", cases, models[i]);
        hyla_model m;
        if (hyla_model_load(&m, dir)) {
            CHECK(0, "%s: %s", models[i], hyla_error_message());
            continue;
        }
        int64_t T = 65;
        int32_t *tokens = case_run_tokens(dir, T);
        CHECK(tokens != NULL, "%s: no 65-token run", models[i]);
        if (tokens) {
            double loss;
            size_t bytes;
            float *g = compute_grads(&m, tokens, T, "none", HYLA_UNIT_LAYER, &loss, &bytes);
            if (g) {
                check_vs_reference(&m, dir, models[i], g);
                check_policies(&m, models[i], tokens, T, g, loss, bytes);
                free(g);
            }
            /* bf16 compute: the same invariants within the mode (every recompute rounds the same
             * fp32 results to the same bf16 values), and no allocation inside a step */
            CHECK(hyla_model_set_compute_bf16(&m, 0) == HYLA_OK, "%s: bf16 compute: %s", models[i], hyla_error_message());
            char name16[64];
            snprintf(name16, sizeof name16, "%s/bf16", models[i]);
            g = compute_grads(&m, tokens, T, "none", HYLA_UNIT_LAYER, &loss, &bytes);
            if (g) {
                check_policies(&m, name16, tokens, T, g, loss, bytes);
                free(g);
            }
            free(tokens);
        }
        hyla_model_free(&m);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
