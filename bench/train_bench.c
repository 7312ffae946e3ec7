/* Training-step benchmark: activation memory (the step's planned arenas, equal to their measured
 * high-water marks) and step time per remat policy x unit, on one model and batch.
 * usage: train_bench MODEL_DIR BATCH SEQ STEPS [--vs REF_SPEC] SPEC [SPEC ...]   (JSON lines)
 * HYLA_BENCH_ACT_DTYPE=bf16 in the environment: every SPEC in bf16 compute (--act-dtype bf16).
 * Unpaired lines carry "profile": seconds per op over the timed steps (divide by "steps").
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
 * Each SPEC: one warm-up step, then STEPS timed steps on the same synthetic tokens; every SPEC
 * starts from the loaded weights (restored between specs).
 *
 * --vs REF_SPEC (paired mode, for a VM whose speed drifts by 10-20% over tens of seconds): for
 * each SPEC a fresh REF_SPEC trainer is opened with it (both the same age: a long-lived reference
 * drifted a few % slower than fresh trainers), and their timed steps alternate in ABBA order
 * (REF SPEC SPEC REF REF SPEC ...), so each row carries its own reference times from the same
 * seconds (ref_step_seconds, time_vs_ref = best / REF's best of that window, and the median of
 * the per-pair ratios). The learning rate is 0 so the trainers can share the weights (AdamW still
 * runs in full; the weights stay the loaded ones), and freed memory stays in the process heap so
 * warm-ups do not fault in their arenas again (timed steps fault nothing either way:
 * minor_faults_per_step). A SPEC whose policy and unit equal an earlier SPEC's (e.g. two budgets
 * that choose the same policy) is not measured again: its line has "same_as": the earlier SPEC. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/error.h"
#include "core/profile.h"
#include "engine/auto_policy.h"
#include "train/data.h"
#include "engine/plan.h"
#include "train/trainer.h"

static int bench_bf16; /* HYLA_BENCH_ACT_DTYPE=bf16 */

static hyla_plan_config plan_config(int64_t B, int64_t T, hyla_remat_unit unit)
{
    hyla_plan_config pc; /* as hyla train --remat auto builds it: fp32 everything, one device */
    memset(&pc, 0, sizeof pc);
    pc.batch = B, pc.seq = T, pc.devices = 1, pc.unit = unit;
    pc.param_bytes = pc.grad_bytes = pc.opt_bytes = 4;
    pc.act_bytes = bench_bf16 ? 2 : 4;
    return pc;
}

/* Planned peak and activation bytes of `pc` with policy `p`. */
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

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* One SPEC's trainer and what its timed steps measured. */
typedef struct {
    char spec[256], *policy, *unit;
    int is_auto;
    double budget, host_budget, peak, planned_act;
    hyla_train_config tc;
    hyla_trainer tr;
    hyla_data d;
    int32_t *tokens;
    int64_t B, T, n;        /* n: timed steps so far */
    double setup, warm, *times, copy, wait, gemm_flops, gemm_seconds, loss;
    uint64_t offload;
    long faults;
} run;

/* Parse SPEC, choose the policy (auto) and plan it. */
static void run_resolve(run *r, hyla_model *m, const char *spec, int64_t B, int64_t T)
{
    memset(r, 0, sizeof *r);
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    char *unit = strrchr(r->spec, ':');
    if (!unit) {
        fprintf(stderr, "train_bench: '%s' is not POLICY:UNIT\n", spec);
        exit(2);
    }
    *unit++ = '\0';
    r->policy = r->spec, r->unit = unit, r->B = B, r->T = T;
    double t0 = hyla_now();
    if (hyla_remat_unit_parse(unit, &r->tc.unit))
        die(spec);
    hyla_plan_config pc = plan_config(B, T, r->tc.unit);
    r->is_auto = !strncmp(r->policy, "auto@", 5) || !strncmp(r->policy, "auto-nohost@", 12);
    if (r->is_auto ? auto_policy(m, pc, r->policy, &r->tc.policy, &r->budget, &r->host_budget)
                   : hyla_policy_parse(&r->tc.policy, r->policy))
        die(spec);
    if (planned_peak(m, pc, &r->tc.policy, &r->peak, &r->planned_act))
        die(spec);
    r->setup = hyla_now() - t0;
}

/* Open the trainer and run the warm-up step. */
static void run_start(run *r, hyla_model *m, int64_t steps, double lr)
{
    const char *spec = r->spec;
    double t0 = hyla_now();
    int64_t B = r->B, T = r->T;
    r->tc.batch = B, r->tc.seq = T, r->tc.accum = 1;
    r->tc.adamw = (hyla_adamw_config){lr, 0.9, 0.95, 1e-8, 0.1, 1.0};
    r->tc.schedule = (hyla_lr_schedule){HYLA_SCHED_CONSTANT, lr, lr, 0, steps, 0};
    if (hyla_trainer_init(&r->tr, m, &r->tc))
        die(spec);
    hyla_data_open_synthetic(&r->d, 3, m->cfg.vocab);
    r->tokens = malloc((size_t)(B * T) * sizeof *r->tokens);
    r->times = calloc((size_t)steps, sizeof *r->times);
    if (!r->tokens || !r->times)
        die("out of memory");
    r->setup += hyla_now() - t0;
    hyla_step_stats s;
    hyla_data_next(&r->d, r->tokens, NULL, B, T);
    if (hyla_trainer_step(&r->tr, r->tokens, NULL, &s)) /* warm-up */
        die(spec);
    r->warm = s.seconds;
}

static void run_step(run *r)
{
    hyla_step_stats s;
    hyla_data_next(&r->d, r->tokens, NULL, r->B, r->T);
    double f0 = hyla_prof.gemm_flops, s0 = hyla_prof.gemm_seconds;
    long faults = minor_faults();
    if (hyla_trainer_step(&r->tr, r->tokens, NULL, &s))
        die(r->spec);
    r->faults += minor_faults() - faults;
    r->gemm_flops += hyla_prof.gemm_flops - f0, r->gemm_seconds += hyla_prof.gemm_seconds - s0;
    r->times[r->n++] = s.seconds;
    r->copy += s.copy_seconds, r->wait += s.copy_wait_seconds, r->offload += s.offload_bytes;
    r->loss = s.loss;
}

static double best_of(const double *t, int64_t n)
{
    double b = t[0];
    for (int64_t i = 1; i < n; i++)
        b = t[i] < b ? t[i] : b;
    return b;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_times(const char *key, const double *t, int64_t n)
{
    printf(", \"%s\": [", key);
    for (int64_t i = 0; i < n; i++)
        printf("%s%.4f", i ? ", " : "", t[i]);
    printf("]");
}

/* One JSON line; ref (paired mode): the reference's steps of the same window. */
static void run_print(const run *r, const run *ref)
{
    const hyla_trainer *tr = &r->tr;
    double best = best_of(r->times, r->n), sum = 0;
    for (int64_t i = 0; i < r->n; i++)
        sum += r->times[i];
    long long steps = (long long)r->n;
    printf("{\"policy\": \"%s\", \"unit\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"steps\": %lld, "
           "\"best_step_seconds\": %.6f, \"mean_step_seconds\": %.6f, \"tokens_per_s\": %.1f, "
           "\"checkpoint_bytes\": %zu, \"work_bytes\": %zu, \"activation_bytes\": %zu, "
           "\"measured_checkpoint_high_water\": %zu, \"measured_work_high_water\": %zu, "
           "\"gemm_gflops\": %.1f, \"gemm_flops_per_step\": %.4g, \"loss\": %.6f, "
           "\"planned_peak_bytes\": %.0f, \"planned_activation_bytes\": %.0f, \"host_bytes\": %zu, "
           "\"offload_bytes_per_step\": %.0f, \"copy_seconds_per_step\": %.6f, \"copy_wait_seconds_per_step\": %.6f, "
           "\"copy_hidden_fraction\": ",
           r->policy, r->unit, (long long)r->B, (long long)r->T, steps, best, sum / r->n, r->B * r->T / best,
           tr->ex.ckpt_bytes, tr->ex.work_bytes, hyla_trainer_activation_bytes(tr), tr->ex.ckpt.high_water,
           tr->ex.work.high_water, r->gemm_flops / r->gemm_seconds / 1e9, r->gemm_flops / r->n, r->loss, r->peak,
           r->planned_act, tr->ex.host_bytes, (double)r->offload / r->n, r->copy / r->n, r->wait / r->n);
    if (r->copy > 0)
        printf("%.4f", r->wait > r->copy ? 0.0 : 1.0 - r->wait / r->copy);
    else
        printf("null");
    printf(", \"setup_seconds\": %.3f, \"warmup_step_seconds\": %.3f, \"minor_faults_per_step\": %.1f", r->setup,
           r->warm, (double)r->faults / r->n);
    print_times("step_seconds", r->times, r->n);
    if (ref) {
        double ratios[r->n];
        for (int64_t i = 0; i < r->n; i++)
            ratios[i] = r->times[i] / ref->times[i];
        qsort(ratios, (size_t)r->n, sizeof *ratios, cmp_double);
        double median = r->n % 2 ? ratios[r->n / 2] : 0.5 * (ratios[r->n / 2 - 1] + ratios[r->n / 2]);
        printf(", \"ref\": \"%s:%s\", \"ref_best_step_seconds\": %.6f, \"time_vs_ref\": %.4f, "
               "\"time_vs_ref_median_pair\": %.4f", ref->policy, ref->unit, best_of(ref->times, ref->n),
               best / best_of(ref->times, ref->n), median);
        print_times("ref_step_seconds", ref->times, ref->n);
    }
    if (r->is_auto) {
        char chosen[2048];
        hyla_policy_format(&r->tc.policy, chosen, sizeof chosen);
        printf(", \"budget_bytes\": %.0f, \"host_budget_bytes\": %s, \"chosen\": \"custom:%s\"", r->budget,
               isinf(r->host_budget) ? "null" : "0", chosen);
    }
    if (!ref) { /* where the timed steps went, per op (seconds summed over them; NAME.bwd: an op's backward) */
        printf(", \"profile\": ");
        hyla_prof_print_json(stdout);
    }
    printf("}\n");
    fflush(stdout);
}

static void run_close(run *r)
{
    free(r->tokens);
    free(r->times);
    hyla_trainer_free(&r->tr);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: train_bench MODEL_DIR BATCH SEQ STEPS [--vs REF_SPEC] SPEC...\n");
        return 2;
    }
    int64_t B = atoll(argv[2]), T = atoll(argv[3]), steps = atoll(argv[4]);
    const char *vs = NULL;
    int first = 5;
    if (!strcmp(argv[5], "--vs") && argc >= 8)
        vs = argv[6], first = 7;
    if (steps < 1) {
        fprintf(stderr, "train_bench: STEPS must be >= 1\n");
        return 2;
    }
    if (vs) { /* keep freed trainers' memory in the heap (already faulted in) for the next one */
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, -1);
    }
    hyla_model m;
    if (hyla_model_load(&m, argv[1]))
        die(argv[1]);
    const char *act = getenv("HYLA_BENCH_ACT_DTYPE"); /* bf16: mixed precision (bf16 compute copy) */
    bench_bf16 = act && !strcmp(act, "bf16");
    if (bench_bf16 && hyla_model_set_compute_bf16(&m, 0))
        die("bf16 compute");
    size_t wbytes = (size_t)m.table.total_floats * sizeof(float);
    float *w0 = vs ? NULL : malloc(wbytes);
    if (!vs && !w0)
        die("out of memory");
    if (w0)
        memcpy(w0, m.w, wbytes);
    double lr = vs ? 0.0 : 1e-4;
    hyla_prof.enabled = 1;
    hyla_prof_reset();
    struct { hyla_keep policy[HYLA_CK__COUNT]; int keep_internal; hyla_remat_unit unit; } *seen = calloc((size_t)argc, sizeof *seen);
    for (int c = first; c < argc; c++) {
        if (w0)
            memcpy(m.w, w0, wbytes); /* every run from the same weights (training updates them) */
        run r, ref;
        run_resolve(&r, &m, argv[c], B, T);
        int same = -1;
        for (int e = first; e < c && same < 0 && r.is_auto; e++)
            if (!memcmp(&seen[e].policy, &r.tc.policy.where, sizeof seen[e].policy) &&
                seen[e].keep_internal == r.tc.policy.keep_internal && seen[e].unit == r.tc.unit)
                same = e;
        memcpy(seen[c].policy, r.tc.policy.where, sizeof seen[c].policy);
        seen[c].keep_internal = r.tc.policy.keep_internal, seen[c].unit = r.tc.unit;
        if (same >= 0) {
            char chosen[2048];
            hyla_policy_format(&r.tc.policy, chosen, sizeof chosen);
            printf("{\"policy\": \"%s\", \"unit\": \"%s\", \"same_as\": \"%s\"", r.policy, r.unit, argv[same]);
            if (r.is_auto)
                printf(", \"budget_bytes\": %.0f, \"host_budget_bytes\": %s, \"chosen\": \"custom:%s\"", r.budget,
                       isinf(r.host_budget) ? "null" : "0", chosen);
            printf("}\n");
            fflush(stdout);
            continue;
        }
        if (vs) {
            run_resolve(&ref, &m, vs, B, T);
            run_start(&ref, &m, steps, lr);
        }
        run_start(&r, &m, steps, lr);
        hyla_prof_reset(); /* the profile of this SPEC's timed steps only */
        for (int64_t i = 0; i < steps; i++) {
            if (vs && i % 2 == 0)
                run_step(&ref);
            run_step(&r);
            if (vs && i % 2 == 1)
                run_step(&ref);
        }
        run_print(&r, vs ? &ref : NULL);
        run_close(&r);
        if (vs)
            run_close(&ref);
    }
    hyla_prof.enabled = 0;
    free(seen);
    free(w0);
    hyla_model_free(&m);
    return 0;
}
