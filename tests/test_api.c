/* The public API (include/hyla.h only): a caller-managed per-layer cache list, prefill then
 * decode with hyla_step, against hyla_forward_tokens over the whole sequence (logits bound of
 * tests/test_reference.c: (16 L + 8) sqrt(256) 2^-24 8 relative to the logit scale). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyla.h"

int main(int argc, char **argv)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_8l", argc > 1 ? argv[1] : "build/cases");
    hyla_engine *e;
    if (hyla_open(dir, &e)) {
        printf("FAIL: %s\n", hyla_last_error());
        return 1;
    }
    int64_t V = hyla_vocab_size(e), L = hyla_num_layers(e), T0 = 10, N = 14, len = 0;
    hyla_layer_cache *caches = calloc((size_t)L, sizeof *caches);
    for (int l = 0; l < L; l++) { /* the caller owns the memory */
        size_t c = hyla_cache_floats(e, l, HYLA_CACHE_CONV, N), s = hyla_cache_floats(e, l, HYLA_CACHE_SSM, N);
        size_t k = hyla_cache_floats(e, l, HYLA_CACHE_KEYS, N);
        caches[l].conv = c ? calloc(c, sizeof(float)) : NULL;
        caches[l].ssm = s ? calloc(s, sizeof(float)) : NULL;
        caches[l].keys = k ? calloc(k, sizeof(float)) : NULL;
        caches[l].values = k ? calloc(k, sizeof(float)) : NULL;
    }
    int32_t tokens[14];
    for (int i = 0; i < N; i++)
        tokens[i] = (i * 31 + 3) % (int32_t)V;
    float *step = malloc((size_t)(T0 * V) * sizeof(float)), *full = malloc((size_t)(N * V) * sizeof(float));
    int failures = 0;
    if (hyla_step(e, tokens, 1, T0, caches, &len, N, step)) /* prefill */
        printf("FAIL: %s\n", hyla_last_error()), failures++;
    for (int64_t t = T0; t < N && !failures; t++) /* decode one token at a time */
        if (hyla_step(e, tokens + t, 1, 1, caches, &len, N, step))
            printf("FAIL: %s\n", hyla_last_error()), failures++;
    double ce, aux;
    hyla_forward_tokens(e, tokens, 1, N, full, &ce, &aux);
    double d = 0, ss = 0;
    for (int64_t v = 0; v < V; v++) {
        d = fmax(d, fabs((double)step[v] - full[(N - 1) * V + v]));
        ss += (double)full[(N - 1) * V + v] * full[(N - 1) * V + v];
    }
    double rms = sqrt(ss / V), tol = (16.0 * L + 8) * 16 * 0x1.0p-24 * 8 * (rms > 1 ? rms : 1);
    if (len != N || !(d <= tol))
        printf("FAIL: after prefill %lld + decode, len %lld, last logits differ by %.3g (tol %.3g)\n", (long long)T0,
               (long long)len, d, tol), failures++;
    int64_t over = N;
    if (hyla_step(e, tokens, 1, 1, caches, &over, N, step) == 0 || !strstr(hyla_last_error(), "exceed"))
        printf("FAIL: a full cache was not refused (%s)\n", hyla_last_error()), failures++;
    printf("%s: caller-managed caches, prefill %lld + decode %lld: max |logit diff| %.3g (tol %.3g)\n",
           failures ? "FAIL" : "ok", (long long)T0, (long long)(N - T0), d, tol);
    for (int l = 0; l < L; l++) {
        free(caches[l].conv);
        free(caches[l].ssm);
        free(caches[l].keys);
        free(caches[l].values);
    }
    free(caches);
    /* bf16: the same forward from bf16 weights; within test_bf16.c's bound of the fp32 logits
     * (S u kappa, S = 24 L + 8 stages of relative error u = 2^-9, kappa = 8), not equal to them,
     * and never saved */
    hyla_engine *e16;
    float *half = malloc((size_t)(N * V) * sizeof(float));
    if (hyla_open_bf16(dir, &e16) || hyla_forward_tokens(e16, tokens, 1, N, half, NULL, NULL)) {
        printf("FAIL: bf16: %s\n", hyla_last_error()), failures++;
    } else {
        double d16 = 0, tol16 = (24.0 * L + 8) * 0x1.0p-9 * 8 * (rms > 1 ? rms : 1);
        for (int64_t i = 0; i < N * V; i++)
            d16 = fmax(d16, fabs((double)half[i] - full[i]));
        if (!(d16 <= tol16) || d16 == 0)
            printf("FAIL: bf16 logits differ from fp32 by %.3g (want 0 < d <= %.3g)\n", d16, tol16), failures++;
        if (hyla_save(e16, "/nonexistent-hyla-dir/x", 0) == 0 || !strstr(hyla_last_error(), "bf16 weights only"))
            printf("FAIL: a bf16 engine was saved (%s)\n", hyla_last_error()), failures++;
        printf("%s: hyla_open_bf16: max |logit - fp32| %.3g (tol %.3g); hyla_save refused\n", failures ? "FAIL" : "ok",
               d16, tol16);
        hyla_close(e16);
    }
    free(half);
    free(step);
    free(full);
    hyla_close(e);
    return failures ? 1 : 0;
}
