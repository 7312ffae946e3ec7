/* Training-step benchmark: activation memory (the step's planned arenas, equal to their measured
 * high-water marks) and step time per remat policy x unit, on one model and batch.
 * usage: train_bench MODEL_DIR BATCH SEQ STEPS SPEC [SPEC ...]   (JSON lines, one per SPEC)
 *
 * SPEC is POLICY:UNIT, POLICY a preset or custom:NAME=device|remat|offload,..., or an auto
 * policy (--remat auto) for a memory budget:
 *   auto@BUDGET:UNIT         budget a size ("1.2GB", "1e9") or REF[*FACTOR]: the planned peak
 *                            (argument + temp, what --memory-budget compares) of preset REF at the
 *                            same unit, with REF's activation bytes (checkpoints + work + staging +
 *                            carries) scaled by FACTOR: peak + (FACTOR - 1) * activation. The rest
 *                            of the peak (parameters, gradients, moments) is the same for every
 *                            policy. E.g. auto@full:layer, auto@full*1.5:layer, auto@none:layer
 *   auto-nohost@BUDGET:UNIT  the same without offloading (host budget 0)
 * Every run starts from the loaded weights (restored between specs) and the same synthetic
 * tokens; the first step is a warm-up, then STEPS timed steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "train/auto_policy.h"
#include "train/data.h"
#include "train/plan.h"
#include "train/trainer.h"

static hyla_plan_config plan_config(int64_t B, int64_t T, hyla_remat_unit unit)
{
    hyla_plan_config pc; /* as hyla train --remat auto builds it: fp32 everything, one device */
    memset(&pc, 0, sizeof pc);
    pc.batch = B, pc.seq = T, pc.devices = 1, pc.unit = unit;
    pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
    return pc;
}

/* Planned peak of `pc` with policy `p`. */
static int planned_peak(const hyla_model *m, hyla_plan_config pc, const hyla_policy *p, double *peak, double *act)
{
    pc.policy = *p;
    hyla_plan plan;
    HYLA_TRY(hyla_plan_compute(m, &pc, &plan));
    *peak = plan.peak_bytes;
    *act = plan.checkpoint_bytes + plan.work_bytes + plan.staging_bytes + plan.carry_bytes;
    hyla_plan_free(&plan);
    return HYLA_OK;
}

/* auto[-nohost]@BUDGET: resolve the budget and choose the policy. */
static int auto_policy(const hyla_model *m, hyla_plan_config pc, const char *spec, hyla_policy *out, double *budget,
                       double *host_budget)
{
    *host_budget = !strncmp(spec, "auto-nohost@", 12) ? 0.0 : INFINITY;
    const char *b = strchr(spec, '@') + 1;
    char ref[64];
    double factor = 1;
    const char *star = strchr(b, '*');
    snprintf(ref, sizeof ref, "%.*s", star ? (int)(star - b) : (int)strlen(b), b);
    if (star)
        factor = atof(star + 1);
    hyla_policy rp;
    if (ref[0] >= 'a' && ref[0] <= 'z' && hyla_policy_parse(&rp, ref) == HYLA_OK) {
        double act;
        HYLA_TRY(planned_peak(m, pc, &rp, budget, &act));
        *budget += (factor - 1) * act;
    } else {
        HYLA_TRY(hyla_parse_size(b, budget));
    }
    hyla_plan plan;
    HYLA_TRY(hyla_auto_policy(m, &pc, *budget, *host_budget, &plan));
    hyla_plan_free(&plan);
    *out = pc.policy;
    return HYLA_OK;
}

static void die(const char *what)
{
    fprintf(stderr, "train_bench: %s: %s\n", what, hyla_error_message());
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: train_bench MODEL_DIR BATCH SEQ STEPS SPEC...\n");
        return 2;
    }
    int64_t B = atoll(argv[2]), T = atoll(argv[3]), steps = atoll(argv[4]);
    hyla_model m;
    if (hyla_model_load(&m, argv[1]))
        die(argv[1]);
    size_t wbytes = (size_t)m.table.total_floats * sizeof(float);
    float *w0 = malloc(wbytes);
    if (!w0)
        die("out of memory");
    memcpy(w0, m.w, wbytes);
    for (int c = 5; c < argc; c++) {
        char policy[256], *unit;
        snprintf(policy, sizeof policy, "%s", argv[c]);
        unit = strrchr(policy, ':');
        if (!unit) {
            fprintf(stderr, "train_bench: '%s' is not POLICY:UNIT\n", argv[c]);
            return 2;
        }
        *unit++ = '\0';
        memcpy(m.w, w0, wbytes); /* every run from the same weights (training updates them) */
        hyla_train_config tc;
        memset(&tc, 0, sizeof tc);
        if (hyla_remat_unit_parse(unit, &tc.unit))
            die(argv[c]);
        hyla_plan_config pc = plan_config(B, T, tc.unit);
        int is_auto = !strncmp(policy, "auto@", 5) || !strncmp(policy, "auto-nohost@", 12);
        double budget = 0, host_budget = 0, peak, planned_act;
        if (is_auto ? auto_policy(&m, pc, policy, &tc.policy, &budget, &host_budget)
                    : hyla_policy_parse(&tc.policy, policy))
            die(argv[c]);
        if (planned_peak(&m, pc, &tc.policy, &peak, &planned_act))
            die(argv[c]);
        tc.batch = B, tc.seq = T, tc.accum = 1;
        tc.adamw = (hyla_adamw_config){1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
        tc.schedule = (hyla_lr_schedule){HYLA_SCHED_CONSTANT, 1e-4, 1e-4, 0, steps, 0};
        hyla_trainer tr;
        if (hyla_trainer_init(&tr, &m, &tc))
            die(argv[c]);
        hyla_data d;
        hyla_data_open_synthetic(&d, 3, m.cfg.vocab);
        int32_t *tokens = malloc((size_t)(B * T) * sizeof *tokens);
        hyla_step_stats s;
        hyla_data_next(&d, tokens, B, T);
        if (hyla_trainer_step(&tr, tokens, &s)) /* warm-up */
            die(argv[c]);
        double best = 1e30, sum = 0, copy = 0, wait = 0;
        uint64_t offload = 0;
        hyla_prof.enabled = 1;
        hyla_prof_reset();
        for (int64_t i = 0; i < steps; i++) {
            hyla_data_next(&d, tokens, B, T);
            if (hyla_trainer_step(&tr, tokens, &s))
                die(argv[c]);
            sum += s.seconds;
            copy += s.copy_seconds, wait += s.copy_wait_seconds, offload += s.offload_bytes;
            if (s.seconds < best)
                best = s.seconds;
        }
        hyla_prof.enabled = 0;
        char chosen[2048];
        hyla_policy_format(&tc.policy, chosen, sizeof chosen);
        printf("{\"policy\": \"%s\", \"unit\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"steps\": %lld, "
               "\"best_step_seconds\": %.6f, \"mean_step_seconds\": %.6f, \"tokens_per_s\": %.1f, "
               "\"checkpoint_bytes\": %zu, \"work_bytes\": %zu, \"activation_bytes\": %zu, "
               "\"measured_checkpoint_high_water\": %zu, \"measured_work_high_water\": %zu, "
               "\"gemm_gflops\": %.1f, \"gemm_flops_per_step\": %.4g, \"loss\": %.6f, "
               "\"planned_peak_bytes\": %.0f, \"planned_activation_bytes\": %.0f, \"host_bytes\": %zu, "
               "\"offload_bytes_per_step\": %.0f, \"copy_seconds_per_step\": %.6f, \"copy_wait_seconds_per_step\": %.6f, "
               "\"copy_hidden_fraction\": ",
               policy, unit, (long long)B, (long long)T, (long long)steps, best, sum / steps, B * T / best,
               tr.ex.ckpt_bytes, tr.ex.work_bytes, hyla_trainer_activation_bytes(&tr), tr.ex.ckpt.high_water,
               tr.ex.work.high_water, hyla_prof.gemm_flops / hyla_prof.gemm_seconds / 1e9,
               hyla_prof.gemm_flops / steps, s.loss, peak, planned_act, tr.ex.host_bytes,
               (double)offload / steps, copy / steps, wait / steps);
        if (copy > 0)
            printf("%.4f", wait > copy ? 0.0 : 1.0 - wait / copy);
        else
            printf("null");
        if (is_auto)
            printf(", \"budget_bytes\": %.0f, \"host_budget_bytes\": %s, \"chosen\": \"custom:%s\"", budget,
                   isinf(host_budget) ? "null" : "0", chosen);
        printf("}\n");
        fflush(stdout);
        free(tokens);
        hyla_trainer_free(&tr);
    }
    free(w0);
    hyla_model_free(&m);
    return 0;
}
