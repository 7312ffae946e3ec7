/* Training: AdamW + clipping + schedule against the PyTorch reference, and resume.
 *
 *  1. Ten steps on next_moe_8l and q35_dense with the reference's batches and hyperparameters
 *     (tests/reference/README.md): per-step lr (exact formula), loss and grad norm, and the final
 *     parameters.
 *  2. Resume: 10 steps == 5 steps + checkpoint + resume + 5 steps, bit for bit (weights, moments,
 *     losses), through the checkpoint files.
 *
 * Tolerances. Step 0 is a plain forward/backward: loss within the logits bound of
 * test_reference.c (2 x S sqrt(n) u kappa), grad norm within the gradient bound of
 * test_grads.c (relative). After that the trajectory is chaotic at fp32 resolution: Adam's first
 * updates are ~lr * sign(g), so gradient entries near zero flip their whole update on a rounding
 * difference, and the reference models' gated norms have heads with tiny output rms whose
 * gradients are ill-conditioned. The test MEASURES this sensitivity instead of guessing it: it
 * runs hyla a second time from weights perturbed by one ulp (one rounding's worth) and takes the
 * running maximum over steps of the loss spread (and the final parameter spread) between the two
 * runs. The float64 reference differs from hyla by an accumulation of such rounding-sized
 * perturbations, amplified alike, so we allow 4x the measured spread (or 4x the reference's own
 * float32-emulation deviation, train_expected.json "fp32_emulation", if larger). Every step's
 * lr is checked exactly, and AdamW's arithmetic on its own by test_optimizer below.
 *
 * Built with -DHYLA_TEST_MPI (build/mpi/test_train_mpi, run by tests/mpi/mpi_cli_test.sh under
 * mpirun -np 2) it runs check 1 data parallel, shard none and then fsdp: the reference's batch rows split over the ranks
 * (rank r runs row r as its micro-batch), the gradient summed over ranks (parallel/grad_reduce.h).
 * The split changes only the order of fp32 sums, and the perturbed second run is split alike,
 * so the same measured tolerances apply. */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/exact_sum.h"
#include "io/safetensors.h"
#include "io/fileio.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "engine/executor.h"
#include "engine/plan.h"
#include "train/trainer.h"

#include "check.h"

#ifdef HYLA_TEST_MPI
#include "parallel/comm_mpi.h"
static hyla_comm *test_comm;
static int test_fsdp; /* shard none, then fsdp */
#endif


static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static hyla_train_config train_config(const cJSON *hp, const char *policy)
{
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    hyla_policy_parse(&tc.policy, policy);
    tc.unit = HYLA_UNIT_LAYER;
    tc.batch = (int64_t)num(hp, "batch_size");
    tc.seq = (int64_t)num(hp, "seq_len");
    tc.accum = 1;
    tc.adamw = (hyla_adamw_config){num(hp, "peak_lr"), num(hp, "beta1"), num(hp, "beta2"), num(hp, "eps"),
                                   num(hp, "weight_decay"), num(hp, "max_grad_norm")};
    tc.schedule = (hyla_lr_schedule){HYLA_SCHED_COSINE, num(hp, "peak_lr"), num(hp, "min_lr"),
                                     (int64_t)num(hp, "warmup_steps"), (int64_t)num(hp, "total_steps"), 0};
    return tc;
}

static void batch_tokens(const cJSON *batches, int s, int32_t *out, int64_t B, int64_t T)
{
    const cJSON *b = cJSON_GetArrayItem(batches, s);
    for (int64_t i = 0; i < B; i++)
        for (int64_t t = 0; t < T; t++)
            out[i * T + t] = (int32_t)cJSON_GetArrayItem(cJSON_GetArrayItem(b, (int)i), (int)t)->valuedouble;
}

/* Runs the 10 reference steps; losses[10], final weights in m. perturb: nudge every initial
 * weight by one ulp first. */
static void run_reference_steps(const char *dir, const cJSON *hp, const cJSON *batches, int perturb, hyla_model *m,
                                hyla_step_stats *stats)
{
    CHECK(hyla_model_load(m, dir) == HYLA_OK, "%s: %s", dir, hyla_error_message());
    if (perturb)
        for (size_t i = 0; i < m->table.total_floats; i++)
            m->w[i] = nextafterf(m->w[i], INFINITY);
    hyla_train_config tc = train_config(hp, "full");
#ifdef HYLA_TEST_MPI
    HYLA_ASSERT(tc.batch % test_comm->size == 0);
    tc.batch /= test_comm->size; /* the step's [batch, seq] tokens are [ranks, batch / ranks, seq]: row r on rank r */
    tc.comm = test_comm;
    tc.fsdp = test_fsdp;
#endif
    hyla_trainer tr;
    CHECK(hyla_trainer_init(&tr, m, &tc) == HYLA_OK, "%s: %s", dir, hyla_error_message());
    int64_t rows = (int64_t)num(hp, "batch_size"); /* the step's rows (over every rank) */
    int32_t *tokens = malloc((size_t)(rows * tc.seq) * sizeof *tokens);
    for (int s = 0; s < cJSON_GetArraySize(batches); s++) {
        batch_tokens(batches, s, tokens, rows, tc.seq);
        CHECK(hyla_trainer_step(&tr, tokens, NULL, &stats[s]) == HYLA_OK, "%s step %d: %s", dir, s, hyla_error_message());
    }
#ifdef HYLA_TEST_MPI
    if (tr.sharded) /* the pieces back into the model's arena, for the comparison */
        CHECK(hyla_fsdp_gather_all(&tr.fsdp) == HYLA_OK, "%s: %s", dir, hyla_error_message());
#endif
    free(tokens);
    hyla_trainer_free(&tr);
}

static double param_diff(const hyla_model *m, const hyla_hf_tensor *ht, const float *want)
{
    double worst = 0;
    for (int64_t r = 0; r < ht->rows; r++) {
        int param;
        int64_t row;
        hyla_hf_row_dest(&m->table, ht, r, &param, &row);
        const hyla_param *p = &m->table.params[param];
        const float *mine = m->w + p->offset + (size_t)row * (size_t)p->shape[p->ndim - 1];
        for (int64_t c = 0; c < ht->row_len; c++)
            worst = fmax(worst, fabs((double)mine[c] - want[r * ht->row_len + c]));
    }
    return worst;
}

static void check_reference_run(const char *cases, const char *name)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", cases, name);
    snprintf(path, sizeof path, "%s/train_expected.json", dir);
    char *text;
    if (hyla_read_text_file(path, &text, NULL)) {
        CHECK(0, "%s", hyla_error_message());
        return;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *hp = cJSON_GetObjectItemCaseSensitive(j, "hyperparameters");
    const cJSON *emu = cJSON_GetObjectItemCaseSensitive(j, "fp32_emulation");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    const cJSON *batches = cJSON_GetObjectItemCaseSensitive(j, "batches");
    int n_steps = cJSON_GetArraySize(steps);
    hyla_step_stats st[16], pt[16];
    hyla_model m, mp;
    HYLA_ASSERT(n_steps <= 16);
    run_reference_steps(dir, hp, batches, 0, &m, st);
    run_reference_steps(dir, hp, batches, 1, &mp, pt);
    double u = 0x1.0p-24, S = 16.0 * (double)m.cfg.n_layers + 8.0;
    double loss_tol0 = 2 * S * 16 * u * 8, gnorm_rel0 = 2 * S * 16 * u * 8;
    double spread = 0, worst_loss = 0, worst_ratio = 0;
    for (int s = 0; s < n_steps; s++) {
        const cJSON *want = cJSON_GetArrayItem(steps, s);
        double dl = fabs(st[s].loss - num(want, "loss"));
        worst_loss = fmax(worst_loss, dl);
        spread = fmax(spread, fabs(st[s].loss - pt[s].loss));
        CHECK(fabs(st[s].lr - num(want, "lr")) <= 1e-15 * num(want, "lr"), "%s step %d: lr %.12g != %.12g", name, s,
              st[s].lr, num(want, "lr"));
        if (s == 0) {
            CHECK(dl <= loss_tol0 * fmax(1, st[s].loss), "%s step 0: loss %.9g vs %.9g (tol %.3g)", name, st[s].loss,
                  num(want, "loss"), loss_tol0);
            double gn = num(want, "grad_norm");
            CHECK(fabs(st[s].grad_norm - gn) <= gnorm_rel0 * gn, "%s step 0: grad norm %.9g vs %.9g", name,
                  st[s].grad_norm, gn);
        } else {
            double tol = 4 * fmax(spread, num(emu, "max_abs_loss_diff"));
            worst_ratio = fmax(worst_ratio, dl / tol);
            CHECK(dl <= tol, "%s step %d: loss %.9g vs %.9g (tol %.3g)", name, s, st[s].loss, num(want, "loss"), tol);
        }
    }
    snprintf(path, sizeof path, "%s/train_final.safetensors", dir);
    hyla_st_set fin;
    double worst_param = 0, param_spread = 0;
    if (hyla_st_open_file(&fin, path) == HYLA_OK) {
        hyla_model orig;
        CHECK(hyla_model_load(&orig, dir) == HYLA_OK, "%s: %s", name, hyla_error_message());
        for (int i = 0; i < m.table.n_params; i++) { /* no MTP loss: the optimizer leaves the head as loaded */
            const hyla_param *p = &m.table.params[i];
            if (p->mtp)
                CHECK(!memcmp(m.w + p->offset, orig.w + p->offset, (size_t)p->numel * sizeof(float)),
                      "%s: MTP parameter %s changed by training without an MTP loss", name, hyla_role_name(p->role));
        }
        hyla_model_free(&orig);
        for (size_t h = 0; h < m.table.n_hf; h++) {
            if (!strncmp(m.table.hf[h].name, "mtp.", 4))
                continue;
            const hyla_st_tensor *t = hyla_st_find(&fin, m.table.hf[h].name);
            CHECK(t != NULL, "%s: final params lack %s", name, m.table.hf[h].name);
            if (!t)
                continue;
            worst_param = fmax(worst_param, param_diff(&m, &m.table.hf[h], t->data));
        }
        hyla_st_close(&fin);
    } else {
        CHECK(0, "%s", hyla_error_message());
    }
    for (size_t i = 0; i < m.table.total_floats; i++)
        param_spread = fmax(param_spread, fabs((double)m.w[i] - mp.w[i]));
    double param_tol = 4 * fmax(param_spread, num(emu, "max_abs_final_param_diff"));
    CHECK(worst_param <= param_tol, "%s: final parameters differ by %.3g (tol %.3g)", name, worst_param, param_tol);
    printf("  %-12s 10 AdamW steps: step 0 loss %.9f (ref %.9f); later max |loss - ref| %.3g (worst %.2f of tol; "
           "1-ulp spread %.3g); max |param - ref| %.3g (tol %.3g)\n",
           name, st[0].loss, num(cJSON_GetArrayItem(steps, 0), "loss"), worst_loss, worst_ratio, spread, worst_param,
           param_tol);
    hyla_model_free(&m);
    hyla_model_free(&mp);
    cJSON_Delete(j);
}

/* AdamW arithmetic against the formula in double on a small vector, clipping included. */
static void test_optimizer(void)
{
    hyla_config cfg;
    memset(&cfg, 0, sizeof cfg);
    hyla_param_table t;
    memset(&t, 0, sizeof t);
    hyla_param params[2] = {{HYLA_P_ATTN_Q, 0, 2, {3, 2, 1}, 6, 0, 0, 0}, {HYLA_P_INPUT_NORM, 0, 1, {4, 1, 1}, 4, 16, 1, 0}};
    t.n_params = 2;
    t.params = params;
    t.total_floats = 32;
    float w[32] = {0}, g[32] = {0};
    double wd_[32] = {0}, m_[32] = {0}, v_[32] = {0};
    for (int i = 0; i < 6; i++)
        w[i] = (float)(0.1 * (i + 1)), wd_[i] = w[i];
    for (int i = 16; i < 20; i++)
        w[i] = (float)(-0.2 * (i - 15)), wd_[i] = w[i];
    hyla_adamw opt;
    hyla_adamw_config c = {1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0};
    hyla_adamw_init(&opt, &c, 32);
    double worst = 0;
    for (int step = 1; step <= 5; step++) {
        double ss = 0;
        for (int i = 0; i < 32; i++) {
            g[i] = (i < 6 || (i >= 16 && i < 20)) ? (float)(0.3 * sin(step * 1.7 + i) * (step == 2 ? 10 : 1)) : 0.0f;
            ss += (double)g[i] * g[i];
        }
        double norm = sqrt(ss), scale = norm > 1.0 ? 1.0 / (norm + 1e-6) : 1.0;
        double got = 0;
        CHECK(hyla_adamw_step(&opt, &t, w, g, &got) == HYLA_OK, "adamw step: %s", hyla_error_message());
        CHECK(fabs(got - norm) <= 1e-12 * norm, "adamw: grad norm %.12g vs %.12g", got, norm);
        for (int i = 0; i < 32; i++) {
            if (!(i < 6 || (i >= 16 && i < 20)))
                continue;
            double gi = g[i] * scale, decay = i < 6 ? 0.1 : 0.0;
            wd_[i] *= 1 - 1e-2 * decay;
            m_[i] = 0.9 * m_[i] + 0.1 * gi;
            v_[i] = 0.95 * v_[i] + 0.05 * gi * gi;
            double mh = m_[i] / (1 - pow(0.9, step)), vh = v_[i] / (1 - pow(0.95, step));
            wd_[i] -= 1e-2 * mh / (sqrt(vh) + 1e-8);
            worst = fmax(worst, fabs(w[i] - wd_[i]));
        }
    }
    /* fp32 update arithmetic: ~10 roundings per step of values <= 1, 5 steps: 50 u */
    CHECK(worst <= 50 * 0x1.0p-24, "adamw: weights differ from the double formula by %.3g", worst);
    printf("  adamw: 5 steps (decay on 2-D only, clipping) match the double formula within %.2g\n", worst);
    hyla_adamw_free(&opt);
}

/* The optimizer's vectorised passes at real sizes (parameters of 10,000, 70,001 and 2^20 + 123
 * floats, none a multiple of the 4096-float block, with a bf16 copy of the matrices):
 *  - AdamW: every element bit-identical to the same fp32 formula evaluated one element at a time
 *    (vectorising cannot change an element's arithmetic), and the bf16 copy == the rounded weight;
 *  - gradient norm: the same bits on 1 and 2 threads, and from pieces cut at block boundaries
 *    and merged (what FSDP owners do) as from the whole; within 4 u_double (4 * 2^-53) relative of
 *    a long double sum: every square is exact in double, and each of the ~n / 4096 block sums and
 *    their exact merge round at most a few times, each time by u_double relative (all terms
 *    positive). */
static void test_optimizer_large(void)
{
    enum { NP = 3 };
    int64_t sizes[NP] = {10000, 70001, (1 << 20) + 123};
    hyla_param params[NP];
    memset(params, 0, sizeof params);
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
        params[i].role = i == 1 ? HYLA_P_INPUT_NORM : HYLA_P_ATTN_Q;
        params[i].layer = 0, params[i].ndim = i == 1 ? 1 : 2, params[i].numel = sizes[i], params[i].offset = off;
        off += (size_t)(sizes[i] + 15) / 16 * 16;
    }
    hyla_param_table t;
    memset(&t, 0, sizeof t);
    t.n_params = NP, t.params = params, t.total_floats = off;
    float *w = calloc(off, sizeof *w), *g = calloc(off, sizeof *g), *w_ref = calloc(off, sizeof *w_ref);
    float *m_ref = calloc(off, sizeof *m_ref), *v_ref = calloc(off, sizeof *v_ref);
    uint16_t *w16 = calloc(off, sizeof *w16);
    for (size_t j = 0; j < off; j++)
        w[j] = w_ref[j] = (float)(0.05 * sin(0.001 * (double)j + 0.3));
    hyla_adamw opt;
    hyla_adamw_config c = {3e-3, 0.9, 0.95, 1e-8, 0.1, 0.0};
    hyla_adamw_init(&opt, &c, off);
    opt.bf16_copy = w16;
    int64_t mismatches = 0, copy_mismatches = 0;
    for (int step = 1; step <= 3; step++) {
        for (size_t j = 0; j < off; j++)
            g[j] = (float)(1e-2 * cos(0.37 * (double)j * step + step));
        CHECK(hyla_adamw_apply(&opt, &t, w, g, 0.75) == HYLA_OK, "adamw: %s", hyla_error_message());
        float rbc1 = (float)(1.0 / opt.bc1), rbc2 = (float)(1.0 / opt.bc2);
        for (int i = 0; i < NP; i++) {
            const hyla_param *p = &params[i];
            float wd = (float)(1.0 - c.lr * (p->ndim >= 2 ? c.weight_decay : 0.0));
            for (int64_t k = 0; k < p->numel; k++) {
                size_t j = p->offset + (size_t)k;
                float gj = g[j] * 0.75f;
                m_ref[j] = 0.9f * m_ref[j] + (1.0f - 0.9f) * gj;
                v_ref[j] = 0.95f * v_ref[j] + (1.0f - 0.95f) * gj * gj;
                w_ref[j] = w_ref[j] * wd - (float)c.lr * (m_ref[j] * rbc1) / (sqrtf(v_ref[j] * rbc2) + (float)c.eps);
                mismatches += memcmp(&w_ref[j], &w[j], 4) != 0 || memcmp(&m_ref[j], &opt.m[j], 4) != 0 ||
                              memcmp(&v_ref[j], &opt.v[j], 4) != 0;
                copy_mismatches += p->ndim >= 2 && w16[j] != hyla_bf16_from_f32(w[j]);
            }
        }
    }
    CHECK(mismatches == 0 && copy_mismatches == 0, "adamw (vectorised): %lld elements differ from the one-at-a-time "
          "formula, %lld bf16 copies from the rounded weights", (long long)mismatches, (long long)copy_mismatches);
    /* the norm */
    long double exact = 0;
    for (int i = 0; i < NP; i++)
        for (int64_t k = 0; k < params[i].numel; k++)
            exact += (long double)g[params[i].offset + k] * (long double)g[params[i].offset + k];
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double n1 = hyla_grad_norm(&t, g);
    omp_set_num_threads(2);
    double n2 = hyla_grad_norm(&t, g);
    omp_set_num_threads(threads);
    hyla_exact_sum acc;
    hyla_exact_sum_init(&acc);
    for (int i = 0; i < NP; i++) /* pieces of 3 blocks, then the rest */
        for (int64_t lo = 0; lo < params[i].numel; lo += 3 * 4096) {
            int64_t len = params[i].numel - lo < 3 * 4096 ? params[i].numel - lo : 3 * 4096;
            hyla_grad_sumsq_add(&acc, g + params[i].offset + lo, len);
        }
    double merged = sqrt(hyla_exact_sum_value(&acc)), want = sqrtl(exact);
    CHECK(memcmp(&n1, &n2, sizeof n1) == 0 && memcmp(&n1, &merged, sizeof n1) == 0,
          "grad norm: 1 thread %.17g, 2 threads %.17g, merged pieces %.17g", n1, n2, merged);
    CHECK(fabs(n1 - want) <= 4 * 0x1.0p-53 * want, "grad norm %.17g vs long double %.17g", n1, want);
    printf("  adamw + bf16 copy over %zu floats: bit-identical to the one-at-a-time formula; grad norm the same on "
           "1 / 2 threads and from merged pieces, %.2g relative from long double\n", off, fabs(n1 - want) / want);
    hyla_adamw_free(&opt);
    free(w), free(g), free(w_ref), free(m_ref), free(v_ref), free(w16);
}

/* 10 straight steps vs 5 + save + resume + 5. */
static void check_resume(const char *cases)
{
    char dir[4096], ck[] = "/tmp/hyla_resume_XXXXXX", ckdir[4200];
    snprintf(dir, sizeof dir, "%s/next_moe_6l", cases);
    CHECK(mkdtemp(ck) != NULL, "mkdtemp");
    snprintf(ckdir, sizeof ckdir, "%s/ck", ck);
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    hyla_policy_parse(&tc.policy, "minimal");
    tc.unit = HYLA_UNIT_LAYER, tc.batch = 2, tc.seq = 20, tc.accum = 2;
    tc.adamw = (hyla_adamw_config){1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0};
    tc.schedule = (hyla_lr_schedule){HYLA_SCHED_COSINE, 1e-2, 1e-3, 2, 10, 0};
    int32_t tokens[2 * 2 * 20];
    double losses[10];
    hyla_model a;
    hyla_trainer ta;
    hyla_data da;
    CHECK(hyla_model_load(&a, dir) == HYLA_OK, "%s", hyla_error_message());
    CHECK(hyla_trainer_init(&ta, &a, &tc) == HYLA_OK, "%s", hyla_error_message());
    hyla_data_open_synthetic(&da, 42, a.cfg.vocab);
    for (int s = 0; s < 10; s++) {
        hyla_step_stats st;
        hyla_data_next(&da, tokens, NULL, 4, 20);
        hyla_trainer_step(&ta, tokens, NULL, &st);
        losses[s] = st.loss;
        if (s == 4) {
            hyla_train_state state = {5, da.pos, 42, "synthetic", ""};
            CHECK(hyla_checkpoint_save(ckdir, &a, &ta.opt, &state) == HYLA_OK, "save: %s", hyla_error_message());
        }
    }
    hyla_model b;
    hyla_trainer tb;
    hyla_train_state state;
    CHECK(hyla_checkpoint_load_model(ckdir, &b) == HYLA_OK, "load: %s", hyla_error_message());
    CHECK(hyla_trainer_init(&tb, &b, &tc) == HYLA_OK, "%s", hyla_error_message());
    CHECK(hyla_checkpoint_load_state(ckdir, &b, &tb.opt, &state) == HYLA_OK, "load state: %s", hyla_error_message());
    CHECK(state.step == 5 && tb.opt.step == 5, "resumed step %lld", (long long)state.step);
    hyla_data db;
    hyla_data_open_synthetic(&db, state.seed, b.cfg.vocab);
    db.pos = state.data_pos;
    for (int s = 5; s < 10; s++) {
        hyla_step_stats st;
        hyla_data_next(&db, tokens, NULL, 4, 20);
        hyla_trainer_step(&tb, tokens, NULL, &st);
        CHECK(st.loss == losses[s], "resume: step %d loss %.9g != %.9g", s, st.loss, losses[s]);
    }
    size_t n = a.table.total_floats * sizeof(float);
    CHECK(!memcmp(a.w, b.w, n), "resume: final weights not bit-identical");
    CHECK(!memcmp(ta.opt.m, tb.opt.m, n) && !memcmp(ta.opt.v, tb.opt.v, n), "resume: moments not bit-identical");
    printf("  resume: 10 steps == 5 + checkpoint + resume + 5, bit-identical (loss %.4f -> %.4f)\n", losses[0], losses[9]);

    /* an interrupted checkpoint write (simulated: a later save died after writing part of its
     * temporary directory) leaves the previous checkpoint intact and loadable */
    char stale[4400], stale_file[4500];
    snprintf(stale, sizeof stale, "%s.tmp.999999", ckdir);
    snprintf(stale_file, sizeof stale_file, "%s/model.safetensors", stale);
    hyla_mkdir_p(stale);
    hyla_write_file_atomic(stale_file, "\x10\x00\x00", 3);
    hyla_model c;
    hyla_trainer tcc;
    hyla_train_state st2;
    CHECK(hyla_checkpoint_load_model(ckdir, &c) == HYLA_OK, "after an interrupted write: %s", hyla_error_message());
    CHECK(hyla_trainer_init(&tcc, &c, &tc) == HYLA_OK && hyla_checkpoint_load_state(ckdir, &c, &tcc.opt, &st2) == HYLA_OK &&
              st2.step == 5,
          "previous checkpoint not loadable after an interrupted write: %s", hyla_error_message());
    /* a second save over an existing checkpoint replaces it whole (atomic exchange) */
    hyla_train_state st3 = {7, 123, 42, "synthetic", ""};
    CHECK(hyla_checkpoint_save(ckdir, &c, &tcc.opt, &st3) == HYLA_OK, "re-save: %s", hyla_error_message());
    CHECK(hyla_checkpoint_load_state(ckdir, &c, &tcc.opt, &st2) == HYLA_OK && st2.step == 7 && st2.data_pos == 123,
          "re-saved checkpoint not the new one");
    hyla_trainer_free(&tcc);
    hyla_model_free(&c);
    hyla_remove_tree(stale);

    /* a corrupt checkpoint is refused with a clear error */
    char state_path[4300];
    snprintf(state_path, sizeof state_path, "%s/trainer_state.json", ckdir);
    hyla_write_file_atomic(state_path, "{\"format\": \"hyla-train-state-1\", \"step\": -3}", 45);
    hyla_adamw tmp = tb.opt;
    CHECK(hyla_checkpoint_load_state(ckdir, &b, &tmp, &state) != HYLA_OK && strstr(hyla_error_message(), "step"),
          "corrupt trainer_state.json accepted (%s)", hyla_error_message());
    hyla_trainer_free(&ta);
    hyla_trainer_free(&tb);
    hyla_model_free(&a);
    hyla_model_free(&b);
    hyla_remove_tree(ck);
}

/* Per-layer updates (AdamW applied to each layer as soon as its gradients are complete) give
 * weights and moments BIT-IDENTICAL to one update after the whole backward (clipping off; each
 * element's update reads only its own gradient), for every remat unit and with offload, and
 * hold less gradient memory: the head plus one unit's window instead of the whole table. Bad
 * combinations (accumulation, clipping) are refused with a clear error. */
static void check_update_per_layer(const char *cases)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_8l", cases);
    const char *policies[] = {"minimal", "full", "minimal_offloaded"};
    for (int unit = 0; unit < 3; unit++) {
        hyla_model a, b;
        CHECK(hyla_model_load(&a, dir) == HYLA_OK && hyla_model_load(&b, dir) == HYLA_OK, "%s", hyla_error_message());
        hyla_train_config tc;
        memset(&tc, 0, sizeof tc);
        hyla_policy_parse(&tc.policy, policies[unit]);
        tc.unit = (hyla_remat_unit)unit, tc.batch = 2, tc.seq = 24, tc.accum = 1;
        tc.adamw = (hyla_adamw_config){1e-2, 0.9, 0.95, 1e-8, 0.1, 0.0};
        tc.schedule = (hyla_lr_schedule){HYLA_SCHED_COSINE, 1e-2, 1e-3, 2, 6, 0};
        hyla_trainer ta, tb;
        CHECK(hyla_trainer_init(&ta, &a, &tc) == HYLA_OK, "%s", hyla_error_message());
        tc.update_per_layer = 1;
        CHECK(hyla_trainer_init(&tb, &b, &tc) == HYLA_OK, "per-layer: %s", hyla_error_message());
        hyla_data d;
        hyla_data_open_synthetic(&d, 7, a.cfg.vocab);
        int32_t tokens[2 * 24];
        for (int step = 0; step < 4; step++) {
            hyla_step_stats sa, sb;
            hyla_data_next(&d, tokens, NULL, 2, 24);
            CHECK(hyla_trainer_step(&ta, tokens, NULL, &sa) == HYLA_OK && hyla_trainer_step(&tb, tokens, NULL, &sb) == HYLA_OK,
                  "step: %s", hyla_error_message());
            CHECK(sa.loss == sb.loss, "per-layer %s step %d: loss %.9g != %.9g", policies[unit], step, sb.loss, sa.loss);
            /* the norm is summed in another order: equal to rounding (relative 1e-12 in double) */
            CHECK(fabs(sa.grad_norm - sb.grad_norm) <= 1e-12 * sa.grad_norm, "per-layer: grad norm %.17g vs %.17g",
                  sb.grad_norm, sa.grad_norm);
        }
        size_t n = a.table.total_floats * sizeof(float);
        CHECK(!memcmp(a.w, b.w, n) && !memcmp(ta.opt.m, tb.opt.m, n) && !memcmp(ta.opt.v, tb.opt.v, n),
              "per-layer %s/%s: weights or moments not bit-identical to whole-step updates", policies[unit],
              hyla_remat_unit_name(tc.unit));
        size_t ga = hyla_trainer_gradient_bytes(&ta), gb = hyla_trainer_gradient_bytes(&tb);
        CHECK(gb < ga, "per-layer: gradient bytes %zu not below %zu", gb, ga);
        hyla_plan_config pc = {.batch = 2, .seq = 24, .devices = 1, .policy = tc.policy, .unit = tc.unit,
                               .update_per_layer = 1, .param_bytes = 4, .grad_bytes = 4, .opt_bytes = 4, .act_bytes = 4};
        hyla_plan plan;
        CHECK(hyla_plan_compute(&b, &pc, &plan) == HYLA_OK && plan.grad_bytes == (double)gb,
              "per-layer: planned gradient bytes %.0f != the trainer's %zu", plan.grad_bytes, gb);
        hyla_plan_free(&plan);
        printf("  per-layer updates, %s / %s: 4 steps bit-identical; gradient memory %zu -> %zu bytes (%.0f%%)\n",
               policies[unit], hyla_remat_unit_name(tc.unit), ga, gb, 100.0 * gb / ga);
        hyla_trainer_free(&ta);
        hyla_trainer_free(&tb);
        hyla_model_free(&a);
        hyla_model_free(&b);
    }
    hyla_model m;
    CHECK(hyla_model_load(&m, dir) == HYLA_OK, "%s", hyla_error_message());
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    hyla_policy_parse(&tc.policy, "full");
    tc.batch = 1, tc.seq = 8, tc.accum = 1, tc.update_per_layer = 1;
    tc.adamw = (hyla_adamw_config){1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0};
    hyla_trainer t;
    CHECK(hyla_trainer_init(&t, &m, &tc) == HYLA_ERR_ARG && strstr(hyla_error_message(), "--clip 0"),
          "per-layer updates with clipping accepted (%s)", hyla_error_message());
    tc.adamw.clip = 0, tc.accum = 2;
    CHECK(hyla_trainer_init(&t, &m, &tc) == HYLA_ERR_ARG && strstr(hyla_error_message(), "--accum 1"),
          "per-layer updates with accumulation accepted (%s)", hyla_error_message());
    hyla_model_free(&m);
}

/* The loss head over chunks of rows: the whole step at once (the unchunked head), chunks of
 * HYLA_HEAD_ROWS and of twice that give BIT-IDENTICAL losses and gradients (each GEMM row is the
 * same for any number of rows, the loss keeps hyla_cross_entropy_fwd's grouping, lm_head's
 * gradient is summed in fixed blocks), on 2 x 300 = 600 rows (chunks 256 + 256 + 88), for an
 * untied and a tied (q35_dense) head, and the head's working set shrinks to one chunk. */
static void check_head_chunks(const char *cases, const char *name)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", cases, name);
    hyla_model m;
    CHECK(hyla_model_load(&m, dir) == HYLA_OK, "%s: %s", dir, hyla_error_message());
    if (failures)
        return;
    const int64_t B = 2, T = 300, n = B * T, rows[3] = {1024, HYLA_HEAD_ROWS, 2 * HYLA_HEAD_ROWS};
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = (int32_t)((i * 7919 + 13) % m.cfg.vocab);
    hyla_policy p;
    hyla_policy_parse(&p, "minimal");
    size_t nf = m.table.total_floats;
    float *g[3];
    double ce[3];
    size_t head[3];
    for (int r = 0; r < 3; r++) {
        hyla_executor ex;
        g[r] = calloc(nf, sizeof(float));
        /* lm_head's gradient summed in blocks of HYLA_HEAD_ROWS for all three (the default block
         * is the chunk, which the default chunk choice makes the same thing) */
        CHECK(hyla_executor_init_head_rows(&ex, &m, &p, HYLA_UNIT_LAYER, B, T, rows[r], HYLA_HEAD_ROWS) == HYLA_OK, "%s",
              hyla_error_message());
        hyla_step_loss l;
        CHECK(hyla_executor_step(&ex, tokens, NULL, g[r], 1.0f / (float)n, 0.01f, &l) == HYLA_OK, "%s", hyla_error_message());
        ce[r] = l.ce_sum;
        head[r] = ex.head_bytes;
        hyla_executor_free(&ex);
    }
    for (int r = 1; r < 3; r++) {
        CHECK(ce[r] == ce[0], "%s: head rows %lld: loss sum %.17g != unchunked %.17g", name, (long long)rows[r], ce[r], ce[0]);
        CHECK(!memcmp(g[r], g[0], nf * sizeof(float)), "%s: head rows %lld: gradients not bit-identical to the unchunked head",
              name, (long long)rows[r]);
    }
    size_t chunk_logits = (size_t)HYLA_HEAD_ROWS * (size_t)m.cfg.vocab * sizeof(float);
    CHECK(head[0] - head[1] == hyla_align_up((size_t)n * (size_t)m.cfg.vocab * sizeof(float)) - hyla_align_up(chunk_logits) &&
              head[1] >= chunk_logits,
          "%s: head working set %zu (chunked) vs %zu (whole) bytes", name, head[1], head[0]);
    printf("  head in chunks of %d / %d rows == unchunked, bit-identical (%s, %lld rows; head %.2f -> %.2f MB)\n",
           HYLA_HEAD_ROWS, 2 * HYLA_HEAD_ROWS, name, (long long)n, head[0] / 1e6, head[1] / 1e6);
    for (int r = 0; r < 3; r++)
        free(g[r]);
    free(tokens);
    hyla_model_free(&m);
}

/* The default chunk (hyla_head_rows): a multiple of HYLA_HEAD_ROWS, never over the byte budget
 * (unless one block already is), covering n in the fewest chunks the budget allows, evenly. */
static void check_head_rows_rule(void)
{
    const int64_t vocabs[] = {256, 32000, 151936, 248320, 1 << 22}, ns[] = {1, 127, 512, 600, 4096, 8192, 100003};
    for (int v = 0; v < 5; v++)
        for (int i = 0; i < 7; i++) {
            int64_t V = vocabs[v], n = ns[i], rows = hyla_head_rows(n, V), chunks = (n + rows - 1) / rows;
            int64_t fit = HYLA_HEAD_BUDGET_BYTES / (V * 4) / HYLA_HEAD_ROWS * HYLA_HEAD_ROWS;
            fit = fit < HYLA_HEAD_ROWS ? HYLA_HEAD_ROWS : fit > HYLA_HEAD_MAX_ROWS ? HYLA_HEAD_MAX_ROWS : fit;
            CHECK(rows % HYLA_HEAD_ROWS == 0 && rows <= fit && chunks == (n + fit - 1) / fit &&
                      rows - (n + chunks - 1) / chunks < HYLA_HEAD_ROWS,
                  "hyla_head_rows(%lld, %lld) = %lld (fit %lld)", (long long)n, (long long)V, (long long)rows, (long long)fit);
        }
    CHECK(hyla_head_rows(512, 151936) == 512 && hyla_head_rows(512, 248320) == 256 && hyla_head_rows(4096, 248320) == 256,
          "head rows at the real shapes: %lld %lld %lld", (long long)hyla_head_rows(512, 151936),
          (long long)hyla_head_rows(512, 248320), (long long)hyla_head_rows(4096, 248320));
}

/* Labels: explicit next-token labels (-100 at each row's last position) train exactly like
 * labels = NULL; which negative value marks an ignored position does not matter; masking a
 * position removes exactly its term (the loss's denominator is the target count). */
static void check_labels(const char *cases)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_6l", cases);
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    hyla_policy_parse(&tc.policy, "minimal");
    tc.unit = HYLA_UNIT_LAYER, tc.batch = 2, tc.seq = 16, tc.accum = 2;
    tc.adamw = (hyla_adamw_config){1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0};
    tc.schedule = (hyla_lr_schedule){HYLA_SCHED_CONSTANT, 1e-2, 1e-2, 0, 10, 0};
    enum { N = 2 * 2 * 16 };
    int32_t tokens[N], next[N], ign_a[N], ign_b[N];
    hyla_data d;
    hyla_model m[4];
    hyla_trainer tr[4];
    for (int k = 0; k < 4; k++) {
        CHECK(hyla_model_load(&m[k], dir) == HYLA_OK && hyla_trainer_init(&tr[k], &m[k], &tc) == HYLA_OK, "%s",
              hyla_error_message());
    }
    hyla_data_open_synthetic(&d, 5, m[0].cfg.vocab);
    double loss[4][3];
    for (int s = 0; s < 3; s++) {
        hyla_data_next(&d, tokens, NULL, 4, 16);
        for (int i = 0; i < N; i++) {
            next[i] = i % 16 == 15 ? -100 : tokens[i + 1];
            /* every third position masked, marked -100 in one copy and -1 / -7 in the other */
            ign_a[i] = i % 3 == 0 ? -100 : next[i];
            ign_b[i] = i % 3 == 0 ? (i % 2 ? -1 : -7) : next[i];
        }
        const int32_t *labels[4] = {NULL, next, ign_a, ign_b};
        for (int k = 0; k < 4; k++) {
            hyla_step_stats st;
            CHECK(hyla_trainer_step(&tr[k], tokens, labels[k], &st) == HYLA_OK, "labels %d: %s", k, hyla_error_message());
            loss[k][s] = st.loss;
        }
    }
    size_t bytes = m[0].table.total_floats * sizeof(float);
    CHECK(!memcmp(loss[0], loss[1], sizeof loss[0]) && !memcmp(m[0].w, m[1].w, bytes),
          "explicit next-token labels differ from labels = NULL");
    CHECK(!memcmp(loss[2], loss[3], sizeof loss[2]) && !memcmp(m[2].w, m[3].w, bytes),
          "the value marking an ignored label changed the run");
    CHECK(loss[2][0] != loss[0][0], "masking a third of the targets did not change the loss");
    printf("  labels: explicit next-token == NULL, ignored-label value irrelevant (bit-identical over 3 steps)\n");
    for (int k = 0; k < 4; k++) {
        hyla_trainer_free(&tr[k]);
        hyla_model_free(&m[k]);
    }
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
#ifdef HYLA_TEST_MPI
    test_comm = hyla_comm_mpi_open(&argc, &argv);
    HYLA_ASSERT(test_comm && test_comm->size > 1);
    for (test_fsdp = 0; test_fsdp < 2; test_fsdp++) {
        printf("shard %s:\n", test_fsdp ? "fsdp" : "none");
        check_reference_run(cases, "q35_dense");
        check_reference_run(cases, "next_moe_8l");
    }
    printf("rank %d of %d: %s: %d failures\n", test_comm->rank, test_comm->size, failures ? "FAIL" : "ok", failures);
    hyla_comm_mpi_close(test_comm);
    return failures ? 1 : 0;
#endif
    test_optimizer();
    test_optimizer_large();
    check_reference_run(cases, "q35_dense");
    check_reference_run(cases, "next_moe_8l");
    check_resume(cases);
    check_labels(cases);
    check_update_per_layer(cases);
    check_head_rows_rule();
    check_head_chunks(cases, "next_moe_8l");
    check_head_chunks(cases, "q35_dense");
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
