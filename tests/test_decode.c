/* Decode consistency (spec §4.3, §5): prefill + decode agrees with a teacher-forced forward.
 *
 * For every reference model (one block, several blocks, remainder, all-linear, all-attention,
 * irregular layer_types, Qwen3.5 dense and MoE) and prompt lengths 1, 63, 64, 65:
 *  1. greedy hyla_generate tokens == argmax of a teacher-forced forward over the growing prefix;
 *  2. each decode step's logits == the teacher-forced last row, within the logits bound of
 *     test_reference.c (S sqrt(n) u kappa: both are fp32 computations of the same function in
 *     different orders - chunked vs recurrent delta rule, one row vs many in the GEMMs);
 *  3. cached multi-token continuation: prefill 40 tokens, then 25 more in one call (chunked rule
 *     from the cached state and conv window): its last row == row 64 of one 65-token forward;
 *  4. batch > 1 with unequal prompt lengths decodes exactly the tokens of one-at-a-time decoding;
 *  5. a prompt longer than HYLA_PREFILL_CHUNK, prefilled in pieces, == one call over it (same bound).
 * Near ties: inputs are fixed and CPU runs deterministic, so nothing here can flake from run to
 * run. A teacher-forced step whose top-2 logit margin is within the bound is a genuine tie:
 * either token is accepted (counted and printed), and the prefix continues with the decoded one.
 * The reference models were generated with router gaps >= 1e-5 on their own sequences. */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "infer/generate.h"
#include "io/fileio.h"
#include "engine/forward.h"
#include "engine/executor.h"
#include "model/infer_state.h"
#include "model/layer_ops.h"

#include "case_files.h"
#include "check.h"

static int near_ties = 0;

#define NEW 6

static double tolerance(const hyla_model *m, const float *ref, int64_t V)
{
    double ss = 0;
    for (int64_t i = 0; i < V; i++)
        ss += (double)ref[i] * ref[i];
    double rms = sqrt(ss / (double)V);
    return (16.0 * (double)m->cfg.n_layers + 8.0) * 16.0 * 0x1.0p-24 * 8.0 * (rms > 1 ? rms : 1);
}

/* teacher-forced last-row logits of tokens[0..n) */
static void last_logits(const hyla_model *m, const int32_t *tokens, int64_t n, float *out)
{
    int64_t V = m->cfg.vocab;
    float *all = malloc((size_t)(n * V) * sizeof *all);
    hyla_forward_out fo;
    CHECK(hyla_forward(m, tokens, NULL, 1, n, HYLA_DELTA_CHUNKED, all, &fo) == HYLA_OK, "forward: %s", hyla_error_message());
    memcpy(out, all + (n - 1) * V, (size_t)V * sizeof *out);
    free(all);
}

static void check_prompt(const hyla_model *m, const char *name, const int32_t *prompt, int64_t L)
{
    int64_t V = m->cfg.vocab;
    hyla_sampling s = {0, 0, 1.0, 1, NEW, NULL, 0, 0};
    int32_t gen[NEW], *outs[1] = {gen};
    int64_t n_out;
    hyla_generate_stats st;
    const int32_t *prompts[1] = {prompt};
    CHECK(hyla_generate(m, 1, prompts, &L, &s, outs, &n_out, NULL, NULL, &st) == HYLA_OK, "%s: %s", name,
          hyla_error_message());
    /* manual prefill + decode capturing each step's logits */
    hyla_infer_state state;
    hyla_infer_state_init(&state, &m->cfg, 1, L + NEW);
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor pre, dec;
    hyla_executor_init(&pre, m, &nothing, HYLA_UNIT_LAYER, 1, L, HYLA_DELTA_CHUNKED, HYLA_FORWARD_LAST);
    hyla_executor_init(&dec, m, &nothing, HYLA_UNIT_LAYER, 1, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
    float *step = malloc((size_t)V * sizeof(float));
    float *tf = malloc((size_t)V * sizeof(float));
    int32_t *seq = malloc((size_t)(L + NEW) * sizeof(int32_t));
    memcpy(seq, prompt, (size_t)L * sizeof *seq);
    hyla_executor_infer(&pre, prompt, &state, step); /* the prompt's last row only */
    double worst = 0;
    for (int i = 0; i < NEW; i++) {
        last_logits(m, seq, L + i, tf);
        double tol = tolerance(m, tf, V), margin, d = 0;
        for (int64_t v = 0; v < V; v++)
            d = fmax(d, fabs((double)step[v] - tf[v]));
        worst = fmax(worst, d / tol);
        CHECK(d <= tol, "%s L=%lld step %d: decode logits differ from teacher-forced by %.3g (tol %.3g)", name,
              (long long)L, i, d, tol);
        int32_t want = case_argmax(tf, V, &margin);
        if (gen[i] != want) {
            if (margin <= 2 * tol)
                near_ties++;
            else
                CHECK(0, "%s L=%lld step %d: decoded %d, teacher-forced argmax %d (margin %.3g)", name, (long long)L, i,
                      gen[i], want, margin);
        }
        seq[L + i] = gen[i];
        if (i + 1 < NEW)
            hyla_executor_infer(&dec, &gen[i], &state, step);
    }
    printf("  %-14s prompt %3lld: %d greedy tokens == teacher-forced; decode logits within %.2f of tolerance\n", name,
           (long long)L, NEW, worst);
    hyla_executor_free(&pre);
    hyla_executor_free(&dec);
    hyla_infer_state_free(&state);
    free(step);
    free(tf);
    free(seq);
}

/* prefill 40, continue with 25 in one call: its last row == row 64 of a single forward (an
 * inference call computes logits for its last row only) */
static void check_continuation(const hyla_model *m, const char *name, const int32_t *tokens)
{
    int64_t V = m->cfg.vocab, A = 40, Bn = 25;
    hyla_infer_state state;
    hyla_infer_state_init(&state, &m->cfg, 1, A + Bn);
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor e1, e2;
    hyla_executor_init(&e1, m, &nothing, HYLA_UNIT_LAYER, 1, A, HYLA_DELTA_CHUNKED, HYLA_FORWARD_LAST);
    hyla_executor_init(&e2, m, &nothing, HYLA_UNIT_LAYER, 1, Bn, HYLA_DELTA_CHUNKED, HYLA_FORWARD_LAST);
    float *l2 = malloc((size_t)V * sizeof(float));
    float *full = malloc((size_t)((A + Bn) * V) * sizeof(float));
    hyla_executor_infer(&e1, tokens, &state, NULL); /* caches only */
    hyla_executor_infer(&e2, tokens + A, &state, l2);
    hyla_forward_out fo;
    hyla_forward(m, tokens, NULL, 1, A + Bn, HYLA_DELTA_CHUNKED, full, &fo);
    const float *want = full + (A + Bn - 1) * V;
    double tol = tolerance(m, want, V), d = 0;
    for (int64_t i = 0; i < V; i++)
        d = fmax(d, fabs((double)l2[i] - want[i]));
    CHECK(d <= tol, "%s: cached 40+25 continuation differs from one 65-token forward by %.3g (tol %.3g)", name, d, tol);
    printf("  %-14s cached continuation 40 + 25 tokens: max |diff| %.3g (tol %.3g)\n", name, d, tol);
    hyla_executor_free(&e1);
    hyla_executor_free(&e2);
    hyla_infer_state_free(&state);
    free(l2);
    free(full);
}

/* A prompt longer than HYLA_PREFILL_CHUNK: hyla_prefill_sequence runs it in pieces (1024 + 1024 +
 * 45 tokens here) on the caches; its last logits and the next decode step's (which read every
 * cache the pieces filled) against one executor call over the whole prompt. */
static void check_pieces(const hyla_model *m, const char *name)
{
    int64_t V = m->cfg.vocab, P = 2 * HYLA_PREFILL_CHUNK + 45;
    int32_t *prompt = malloc((size_t)(P + 1) * sizeof *prompt);
    for (int64_t i = 0; i <= P; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % V);
    hyla_infer_state a, b;
    hyla_infer_state_init(&a, &m->cfg, 1, P + 1);
    hyla_infer_state_init(&b, &m->cfg, 1, P + 1);
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor one, dec;
    hyla_executor_init(&one, m, &nothing, HYLA_UNIT_LAYER, 1, P, HYLA_DELTA_CHUNKED, HYLA_FORWARD_LAST);
    hyla_executor_init(&dec, m, &nothing, HYLA_UNIT_LAYER, 1, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
    float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    CHECK(hyla_prefill_sequence(m, &a, 0, prompt, P, la, NULL) == HYLA_OK, "%s: pieces: %s", name, hyla_error_message());
    CHECK(hyla_executor_infer(&one, prompt, &b, lb) == HYLA_OK, "%s: one call: %s", name, hyla_error_message());
    double d0 = 0, d1 = 0, tol = tolerance(m, lb, V);
    for (int64_t v = 0; v < V; v++)
        d0 = fmax(d0, fabs((double)la[v] - lb[v]));
    CHECK(a.len[0] == P && b.len[0] == P, "%s: pieces left %lld cached tokens, want %lld", name, (long long)a.len[0],
          (long long)P);
    hyla_executor_infer(&dec, prompt + P, &a, la);
    hyla_executor_infer(&dec, prompt + P, &b, lb);
    for (int64_t v = 0; v < V; v++)
        d1 = fmax(d1, fabs((double)la[v] - lb[v]));
    CHECK(d0 <= tol && d1 <= tol, "%s: a %lld-token prompt in pieces differs from one call by %.3g, next step %.3g (tol %.3g)",
          name, (long long)P, d0, d1, tol);
    printf("  %-14s prompt %lld in pieces of %d: last logits within %.3g, next decode step %.3g of one call (tol %.3g)\n",
           name, (long long)P, HYLA_PREFILL_CHUNK, d0, d1, tol);
    hyla_executor_free(&one);
    hyla_executor_free(&dec);
    hyla_infer_state_free(&a);
    hyla_infer_state_free(&b);
    free(prompt);
    free(la);
    free(lb);
}

static void check_batch(const hyla_model *m, const char *name, const int32_t *tokens)
{
    int64_t lens[3] = {1, 30, 65};
    const int32_t *prompts[3] = {tokens + 100, tokens + 50, tokens};
    int32_t g[3][NEW], one[NEW], *outs[3] = {g[0], g[1], g[2]}, *o1[1] = {one};
    int64_t n_out[3], n1;
    hyla_sampling s = {0, 0, 1.0, 1, NEW, NULL, 0, 0};
    hyla_generate_stats st;
    CHECK(hyla_generate(m, 3, prompts, lens, &s, outs, n_out, NULL, NULL, &st) == HYLA_OK, "%s batch: %s", name,
          hyla_error_message());
    for (int b = 0; b < 3; b++) {
        CHECK(hyla_generate(m, 1, &prompts[b], &lens[b], &s, o1, &n1, NULL, NULL, &st) == HYLA_OK, "%s", hyla_error_message());
        CHECK(n1 == n_out[b] && !memcmp(one, g[b], (size_t)n1 * sizeof *one),
              "%s: batched decode of prompt %d (len %lld) differs from decoding it alone", name, b, (long long)lens[b]);
    }
    printf("  %-14s batch of 3 (prompt lengths 1, 30, 65): tokens == one-at-a-time decoding\n", name);
}

/* A decoded token's fused GDN core (model/op_gdn.c: conv .. gated norm of a key head and its value
 * heads in one parallel region) == the ops one after another, bit for bit: two sequences prefilled
 * with 30 tokens each, then 8 decode steps; every step's logits of both and the caches after them.
 * Fails when the fused path reads another head's channels, a wrong window row or the state of
 * another sequence (these models have 2 key heads of 4 value heads, dk 8 != dv 12). */
static void check_fused(const hyla_model *m, const char *name, const int32_t *tokens)
{
    enum { B = 2, L = 30, STEPS = 8 };
    int64_t V = m->cfg.vocab;
    float *logits[2];
    hyla_infer_state state[2];
    for (int fused = 0; fused < 2; fused++) {
        hyla_gdn_decode_fusion = fused;
        hyla_policy nothing;
        hyla_policy_parse(&nothing, "full");
        hyla_executor pre, dec;
        hyla_infer_state_init(&state[fused], &m->cfg, B, L + STEPS);
        hyla_executor_init(&pre, m, &nothing, HYLA_UNIT_LAYER, B, L, HYLA_DELTA_CHUNKED, HYLA_FORWARD_LAST);
        hyla_executor_init(&dec, m, &nothing, HYLA_UNIT_LAYER, B, 1, HYLA_DELTA_RECURRENT, HYLA_FORWARD_LAST);
        logits[fused] = malloc((size_t)(STEPS * B * V) * sizeof(float));
        int32_t prompt[B * L];
        memcpy(prompt, tokens, L * sizeof *prompt);
        memcpy(prompt + L, tokens + 50, L * sizeof *prompt);
        CHECK(hyla_executor_infer(&pre, prompt, &state[fused], logits[fused]) == HYLA_OK, "%s", hyla_error_message());
        for (int i = 0; i < STEPS; i++) {
            int32_t next[B] = {tokens[100 + i], tokens[150 + i]};
            CHECK(hyla_executor_infer(&dec, next, &state[fused], logits[fused] + i * B * V) == HYLA_OK, "%s",
                  hyla_error_message());
        }
        hyla_executor_free(&pre);
        hyla_executor_free(&dec);
    }
    hyla_gdn_decode_fusion = 1;
    CHECK(!memcmp(logits[0], logits[1], (size_t)(STEPS * B * V) * sizeof(float)),
          "%s: fused decode steps' logits differ from the ops one by one", name);
    int64_t nr = hyla_infer_state_recurrent_floats(&m->cfg);
    float *rec[2] = {malloc((size_t)nr * sizeof(float)), malloc((size_t)nr * sizeof(float))};
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < 2; i++)
            hyla_infer_state_save_recurrent(&state[i], &m->cfg, b, rec[i]);
        CHECK(!memcmp(rec[0], rec[1], (size_t)nr * sizeof(float)),
              "%s: sequence %d's conv windows and delta-rule states after fused decode steps differ from the ops one "
              "by one", name, b);
    }
    free(rec[0]);
    free(rec[1]);
    printf("  %-14s fused GDN decode step: logits and caches == the ops one by one (2 sequences, 8 steps)\n", name);
    for (int i = 0; i < 2; i++) {
        free(logits[i]);
        hyla_infer_state_free(&state[i]);
    }
}

/* Greedy's pick (hyla_argmax, split over the threads at a vocabulary's size) == the first index of
 * the largest value by one scalar loop (NaNs never win; a NaN at 0 stays), for 1, 2 and 3 threads:
 * the maximum repeated in several threads' ranges, NaNs at ranges' starts, +0 and -0 as the
 * largest, a maximum in the last element. */
static int32_t argmax_serial(const float *x, int64_t V)
{
    int32_t best = 0;
    for (int64_t v = 1; v < V && x[0] == x[0]; v++)
        if (x[v] > x[best])
            best = (int32_t)v;
    return best;
}

static void check_argmax(void)
{
    enum { V = 248320 };
    float *x = malloc(V * sizeof *x);
    int threads_before = omp_get_max_threads(), bad = 0, cases = 0;
    for (int kase = 0; kase < 6; kase++) {
        uint32_t st = 99u + (uint32_t)kase;
        for (int64_t v = 0; v < V; v++) {
            st = st * 1664525u + 1013904223u;
            x[v] = (float)(st >> 8) / 16777216.0f - 1.0f; /* [-1, 1) */
        }
        if (kase == 1) /* the maximum three times, in different halves and thirds */
            x[5] = x[V / 2 + 7] = x[V - 3] = 2.0f;
        if (kase == 2) { /* NaNs at the ranges' starts (halves, thirds) and a maximum after them */
            x[V / 2] = x[V / 3] = x[2 * (V / 3)] = x[2 * (V / 3) + 1] = NAN;
            x[V / 2 + 1] = 3.0f;
        }
        if (kase == 3) /* everything <= 0: -0 then +0 as the largest */
            for (int64_t v = 0; v < V; v++)
                x[v] = v == V / 2 + 9 ? -0.0f : v == V - 1 ? 0.0f : -1.0f - (float)(v % 7);
        if (kase == 4)
            x[V - 1] = 5.0f;
        if (kase == 5)
            x[0] = NAN;
        for (int threads = 1; threads <= 3; threads++, cases++) {
            omp_set_num_threads(threads);
            bad += hyla_argmax(x, V) != argmax_serial(x, V);
        }
    }
    omp_set_num_threads(threads_before);
    CHECK(bad == 0, "argmax: %d of %d cases differ from the serial first index of the largest", bad, cases);
    printf("  argmax over %d values (1-3 threads, ties, NaNs, signed zeros): the serial loop's index\n", V);
    free(x);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    check_argmax();
    const char *models[] = {"next_moe_8l", "next_moe_6l", "q35_dense", "q35_moe", "irregular", "all_linear", "all_attention"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char dir[4096], path[4200];
        snprintf(dir, sizeof dir, "%s/%s", cases, models[i]);
        snprintf(path, sizeof path, "%s/expected.json", dir);
        hyla_model m;
        char *text;
        if (hyla_model_load(&m, dir) || hyla_read_text_file(path, &text, NULL)) {
            CHECK(0, "%s: %s", models[i], hyla_error_message());
            continue;
        }
        cJSON *j = cJSON_Parse(text);
        free(text);
        int32_t tokens[200];
        const cJSON *run;
        cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(j, "runs")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(run, "tokens");
            if (cJSON_GetArraySize(t) == 200)
                for (int k = 0; k < 200; k++)
                    tokens[k] = (int32_t)cJSON_GetArrayItem(t, k)->valuedouble;
        }
        cJSON_Delete(j);
        int64_t lens[] = {1, 63, 64, 65};
        for (int k = 0; k < 4; k++)
            check_prompt(&m, models[i], tokens, lens[k]);
        check_continuation(&m, models[i], tokens);
        check_pieces(&m, models[i]);
        check_batch(&m, models[i], tokens);
        check_fused(&m, models[i], tokens);
        hyla_model_free(&m);
    }
    printf("%s: %d failures, %d near ties accepted\n", failures ? "FAIL" : "ok", failures, near_ties);
    return failures ? 1 : 0;
}
