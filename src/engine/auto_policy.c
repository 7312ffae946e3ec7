#include "engine/auto_policy.h"

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

/* Width of the shared expert / dense MLP in most layers (the mlpwi / mlpwo names cover both). */
static int64_t mlp_width(const hyla_config *c)
{
    int moe = 0;
    for (int l = 0; l < c->n_layers; l++)
        moe += c->layer_is_moe[l];
    return 2 * moe >= c->n_layers ? c->shared_inter : c->inter;
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
    case HYLA_CK_MLPWO: return 2.0 * (double)mlp_width(c);
    case HYLA_CK_MOE_MLPWO: return 2.0 * (double)c->moe_inter;
    case HYLA_CK_GDN_CORE: return 4.0 * (HYLA_DELTA_CHUNK + (double)c->lin_k_dim);
    case HYLA_CK_CONTEXT: return 2.0 * (double)seq; /* causal QK^T and PV per output element */
    default: return 10.0;                          /* elementwise: conv, norms, gates, residual */
    }
}

static int is_gemm(hyla_ckpt_name n) { return n != HYLA_CK_GDN_CONV && n != HYLA_CK_GDN_NORM && n != HYLA_CK_ATTENTION_OUT && n != HYLA_CK_FFN_INPUT; }

/* Measured on the reference machine (2-core EPYC, fp32): projection GEMMs ~270 GFLOP/s in the
 * training step, elementwise ops ~10 GFLOP/s; the host store (page cache through the I/O
 * thread) moves a byte out and back in ~0.25 ns (`hyla train` reports copy times per step). */
#define GEMM_FLOPS 270e9
#define ELEMENTWISE_FLOPS 10e9
#define HOST_ROUND_TRIP_S_PER_BYTE 0.25e-9

typedef struct {
    hyla_ckpt_name name, twin; /* twin: a name produced by the same GEMM (or name itself) */
    hyla_keep to;
    double seconds_per_byte;
} move;

/* Names one op produces together: keeping one of them on device without the other saves no
 * recompute (the GEMM re-runs for the missing one), so they move as a pair. */
static hyla_ckpt_name twin_of(hyla_ckpt_name c)
{
    switch (c) {
    case HYLA_CK_MLPWI_0: return HYLA_CK_MLPWI_1;
    case HYLA_CK_MLPWI_1: return HYLA_CK_MLPWI_0;
    case HYLA_CK_MOE_MLPWI_0: return HYLA_CK_MOE_MLPWI_1;
    case HYLA_CK_MOE_MLPWI_1: return HYLA_CK_MOE_MLPWI_0;
    default: return c;
    }
}

static int cmp_move(const void *a, const void *b)
{
    double x = ((const move *)a)->seconds_per_byte, y = ((const move *)b)->seconds_per_byte;
    return x < y ? -1 : x > y;
}

/* Share of host copy time the step's compute cannot hide if `bytes` go to the host and back. */
static double exposed_share(const hyla_model *m, const hyla_plan_config *pc, double bytes)
{
    hyla_param_counts counts;
    hyla_params_count(&m->table, &counts);
    double tokens = (double)(pc->batch * pc->seq);
    double compute = 6.0 * (double)(counts.active - counts.embedding) * tokens / GEMM_FLOPS;
    double copies = bytes * HOST_ROUND_TRIP_S_PER_BYTE;
    double share = copies > compute ? 1.0 - compute / copies : 0.0;
    return share > 0.05 ? share : 0.05;
}

int hyla_auto_policy(const hyla_model *m, hyla_plan_config *pc, double budget, double host_budget, hyla_plan *out)
{
    hyla_policy p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "auto");
    for (int c = 0; c < HYLA_CK__COUNT; c++)
        p.where[c] = HYLA_KEEP_DEVICE;
    pc->policy = p;
    hyla_plan plan;
    HYLA_TRY(hyla_plan_compute(m, pc, &plan));
    double all_bytes = 0;
    for (int c = 0; c < HYLA_CK__COUNT; c++)
        all_bytes += plan.by_name[c];
    double offload_cost = HOST_ROUND_TRIP_S_PER_BYTE * exposed_share(m, pc, all_bytes);
    move moves[2 * HYLA_CK__COUNT];
    int n = 0;
    for (int c = 0; c < HYLA_CK__COUNT; c++) {
        hyla_ckpt_name twin = twin_of((hyla_ckpt_name)c);
        if (plan.by_name[c] <= 0 || (int)twin < c) /* a pair moves once, under its first name */
            continue;
        if (c != HYLA_CK_DECODER_LAYER_INPUT) { /* the remat boundary itself cannot be recomputed */
            double fpe = flops_per_element(&m->cfg, (hyla_ckpt_name)c, pc->seq);
            double speed = is_gemm((hyla_ckpt_name)c) ? GEMM_FLOPS : ELEMENTWISE_FLOPS;
            moves[n++] = (move){(hyla_ckpt_name)c, twin, HYLA_KEEP_REMAT, fpe / 4.0 / speed}; /* fp32: 4 bytes */
        }
        if (host_budget > 0)
            moves[n++] = (move){(hyla_ckpt_name)c, twin, HYLA_KEEP_OFFLOAD, offload_cost};
    }
    qsort(moves, (size_t)n, sizeof *moves, cmp_move);
    for (int i = 0; i < n && plan.peak_bytes > budget; i++) {
        hyla_keep now = pc->policy.where[moves[i].name];
        if (now == HYLA_KEEP_REMAT || (now == HYLA_KEEP_OFFLOAD && moves[i].to == HYLA_KEEP_OFFLOAD))
            continue;
        hyla_plan_config trial = *pc;
        trial.policy.where[moves[i].name] = trial.policy.where[moves[i].twin] = moves[i].to;
        hyla_plan next;
        int st = hyla_plan_compute(m, &trial, &next);
        if (st) {
            hyla_plan_free(&plan);
            return st;
        }
        if (next.peak_bytes < plan.peak_bytes && next.host_bytes <= host_budget) { /* keep only useful moves */
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
                              "(every checkpoint rematerialised or offloaded)", budget / 1e9, minimum / 1e9);
    }
    *out = plan;
    return HYLA_OK;
}
