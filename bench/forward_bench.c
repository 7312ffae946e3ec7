/* Forward-pass benchmark: tokens/s of hyla's fp32 forward on one sequence, with a per-op
 * profile and the GEMM (projection matmul) throughput as % of the machine's FP32 peak.
 * usage: forward_bench MODEL_DIR [SEQ=512] [REPS=5]   (prints one JSON object)
 * bench/forward.sh runs it next to the PyTorch reference on the same weights. */
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/profile.h"
#include "engine/executor.h"
#include "model/model.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: forward_bench MODEL_DIR [SEQ] [REPS]\n");
        return 2;
    }
    int64_t T = argc > 2 ? atoll(argv[2]) : 512, reps = argc > 3 ? atoll(argv[3]) : 5;
    const char *peak_env = getenv("HYLA_PEAK_GFLOPS");
    double peak = peak_env ? atof(peak_env) : 435.0;
    hyla_model m;
    if (hyla_model_load(&m, argv[1])) {
        fprintf(stderr, "forward_bench: %s\n", hyla_error_message());
        return 1;
    }
    int32_t *tokens = malloc((size_t)T * sizeof *tokens);
    for (int64_t i = 0; i < T; i++)
        tokens[i] = (int32_t)((i * 7919 + 13) % m.cfg.vocab);
    /* one executor for every repetition, as an engine serving requests would keep it: its arenas
     * are allocated and first touched once (hyla_forward builds a fresh one per call) */
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor ex;
    if (hyla_executor_init(&ex, &m, &nothing, HYLA_UNIT_LAYER, 1, T, HYLA_DELTA_CHUNKED, 1)) {
        fprintf(stderr, "forward_bench: %s\n", hyla_error_message());
        return 1;
    }
    hyla_step_loss out;
    hyla_executor_forward(&ex, tokens, NULL, NULL, &out); /* warm-up */
    hyla_prof.enabled = 1;
    hyla_prof_reset();
    double best = 1e30, total = 0;
    for (int64_t r = 0; r < reps; r++) {
        double t0 = hyla_now();
        hyla_executor_forward(&ex, tokens, NULL, NULL, &out);
        double dt = hyla_now() - t0;
        total += dt;
        if (dt < best)
            best = dt;
    }
    hyla_param_counts pc;
    hyla_params_count(&m.table, &pc);
    double gemm_gflops = hyla_prof.gemm_flops / hyla_prof.gemm_seconds / 1e9;
    printf("{\"engine\": \"hyla\", \"seq\": %lld, \"reps\": %lld, \"best_seconds\": %.6f, \"mean_seconds\": %.6f, "
           "\"tokens_per_s\": %.1f, \"params_total\": %lld, \"params_active\": %lld, \"loss\": %.6f, "
           "\"gemm_gflops\": %.1f, \"gemm_pct_peak\": %.1f, \"gemm_seconds_share\": %.3f, \"peak_gflops\": %.0f, "
           "\"profile\": ",
           (long long)T, (long long)reps, best, total / reps, T / best, (long long)pc.total, (long long)pc.active,
           out.ce_sum / (double)out.ce_count, gemm_gflops, 100 * gemm_gflops / peak, hyla_prof.gemm_seconds / total, peak);
    hyla_prof_print_json(stdout);
    printf("}\n");
    free(tokens);
    hyla_executor_free(&ex);
    hyla_model_free(&m);
    return 0;
}
