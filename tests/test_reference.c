/* Oracle comparison: every tiny model written by tests/reference/make_cases.py (PyTorch,
 * float64, written from the spec) against hyla's fp32 forward.
 *
 *  1. logits, cross-entropy, router aux loss and total loss vs the reference, for every model
 *     and every sequence length (1, 63, 64, 65, 200);
 *  2. chunked vs recurrent delta rule on the whole model;
 *  3. the same weights in the other GDN / expert layout give bit-identical logits;
 *  4. load -> save -> load keeps every tensor's bytes, name, shape and dtype.
 *
 * Tolerance (derived, not tuned). hyla computes in fp32 (unit roundoff u = 2^-24 ~ 6e-8); the
 * oracle in float64, so its own error is negligible. A logit is the end of a chain of
 * S = 16 rounding stages per layer (norm, projections, conv, l2norm, delta rule / softmax,
 * gated norm, out projection, router, experts, residual adds) plus 8 for embedding, final norm
 * and lm_head. Each stage is a dot product or reduction of length n <= n_max (256 in these
 * models), whose rounding error is ~sqrt(n) u relative to the magnitude of its operands
 * (random-walk accumulation). The stages are normalised (RMSNorm every half layer), so relative
 * errors add rather than multiply, amplified at most by the conditioning of softmax / the delta
 * rule's triangular solve, bounded here by kappa = 8. Hence
 *     |logit_hyla - logit_ref| <= S * sqrt(n_max) * u * kappa * max(1, rms(ref logits)).
 * For 8 layers: 136 * 16 * 6e-8 * 8 = 1.04e-3 relative to the logit scale. The losses are
 * means of log-softmax values, 2-Lipschitz in the max-norm of the logits: tolerance 2x that.
 * A wrong op (layout, sign, missing gate) moves logits by O(0.1 - 1), far outside this bound.
 * Chunked vs recurrent (same fp32 precision, two different summation orders) uses the same bound. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileio.h"
#include "engine/forward.h"
#include "model/model.h"

#include "case_files.h"
#include "check.h"


static double logit_tolerance(const hyla_model *m, const float *ref, int64_t count)
{
    double ss = 0;
    for (int64_t i = 0; i < count; i++)
        ss += (double)ref[i] * ref[i];
    double rms = sqrt(ss / (double)count);
    int64_t n_max = 256; /* longest reduction in the test models (checked below) */
    double S = 16.0 * (double)m->cfg.n_layers + 8.0, u = 0x1.0p-24, kappa = 8.0;
    return S * sqrt((double)n_max) * u * kappa * (rms > 1.0 ? rms : 1.0);
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) /* NaN-propagating */
            d = x;
    }
    return d;
}

static double json_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void check_loss(const char *what, const char *model, int64_t T, double got, double want, double tol)
{
    if (isnan(want))
        CHECK(isnan(got), "%s T=%lld %s: expected none, got %.9g", model, (long long)T, what, got);
    else
        CHECK(fabs(got - want) <= tol, "%s T=%lld %s: got %.9g want %.9g (tol %.3g)", model, (long long)T, what, got,
              want, tol);
}

static void check_run(const hyla_model *m, const char *dir, const char *name, const cJSON *run)
{
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(run, "tokens");
    int64_t T = cJSON_GetArraySize(toks), V = m->cfg.vocab;
    int32_t *tokens = malloc((size_t)T * sizeof *tokens);
    for (int64_t i = 0; i < T; i++)
        tokens[i] = (int32_t)cJSON_GetArrayItem(toks, (int)i)->valuedouble;
    char path[8200];
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItemCaseSensitive(run, "logits")->valuestring);
    float *ref = case_read_f32(path, T * V);
    CHECK(ref != NULL, "%s: cannot read %s", name, path);
    float *chunked = malloc((size_t)(T * V) * sizeof(float)), *recurrent = malloc((size_t)(T * V) * sizeof(float));
    hyla_forward_out oc, orr;
    int st = hyla_forward(m, tokens, NULL, 1, T, HYLA_DELTA_CHUNKED, chunked, &oc);
    CHECK(st == HYLA_OK, "%s: forward failed: %s", name, hyla_error_message());
    st = hyla_forward(m, tokens, NULL, 1, T, HYLA_DELTA_RECURRENT, recurrent, &orr);
    CHECK(st == HYLA_OK, "%s: recurrent forward failed: %s", name, hyla_error_message());
    if (ref) {
        double tol = logit_tolerance(m, ref, T * V);
        double d = max_abs_diff(chunked, ref, T * V), dr = max_abs_diff(recurrent, chunked, T * V);
        printf("  %-14s T=%-4lld max|logit - ref| %.3g  max|recurrent - chunked| %.3g  (tol %.3g)\n", name,
               (long long)T, d, dr, tol);
        CHECK(d <= tol, "%s T=%lld: logits differ from the reference by %.3g > %.3g", name, (long long)T, d, tol);
        CHECK(dr <= tol, "%s T=%lld: recurrent vs chunked logits differ by %.3g > %.3g", name, (long long)T, dr, tol);
        check_loss("ce_loss", name, T, oc.ce_loss, json_num(run, "ce_loss"), 2 * tol);
        check_loss("aux_loss", name, T, oc.aux_loss, json_num(run, "aux_loss"), 2 * tol);
        check_loss("total_loss", name, T, oc.total_loss, json_num(run, "total_loss"), 2 * tol);
    }
    free(ref);
    free(chunked);
    free(recurrent);
    free(tokens);
}

/* Same weights, other layout: must give bit-identical logits. Also checks lossless save. */
static void check_layouts(const hyla_model *m, const char *name, const int32_t *tokens, int64_t T)
{
    char tmp[] = "/tmp/hyla_layout_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    hyla_layout other = m->table.layout;
    other.gdn_grouped = !other.gdn_grouped;
    other.experts_fused = !other.experts_fused;
    char out[4200];
    snprintf(out, sizeof out, "%s/other", tmp);
    int st = hyla_model_save(m, out, &other, 0);
    CHECK(st == HYLA_OK, "%s: save in other layout: %s", name, hyla_error_message());
    hyla_model m2;
    st = hyla_model_load(&m2, out);
    CHECK(st == HYLA_OK, "%s: reload other layout: %s", name, hyla_error_message());
    if (st == HYLA_OK) {
        int64_t V = m->cfg.vocab;
        float *a = malloc((size_t)(T * V) * sizeof(float)), *b = malloc((size_t)(T * V) * sizeof(float));
        hyla_forward_out oa, ob;
        hyla_forward(m, tokens, NULL, 1, T, HYLA_DELTA_CHUNKED, a, &oa);
        hyla_forward(&m2, tokens, NULL, 1, T, HYLA_DELTA_CHUNKED, b, &ob);
        CHECK(memcmp(a, b, (size_t)(T * V) * sizeof(float)) == 0,
              "%s: logits differ between layouts (grouped=%d fused=%d vs grouped=%d fused=%d)", name,
              m->table.layout.gdn_grouped, m->table.layout.experts_fused, other.gdn_grouped, other.experts_fused);
        free(a);
        free(b);
        hyla_model_free(&m2);
    }
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "cleanup");
}

static void check_lossless(const hyla_model *m, const char *dir, const char *name)
{
    char tmp[] = "/tmp/hyla_resave_XXXXXX", out[4200];
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    snprintf(out, sizeof out, "%s/m", tmp);
    /* shard small models too, so the index path is exercised on the way back */
    int st = hyla_model_save(m, out, NULL, 64 << 10);
    CHECK(st == HYLA_OK, "%s: save: %s", name, hyla_error_message());
    hyla_st_set a, b;
    CHECK(hyla_st_open(&a, dir) == HYLA_OK, "%s: open original: %s", name, hyla_error_message());
    CHECK(hyla_st_open(&b, out) == HYLA_OK, "%s: open re-saved: %s", name, hyla_error_message());
    size_t compared = 0;
    for (size_t i = 0; i < hyla_st_count(&a); i++) {
        const hyla_st_tensor *ta = hyla_st_at(&a, i);
        /* every stored tensor comes back, carried ones (mtp.*, model.visual.*) included; only a
         * tied model's stored lm_head copy is dropped (HF ignores it) */
        if (hyla_model_is_ignored_tensor(ta->name, &m->cfg) && !strcmp(ta->name, "lm_head.weight"))
            continue;
        const hyla_st_tensor *tb = hyla_st_find(&b, ta->name);
        CHECK(tb != NULL, "%s: re-saved model lacks '%s'", name, ta->name);
        if (!tb)
            continue;
        CHECK(ta->dtype == tb->dtype && ta->ndim == tb->ndim &&
                  !memcmp(ta->shape, tb->shape, sizeof(int64_t) * (size_t)ta->ndim),
              "%s: '%s' dtype/shape changed on re-save", name, ta->name);
        CHECK(ta->nbytes == tb->nbytes && !memcmp(ta->data, tb->data, ta->nbytes), "%s: '%s' bytes changed on re-save",
              name, ta->name);
        compared++;
    }
    CHECK(compared == hyla_st_count(&b), "%s: re-saved model has %zu tensors, original %zu", name, hyla_st_count(&b),
          compared);
    printf("  %-14s load -> save (sharded) -> load: %zu tensors byte-identical\n", name, compared);
    hyla_st_close(&a);
    hyla_st_close(&b);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "cleanup");
}

static void check_model(const char *cases, const char *name)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", cases, name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text;
    if (hyla_read_text_file(path, &text, NULL) != HYLA_OK)
        return; /* not a case directory */
    cJSON *exp = cJSON_Parse(text);
    free(text);
    CHECK(exp != NULL, "%s: bad JSON", path);
    if (!exp)
        return;
    hyla_model m;
    int st = hyla_model_load(&m, dir);
    CHECK(st == HYLA_OK, "%s: load failed: %s", name, hyla_error_message());
    if (st == HYLA_OK) {
        int64_t n_max = m.cfg.hidden;
        n_max = n_max > hyla_cfg_conv_dim(&m.cfg) ? n_max : hyla_cfg_conv_dim(&m.cfg);
        CHECK(n_max <= 256, "%s: test model wider than the tolerance derivation assumes", name);
        const cJSON *run;
        const cJSON *longest = NULL;
        cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(exp, "runs")) {
            check_run(&m, dir, name, run);
            longest = run;
        }
        if (longest) {
            const cJSON *toks = cJSON_GetObjectItemCaseSensitive(longest, "tokens");
            int64_t T = cJSON_GetArraySize(toks);
            int32_t *tokens = malloc((size_t)T * sizeof *tokens);
            for (int64_t i = 0; i < T; i++)
                tokens[i] = (int32_t)cJSON_GetArrayItem(toks, (int)i)->valuedouble;
            check_layouts(&m, name, tokens, T);
            free(tokens);
        }
        check_lossless(&m, dir, name);
        hyla_model_free(&m);
    }
    cJSON_Delete(exp);
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    DIR *d = opendir(cases);
    if (!d) {
        printf("FAIL: cannot open cases directory %s (run tests/reference/make_cases.py)\n", cases);
        return 1;
    }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int models = 0;
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s/expected.json", cases, names[i]);
        models += hyla_file_exists(p);
        check_model(cases, names[i]);
        free(names[i]);
    }
    CHECK(models >= 7, "expected at least 7 reference models in %s, found %d", cases, models);
    printf("%s: %d models, %d failures\n", failures ? "FAIL" : "ok", models, failures);
    return failures ? 1 : 0;
}
