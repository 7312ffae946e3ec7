/* Training-step benchmark: activation memory (the step's planned arenas, equal to their measured
 * high-water marks) and step time per remat policy x unit, on one model and batch.
 * usage: train_bench MODEL_DIR BATCH SEQ STEPS POLICY:UNIT [POLICY:UNIT ...]   (JSON lines) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "train/data.h"
#include "train/trainer.h"

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: train_bench MODEL_DIR BATCH SEQ STEPS POLICY:UNIT...\n");
        return 2;
    }
    int64_t B = atoll(argv[2]), T = atoll(argv[3]), steps = atoll(argv[4]);
    for (int c = 5; c < argc; c++) {
        char policy[256], *unit;
        snprintf(policy, sizeof policy, "%s", argv[c]);
        unit = strrchr(policy, ':');
        if (!unit) {
            fprintf(stderr, "train_bench: '%s' is not POLICY:UNIT\n", argv[c]);
            return 2;
        }
        *unit++ = '\0';
        hyla_model m;
        if (hyla_model_load(&m, argv[1])) {
            fprintf(stderr, "train_bench: %s\n", hyla_error_message());
            return 1;
        }
        hyla_train_config tc;
        memset(&tc, 0, sizeof tc);
        if (hyla_policy_parse(&tc.policy, policy) || hyla_remat_unit_parse(unit, &tc.unit)) {
            fprintf(stderr, "train_bench: %s\n", hyla_error_message());
            return 2;
        }
        tc.batch = B, tc.seq = T, tc.accum = 1;
        tc.adamw = (hyla_adamw_config){1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0};
        tc.schedule = (hyla_lr_schedule){HYLA_SCHED_CONSTANT, 1e-4, 1e-4, 0, steps, 0};
        hyla_trainer tr;
        if (hyla_trainer_init(&tr, &m, &tc)) {
            fprintf(stderr, "train_bench: %s\n", hyla_error_message());
            return 1;
        }
        hyla_data d;
        hyla_data_open_synthetic(&d, 3, m.cfg.vocab);
        int32_t *tokens = malloc((size_t)(B * T) * sizeof *tokens);
        hyla_step_stats s;
        hyla_data_next(&d, tokens, B, T);
        hyla_trainer_step(&tr, tokens, &s); /* warm-up */
        double best = 1e30, sum = 0;
        hyla_prof.enabled = 1;
        hyla_prof_reset();
        for (int64_t i = 0; i < steps; i++) {
            hyla_data_next(&d, tokens, B, T);
            hyla_trainer_step(&tr, tokens, &s);
            sum += s.seconds;
            if (s.seconds < best)
                best = s.seconds;
        }
        hyla_prof.enabled = 0;
        printf("{\"policy\": \"%s\", \"unit\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"steps\": %lld, "
               "\"best_step_seconds\": %.6f, \"mean_step_seconds\": %.6f, \"tokens_per_s\": %.1f, "
               "\"checkpoint_bytes\": %zu, \"work_bytes\": %zu, \"activation_bytes\": %zu, "
               "\"measured_checkpoint_high_water\": %zu, \"measured_work_high_water\": %zu, "
               "\"gemm_gflops\": %.1f, \"gemm_flops_per_step\": %.4g, \"loss\": %.6f}\n",
               policy, unit, (long long)B, (long long)T, (long long)steps, best, sum / steps, B * T / best,
               tr.ex.ckpt_bytes, tr.ex.work_bytes, hyla_trainer_activation_bytes(&tr), tr.ex.ckpt.high_water,
               tr.ex.work.high_water, hyla_prof.gemm_flops / hyla_prof.gemm_seconds / 1e9,
               hyla_prof.gemm_flops / steps, s.loss);
        fflush(stdout);
        free(tokens);
        hyla_trainer_free(&tr);
        hyla_model_free(&m);
    }
    return 0;
}
