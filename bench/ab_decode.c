/* Two builds of hyla decoding the same model in one process, in alternating windows (driven by
 * bench/ab_decode.sh). The VM here reads DRAM at ~45 or ~87 GB/s in phases of seconds to minutes,
 * so two binaries timed one after the other can differ by 2x from the phase alone, and a kernel
 * that is faster from the caches can still be slower in a decode (the four-row Q6_K kernel was:
 * 10-13% slower in whole Q4_K_M decodes measured this way, though faster from the L3). Here two
 * libhyla.so builds are opened side by side (dlopen, RTLD_LOCAL: each its own globals), each engine
 * prefills the same P-token prompt into its own caches, then they decode the same token stream in
 * turns of WINDOW tokens, so both meet the same phases.
 *
 * Prints one JSON object: tokens/s of each over all its windows, b_over_a (B's tokens/s over A's),
 * and the median and quartiles of that ratio over the pairs of neighbouring windows.
 * usage: ab_decode LIB_A LIB_B MODEL [P=64] [WINDOWS=60] [bf16] */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyla.h"

enum { WINDOW = 8 };

typedef struct {
    const char *lib;
    int (*open)(const char *, hyla_engine **);
    int64_t (*layers)(const hyla_engine *);
    int64_t (*vocab)(const hyla_engine *);
    size_t (*cache_floats)(const hyla_engine *, int, hyla_cache_part, int64_t);
    int (*step)(hyla_engine *, const int32_t *, int64_t, int64_t, hyla_layer_cache *, int64_t *, int64_t, float *);
    hyla_engine *e;
    hyla_layer_cache *caches; /* [layers] */
    int64_t len;
    float *logits; /* [vocab] */
} engine;

static void *symbol(void *h, const char *lib, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "ab_decode: %s has no %s\n", lib, name);
        exit(1);
    }
    return p;
}

static void open_engine(engine *g, const char *lib, const char *model, int bf16, const int32_t *prompt, int64_t P,
                        int64_t max_len)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "ab_decode: %s\n", dlerror());
        exit(1);
    }
    g->lib = lib;
    g->open = (int (*)(const char *, hyla_engine **))symbol(h, lib, bf16 ? "hyla_open_bf16" : "hyla_open");
    g->layers = (int64_t(*)(const hyla_engine *))symbol(h, lib, "hyla_num_layers");
    g->vocab = (int64_t(*)(const hyla_engine *))symbol(h, lib, "hyla_vocab_size");
    g->cache_floats = (size_t(*)(const hyla_engine *, int, hyla_cache_part, int64_t))symbol(h, lib, "hyla_cache_floats");
    g->step = (int (*)(hyla_engine *, const int32_t *, int64_t, int64_t, hyla_layer_cache *, int64_t *, int64_t,
                       float *))symbol(h, lib, "hyla_step");
    if (g->open(model, &g->e)) {
        fprintf(stderr, "ab_decode: %s could not open %s\n", lib, model);
        exit(1);
    }
    int64_t L = g->layers(g->e);
    g->caches = calloc((size_t)L, sizeof *g->caches);
    g->logits = malloc((size_t)g->vocab(g->e) * sizeof *g->logits);
    if (!g->caches || !g->logits) {
        fprintf(stderr, "ab_decode: out of memory\n");
        exit(1);
    }
    for (int l = 0; l < L; l++) {
        float **part[4] = {&g->caches[l].conv, &g->caches[l].ssm, &g->caches[l].keys, &g->caches[l].values};
        for (int k = 0; k < 4; k++) {
            size_t n = g->cache_floats(g->e, l, (hyla_cache_part)k, max_len);
            if (n && !(*part[k] = calloc(n, sizeof(float)))) {
                fprintf(stderr, "ab_decode: out of memory for the caches\n");
                exit(1);
            }
        }
    }
    g->len = 0;
    if (g->step(g->e, prompt, 1, P, g->caches, &g->len, max_len, g->logits)) {
        fprintf(stderr, "ab_decode: %s: the prefill failed\n", lib);
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ab_decode LIB_A LIB_B MODEL [P=64] [WINDOWS=60] [bf16]\n");
        return 2;
    }
    int64_t P = argc > 4 ? atoll(argv[4]) : 64, windows = argc > 5 ? atoll(argv[5]) : 60;
    int bf16 = argc > 6 && !strcmp(argv[6], "bf16");
    if (P < 1 || P > 1000000 || windows < 2 || windows > 100000 || windows % 2) {
        fprintf(stderr, "ab_decode: P must be 1..1000000 and WINDOWS an even count 2..100000\n");
        return 2;
    }
    int64_t max_len = P + windows / 2 * WINDOW + 1;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    double *t = malloc((size_t)windows * sizeof *t), *ratio = malloc((size_t)windows / 2 * sizeof *ratio);
    if (!prompt || !t || !ratio)
        return 1;
    for (int64_t i = 0; i < P; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % 1000);
    engine g[2];
    open_engine(&g[0], argv[1], argv[3], bf16, prompt, P, max_len);
    open_engine(&g[1], argv[2], argv[3], bf16, prompt, P, max_len);
    int32_t tok[2] = {5, 5};
    double total[2] = {0, 0};
    for (int64_t w = 0; w < windows; w++) {
        int k = (int)(w & 1);
        double t0 = omp_get_wtime();
        for (int s = 0; s < WINDOW; s++) {
            if (g[k].step(g[k].e, &tok[k], 1, 1, g[k].caches, &g[k].len, max_len, g[k].logits)) {
                fprintf(stderr, "ab_decode: %s: a decode step failed\n", g[k].lib);
                return 1;
            }
            tok[k] = (tok[k] * 31 + 7) % 1000; /* the same stream for both */
        }
        t[w] = omp_get_wtime() - t0;
        total[k] += t[w];
    }
    for (int64_t p = 0; p < windows / 2; p++)
        ratio[p] = t[2 * p] / t[2 * p + 1];
    qsort(ratio, (size_t)(windows / 2), sizeof *ratio, cmp_double);
    int64_t n = windows / 2;
    double per = (double)(windows / 2 * WINDOW);
    printf("{\"a\": \"%s\", \"b\": \"%s\", \"model\": \"%s\", \"prompt\": %lld, \"windows\": %lld, \"window_tokens\": %d, "
           "\"a_tokens_per_s\": %.2f, \"b_tokens_per_s\": %.2f, \"b_over_a\": %.4f, "
           "\"b_over_a_pairs\": {\"q1\": %.4f, \"median\": %.4f, \"q3\": %.4f}}\n",
           argv[1], argv[2], argv[3], (long long)P, (long long)windows, WINDOW, per / total[0], per / total[1],
           total[0] / total[1], ratio[n / 4], ratio[n / 2], ratio[(3 * n) / 4]);
    return 0;
}
