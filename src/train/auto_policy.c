#include "train/auto_policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "ops/ops.h"

int hyla_parse_size(const char *text, double *bytes)
{
    char *end;
    double v = strtod(text, &end);
    static const struct { const char *unit; double mul; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; end != text && isfinite(v) && v > 0 && i < sizeof units / sizeof *units; i++)
        if (!strcasecmp(end, units[i].unit)) {
            *bytes = v * units[i].mul;
            return HYLA_OK;
        }
    return hyla_error_set(HYLA_ERR_ARG, "memory budget '%s' is not a positive size (e.g. 40GB, 512MiB)", text);
}

/* Estimated recompute FLOPs per element of a name's tensor (the op that produces it). */
static double flops_per_element(const hyla_config *c, hyla_ckpt_name n, int64_t seq)
{
    double H = (double)c->hidden;
    switch (n) {
    case HYLA_CK_GDN_IN_PROJ: case HYLA_CK_QUERY_PROJ: case HYLA_CK_KEY_PROJ: case HYLA_CK_VALUE_PROJ:
    case HYLA_CK_ROUTER_LOGITS: case HYLA_CK_MLPWI_0: case HYLA_CK_MLPWI_1: case HYLA_CK_MOE_MLPWI_0:
    case HYLA_CK_MOE_MLPWI_1:
        return 2 * H;
    case HYLA_CK_OUT_PROJ: return 2.0 * (double)(c->n_heads * c->head_dim > hyla_cfg_value_dim(c) ? c->n_heads * c->head_dim : hyla_cfg_value_dim(c));
    case HYLA_CK_MLPWO: return 2.0 * (double)(c->shared_inter > c->inter ? c->shared_inter : c->inter);
    case HYLA_CK_MOE_MLPWO: return 2.0 * (double)c->moe_inter;
    case HYLA_CK_GDN_CORE: return 4.0 * (HYLA_DELTA_CHUNK + (double)c->lin_k_dim);
    case HYLA_CK_CONTEXT: return 2.0 * (double)seq; /* causal QK^T and PV per output element */
    default: return 10.0;                          /* elementwise: conv, norms, gates, residual */
    }
}

static int is_gemm(hyla_ckpt_name n) { return n != HYLA_CK_GDN_CONV && n != HYLA_CK_GDN_NORM && n != HYLA_CK_ATTENTION_OUT && n != HYLA_CK_FFN_INPUT; }

typedef struct {
    hyla_ckpt_name name;
    double seconds_per_byte;
} candidate;

static int cmp_candidate(const void *a, const void *b)
{
    double x = ((const candidate *)a)->seconds_per_byte, y = ((const candidate *)b)->seconds_per_byte;
    return x < y ? -1 : x > y;
}

int hyla_auto_policy(const hyla_model *m, hyla_plan_config *pc, double budget, hyla_plan *out)
{
    /* measured speeds on the reference machine: projection GEMMs ~270 GFLOP/s, elementwise ~10 */
    const double gemm_flops = 270e9, elementwise_flops = 10e9;
    hyla_policy p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "auto");
    for (int c = 0; c < HYLA_CK__COUNT; c++)
        p.where[c] = HYLA_KEEP_DEVICE;
    pc->policy = p;
    hyla_plan plan;
    HYLA_TRY(hyla_plan_compute(m, pc, &plan));
    candidate cand[HYLA_CK__COUNT];
    int n = 0;
    for (int c = 1; c < HYLA_CK__COUNT; c++) { /* decoder_layer_input is the remat boundary */
        if (plan.by_name[c] <= 0)
            continue;
        double fpe = flops_per_element(&m->cfg, (hyla_ckpt_name)c, pc->seq);
        double speed = is_gemm((hyla_ckpt_name)c) ? gemm_flops : elementwise_flops;
        cand[n].name = (hyla_ckpt_name)c;
        cand[n].seconds_per_byte = fpe / 4.0 / speed; /* per fp32 element = 4 bytes */
        n++;
    }
    qsort(cand, (size_t)n, sizeof *cand, cmp_candidate);
    for (int i = 0; i < n && plan.peak_bytes > budget; i++) {
        hyla_plan_config trial = *pc;
        trial.policy.where[cand[i].name] = HYLA_KEEP_REMAT;
        hyla_plan next;
        int st = hyla_plan_compute(m, &trial, &next);
        if (st) {
            hyla_plan_free(&plan);
            return st;
        }
        if (next.peak_bytes < plan.peak_bytes) { /* keep the step only if it lowers the peak */
            hyla_plan_free(&plan);
            plan = next;
            *pc = trial;
        } else {
            hyla_plan_free(&next);
        }
    }
    if (plan.peak_bytes > budget) {
        double minimum = plan.peak_bytes;
        hyla_plan_free(&plan);
        return hyla_error_set(HYLA_ERR_ARG, "memory budget %.4g GB is impossible: the least this step needs is %.4g GB "
                              "(every checkpoint rematerialised)", budget / 1e9, minimum / 1e9);
    }
    *out = plan;
    return HYLA_OK;
}
