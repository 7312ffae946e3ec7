/* The MTP loss in a training step (engine/mtp_loss.h, docs/mtp.md).
 *
 * On the reference models with an MTP head (next_moe_8l, q35_dense, q35_moe), one step over the
 * 65-token run with loss = main total + 0.3 x MTP loss:
 *  1. the loss and every parameter's gradient (trunk and mtp.*) against the float64 oracle's
 *     autograd (grads_mtp_65.safetensors), within test_grads.c's bound with the MTP layer counted
 *     (S = 2 (16 (N + 1) + 8) terms, relative to each tensor's largest gradient);
 *  2. bit-identical gradients and loss for every remat policy (device, recompute, offload) and
 *     unit (layer, block, part): the MTP layer is a unit like the others and its recompute runs
 *     the very same ops;
 *  3. the arenas' measured high-water marks == the planning pass's sizes;
 *  4. with the MTP weight 0 the step equals a plain step (the head gets no gradient), and the MTP
 *     targets never cross a packed document boundary (hyla_mtp_target_count against a count by
 *     hand);
 *  5. LoRA with the MTP loss, adapters on trunk and head modules (mtp.fc and the MTP layer's
 *     attention named in the targets): with B = 0 the forward is the base model's, so every dY is
 *     the full step's and dB = s G A^T, dA = 0, where G is the full step's (oracle-checked)
 *     gradient of the adapted weight. The two sides sum in different orders: |dB - s G A^T| <=
 *     64 (n + K) u s sum_k |G_ik| |A_jk| (n rows, K inputs, u = 2^-24; G's own rounding counted
 *     in the factor 64); a lost or misplaced adapter gradient (fc's, the head layer's) is O(1)
 *     off. Saving the adapter names the head's modules by their full names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/executor.h"
#include "engine/host_store.h"
#include "engine/mtp_loss.h"
#include "io/safetensors.h"
#include "model/lora.h"

#include "case_files.h"
#include "check.h"

#define T_RUN 65
#define WEIGHT 0.3

static const char *const policies[] = {"none", "full", "minimal", "save_qkv_proj", "save_dot_except_mlp",
                                       "minimal_offloaded", "qkv_proj_offloaded"};

/* One step's gradients (calloc'd) and loss with the MTP loss at `weight` (0: a plain executor). */
static float *step(const hyla_model *m, const int32_t *tokens, const char *policy_s, hyla_remat_unit unit, double weight,
                   double *loss_out, int *plan_ok)
{
    hyla_policy p;
    if (hyla_policy_parse(&p, policy_s)) {
        CHECK(0, "policy %s: %s", policy_s, hyla_error_message());
        return NULL;
    }
    hyla_executor ex;
    int st = weight > 0 ? hyla_executor_init_mtp(&ex, m, &p, unit, 1, T_RUN)
                        : hyla_executor_init(&ex, m, &p, unit, 1, T_RUN, HYLA_DELTA_CHUNKED, 0);
    if (st) {
        CHECK(0, "executor: %s", hyla_error_message());
        return NULL;
    }
    hyla_host_store *store = NULL;
    if (ex.host_bytes && (hyla_host_store_open(&store, NULL, 0) || hyla_executor_attach_store(&ex, store))) {
        CHECK(0, "host store: %s", hyla_error_message());
        hyla_executor_free(&ex);
        return NULL;
    }
    float *g = calloc(m->table.total_floats, sizeof(float));
    int64_t mtp_targets = hyla_mtp_target_count(NULL, T_RUN, T_RUN, NULL, 0);
    ex.mtp_scale = (float)(weight / (double)mtp_targets);
    hyla_step_loss l;
    float ce_scale = (float)(1.0 / (double)(T_RUN - 1)), aux_scale = (float)m->cfg.router_aux_loss_coef;
    CHECK(hyla_executor_step(&ex, tokens, NULL, g, ce_scale, aux_scale, &l) == HYLA_OK, "%s: %s", policy_s,
          hyla_error_message());
    CHECK(weight == 0 || l.mtp_count == mtp_targets, "%s: %lld MTP targets, counted %lld", policy_s,
          (long long)l.mtp_count, (long long)mtp_targets);
    *loss_out = l.ce_sum / (double)(T_RUN - 1) + (isnan(l.aux_loss) ? 0.0 : m->cfg.router_aux_loss_coef * l.aux_loss) +
                (weight > 0 ? weight * l.mtp_sum / (double)l.mtp_count : 0.0);
    *plan_ok = ex.ckpt.high_water == ex.ckpt_bytes && ex.work.high_water == ex.work_bytes;
    hyla_executor_free(&ex);
    hyla_host_store_close(store);
    return g;
}


static void check_vs_oracle(const hyla_model *m, const char *dir, const char *name, const float *g, double loss,
                            double want_loss)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/grads_mtp_%d.safetensors", dir, T_RUN);
    hyla_st_set ref;
    if (hyla_st_open_file(&ref, path)) {
        CHECK(0, "%s: %s", name, hyla_error_message());
        return;
    }
    double S = 2.0 * (16.0 * (double)(m->cfg.n_layers + 1) + 8.0), rel = S * 16.0 * 0x1.0p-24 * 8.0;
    CHECK(fabs(loss - want_loss) <= rel * fabs(want_loss), "%s: loss %.9g, oracle %.9g", name, loss, want_loss);
    double gmax_all = case_max_abs(&ref), worst = 0;
    size_t compared = 0, mtp_tensors = 0;
    for (size_t h = 0; h < m->table.n_hf; h++) {
        const hyla_hf_tensor *ht = &m->table.hf[h];
        const hyla_st_tensor *t = hyla_st_find(&ref, ht->name);
        CHECK(t != NULL, "%s: the oracle has no gradient for %s", name, ht->name);
        if (!t)
            continue;
        int64_t count = ht->rows * ht->row_len;
        float *mine = malloc((size_t)count * sizeof(float)), *want = malloc((size_t)count * sizeof(float));
        case_hf_grad(m, g, h, mine);
        memcpy(want, t->data, (size_t)count * sizeof(float));
        double tmax = 0, dmax = 0;
        for (int64_t i = 0; i < count; i++) {
            tmax = fmax(tmax, fabs(want[i]));
            dmax = fmax(dmax, fabs((double)mine[i] - want[i]));
        }
        /* a tensor whose gradient is tiny against the model's: bounded by the model's scale */
        double tol = rel * fmax(tmax, 1e-3 * gmax_all);
        worst = fmax(worst, dmax / tol);
        CHECK(dmax <= tol, "%s: %s gradient differs from the oracle by %.3g (bound %.3g)", name, ht->name, dmax, tol);
        compared++;
        mtp_tensors += !strncmp(ht->name, "mtp.", 4);
        free(mine);
        free(want);
    }
    CHECK(mtp_tensors > 0, "%s: no mtp.* gradient compared", name);
    printf("  %-12s loss %.9f (oracle %.9f); %zu gradients (%zu of the MTP head) within %.2f of the bound\n", name, loss,
           want_loss, compared, mtp_tensors, worst);
    hyla_st_close(&ref);
}

static void check_target_count(void)
{
    /* two rows of 6; the second packed as documents of 2 and 4: targets inside each only */
    int32_t labels[12];
    for (int i = 0; i < 12; i++)
        labels[i] = (i % 6) == 5 ? -100 : 1;
    labels[1] = -100; /* the last token of the first document of row 2 ... of row 1 here */
    int64_t rows_plain = hyla_mtp_target_count(NULL, 12, 6, NULL, 0);
    CHECK(rows_plain == 2 * 4, "next-token targets: %lld MTP targets, want 8", (long long)rows_plain);
    int64_t seg[3] = {2, 4, 6};
    /* doc [0,2): row 0's target = label[1] = -100; doc [2,6): rows 2,3,4 take labels 3,4,5 = 1,1,-100;
     * doc [6,12): rows 6..10 take labels 7..11 = 1,1,1,1,-100 */
    int64_t packed = hyla_mtp_target_count(labels, 12, 6, seg, 3);
    CHECK(packed == 2 + 4, "packed documents: %lld MTP targets, want 6", (long long)packed);
}

static void check_lora(hyla_model *m, const char *name, const int32_t *tokens, const float *g_full)
{
    hyla_lora L;
    hyla_lora_options o = {.r = 4, .alpha = 8, .targets = "q_proj,o_proj,mtp.fc,mtp.layers.0.self_attn.q_proj", .seed = 5};
    if (hyla_lora_create(&L, &m->table, &o)) {
        CHECK(0, "%s: LoRA: %s", name, hyla_error_message());
        return;
    }
    int head_modules = 0;
    for (int i = 0; i < L.n_modules; i++)
        head_modules += !strncmp(L.modules[i].name, "mtp.", 4);
    CHECK(head_modules == 3, "%s: %d of the head's modules adapted, want mtp.fc and the MTP layer's q_proj and o_proj", name,
          head_modules);
    hyla_policy p;
    hyla_policy_parse(&p, "full");
    hyla_executor ex;
    m->lora = &L;
    L.training = 1;
    float *g = calloc(L.table.total_floats + 1, sizeof *g);
    CHECK(hyla_executor_init_mtp(&ex, m, &p, HYLA_UNIT_LAYER, 1, T_RUN) == HYLA_OK, "%s", hyla_error_message());
    ex.mtp_scale = (float)(WEIGHT / (double)hyla_mtp_target_count(NULL, T_RUN, T_RUN, NULL, 0));
    hyla_step_loss l;
    CHECK(hyla_executor_step(&ex, tokens, NULL, g, (float)(1.0 / (T_RUN - 1)), (float)m->cfg.router_aux_loss_coef, &l) ==
              HYLA_OK, "%s", hyla_error_message());
    int plan_ok = ex.ckpt.high_water == ex.ckpt_bytes && ex.work.high_water == ex.work_bytes;
    hyla_executor_free(&ex);
    m->lora = NULL;
    CHECK(plan_ok, "%s: LoRA + MTP step: measured arenas differ from the plan", name);
    double worst = 0, s = L.scaling;
    int64_t K, nonzero_a = 0, head_nonzero = 0;
    for (int si = 0; si < L.n_segments; si++) {
        const hyla_lora_segment *sg = &L.segments[si];
        const hyla_lora_module *md = &L.modules[sg->module];
        const hyla_param *q = &m->table.params[sg->param];
        K = md->in;
        const float *A = L.w + md->a_offset, *dB = g + sg->b_offset;
        for (int64_t i = 0; i < sg->rows; i++) {
            const float *G = g_full + q->offset + (sg->row0 + i) * K;
            for (int64_t j = 0; j < L.r; j++) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++)
                    ref += (double)G[k] * A[j * K + k], mag += fabs((double)G[k] * A[j * K + k]);
                ref *= s, mag *= s;
                double bound = 64.0 * (double)(T_RUN + K) * 0x1p-24 * mag + 1e-30;
                double e = fabs(dB[i * L.r + j] - ref) / bound;
                worst = e > worst ? e : worst;
                head_nonzero += q->mtp && dB[i * L.r + j] != 0.0f;
            }
        }
    }
    for (int mi = 0; mi < L.n_modules; mi++)
        for (int64_t e = 0; e < L.r * L.modules[mi].in; e++)
            nonzero_a += g[L.modules[mi].a_offset + e] != 0.0f;
    CHECK(worst <= 1.0, "%s: LoRA + MTP: dB vs s G A^T at %.3g of the bound", name, worst);
    CHECK(nonzero_a == 0, "%s: LoRA + MTP: %lld nonzero dA entries with B = 0", name, (long long)nonzero_a);
    CHECK(head_nonzero > 0, "%s: LoRA + MTP: the head's adapters got no gradient", name);
    printf("  %-12s LoRA + MTP loss: adapter gradients (trunk and head modules) == s G A^T within %.3f of the bound, dA = 0\n",
           name, worst);
    free(g);
    hyla_lora_free(&L);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    const char *models[] = {"next_moe_8l", "q35_dense", "q35_moe"};
    check_target_count();
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        char dir[4096];
        hyla_model m;
        cJSON *j;
        if (case_load(cases, models[k], dir, sizeof dir, &m, &j)) {
            CHECK(0, "%s: %s", models[k], hyla_error_message());
            continue;
        }
        const cJSON *mg = cJSON_GetObjectItemCaseSensitive(j, "mtp_grads");
        double want_loss = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(mg, "loss"));
        double weight = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(mg, "weight"));
        CHECK(weight == WEIGHT, "%s: oracle weight %g", models[k], weight);
        cJSON_Delete(j);
        int32_t *tokens = case_run_tokens(dir, T_RUN);
        CHECK(tokens != NULL, "%s: no %d-token run", models[k], T_RUN);
        if (!tokens) {
            hyla_model_free(&m);
            continue;
        }
        double loss0;
        int plan_ok;
        float *g0 = step(&m, tokens, "none", HYLA_UNIT_LAYER, WEIGHT, &loss0, &plan_ok);
        if (g0) {
            check_vs_oracle(&m, dir, models[k], g0, loss0, want_loss);
            check_lora(&m, models[k], tokens, g0);
        }
        int same = 0, runs = 0;
        for (int unit = 0; unit < 3 && g0; unit++)
            for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
                double loss;
                float *g = step(&m, tokens, policies[p], (hyla_remat_unit)unit, WEIGHT, &loss, &plan_ok);
                if (!g)
                    continue;
                runs++;
                CHECK(plan_ok, "%s %s/%s: measured arenas differ from the plan", models[k], policies[p],
                      hyla_remat_unit_name((hyla_remat_unit)unit));
                int bit = loss == loss0 && !memcmp(g, g0, m.table.total_floats * sizeof(float));
                CHECK(bit, "%s %s/%s: MTP step not bit-identical to none/layer", models[k], policies[p],
                      hyla_remat_unit_name((hyla_remat_unit)unit));
                same += bit;
                free(g);
            }
        printf("  %-12s MTP step bit-identical over %d of %d policy/unit runs; planned == measured\n", models[k], same, runs);
        /* weight 0: a plain step, the head untouched */
        double lp;
        float *gp = step(&m, tokens, "full", HYLA_UNIT_LAYER, 0, &lp, &plan_ok);
        float *gz = g0 ? calloc(m.table.total_floats, sizeof(float)) : NULL;
        if (gp && gz) {
            hyla_policy p;
            hyla_policy_parse(&p, "full");
            hyla_executor ex;
            CHECK(hyla_executor_init_mtp(&ex, &m, &p, HYLA_UNIT_LAYER, 1, T_RUN) == HYLA_OK, "%s", hyla_error_message());
            ex.mtp_scale = 0;
            hyla_step_loss l;
            CHECK(hyla_executor_step(&ex, tokens, NULL, gz, (float)(1.0 / (T_RUN - 1)), (float)m.cfg.router_aux_loss_coef,
                                     &l) == HYLA_OK, "%s", hyla_error_message());
            hyla_executor_free(&ex);
            size_t differ = 0, head_nonzero = 0;
            for (int i = 0; i < m.table.n_params; i++) {
                const hyla_param *q = &m.table.params[i];
                for (int64_t e = 0; e < q->numel; e++) {
                    float a = gz[q->offset + e], b = gp[q->offset + e];
                    head_nonzero += q->mtp && a != 0.0f;
                    differ += !q->mtp && memcmp(&a, &b, sizeof a) != 0;
                }
            }
            CHECK(differ == 0 && head_nonzero == 0, "%s: MTP weight 0: %zu trunk gradients differ from a plain step, "
                  "%zu head gradients non-zero", models[k], differ, head_nonzero);
        }
        free(gp);
        free(gz);
        free(g0);
        free(tokens);
        hyla_model_free(&m);
    }
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_mtp_train: all checks passed\n");
    return 0;
}
