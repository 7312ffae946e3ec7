/* Router replay (MaxText PR 4826 semantics): forced experts, live softmax weights.
 *  1. replaying the routing recorded from a forward reproduces that forward exactly (loss and
 *     every gradient bit-identical);
 *  2. changing one layer's replayed routing for one token changes the loss; so does a -1 pad;
 *  3. routing files with the wrong shape, an id >= num_experts, a duplicate, or a short body are
 *     refused with an error naming the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/routing.h"
#include "engine/executor.h"

#include "check.h"


static double step(const hyla_model *m, const int32_t *tokens, int64_t T, const int32_t *replay, int32_t *record,
                   float *grads)
{
    hyla_policy p;
    hyla_policy_parse(&p, "minimal");
    hyla_executor ex;
    hyla_executor_init(&ex, m, &p, HYLA_UNIT_LAYER, 1, T, HYLA_DELTA_CHUNKED, 0);
    ex.replay = replay;
    ex.record = record;
    memset(grads, 0, m->table.total_floats * sizeof(float));
    hyla_step_loss l;
    hyla_executor_step(&ex, tokens, NULL, grads, 1.0f / (float)(T - 1), (float)m->cfg.router_aux_loss_coef, &l);
    hyla_executor_free(&ex);
    return l.ce_sum / (double)(T - 1) + m->cfg.router_aux_loss_coef * l.aux_loss;
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_6l", cases); /* one block + remainder, a dense layer */
    hyla_model m;
    if (hyla_model_load(&m, dir)) {
        printf("FAIL: %s\n", hyla_error_message());
        return 1;
    }
    int64_t T = 40, k = m.cfg.top_k, L = hyla_moe_layer_count(&m.cfg);
    int32_t tokens[40];
    for (int i = 0; i < T; i++)
        tokens[i] = (i * 13 + 7) % (int32_t)m.cfg.vocab;
    size_t n_ids = (size_t)(L * T * k);
    int32_t *rec = malloc(n_ids * sizeof *rec), *mod = malloc(n_ids * sizeof *mod);
    float *g0 = malloc(m.table.total_floats * sizeof(float)), *g1 = malloc(m.table.total_floats * sizeof(float));
    double l0 = step(&m, tokens, T, NULL, rec, g0);
    double l1 = step(&m, tokens, T, rec, NULL, g1);
    CHECK(l0 == l1, "replay of recorded routing: loss %.9g != %.9g", l1, l0);
    CHECK(!memcmp(g0, g1, m.table.total_floats * sizeof(float)), "replay of recorded routing: gradients differ");
    printf("  replay of the recorded routing: loss %.9f and all gradients bit-identical\n", l1);

    /* one token of the remainder block's last MoE layer gets another expert */
    memcpy(mod, rec, n_ids * sizeof *mod);
    int32_t *row = mod + ((L - 1) * T + 5) * k;
    int32_t other = 0;
    while (other == row[0] || other == row[1])
        other++;
    row[1] = other;
    double l2 = step(&m, tokens, T, mod, NULL, g1);
    CHECK(l2 != l0 && isfinite(l2), "changing one layer's routing did not change the loss (%.9g)", l2);
    memcpy(mod, rec, n_ids * sizeof *mod);
    mod[(0 * T + 3) * k + 1] = -1;
    double l3 = step(&m, tokens, T, mod, NULL, g1);
    CHECK(l3 != l0 && isfinite(l3), "a -1 padding slot did not change the loss (%.9g)", l3);
    printf("  one changed expert in MoE layer %lld: loss %.9f; one -1 pad: loss %.9f\n", (long long)L - 1, l2, l3);

    /* files */
    hyla_routing r = {L, k, T, rec}, back;
    const char *path = "/tmp/hyla_routing_test.bin";
    CHECK(hyla_routing_write(path, &r) == HYLA_OK, "write: %s", hyla_error_message());
    CHECK(hyla_routing_read(path, &m.cfg, &back) == HYLA_OK && !memcmp(back.ids, rec, n_ids * sizeof *rec),
          "read back: %s", hyla_error_message());
    hyla_routing_free(&back);
    struct { const char *what, *expect; } bad[4] = {{"id >= E", "out of range"}, {"duplicate", "chosen twice"},
                                                  {"wrong layer count", "MoE layers"}, {"short body", "bytes of ids"}};
    for (int c = 0; c < 4; c++) {
        hyla_routing w = {L, k, T, mod};
        memcpy(mod, rec, n_ids * sizeof *mod);
        if (c == 0)
            mod[7] = (int32_t)m.cfg.n_experts;
        if (c == 1)
            mod[1] = mod[0];
        if (c == 2)
            w.n_layers = L + 1, w.ids = malloc((size_t)((L + 1) * T * k) * sizeof(int32_t)),
            memset(w.ids, 0xff, (size_t)((L + 1) * T * k) * sizeof(int32_t));
        hyla_routing_write(path, &w);
        if (c == 3) {
            FILE *f = fopen(path, "r+b");
            CHECK(f && ftruncate(fileno(f), 24 + 8) == 0, "truncate");
            if (f)
                fclose(f);
        }
        int st = hyla_routing_read(path, &m.cfg, &back);
        CHECK(st != HYLA_OK && strstr(hyla_error_message(), path) && strstr(hyla_error_message(), bad[c].expect),
              "bad routing file (%s) not refused clearly: %s", bad[c].what, hyla_error_message());
        printf("  refused (%s): %s\n", bad[c].what, hyla_error_message());
        if (c == 2)
            free(w.ids);
    }
    remove(path);
    free(rec);
    free(mod);
    free(g0);
    free(g1);
    hyla_model_free(&m);
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
