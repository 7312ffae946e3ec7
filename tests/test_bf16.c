/* bf16 compute on every reference model (tests/reference/make_cases.py; the oracle is PyTorch
 * float64, written from the spec):
 *
 *  1. bf16 forward logits (T = 65) against the float64 oracle, within the bound below; argmax
 *     agreement with the oracle reported;
 *  2. the three ways to reach bf16 weights give bit-identical logits: bf16 weights read straight
 *     from the file (hyla_model_load_bf16), an fp32 load converted with its fp32 copy released,
 *     and fp32 master weights with a bf16 compute copy (training's mode);
 *  3. chunked vs recurrent delta rule in bf16, within the bound;
 *  4. greedy decode (prefill + cached steps) vs a teacher-forced bf16 forward: the same token
 *     wherever the teacher-forced top-2 margin exceeds twice the bound (both are bf16
 *     computations of the same function that may each sit anywhere within the bound), and each
 *     step's logits within twice the bound of the teacher-forced row.
 *
 * Bound (derived, in the style of test_reference.c's fp32 one). In bf16 compute every activation
 * is rounded to bf16 after the op that makes it, and every matmul multiplies bf16-rounded
 * weights: relative error at most u = 2^-9 per element (8 significant bits, round to nearest;
 * the 2^-8 is the spacing); accumulation stays fp32 (~1e-7, negligible here). A logit
 * sits at the end of S = 24 rounding stages per layer (16 activations, 8 weight matrices) plus 8
 * (embedding, final norm, lm_head). Stages are normalised (RMSNorm every half layer), so each
 * stage's relative error adds to the total rather than multiplying, amplified at most by kappa =
 * 8 (softmax, the delta rule's triangular solve: as in the fp32 bound), with no cancellation
 * assumed between stages:
 *     |logit_bf16 - logit_ref| <= S * u * kappa * max(1, rms(ref logits))
 * (8 layers: 200 * 2^-9 * 8 = 3.1 relative to the logit scale; measured maxima are 1.2-15x
 * below it). A wrong op (layout, sign, missing gate) moves logits by O(1) in rms:
 * the rms error is also checked, against bound / 8 (between the random-walk expectation
 * sqrt(S) u / sqrt(3) kappa and the bound).
 * MoE: a token whose top-k experts sit closer than bf16 resolution may route differently, a
 * discrete change no perturbation bound covers (the reference models have router gaps >= 1e-5,
 * fp32-safe, not bf16-safe). The oracle comparison therefore runs with the fp32 run's routing
 * replayed (engine/routing.h); how many tokens route differently unforced is reported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/executor.h"
#include "engine/forward.h"
#include "infer/generate.h"
#include "model/model.h"

#include "case_files.h"
#include "check.h"

static double bf16_bound(const hyla_model *m, const float *ref, int64_t count)
{
    double ss = 0;
    for (int64_t i = 0; i < count; i++)
        ss += (double)ref[i] * ref[i];
    double rms = sqrt(ss / (double)count);
    double S = 24.0 * (double)m->cfg.n_layers + 8.0, u = 0x1.0p-9, kappa = 8.0;
    return S * u * kappa * (rms > 1.0 ? rms : 1.0);
}

static float *forward_logits(const hyla_model *m, const int32_t *tokens, int64_t T, hyla_delta_mode mode)
{
    float *out = malloc((size_t)(T * m->cfg.vocab) * sizeof *out);
    hyla_forward_out fo;
    CHECK(out && hyla_forward(m, tokens, NULL, 1, T, mode, out, &fo) == HYLA_OK, "forward: %s", hyla_error_message());
    return out;
}

/* Forward through an executor with router recording / replay ([moe layers][T][k], or NULL). */
static float *routed_logits(const hyla_model *m, const int32_t *tokens, int64_t T, const int32_t *replay, int32_t *record)
{
    hyla_policy none;
    hyla_executor ex;
    float *out = malloc((size_t)(T * m->cfg.vocab) * sizeof *out);
    hyla_step_loss loss;
    CHECK(hyla_policy_parse(&none, "none") == HYLA_OK &&
              hyla_executor_init(&ex, m, &none, HYLA_UNIT_LAYER, 1, T, HYLA_DELTA_CHUNKED, 1) == HYLA_OK,
          "executor: %s", hyla_error_message());
    ex.replay = replay;
    ex.record = record;
    CHECK(hyla_executor_forward(&ex, tokens, NULL, out, &loss) == HYLA_OK, "forward: %s", hyla_error_message());
    hyla_executor_free(&ex);
    return out;
}

/* 4: greedy decode of `steps` tokens after a prompt of L, against teacher-forced forwards */
static void check_decode(const hyla_model *m, const char *name, const int32_t *prompt, int64_t L, double bound)
{
    enum { STEPS = 6 };
    int64_t V = m->cfg.vocab;
    int32_t seq[80], gen[STEPS], *outs[1] = {gen};
    memcpy(seq, prompt, (size_t)L * sizeof *seq);
    hyla_sampling s = {0, 0, 1.0, 1, STEPS, NULL, 0, 0};
    const int32_t *prompts[1] = {prompt};
    int64_t lens[1] = {L}, n_out = 0;
    hyla_generate_stats st;
    CHECK(hyla_generate(m, 1, prompts, lens, &s, outs, &n_out, NULL, NULL, &st) == HYLA_OK && n_out == STEPS,
          "%s: generate: %s", name, hyla_error_message());
    int agree = 0, decided = 0;
    for (int k = 0; k < STEPS; k++) {
        float *tf = forward_logits(m, seq, L + k, HYLA_DELTA_CHUNKED);
        double margin;
        int32_t want = case_argmax(tf + (L + k - 1) * V, V, &margin);
        if (margin > 2 * bound) {
            decided++;
            agree += want == gen[k];
            CHECK(want == gen[k], "%s L=%lld step %d: decoded %d, teacher-forced argmax %d (margin %.3g > 2 x bound %.3g)",
                  name, (long long)L, k, gen[k], want, margin, 2 * bound);
        }
        free(tf);
        seq[L + k] = gen[k]; /* continue from the decoded token either way */
    }
    printf("  %-14s decode L=%-2lld  %d/%d steps with a margin above 2 x bound: all equal to teacher-forced\n", name,
           (long long)L, agree, decided);
}

static void check_model(const char *cases, const char *name)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", cases, name);
    const int64_t T = 65;
    int32_t *tokens = case_run_tokens(dir, T);
    hyla_model direct, converted, master;
    CHECK(tokens && hyla_model_load_bf16(&direct, dir) == HYLA_OK, "%s: %s", name, hyla_error_message());
    if (!tokens)
        return;
    int64_t V = direct.cfg.vocab;
    snprintf(path, sizeof path, "%s/logits_65.f32", dir);
    float *ref = case_read_f32(path, T * V);
    CHECK(ref != NULL, "%s: no oracle logits", name);
    float *got = forward_logits(&direct, tokens, T, HYLA_DELTA_CHUNKED);
    /* the fp32 run's routing, replayed in bf16 for the oracle comparison */
    int n_moe = 0;
    for (int l = 0; l < direct.cfg.n_layers; l++)
        n_moe += direct.cfg.layer_is_moe[l];
    int64_t top = direct.cfg.top_k > 0 ? direct.cfg.top_k : 1, routes = (int64_t)n_moe * T * top;
    int32_t *r32 = calloc((size_t)(routes ? routes : 1), 4), *r16 = calloc((size_t)(routes ? routes : 1), 4);
    hyla_model fp32;
    CHECK(hyla_model_load(&fp32, dir) == HYLA_OK, "%s: %s", name, hyla_error_message());
    free(routed_logits(&fp32, tokens, T, NULL, n_moe ? r32 : NULL));
    free(routed_logits(&direct, tokens, T, NULL, n_moe ? r16 : NULL));
    int flipped = 0;
    for (int64_t t = 0; t < T; t++) {
        int diff = 0;
        for (int l = 0; l < n_moe; l++)
            for (int64_t j = 0; j < top; j++) {
                int64_t at = ((int64_t)l * T + t) * top + j;
                int found = 0;
                for (int64_t j2 = 0; j2 < top; j2++)
                    found |= r16[((int64_t)l * T + t) * top + j2] == r32[at];
                diff |= !found;
            }
        flipped += diff;
    }
    float *forced = n_moe ? routed_logits(&direct, tokens, T, r32, NULL) : NULL;
    const float *cmp = forced ? forced : got;
    hyla_model_free(&fp32);
    double bound = bf16_bound(&direct, ref, T * V), worst = 0, ss = 0;
    int same_argmax = 0;
    for (int64_t t = 0; t < T; t++) {
        double mg, mr;
        same_argmax += case_argmax(got + t * V, V, &mg) == case_argmax(ref + t * V, V, &mr);
        for (int64_t v = 0; v < V; v++) {
            double d = fabs((double)cmp[t * V + v] - ref[t * V + v]);
            worst = d > worst || isnan(d) ? d : worst;
            ss += d * d;
        }
    }
    double rms = sqrt(ss / (double)(T * V));
    printf("  %-14s bf16 vs float64 oracle%s: max |dlogit| %.3g, rms %.3g (bound %.3g, rms bound %.3g); argmax equal "
           "at %d/%lld positions; %d tokens route differently unforced\n", name, forced ? " (fp32 routing)" : "", worst,
           rms, bound, bound / 8, same_argmax, (long long)T, flipped);
    CHECK(worst <= bound && rms <= bound / 8, "%s: bf16 logits off the oracle by max %.3g / rms %.3g (bounds %.3g / %.3g)",
          name, worst, rms, bound, bound / 8);
    free(r32), free(r16), free(forced);

    /* 2: the same bf16 weights however they were reached */
    CHECK(hyla_model_load(&converted, dir) == HYLA_OK && hyla_model_set_compute_bf16(&converted, 1) == HYLA_OK &&
              hyla_model_load(&master, dir) == HYLA_OK && hyla_model_set_compute_bf16(&master, 0) == HYLA_OK,
          "%s: %s", name, hyla_error_message());
    float *a = forward_logits(&converted, tokens, T, HYLA_DELTA_CHUNKED);
    float *b = forward_logits(&master, tokens, T, HYLA_DELTA_CHUNKED);
    CHECK(!memcmp(a, got, (size_t)(T * V) * sizeof *a) && !memcmp(b, got, (size_t)(T * V) * sizeof *b),
          "%s: bf16 logits differ between direct, converted and master-copy weights", name);
    CHECK(!hyla_model_param(&direct, HYLA_P_EMBED, -1) && hyla_model_param(&master, HYLA_P_EMBED, -1),
          "%s: fp32 views of bf16-only matrices must not exist", name);

    /* 3: chunked vs recurrent */
    float *rec = forward_logits(&direct, tokens, T, HYLA_DELTA_RECURRENT);
    double dr = 0;
    for (int64_t i = 0; i < T * V; i++)
        dr = fmax(dr, fabs((double)rec[i] - got[i]));
    printf("  %-14s bf16 recurrent vs chunked: max |dlogit| %.3g (bound %.3g)\n", name, dr, bound);
    CHECK(dr <= bound, "%s: bf16 recurrent vs chunked differ by %.3g > %.3g", name, dr, bound);

    /* 4: decode */
    int64_t lens[] = {1, 33, 64};
    for (int k = 0; k < 3; k++)
        check_decode(&direct, name, tokens, lens[k], bound);
    free(ref), free(got), free(a), free(b), free(rec), free(tokens);
    hyla_model_free(&direct);
    hyla_model_free(&converted);
    hyla_model_free(&master);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    for (int i = 0; i < CASE_N_MODELS; i++)
        check_model(cases, case_models[i]);
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
