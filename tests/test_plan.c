/* Plan exactness: for 28 configurations, each in fp32 and in bf16 compute (models with different layouts and remainder blocks,
 * batch, sequence, every policy and unit, offloading ones included) the planner's prediction
 * (hyla_plan_compute, which allocates nothing) equals what a real training step measures: the
 * high-water marks of the checkpoint, work and offload staging arenas after the step, and the
 * bytes the host store wrote and read back, byte for byte.
 *
 * Offload accounting: for each offloading configuration, its twin with every `offload` turned
 * into `device` plans a checkpoint arena larger by exactly the host bytes, the same working set,
 * and a temp larger by exactly host - staging (staging = the two device halves copies go
 * through, the only device cost of offloading).
 *
 * bf16 halving: each bf16 configuration's checkpoints, but for the fp32-only tensors its plan
 * names, take half the bytes of the same configuration in fp32 (check_bf16_halves). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "engine/auto_policy.h"
#include "engine/plan.h"

typedef struct {
    const char *model, *policy;
    hyla_remat_unit unit;
    int64_t B, T;
} plan_case;

/* Sum of a plan's checkpoint bytes by name, both tiers. */
static double named_checkpoint_bytes(const hyla_plan *p)
{
    double b = 0;
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        b += p->by_name[c] + p->host_by_name[c];
    return b;
}

/* bf16 compute halves the checkpoints but for the fp32-only ones the plan names: with F the
 * fp32-only bytes (the same tensors, the same fp32 bytes in both dtypes), the bf16 plan's other
 * checkpoints take half the fp32 plan's. Each tensor is 64-byte aligned in its own dtype, and
 * |align64(2n) - align64(4n)/2| < 64, so the two sides differ by less than 64 bytes per bf16
 * tensor. */
static void check_bf16_halves(const hyla_model *m, const hyla_plan_config *pc16, const hyla_plan *p16, const plan_case *c)
{
    hyla_model m32 = *m;
    m32.compute_dtype = HYLA_DT_F32;
    hyla_plan_config pc32 = *pc16;
    pc32.act_bytes = 4;
    hyla_plan p32;
    if (hyla_plan_compute(&m32, &pc32, &p32) != HYLA_OK) {
        CHECK(0, "%s %s: fp32 plan: %s", c->model, c->policy, hyla_error_message());
        return;
    }
    double F = p16->fp32_only_bytes, half = (named_checkpoint_bytes(&p32) - F) / 2, b16 = named_checkpoint_bytes(p16) - F;
    double slack = 64.0 * (double)p16->bf16_tensors;
    CHECK(p16->bf16_tensors > 0 && fabs(b16 - half) < slack && p32.fp32_only_bytes == 0,
          "%s %s/%s: bf16 checkpoints %.0f (+ %.0f fp32-only) vs half of fp32's %.0f, slack %.0f over %lld tensors",
          c->model, c->policy, hyla_remat_unit_name(c->unit), b16, F, half, slack, (long long)p16->bf16_tensors);
    printf("  %-14s bf16 %-24.24s checkpoints: %.0f bf16 bytes = %.4f x the fp32 plan's, + %.0f fp32-only bytes\n",
           c->model, c->policy, b16, half > 0 ? b16 / (2 * half) : 0.0, F);
    hyla_plan_free(&p32);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    static const plan_case sweep[] = {
        {"next_moe_8l", "none", HYLA_UNIT_LAYER, 1, 65},       {"next_moe_8l", "full", HYLA_UNIT_LAYER, 2, 33},
        {"next_moe_8l", "full", HYLA_UNIT_BLOCK, 1, 64},       {"next_moe_8l", "minimal", HYLA_UNIT_PART, 1, 100},
        {"next_moe_6l", "save_qkv_proj", HYLA_UNIT_LAYER, 3, 20}, {"next_moe_6l", "full", HYLA_UNIT_BLOCK, 1, 130},
        {"next_moe_6l", "minimal_with_context", HYLA_UNIT_LAYER, 1, 7},
        {"next_moe_6l", "save_out_proj", HYLA_UNIT_PART, 2, 64}, {"q35_dense", "none", HYLA_UNIT_BLOCK, 1, 65},
        {"q35_dense", "save_dot_except_mlp", HYLA_UNIT_LAYER, 2, 40}, {"q35_dense", "full", HYLA_UNIT_PART, 1, 2},
        {"q35_moe", "save_dot_except_mlpwi", HYLA_UNIT_LAYER, 1, 65}, {"q35_moe", "minimal", HYLA_UNIT_BLOCK, 2, 31},
        {"q35_moe", "full", HYLA_UNIT_LAYER, 4, 16},           {"irregular", "full", HYLA_UNIT_BLOCK, 1, 65},
        {"irregular", "minimal", HYLA_UNIT_LAYER, 2, 50},      {"irregular", "custom:gdn_core=device,context=device",
                                                                HYLA_UNIT_PART, 1, 64},
        {"irregular", "none", HYLA_UNIT_LAYER, 1, 129},        {"all_linear", "full", HYLA_UNIT_BLOCK, 1, 65},
        {"all_linear", "save_qkv_proj", HYLA_UNIT_PART, 2, 33}, {"all_linear", "none", HYLA_UNIT_LAYER, 1, 3},
        {"all_attention", "full", HYLA_UNIT_LAYER, 2, 65},     {"all_attention", "minimal", HYLA_UNIT_BLOCK, 1, 64},
        {"all_attention", "custom:attention_out=device,ffn_input=device", HYLA_UNIT_PART, 3, 10},
        {"next_moe_8l", "minimal_offloaded", HYLA_UNIT_LAYER, 1, 65}, {"q35_moe", "qkv_proj_offloaded", HYLA_UNIT_BLOCK, 2, 31},
        {"irregular", "custom:decoder_layer_input=offload,gdn_core=offload,context=device,mlpwo=offload", HYLA_UNIT_PART, 1, 64},
        {"all_linear", "minimal_offloaded", HYLA_UNIT_PART, 1, 40},
    };
    int n = (int)(sizeof sweep / sizeof *sweep);
    for (int i = 0; i < 2 * n; i++) { /* every configuration in fp32, then in bf16 compute */
        const plan_case *c = &sweep[i % n];
        int bf16 = i >= n;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", cases, c->model);
        hyla_model m;
        if (hyla_model_load(&m, dir)) {
            CHECK(0, "%s: %s", c->model, hyla_error_message());
            continue;
        }
        hyla_plan_config pc;
        memset(&pc, 0, sizeof pc);
        hyla_policy_parse(&pc.policy, c->policy);
        pc.unit = c->unit, pc.batch = c->B, pc.seq = c->T, pc.devices = 1;
        pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
        if (bf16) {
            pc.act_bytes = 2;
            CHECK(hyla_model_set_compute_bf16(&m, 0) == HYLA_OK, "bf16: %s", hyla_error_message());
        }
        hyla_plan plan;
        CHECK(hyla_plan_compute(&m, &pc, &plan) == HYLA_OK, "plan: %s", hyla_error_message());
        if (bf16)
            check_bf16_halves(&m, &pc, &plan, c);
        hyla_executor ex;
        CHECK(hyla_executor_init(&ex, &m, &pc.policy, c->unit, c->B, c->T, HYLA_DELTA_CHUNKED, 0) == HYLA_OK, "%s",
              hyla_error_message());
        hyla_host_store *store = NULL;
        if (ex.host_bytes)
            CHECK(hyla_host_store_open(&store, NULL, 0) == HYLA_OK && hyla_executor_attach_store(&ex, store) == HYLA_OK,
                  "store: %s", hyla_error_message());
        int32_t *tokens = malloc((size_t)(c->B * c->T) * sizeof *tokens);
        for (int64_t t = 0; t < c->B * c->T; t++)
            tokens[t] = (int32_t)((t * 37 + i) % m.cfg.vocab);
        float *grads = calloc(m.table.total_floats, sizeof(float));
        hyla_step_loss loss;
        CHECK(hyla_executor_step(&ex, tokens, NULL, grads, 0.01f, 0.001f, &loss) == HYLA_OK, "step: %s", hyla_error_message());
        size_t staging = ex.xfer[0].high_water + ex.xfer[1].high_water;
        CHECK((double)ex.ckpt.high_water == plan.checkpoint_bytes && (double)ex.work.high_water == plan.work_bytes &&
              (double)staging == plan.staging_bytes,
              "%s %s/%s B=%lld T=%lld: measured checkpoint %zu + work %zu + staging %zu, planned %.0f + %.0f + %.0f",
              c->model, c->policy, hyla_remat_unit_name(c->unit), (long long)c->B, (long long)c->T, ex.ckpt.high_water,
              ex.work.high_water, staging, plan.checkpoint_bytes, plan.work_bytes, plan.staging_bytes);
        printf("  %-14s %-4s %-24.24s %-5s B=%lld T=%-3lld checkpoints %9zu + work %9zu + staging %7zu bytes == plan\n",
               c->model, bf16 ? "bf16" : "f32", c->policy, hyla_remat_unit_name(c->unit), (long long)c->B, (long long)c->T, ex.ckpt.high_water,
               ex.work.high_water, staging);
        if (store) {
            hyla_host_store_stats io;
            hyla_host_store_stats_get(store, &io);
            /* every offloaded tensor written once and read back once, at its exact size; the store's
             * offsets are 64-byte aligned, so each copy pads the plan by less than 64 bytes */
            CHECK(io.bytes_written == io.bytes_read && io.writes == io.reads && (double)io.bytes_written <= plan.host_bytes &&
                      plan.host_bytes < (double)(io.bytes_written + 64 * io.writes),
                  "%s %s: host store wrote %llu bytes in %llu copies and read %llu in %llu, plan says %.0f", c->model,
                  c->policy, (unsigned long long)io.bytes_written, (unsigned long long)io.writes,
                  (unsigned long long)io.bytes_read, (unsigned long long)io.reads, plan.host_bytes);
            /* the device twin: offload -> device. Its checkpoint arena grows by exactly the host bytes
             * in both dtypes (bf16 compute stores a bf16-valued checkpoint as bf16 on either tier).
             * Work and temp agree only in fp32: a device-kept bf16 checkpoint's fp32 form lives in the
             * work arena while its layer runs, an offloaded one's in the staging half. */
            hyla_plan_config twin = pc;
            for (int k = 0; k < HYLA_CK__COUNT; k++)
                if (twin.policy.where[k] == HYLA_KEEP_OFFLOAD)
                    twin.policy.where[k] = HYLA_KEEP_DEVICE;
            hyla_plan dev;
            CHECK(hyla_plan_compute(&m, &twin, &dev) == HYLA_OK, "twin plan: %s", hyla_error_message());
            CHECK(dev.checkpoint_bytes - plan.checkpoint_bytes == plan.host_bytes &&
                  (bf16 || (dev.work_bytes == plan.work_bytes && dev.temp_bytes - plan.temp_bytes == plan.host_bytes - plan.staging_bytes)),
                  "%s %s: device twin checkpoints %.0f vs %.0f, work %.0f vs %.0f, temp %.0f vs %.0f; host %.0f staging %.0f",
                  c->model, c->policy, dev.checkpoint_bytes, plan.checkpoint_bytes, dev.work_bytes, plan.work_bytes,
                  dev.temp_bytes, plan.temp_bytes, plan.host_bytes, plan.staging_bytes);
            printf("  %14s offloaded %.0f bytes: checkpoint arena %+.0f exactly, temp %+.0f (= staging %.0f - host); "
                   "copies %.2f ms, compute waited %.2f ms\n", "", plan.host_bytes,
                   plan.checkpoint_bytes - dev.checkpoint_bytes, plan.temp_bytes - dev.temp_bytes, plan.staging_bytes,
                   io.io_seconds * 1e3, io.wait_seconds * 1e3);
            hyla_plan_free(&dev);
        }
        hyla_host_store_close(store);
        free(tokens);
        free(grads);
        hyla_executor_free(&ex);
        hyla_plan_free(&plan);
        hyla_model_free(&m);
    }
    /* --remat auto: predicted peak monotone non-increasing as the budget falls; the chosen
     * policy, written in custom syntax and parsed back, plans to the same peak; an impossible
     * budget is an error stating the minimum */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_8l", cases);
    hyla_model m;
    if (hyla_model_load(&m, dir) == HYLA_OK) {
        hyla_plan_config pc;
        memset(&pc, 0, sizeof pc);
        pc.unit = HYLA_UNIT_LAYER, pc.batch = 2, pc.seq = 64, pc.devices = 1;
        pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
        double lowest_no_host = 0;
        for (int with_host = 0; with_host < 2; with_host++) {
        double prev = INFINITY, lowest = 0;
        int steps = 0, offloading = 0;
        for (double budget = 60e6; budget > 1e6; budget *= 0.97) {
            hyla_plan p;
            hyla_plan_config a = pc;
            if (hyla_auto_policy(&m, &a, budget, with_host ? INFINITY : 0, &p) != HYLA_OK) {
                CHECK(strstr(hyla_error_message(), "impossible") && strstr(hyla_error_message(), "least"),
                      "auto: unexpected error %s", hyla_error_message());
                break;
            }
            CHECK(p.peak_bytes <= budget && p.peak_bytes <= prev, "auto: budget %.0f -> peak %.0f (previous %.0f)",
                  budget, p.peak_bytes, prev);
            char text[2048], custom[2100];
            hyla_policy_format(&a.policy, text, sizeof text);
            snprintf(custom, sizeof custom, "custom:%s", text);
            hyla_plan_config b = pc;
            hyla_plan q;
            CHECK(hyla_policy_parse(&b.policy, custom) == HYLA_OK && hyla_plan_compute(&m, &b, &q) == HYLA_OK &&
                      q.peak_bytes == p.peak_bytes,
                  "auto: the printed policy does not reproduce its plan (%s)", custom);
            hyla_plan_free(&q);
            CHECK(with_host || p.host_bytes == 0, "auto: offloads with a host budget of 0");
            offloading += p.host_bytes > 0;
            prev = lowest = p.peak_bytes;
            steps++;
            hyla_plan_free(&p);
        }
        CHECK(steps > 3, "auto: only %d feasible budgets in the sweep", steps);
        printf("  auto (%s): %d budgets from 60 MB down: peak monotone, lowest %.0f bytes (%d offloading); below it: "
               "clear error\n", with_host ? "device/offload/remat" : "device/remat", steps, lowest, offloading);
        if (!with_host)
            lowest_no_host = lowest;
        else
            CHECK(offloading > 0 && lowest < lowest_no_host, "auto: offload never chosen, or no lower minimum (%.0f vs %.0f)",
                  lowest, lowest_no_host);
        }
        hyla_model_free(&m);
    }
    printf("%s: %d configurations, %d failures\n", failures ? "FAIL" : "ok", n, failures);
    return failures ? 1 : 0;
}
