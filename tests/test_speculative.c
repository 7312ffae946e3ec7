/* The MTP head and speculative decoding (docs/mtp.md, infer/mtp.h, infer/speculative.h).
 *
 * On the reference models that carry an MTP head (next_moe_8l: Qwen3-Next with an MoE MTP layer;
 * q35_dense; q35_moe):
 *  1. the head's teacher-forced logits (the trunk's prefill hidden rows, then the head over the
 *     T - 1 pairs) against the float64 oracle's mtp_forward, within the logits bound of
 *     test_decode.c with one layer more (two fp32 computations of one function);
 *  2. greedy --draft N (N = 1, 2, 3) produces plain greedy decoding's tokens, for prompt lengths
 *     1 .. 150, both with the head's own drafts (random weights: few accepted) and with drafts
 *     filtered to be the right token except on a fixed pattern, which drives every acceptance
 *     length and so every rollback (KV truncation, recurrent state restore and replay, head
 *     entries dropped and re-appended). Where the verify (N + 1 rows) and plain decode (one row)
 *     round a near-tie differently the sequences may part: the test then shows the top-2 margin of
 *     the teacher-forced logits at that step is within twice the bound, and counts such cases;
 *  3. sampling: over 3000 seeded runs each, the second and third generated tokens' empirical
 *     distributions with --draft 2 and without (temperature 1, top-k 4) pass a two-sample
 *     chi-squared homogeneity test at significance 0.001 (speculative rejection sampling leaves
 *     the output distribution the trunk's; a draft accepted without the test would shift it);
 *  4. bad input: a model without MTP tensors, N out of range. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/forward.h"
#include "infer/generate.h"
#include "infer/mtp.h"
#include "infer/speculative.h"

#include "case_files.h"
#include "check.h"

#define NEW 24

static int near_ties = 0, compared = 0;

/* test_decode.c's bound with the MTP layer counted: S sqrt(n) u kappa over the layers */
static double tolerance(const hyla_model *m, const float *ref, int64_t V, int extra_layers)
{
    double ss = 0;
    for (int64_t i = 0; i < V; i++)
        ss += (double)ref[i] * ref[i];
    double rms = sqrt(ss / (double)V);
    return (16.0 * (double)(m->cfg.n_layers + extra_layers) + 8.0) * 16.0 * 0x1.0p-24 * 8.0 * (rms > 1 ? rms : 1);
}

static float *read_f32(const char *dir, const char *name, size_t count)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    float *x = malloc(count * sizeof *x);
    size_t got = f && x ? fread(x, sizeof *x, count, f) : 0;
    if (f)
        fclose(f);
    if (got != count) {
        free(x);
        return NULL;
    }
    return x;
}

/* 1: teacher-forced head logits vs the oracle's */
static void check_head_logits(const hyla_model *m, const char *dir, const char *name, const int32_t *tokens, int64_t T,
                              const char *file)
{
    int64_t V = m->cfg.vocab, H = m->cfg.hidden;
    float *want = read_f32(dir, file, (size_t)((T - 1) * V));
    CHECK(want != NULL, "%s: cannot read %s", name, file);
    if (!want)
        return;
    hyla_infer_state st;
    hyla_infer_state_init(&st, &m->cfg, 1, T);
    float *hidden = malloc((size_t)(T * H) * sizeof(float)), *last = malloc((size_t)V * sizeof(float));
    float *got = malloc((size_t)((T - 1) * V) * sizeof(float));
    CHECK(hyla_prefill_sequence_hidden(m, &st, 0, tokens, T, last, NULL, hidden) == HYLA_OK, "%s: %s", name,
          hyla_error_message());
    hyla_mtp head;
    CHECK(hyla_mtp_init(&head, m, 1, T - 1, T) == HYLA_OK, "%s: %s", name, hyla_error_message());
    CHECK(hyla_mtp_run(&head, tokens + 1, hidden, T - 1, NULL, got, 0) == HYLA_OK, "%s: %s", name, hyla_error_message());
    double worst = 0;
    for (int64_t t = 0; t < T - 1; t++) {
        double tol = tolerance(m, want + t * V, V, 1), d = 0;
        for (int64_t v = 0; v < V; v++)
            d = fmax(d, fabs((double)got[t * V + v] - want[t * V + v]));
        worst = fmax(worst, d / tol);
        CHECK(d <= tol, "%s T=%lld row %lld: MTP logits differ from the oracle by %.3g (bound %.3g)", name, (long long)T,
              (long long)t, d, tol);
    }
    printf("  %-12s T=%3lld: MTP head logits vs float64 oracle within %.3f of the bound\n", name, (long long)T, worst);
    hyla_mtp_free(&head);
    hyla_infer_state_free(&st);
    free(hidden);
    free(last);
    free(got);
    free(want);
}

typedef struct {
    const int32_t *truth; /* plain greedy's tokens */
    int64_t n;
    int64_t calls;
} filter_ctx;

/* The right token except on every third call (and past the known tokens): every acceptance length. */
static int32_t pattern_filter(void *vctx, int64_t at, int32_t draft)
{
    filter_ctx *c = vctx;
    c->calls++;
    if (at < c->n && c->calls % 3 != 0)
        return c->truth[at];
    return draft;
}

/* the first index where a and b differ (n if none) */
static int64_t first_diff(const int32_t *a, const int32_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return n;
}

/* 2: --draft N == plain greedy (up to near-ties, shown as such) */
static void check_draft(const hyla_model *m, const char *name, const int32_t *prompt, int64_t L, int N, int filtered)
{
    int64_t V = m->cfg.vocab;
    hyla_sampling s = {0, 0, 1.0, 1, NEW, NULL, 0, 0};
    int32_t plain[NEW], spec[NEW], *outs[1] = {plain};
    int64_t n_plain, n_spec;
    hyla_generate_stats st, sst;
    const int32_t *prompts[1] = {prompt};
    CHECK(hyla_generate(m, 1, prompts, &L, &s, outs, &n_plain, NULL, NULL, &st) == HYLA_OK, "%s", hyla_error_message());
    filter_ctx fc = {plain, n_plain, 0};
    int rc = hyla_generate_draft_filtered(m, prompt, L, &s, N, spec, &n_spec, NULL, NULL, &sst,
                                          filtered ? pattern_filter : NULL, &fc);
    CHECK(rc == HYLA_OK, "%s draft %d: %s", name, N, hyla_error_message());
    if (rc != HYLA_OK)
        return;
    compared++;
    CHECK(sst.drafted == sst.draft_rounds * N && sst.accepted <= sst.drafted, "%s: draft counts %lld/%lld/%lld", name,
          (long long)sst.draft_rounds, (long long)sst.drafted, (long long)sst.accepted);
    if (filtered)
        CHECK(sst.accepted > 0, "%s N=%d L=%lld: the filtered drafts were never accepted", name, N, (long long)L);
    int64_t i = first_diff(plain, spec, n_plain < n_spec ? n_plain : n_spec);
    if (i == n_plain && n_plain == n_spec)
        return;
    CHECK(i < n_plain && i < n_spec, "%s N=%d L=%lld: %lld tokens with --draft, %lld without", name, N, (long long)L,
          (long long)n_spec, (long long)n_plain);
    if (i >= n_plain || i >= n_spec)
        return;
    /* parted at step i: a genuine near-tie of the trunk's logits there? */
    int32_t *seq = malloc((size_t)(L + i) * sizeof *seq);
    memcpy(seq, prompt, (size_t)L * sizeof *seq);
    memcpy(seq + L, plain, (size_t)i * sizeof *seq);
    float *tf = malloc((size_t)V * sizeof *tf);
    hyla_forward_out fo;
    CHECK(hyla_forward_last_row(m, seq, L + i, tf, &fo) == HYLA_OK, "%s", hyla_error_message());
    double margin, tol = tolerance(m, tf, V, 0);
    case_argmax(tf, V, &margin);
    if (margin <= 2 * tol) {
        near_ties++;
        printf("  %-12s N=%d L=%3lld: parted at step %lld on a near-tie (margin %.3g <= %.3g)\n", name, N, (long long)L,
               (long long)i, margin, 2 * tol);
    } else
        CHECK(0, "%s N=%d L=%lld: --draft gave %d at step %lld, plain greedy %d (margin %.3g > %.3g)", name, N,
              (long long)L, spec[i], (long long)i, plain[i], margin, 2 * tol);
    free(seq);
    free(tf);
}

/* The chi-squared critical value of k degrees of freedom at significance 0.001 (Wilson-Hilferty). */
static double chi2_critical(int k)
{
    double z = 3.0902, a = 2.0 / (9.0 * k);
    return k * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Two-sample homogeneity over a token position's counts a, b [V] of n runs each; categories with
 * fewer than 10 in all are pooled. Returns the statistic; *dof receives its degrees of freedom. */
static double chi2_two_sample(const int64_t *a, const int64_t *b, int64_t V, int *dof)
{
    double stat = 0, pa = 0, pb = 0;
    int cats = 0;
    for (int64_t v = 0; v < V; v++) {
        if (a[v] + b[v] < 10) {
            pa += (double)a[v], pb += (double)b[v];
            continue;
        }
        stat += ((double)a[v] - (double)b[v]) * ((double)a[v] - (double)b[v]) / (double)(a[v] + b[v]);
        cats++;
    }
    if (pa + pb > 0) {
        stat += (pa - pb) * (pa - pb) / (pa + pb);
        cats++;
    }
    *dof = cats - 1;
    return stat;
}

static void check_sampling(const hyla_model *m, const char *name, const int32_t *prompt)
{
    enum { RUNS = 3000, NEW_S = 3 };
    int64_t V = m->cfg.vocab;
    int64_t *plain = calloc((size_t)(2 * V), sizeof *plain), *draft = calloc((size_t)(2 * V), sizeof *draft);
    int64_t accepted = 0, drafted = 0;
    for (int r = 0; r < RUNS; r++) {
        hyla_sampling s = {1.0, 4, 1.0, (uint64_t)(1000 + r), NEW_S, NULL, 0, 0};
        int32_t a[NEW_S], b[NEW_S], *outs[1] = {a};
        int64_t na, nb, L = 5;
        hyla_generate_stats st;
        const int32_t *ps[1] = {prompt};
        CHECK(hyla_generate(m, 1, ps, &L, &s, outs, &na, NULL, NULL, &st) == HYLA_OK, "%s", hyla_error_message());
        CHECK(hyla_generate_draft(m, prompt, L, &s, 2, b, &nb, NULL, NULL, &st) == HYLA_OK, "%s", hyla_error_message());
        accepted += st.accepted, drafted += st.drafted;
        for (int i = 1; i < NEW_S && na == NEW_S && nb == NEW_S; i++)
            plain[(i - 1) * V + a[i]]++, draft[(i - 1) * V + b[i]]++;
    }
    for (int i = 0; i < 2; i++) {
        int dof;
        double stat = chi2_two_sample(plain + i * V, draft + i * V, V, &dof), crit = chi2_critical(dof > 0 ? dof : 1);
        CHECK(dof >= 1 && stat <= crit, "%s: token %d's distribution with --draft 2 differs from plain sampling: "
              "chi-squared %.1f > %.1f (%d dof, p < 0.001)", name, i + 2, stat, crit, dof);
        printf("  %-12s sampling: token %d over %d runs each, chi-squared %.1f (%d dof; 0.001 critical %.1f); "
               "%lld of %lld drafts accepted\n", name, i + 2, RUNS, stat, dof, crit, (long long)accepted, (long long)drafted);
    }
    free(plain);
    free(draft);
}

static void check_bad_input(const hyla_model *with_mtp, const char *cases)
{
    hyla_sampling s = {0, 0, 1.0, 1, 4, NULL, 0, 0};
    int32_t prompt[2] = {1, 2}, out[4];
    int64_t n;
    hyla_generate_stats st;
    CHECK(hyla_generate_draft(with_mtp, prompt, 2, &s, 0, out, &n, NULL, NULL, &st) == HYLA_ERR_ARG, "draft 0 accepted");
    CHECK(hyla_generate_draft(with_mtp, prompt, 2, &s, HYLA_MAX_DRAFT + 1, out, &n, NULL, NULL, &st) == HYLA_ERR_ARG,
          "draft %d accepted", HYLA_MAX_DRAFT + 1);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_6l", cases); /* a model without MTP tensors */
    hyla_model plain;
    if (hyla_model_load(&plain, dir) == HYLA_OK) {
        CHECK(plain.cfg.n_mtp_layers == 0, "next_moe_6l: %lld MTP layers", (long long)plain.cfg.n_mtp_layers);
        CHECK(hyla_generate_draft(&plain, prompt, 2, &s, 2, out, &n, NULL, NULL, &st) == HYLA_ERR_ARG &&
                  strstr(hyla_error_message(), "MTP"),
              "draft on a model without MTP: %s", hyla_error_message());
        hyla_model_free(&plain);
    } else
        CHECK(0, "next_moe_6l: %s", hyla_error_message());
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    const char *models[] = {"next_moe_8l", "q35_dense", "q35_moe"};
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        char dir[4096];
        hyla_model m;
        cJSON *j;
        if (case_load(cases, models[k], dir, sizeof dir, &m, &j)) {
            CHECK(0, "%s: %s", models[k], hyla_error_message());
            continue;
        }
        CHECK(m.cfg.n_mtp_layers == 1, "%s: %lld MTP layers loaded", models[k], (long long)m.cfg.n_mtp_layers);
        int32_t tokens[200];
        int have200 = 0;
        const cJSON *run;
        cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(j, "runs")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(run, "tokens"), *f = cJSON_GetObjectItemCaseSensitive(run, "mtp_logits");
            int64_t T = cJSON_GetArraySize(t);
            int32_t *toks = malloc((size_t)(T ? T : 1) * sizeof *toks);
            for (int64_t i = 0; i < T; i++)
                toks[i] = (int32_t)cJSON_GetArrayItem(t, (int)i)->valuedouble;
            if (T >= 2)
                CHECK(cJSON_IsString(f), "%s T=%lld: no mtp_logits in expected.json", models[k], (long long)T);
            if (cJSON_IsString(f))
                check_head_logits(&m, dir, models[k], toks, T, f->valuestring);
            if (T == 200)
                memcpy(tokens, toks, sizeof tokens), have200 = 1;
            free(toks);
        }
        cJSON_Delete(j);
        CHECK(have200, "%s: no 200-token run", models[k]);
        int64_t lens[] = {1, 2, 5, 63, 64, 65, 150};
        for (int N = 1; N <= 3 && have200; N++)
            for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
                check_draft(&m, models[k], tokens, lens[i], N, 0);
                check_draft(&m, models[k], tokens, lens[i], N, 1);
            }
        printf("  %-12s --draft 1..3 == plain greedy over %zu prompt lengths, own and filtered drafts\n", models[k],
               sizeof lens / sizeof *lens);
        if (k == 0)
            check_bad_input(&m, cases);
        if (k != 1) /* the MoE heads (the dense one's vocabulary is the same size) */
            check_sampling(&m, models[k], tokens);
        hyla_model_free(&m);
    }
    printf("%d runs compared, %d parted on a near-tie\n", compared, near_ties);
    CHECK(near_ties * 10 <= compared, "near-ties in %d of %d runs: not rare", near_ties, compared);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_speculative: all checks passed\n");
    return 0;
}
