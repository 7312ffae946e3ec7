/* The cost of a speculative verify (infer/speculative.h) against a plain decode step, on one
 * model: after a PROMPT-token prefill, the best of REPS alternated rounds of
 *   - one decode step (1 row, recurrent delta rule, last-row logits), and
 *   - a verify of N + 1 rows for N = 1, 2, 3 (recurrent rule, every row's logits and hidden rows),
 * each run on the same cached state (the caches' length is put back after every call; the
 * recurrent state drifts, which does not change the work). The verify keeps its rollback points
 * (the recurrent state after each row but the last, hyla_infer_state.row_keep) as a round does. Ratios verify / decode: what a round
 * costs beside its tokens. The target is <= 1.3 for N = 2 on the Qwen3.5-0.8B shape.
 * HYLA_VERIFY_PROFILE=1: also the profile by op of one decode step and one 3-row verify (stderr).
 * MODEL_DIR may be a .gguf file: its matrices in their stored types, as hyla generate runs them.
 * usage: verify_bench MODEL_DIR [PROMPT=64] [REPS=5] [DTYPE=f32|bf16]   (one JSON object) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "engine/executor.h"
#include "infer/generate.h"
#include "io/gguf_read.h"
#include "model/model.h"

static double best_call(hyla_executor *ex, hyla_infer_state *st, const int32_t *rows, float *logits, int reps)
{
    double best = 1e30;
    int64_t len = st->len[0];
    for (int r = 0; r < reps; r++) {
        double t0 = hyla_now();
        if (hyla_executor_infer(ex, rows, st, logits) != HYLA_OK) {
            fprintf(stderr, "verify_bench: %s\n", hyla_error_message());
            exit(1);
        }
        double s = hyla_now() - t0;
        best = s < best ? s : best;
        st->len[0] = len;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: verify_bench MODEL_DIR [PROMPT] [REPS] [DTYPE]\n");
        return 2;
    }
    int64_t P = argc > 2 ? atoll(argv[2]) : 64;
    int reps = argc > 3 ? atoi(argv[3]) : 5, bf16 = argc > 4 && !strcmp(argv[4], "bf16");
    hyla_model m;
    int rc = hyla_is_gguf_path(argv[1]) ? hyla_model_load_gguf(&m, argv[1])
             : bf16 ? hyla_model_load_bf16(&m, argv[1])
                    : hyla_model_load(&m, argv[1]);
    if (rc != HYLA_OK) {
        fprintf(stderr, "verify_bench: %s\n", hyla_error_message());
        return 1;
    }
    int64_t V = m.cfg.vocab, H = m.cfg.hidden;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt), rows[4] = {11, 12, 13, 14};
    for (int64_t i = 0; i < P; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % V);
    hyla_infer_state st;
    float *logits = malloc((size_t)(4 * V) * sizeof *logits), *hidden = malloc((size_t)(4 * H) * sizeof *hidden);
    if (hyla_infer_state_init(&st, &m.cfg, 1, P + 8) != HYLA_OK ||
        hyla_prefill_sequence(&m, &st, 0, prompt, P, logits, NULL) != HYLA_OK) {
        fprintf(stderr, "verify_bench: %s\n", hyla_error_message());
        return 1;
    }
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor dec, ver[3];
    hyla_executor_init(&dec, &m, &nothing, HYLA_UNIT_LAYER, 1, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
    float *kept = malloc((size_t)(4 * hyla_infer_state_recurrent_floats(&m.cfg) + 1) * sizeof *kept);
    for (int n = 1; n <= 3; n++) {
        hyla_executor_init(&ver[n - 1], &m, &nothing, HYLA_UNIT_LAYER, 1, n + 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_ROWS);
        ver[n - 1].hidden_out = hidden;
    }
    /* alternated, one call of each per round (a shared VM drifts): the best of each over the rounds */
    double t_dec = 1e30, t_ver[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        double t = best_call(&dec, &st, rows, logits, 1);
        t_dec = t < t_dec ? t : t_dec;
        for (int n = 1; n <= 3; n++) {
            st.row_keep = kept, st.row_keep_cap = n + 1;
            t = best_call(&ver[n - 1], &st, rows, logits, 1);
            st.row_keep = NULL;
            t_ver[n - 1] = t < t_ver[n - 1] ? t : t_ver[n - 1];
        }
    }
    if (getenv("HYLA_VERIFY_PROFILE")) { /* by op: one decode step, then one verify of 3 rows */
        hyla_prof.enabled = 1;
        hyla_prof_reset();
        best_call(&dec, &st, rows, logits, 1);
        hyla_prof_print_json(stderr);
        hyla_prof_reset();
        st.row_keep = kept, st.row_keep_cap = 3;
        best_call(&ver[1], &st, rows, logits, 1);
        st.row_keep = NULL;
        hyla_prof_print_json(stderr);
        hyla_prof.enabled = 0;
    }
    printf("{\"model\": \"%s\", \"dtype\": \"%s\", \"prompt\": %lld, \"reps\": %d, \"decode_step_ms\": %.3f", argv[1],
           bf16 ? "bf16" : "f32", (long long)P, reps, 1e3 * t_dec);
    for (int n = 1; n <= 3; n++)
        printf(", \"verify_%d_ms\": %.3f, \"verify_%d_over_decode\": %.3f", n, 1e3 * t_ver[n - 1], n, t_ver[n - 1] / t_dec);
    printf("}\n");
    hyla_executor_free(&dec);
    for (int n = 0; n < 3; n++)
        hyla_executor_free(&ver[n]);
    hyla_infer_state_free(&st);
    hyla_model_free(&m);
    free(prompt);
    free(logits);
    free(hidden);
    free(kept);
    return 0;
}
