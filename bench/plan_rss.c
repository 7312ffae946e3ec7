/* Plan vs reality for the whole process: peak RSS of a real training step against the plan's
 * total (argument + temp) for the same model, batch and policy, 1 device.
 * usage: plan_rss MODEL_DIR BATCH SEQ POLICY UNIT   (one JSON object)
 * Run it in a fresh process per configuration: RSS is a process-wide high-water mark. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/error.h"
#include "train/data.h"
#include "engine/plan.h"
#include "train/trainer.h"

static double rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: plan_rss MODEL_DIR BATCH SEQ POLICY UNIT\n");
        return 2;
    }
    double base = rss_bytes(); /* process + libraries before anything of hyla's */
    hyla_model m;
    if (hyla_model_load(&m, argv[1])) {
        fprintf(stderr, "plan_rss: %s\n", hyla_error_message());
        return 1;
    }
    double after_load = rss_bytes();
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    if (hyla_policy_parse(&tc.policy, argv[4]) || hyla_remat_unit_parse(argv[5], &tc.unit)) {
        fprintf(stderr, "plan_rss: %s\n", hyla_error_message());
        return 2;
    }
    tc.batch = atoll(argv[2]), tc.seq = atoll(argv[3]), tc.accum = 1;
    tc.adamw = (hyla_adamw_config){1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
    tc.schedule = (hyla_lr_schedule){HYLA_SCHED_CONSTANT, 1e-4, 1e-4, 0, 1, 0};
    hyla_plan_config pc;
    memset(&pc, 0, sizeof pc);
    pc.batch = tc.batch, pc.seq = tc.seq, pc.devices = 1, pc.policy = tc.policy, pc.unit = tc.unit;
    pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
    hyla_plan plan;
    hyla_trainer tr;
    if (hyla_plan_compute(&m, &pc, &plan) || hyla_trainer_init(&tr, &m, &tc)) {
        fprintf(stderr, "plan_rss: %s\n", hyla_error_message());
        return 1;
    }
    hyla_data d;
    hyla_data_open_synthetic(&d, 1, m.cfg.vocab);
    int32_t *tokens = malloc((size_t)(tc.batch * tc.seq) * sizeof *tokens);
    hyla_step_stats st;
    for (int i = 0; i < 2; i++) {
        hyla_data_next(&d, tokens, NULL, tc.batch, tc.seq);
        hyla_trainer_step(&tr, tokens, NULL, &st);
    }
    double peak = rss_bytes();
    printf("{\"policy\": \"%s\", \"unit\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"plan_total_bytes\": %.0f, "
           "\"plan_argument_bytes\": %.0f, \"plan_temp_bytes\": %.0f, \"peak_rss_bytes\": %.0f, "
           "\"rss_before_model_bytes\": %.0f, \"rss_after_load_bytes\": %.0f, \"rss_minus_plan_bytes\": %.0f, "
           "\"rss_minus_plan_minus_baseline_bytes\": %.0f}\n",
           argv[4], argv[5], (long long)tc.batch, (long long)tc.seq, plan.peak_bytes, plan.argument_bytes, plan.temp_bytes,
           peak, base, after_load, peak - plan.peak_bytes, peak - plan.peak_bytes - base);
    free(tokens);
    hyla_plan_free(&plan);
    hyla_trainer_free(&tr);
    hyla_model_free(&m);
    return 0;
}
