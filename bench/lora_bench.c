/* LoRA vs full fine-tuning: step time, tokens/s, and memory planned (hyla_plan_compute, as
 * `hyla plan --lora-rank`) against measured (the trainer's allocations and its arenas'
 * high-water marks after the timed steps).
 * usage: lora_bench MODEL_DIR BATCH SEQ STEPS RANK MODES [TARGETS]   MODES: full,lora | lora | lora-bf16base
 * One JSON line per mode; policy full / unit layer (hyla train's default). lora-bf16base: the frozen
 * base read as bf16 only (hyla train --lora-rank R --param-dtype bf16: bf16 compute, fp32 adapter and
 * moments), alone in its process, so that its peak resident set (VmHWM) less the resident set before
 * the model was loaded is the run's memory, printed beside the plan's peak (argument + temp bytes).
 * HYLA_BENCH_POLICY in the environment: the remat policy (default full, hyla train's default; none keeps
 * every activation, as PEFT without gradient checkpointing does). Each line carries the timed steps'
 * per-op profile (seconds per step) and their GEMM FLOPs and seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "core/rss.h"
#include "engine/plan.h"
#include "model/lora.h"
#include "train/data.h"
#include "train/trainer.h"

static void die(const char *what)
{
    fprintf(stderr, "lora_bench: %s: %s\n", what, hyla_error_message());
    exit(1);
}

static size_t rss_before_load;

static void bench(hyla_model *m, int lora, int64_t B, int64_t T, int64_t steps, int64_t rank, const char *targets)
{
    int bf16_base = m->w16 && !m->matrices_in_w;
    hyla_lora L;
    memset(&L, 0, sizeof L);
    if (lora) {
        hyla_lora_options o = {.r = rank, .alpha = 2.0 * (double)rank, .dropout = 0, .targets = targets, .seed = 1};
        if (hyla_lora_create(&L, &m->table, &o))
            die("lora");
        for (size_t i = 0; i < L.table.total_floats; i++) /* B != 0: the adapter path does real work */
            L.w[i] = L.w[i] != 0.0f ? L.w[i] : 1e-3f;
        m->lora = &L;
    }
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    const char *policy = getenv("HYLA_BENCH_POLICY") ? getenv("HYLA_BENCH_POLICY") : "full";
    if (hyla_policy_parse(&tc.policy, policy))
        die("HYLA_BENCH_POLICY");
    tc.unit = HYLA_UNIT_LAYER, tc.batch = B, tc.seq = T, tc.accum = 1;
    tc.adamw = (hyla_adamw_config){1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
    tc.schedule = (hyla_lr_schedule){HYLA_SCHED_CONSTANT, 1e-4, 1e-4, 0, steps + 1, 0};
    hyla_plan_config pc;
    memset(&pc, 0, sizeof pc);
    pc.policy = tc.policy, pc.unit = tc.unit, pc.batch = B, pc.seq = T, pc.devices = 1;
    pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
    if (bf16_base)
        pc.param_bytes = pc.act_bytes = 2;
    hyla_plan plan;
    if (hyla_plan_compute(m, &pc, &plan))
        die("plan");
    hyla_trainer tr;
    if (hyla_trainer_init(&tr, m, &tc))
        die("trainer");
    hyla_data d;
    hyla_data_open_synthetic(&d, 3, m->cfg.vocab);
    int32_t *tok = malloc((size_t)(B * T) * sizeof *tok);
    hyla_step_stats s;
    double best = 1e30, sum = 0, warm = 0;
    for (int64_t i = 0; i <= steps; i++) {
        hyla_data_next(&d, tok, NULL, B, T);
        if (hyla_trainer_step(&tr, tok, NULL, &s))
            die("step");
        if (i == 0) {
            warm = s.seconds;
            hyla_prof_reset(); /* the timed steps' profile only */
            continue;
        }
        best = s.seconds < best ? s.seconds : best;
        sum += s.seconds;
    }
    double params = 4.0 * (double)m->table.total_floats + (lora ? 4.0 * (double)L.table.total_floats : 0.0);
    if (bf16_base) /* as loaded: bf16 matrices, fp32 vectors */
        params = plan.param_bytes;
    double moments = 8.0 * (double)tr.opt.n_floats, grads = (double)hyla_trainer_gradient_bytes(&tr);
    printf("{\"mode\": \"%s\", \"policy\": \"%s\", \"rank\": %lld, \"targets\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"steps\": %lld, "
           "\"best_step_seconds\": %.4f, \"mean_step_seconds\": %.4f, \"warmup_step_seconds\": %.4f, \"tokens_per_s\": %.1f, "
           "\"loss\": %.5f, \"params\": %lld, \"trained_params\": %lld, "
           "\"planned\": {\"param_bytes\": %.0f, \"optimizer_bytes\": %.0f, \"gradient_bytes\": %.0f, \"argument_bytes\": %.0f, "
           "\"checkpoint_bytes\": %.0f, \"work_bytes\": %.0f, \"temp_bytes\": %.0f}, "
           "\"measured\": {\"param_bytes\": %.0f, \"optimizer_bytes\": %.0f, \"gradient_bytes\": %.0f, "
           "\"checkpoint_high_water\": %zu, \"work_high_water\": %zu}, \"activation_arenas_plan_equals_measured\": %s, "
           "\"planned_peak_bytes\": %.0f, \"peak_rss_growth_bytes\": %zu, \"peak_rss_growth_over_plan\": %.4f",
           bf16_base ? "lora-bf16base" : lora ? "lora" : "full", policy, (long long)(lora ? rank : 0), lora ? (targets ? targets : "all-linear") : "", (long long)B,
           (long long)T, (long long)steps, best, sum / (double)steps, warm, (double)(B * T) / best, s.loss,
           (long long)plan.params, (long long)plan.trained_params, plan.param_bytes, plan.opt_bytes, plan.grad_bytes,
           plan.argument_bytes, plan.checkpoint_bytes, plan.work_bytes, plan.temp_bytes, params, moments, grads,
           tr.ex.ckpt.high_water, tr.ex.work.high_water,
           (double)tr.ex.ckpt.high_water == plan.checkpoint_bytes && (double)tr.ex.work.high_water == plan.work_bytes
               ? "true" : "false", plan.peak_bytes, hyla_peak_rss_bytes() - rss_before_load,
           (double)(hyla_peak_rss_bytes() - rss_before_load) / plan.peak_bytes);
    printf(", \"gemm_flops_per_step\": %.4g, \"gemm_seconds_per_step\": %.4f, \"profile\": ",
           hyla_prof.gemm_flops / (double)steps, hyla_prof.gemm_seconds / (double)steps);
    hyla_prof_print_json(stdout);
    printf("}\n");
    fflush(stdout);
    hyla_trainer_free(&tr);
    hyla_plan_free(&plan);
    free(tok);
    if (lora) {
        m->lora = NULL;
        hyla_lora_free(&L);
    }
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: lora_bench MODEL_DIR BATCH SEQ STEPS RANK full,lora|lora|full [TARGETS]\n");
        return 2;
    }
    hyla_model m;
    rss_before_load = hyla_rss_bytes();
    hyla_prof.enabled = 1;
    if (strstr(argv[6], "bf16base") ? hyla_model_load_bf16(&m, argv[1]) : hyla_model_load(&m, argv[1]))
        die(argv[1]);
    int64_t B = atoll(argv[2]), T = atoll(argv[3]), steps = atoll(argv[4]), rank = atoll(argv[5]);
    const char *targets = argc > 7 ? argv[7] : NULL;
    if (strstr(argv[6], "full") && !strstr(argv[6], "bf16base"))
        bench(&m, 0, B, T, steps, rank, targets);
    if (strstr(argv[6], "lora"))
        bench(&m, 1, B, T, steps, rank, targets);
    hyla_model_free(&m);
    return 0;
}
