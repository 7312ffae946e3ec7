/* LoRA training on every tiny reference model.
 *
 *  1. Adapter gradients (dLoss/dlora_A, dlora_B, loss = ce + coef * aux) against PyTorch float64
 *     autograd (tests/reference make_lora: lora/ adapter + lora_grads_65.safetensors), with the
 *     whole-model gradient bound of test_grads.c (same chain of fp32 stages, plus the adapter's
 *     two GEMMs per projection, which the per-layer 16 stages already over-count).
 *  2. Frozen base: a step writes no base gradient (the gradient arena is the adapter's), and a
 *     fresh adapter (B = 0) leaves the forward bit-identical to the base model: x A^T B^T = 0
 *     exactly, and y + 0 == y.
 *  3. Every remat policy x unit (offloading ones included) gives loss and adapter gradients
 *     BIT-IDENTICAL to `none`, with dropout on too: masks are a pure function of (step, module,
 *     element), so a recomputed forward draws the same mask.
 *  4. Plan == measured: the planning pass's checkpoint and work arenas equal a real LoRA step's
 *     high-water marks byte for byte (the adapter's scratch included).
 *  5. Files: write (PEFT) -> load is the identity on the arena; merged forward == unmerged
 *     forward within fp32 rounding of the merge (bound below). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case_files.h"
#include "check.h"
#include "core/error.h"
#include "engine/executor.h"
#include "engine/forward.h"
#include "engine/plan.h"
#include "io/fileio.h"
#include "model/adapter.h"
#include "model/lora.h"
#include "model/model.h"

/* One LoRA step (B=1, T=65) under `policy`/`unit`; returns the adapter gradients (owned) and the loss. */
static float *lora_step(const hyla_model *m, const int32_t *tok, const char *policy, hyla_remat_unit unit, double *loss,
                        int check_plan)
{
    hyla_policy p;
    hyla_policy_parse(&p, policy);
    hyla_executor ex;
    if (hyla_executor_init(&ex, m, &p, unit, 1, 65, HYLA_DELTA_CHUNKED, 0)) {
        CHECK(0, "%s: %s", policy, hyla_error_message());
        return NULL;
    }
    hyla_host_store *store = NULL;
    if (ex.host_bytes)
        CHECK(hyla_host_store_open(&store, NULL, 0) == HYLA_OK && hyla_executor_attach_store(&ex, store) == HYLA_OK,
              "store: %s", hyla_error_message());
    float *g = calloc(m->lora->table.total_floats + 1, sizeof *g);
    hyla_step_loss l;
    float ce_scale = 1.0f / 64.0f, aux_scale = (float)m->cfg.router_aux_loss_coef;
    m->lora->training = 1;
    CHECK(hyla_executor_step(&ex, tok, NULL, g, ce_scale, aux_scale, &l) == HYLA_OK, "%s step: %s", policy,
          hyla_error_message());
    m->lora->training = 0;
    *loss = l.ce_sum / 64.0 + (isnan(l.aux_loss) ? 0.0 : m->cfg.router_aux_loss_coef * l.aux_loss);
    if (check_plan) {
        hyla_plan_config pc;
        memset(&pc, 0, sizeof pc);
        pc.policy = p, pc.unit = unit, pc.batch = 1, pc.seq = 65, pc.devices = 1;
        pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
        hyla_plan plan;
        CHECK(hyla_plan_compute(m, &pc, &plan) == HYLA_OK, "plan: %s", hyla_error_message());
        CHECK((double)ex.ckpt.high_water == plan.checkpoint_bytes && (double)ex.work.high_water == plan.work_bytes,
              "LoRA %s: measured checkpoint %zu + work %zu, planned %.0f + %.0f", policy, ex.ckpt.high_water,
              ex.work.high_water, plan.checkpoint_bytes, plan.work_bytes);
        /* the adapter's table as the trainer allocates it: its parameters, each padded to 16 floats */
        double floats = (double)m->lora->table.total_floats;
        CHECK(plan.trained_params > 0 && floats >= (double)plan.trained_params && plan.grad_bytes == 4.0 * floats &&
                  plan.opt_bytes == 8.0 * floats,
              "LoRA plan: gradients %.0f and moments %.0f bytes for %lld adapter parameters (%.0f floats)", plan.grad_bytes,
              plan.opt_bytes, (long long)plan.trained_params, floats);
        printf("    plan == measured (%s): checkpoints %zu + work %zu bytes; adapter %lld params, grads %.0f bytes\n",
               policy, ex.ckpt.high_water, ex.work.high_water, (long long)plan.trained_params, plan.grad_bytes);
        hyla_plan_free(&plan);
    }
    hyla_executor_free(&ex);
    hyla_host_store_close(store);
    return g;
}

static void check_vs_reference(const hyla_model *m, const char *dir, const char *name, const float *g, double loss)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/lora_grads_65.safetensors", dir);
    hyla_st_set ref;
    if (hyla_st_open_file(&ref, path)) {
        CHECK(0, "%s: %s", name, hyla_error_message());
        return;
    }
    double gmax_all = case_max_abs(&ref);
    /* test_grads.c's bound: S stages of sqrt(n_max) u, amplified by kappa = 8 */
    double S = 2.0 * (16.0 * (double)m->cfg.n_layers + 8.0), rel = S * 16.0 * 0x1.0p-24 * 8.0, worst = 0;
    const hyla_lora *L = m->lora;
    CHECK(hyla_st_count(&ref) == 2 * (size_t)L->n_modules, "%s: %zu reference tensors for %d modules", name,
          hyla_st_count(&ref), L->n_modules);
    for (int k = 0; k < L->n_modules; k++) {
        const hyla_lora_module *md = &L->modules[k];
        for (int ab = 0; ab < 2; ab++) {
            char key[300];
            snprintf(key, sizeof key, "base_model.model.%s.lora_%c.weight", md->name, ab ? 'B' : 'A');
            const hyla_st_tensor *t = hyla_st_find(&ref, key);
            CHECK(t != NULL, "%s: no reference gradient %s", name, key);
            if (!t)
                continue;
            int64_t count = L->r * (ab ? md->out : md->in);
            float *mine = malloc((size_t)count * sizeof *mine);
            if (ab)
                hyla_lora_b_rows(L, &m->table, k, mine, (float *)g, 1);
            else
                memcpy(mine, g + md->a_offset, (size_t)count * sizeof *mine);
            double tmax = 0, dmax = 0;
            for (int64_t i = 0; i < count; i++) {
                double want = ((const float *)t->data)[i];
                tmax = fmax(tmax, fabs(want));
                double d = fabs(mine[i] - want);
                dmax = d > dmax || d != d ? d : dmax;
            }
            double tol = rel * tmax + rel * 1e-2 * gmax_all;
            CHECK(dmax <= tol, "%s: gradient of %s differs by %.3g (tensor max %.3g, tol %.3g)", name, key, dmax, tmax, tol);
            worst = tol > 0 && dmax / tol > worst ? dmax / tol : worst;
            free(mine);
        }
    }
    hyla_st_close(&ref);
    /* the loss: the logits bound of test_reference.c is far below this 1e-4 relative */
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text;
    double want = NAN;
    if (hyla_read_text_file(path, &text, NULL) == HYLA_OK) {
        cJSON *j = cJSON_Parse(text);
        free(text);
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "lora"), "loss");
        want = cJSON_IsNumber(lo) ? lo->valuedouble : NAN;
        cJSON_Delete(j);
    }
    CHECK(fabs(loss - want) <= 1e-4 * fabs(want), "%s: LoRA loss %.9g, reference %.9g", name, loss, want);
    printf("  %-14s %d modules: loss %.7f (ref %.7f), adapter gradients vs autograd: worst %.2f of tolerance\n", name,
           L->n_modules, loss, want, worst);
}

static const char *const policies[] = {"full", "minimal", "save_qkv_proj", "save_dot_except_mlp", "minimal_offloaded",
                                       "qkv_proj_offloaded"};

static void check_policies(const hyla_model *m, const char *name, const int32_t *tok, const float *g_none,
                           double loss_none)
{
    size_t n = m->lora->table.total_floats;
    int checked = 0;
    for (int unit = 0; unit < 3; unit++)
        for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
            double loss;
            float *g = lora_step(m, tok, policies[p], (hyla_remat_unit)unit, &loss, unit == 1 && p == 1);
            if (!g)
                continue;
            CHECK(loss == loss_none && !memcmp(g, g_none, n * sizeof *g), "%s LoRA %s/%s (dropout %.2f): not "
                  "bit-identical to none", name, policies[p], hyla_remat_unit_name(unit), m->lora->dropout);
            checked++;
            free(g);
        }
    printf("    %d policy x unit runs bit-identical to none (dropout %.2f)\n", checked, m->lora->dropout);
}

/* Logits of the model as it stands (adapter attached or merged). */
static float *logits_of(const hyla_model *m, const int32_t *tok, int64_t T)
{
    float *lg = malloc((size_t)(T * m->cfg.vocab) * sizeof *lg);
    hyla_forward_out out;
    CHECK(hyla_forward(m, tok, NULL, 1, T, HYLA_DELTA_CHUNKED, lg, &out) == HYLA_OK, "forward: %s", hyla_error_message());
    return lg;
}

static void check_model(const char *cases, const char *name)
{
    char dir[4096], adir[4200], tmp[] = "/tmp/hyla_lora_XXXXXX";
    snprintf(dir, sizeof dir, "%s/%s", cases, name);
    snprintf(adir, sizeof adir, "%s/lora", dir);
    hyla_model m;
    if (hyla_model_load(&m, dir)) {
        CHECK(0, "%s: %s", name, hyla_error_message());
        return;
    }
    int32_t *tok = case_run_tokens(dir, 65);
    hyla_lora L;
    CHECK(tok && hyla_lora_load(&L, &m.table, adir) == HYLA_OK, "%s: %s", name, hyla_error_message());
    m.lora = &L;
    double loss;
    float *g = lora_step(&m, tok, "none", HYLA_UNIT_LAYER, &loss, 1);
    if (getenv("HYLA_TEST_VERBOSE"))
        printf("loss %.9f\n", loss);
    check_vs_reference(&m, dir, name, g, loss);
    check_policies(&m, name, tok, g, loss);
    free(g);

    /* files: write -> load is the identity */
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    CHECK(hyla_lora_write(&L, &m.table, tmp, dir) == HYLA_OK, "write: %s", hyla_error_message());
    hyla_lora back;
    CHECK(hyla_lora_load(&back, &m.table, tmp) == HYLA_OK, "reload: %s", hyla_error_message());
    CHECK(back.table.total_floats == L.table.total_floats && back.scaling == L.scaling &&
              !memcmp(back.w, L.w, L.table.total_floats * sizeof(float)),
          "%s: written adapter does not read back identically", name);
    hyla_lora_free(&back);

    /* merged forward == unmerged forward: the merge rounds W + s B A once per weight (relative
     * u to |W| + |s B A|), a change of at most u * sum|x| (|W| + |sBA|) per projection output;
     * through the network (test_reference's chain: S stages, kappa 8) that stays below the
     * logits bound S sqrt(n) u kappa * max|logit| used there. */
    float *un = logits_of(&m, tok, 65);
    m.lora = NULL;
    hyla_adapter_info info;
    CHECK(hyla_model_merge_adapter(&m, tmp, &info) == HYLA_OK, "merge: %s", hyla_error_message());
    float *mg = logits_of(&m, tok, 65);
    double dmax = 0, lmax = 0;
    for (int64_t i = 0; i < 65 * m.cfg.vocab; i++) {
        dmax = fmax(dmax, fabs((double)un[i] - mg[i]));
        lmax = fmax(lmax, fabs((double)un[i]));
    }
    double S = 16.0 * (double)m.cfg.n_layers + 8.0, bound = S * 16.0 * 0x1.0p-24 * 8.0 * lmax;
    CHECK(dmax <= bound, "%s: merged vs unmerged logits differ by %.3g (bound %.3g)", name, dmax, bound);
    printf("    merged == unmerged forward: max |diff| %.2g (bound %.2g)\n", dmax, bound);
    free(un);
    free(mg);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0, "rm");
    hyla_lora_free(&L);
    hyla_model_free(&m);

    /* a fresh adapter (B = 0, every module) changes nothing; with dropout, remat stays exact */
    CHECK(hyla_model_load(&m, dir) == HYLA_OK, "%s", hyla_error_message());
    float *base = logits_of(&m, tok, 65);
    hyla_lora_options o = {.r = 3, .alpha = 6, .dropout = 0.25, .targets = NULL, .seed = 7};
    CHECK(hyla_lora_create(&L, &m.table, &o) == HYLA_OK, "create: %s", hyla_error_message());
    m.lora = &L;
    float *fresh = logits_of(&m, tok, 65);
    CHECK(!memcmp(base, fresh, (size_t)(65 * m.cfg.vocab) * sizeof(float)), "%s: a B = 0 adapter changed the logits",
          name);
    for (int64_t i = 0; i < (int64_t)L.table.total_floats; i++) /* non-zero B so dropout matters everywhere */
        L.w[i] = L.w[i] != 0.0f ? L.w[i] : 0.01f * (float)((i * 7919) % 13 - 6);
    g = lora_step(&m, tok, "none", HYLA_UNIT_LAYER, &loss, 0);
    check_policies(&m, name, tok, g, loss);
    free(g);
    free(base);
    free(fresh);
    m.lora = NULL;
    hyla_lora_free(&L);
    hyla_model_free(&m);
    free(tok);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    const char *models[] = {"next_moe_8l", "next_moe_6l", "q35_dense", "q35_moe", "irregular", "all_linear", "all_attention"};
    const char *only = getenv("HYLA_TEST_ONLY");
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        if (!only || strstr(only, models[i]))
            check_model(cases, models[i]);
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
