/* hyla plan CONFIG: a training step's memory, predicted without allocating it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/dtype_flags.h"
#include "cli/options.h"
#include "core/error.h"
#include "io/fileio.h"
#include "io/gguf_read.h"
#include "model/lora.h"
#include "model/model.h"
#include "engine/auto_policy.h"
#include "engine/plan.h"
#include "engine/plan_svg.h"
#include "infer/generate.h"
#include "infer/infer_plan.h"

static int dtype_bytes(const char *flag, const char *v, double *out)
{
    if (!strcmp(v, "f32") || !strcmp(v, "fp32"))
        *out = 4;
    else if (!strcmp(v, "bf16") || !strcmp(v, "f16") || !strcmp(v, "fp16"))
        *out = 2;
    else
        return hyla_error_set(HYLA_ERR_ARG, "%s must be f32, bf16 or f16, got '%s'", flag, v);
    return HYLA_OK;
}

static void print_json(const hyla_plan *p, const hyla_plan_config *pc)
{
    printf("{\"devices\": %lld, \"batch\": %lld, \"seq\": %lld, \"policy\": \"%s\", \"unit\": \"%s\", \"params\": %lld,\n",
           (long long)pc->devices, (long long)pc->batch, (long long)pc->seq, pc->policy.name,
           hyla_remat_unit_name(pc->unit), (long long)p->params);
    printf(" \"argument_bytes\": %.0f, \"param_bytes\": %.0f, \"optimizer_bytes\": %.0f, \"batch_bytes\": %.0f,\n",
           p->argument_bytes, p->param_bytes, p->opt_bytes, p->batch_bytes);
    printf(" \"trained_params\": %lld, \"adapter_bytes\": %.0f, \"compute_copy_bytes\": %.0f, \"act_dtype\": \"%s\",\n",
           (long long)p->trained_params, p->adapter_bytes, p->compute_copy_bytes, pc->act_bytes == 2 ? "bf16" : "f32");
    printf(" \"temp_bytes\": %.0f, \"checkpoint_bytes\": %.0f, \"work_bytes\": %.0f, \"offload_staging_bytes\": %.0f, "
           "\"carry_bytes\": %.0f, \"gradient_bytes\": %.0f, \"gathered_weight_bytes\": %.0f, \"total_bytes\": %.0f, "
           "\"host_bytes\": %.0f, \"head_bytes\": %.0f, \"reduce_bytes\": %.0f, \"accum\": %lld, \"comm_bytes\": %.0f, \"expert_groups\": %lld,\n",
           p->temp_bytes, p->checkpoint_bytes, p->work_bytes, p->staging_bytes, p->carry_bytes, p->grad_bytes,
           p->gathered_bytes, p->peak_bytes, p->host_bytes, p->head_bytes, p->reduce_bytes,
           (long long)(pc->accum > 1 ? pc->accum : 1), p->comm_bytes, (long long)(pc->expert_groups > 1 ? pc->expert_groups : 1));
    printf(" \"context_parallel\": %lld, \"context_bytes\": %.0f, \"context_comm_bytes\": %.0f,\n",
           (long long)(pc->context_parallel > 1 ? pc->context_parallel : 1), p->context_bytes, p->context_comm_bytes);
    printf(" \"checkpoints_by_name\": {");
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        printf("%s\"%s\": %.0f", c ? ", " : "", hyla_ckpt_name_str((hyla_ckpt_name)c), p->by_name[c]);
    printf("},\n \"host_checkpoints_by_name\": {");
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        printf("%s\"%s\": %.0f", c ? ", " : "", hyla_ckpt_name_str((hyla_ckpt_name)c), p->host_by_name[c]);
    printf("},\n \"fp32_only_checkpoints_by_name\": {");
    for (int c = 0, first = 1; c <= HYLA_CK__COUNT; c++)
        if (p->fp32_only_by_name[c] > 0) {
            printf("%s\"%s\": %.0f", first ? "" : ", ", hyla_ckpt_name_str((hyla_ckpt_name)c), p->fp32_only_by_name[c]);
            first = 0;
        }
    printf("}, \"fp32_only_checkpoint_bytes\": %.0f, \"bf16_checkpoint_tensors\": %lld", p->fp32_only_bytes,
           (long long)p->bf16_tensors);
    printf(",\n \"checkpoints_by_layer_kind\": {\"linear_attention\": %.0f, \"full_attention\": %.0f},\n", p->by_kind[0],
           p->by_kind[1]);
    printf(" \"host_checkpoints_by_layer_kind\": {\"linear_attention\": %.0f, \"full_attention\": %.0f},\n",
           p->host_by_kind[0], p->host_by_kind[1]);
    printf(" \"activation_timeline_bytes\": [");
    for (int i = 0; i < p->n_timeline; i++)
        printf("%s%.0f", i ? ", " : "", p->timeline[i]);
    printf("],\n \"host_timeline_bytes\": [");
    for (int i = 0; i < p->n_timeline; i++)
        printf("%s%.0f", i ? ", " : "", p->host_timeline[i]);
    printf("]}\n");
}

/* --infer-prompt: the memory of a generation (infer/infer_plan.h). */
static int print_infer_plan(const hyla_model *m, int weights_bf16, int compute_bf16, int64_t B, int64_t prompt,
                            int64_t max_new, int json, const char *path)
{
    hyla_infer_plan p;
    if (hyla_infer_plan_make(m, weights_bf16, compute_bf16, B, prompt, max_new, &p))
        return hyla_cli_fail("plan");
    if (json) {
        printf("{\"batch\": %lld, \"prompt\": %lld, \"max_new\": %lld, \"weight_bytes\": %zu, \"cache_bytes\": %zu, "
               "\"sampling_bytes\": %zu, \"prefill_bytes\": %zu, \"prefill_head_bytes\": %zu, \"decode_bytes\": %zu, "
               "\"peak_bytes\": %zu}\n", (long long)B, (long long)prompt, (long long)max_new, p.weights, p.caches,
               p.sampling, p.prefill, p.prefill_head, p.decode, p.peak);
        return 0;
    }
    double Mi = 1048576.0;
    printf("inference plan: %s, %lld sequence(s) x (prompt %lld + %lld new tokens), %s weights%s\n", path, (long long)B,
           (long long)prompt, (long long)max_new, weights_bf16 ? "bf16" : "fp32",
           compute_bf16 && !weights_bf16 ? " (+ bf16 copy of the matrices)" : "");
    printf("  weights          %10.1f MiB\n  caches           %10.1f MiB  (conv windows, delta-rule states, K/V)\n"
           "  sampling         %10.1f MiB  (last-position logits, probabilities, ids)\n"
           "  prefill          %10.1f MiB  (a prompt piece of at most %d tokens; head %.2f MiB: the last row only, no prompt x vocab logits)\n"
           "  decode           %10.1f MiB\n  peak             %10.1f MiB  (weights + caches + sampling + the larger "
           "executor)\n", p.weights / Mi, p.caches / Mi, p.sampling / Mi, p.prefill / Mi, HYLA_PREFILL_CHUNK, p.prefill_head / Mi,
           p.decode / Mi, p.peak / Mi);
    return 0;
}

static void print_text(const hyla_plan *p, const hyla_plan_config *pc, const char *path)
{
    double G = 1e9, Gi = 1073741824.0;
    printf("plan: %s, batch %lld x seq %lld, remat %s / %s, %lld device%s%s\n", path, (long long)pc->batch,
           (long long)pc->seq, pc->policy.name, hyla_remat_unit_name(pc->unit), (long long)pc->devices,
           pc->devices > 1 ? "s" : "", pc->fsdp && pc->devices > 1 ? " (FSDP: parameters, gradients, moments sharded)" : "");
    if (pc->expert_groups > 1)
        printf("expert groups: %lld (an MoE layer's routed experts gathered and reduce-scattered %lld at a time)\n",
               (long long)pc->expert_groups, (long long)p->experts_per_group);
    if (pc->context_parallel > 1)
        printf("context parallel: %lld slices of %lld tokens, one per device; the link between them %.3f GB (in temp), "
               "its messages %.3f GB per step (in sent)\n", (long long)pc->context_parallel,
               (long long)(pc->seq / pc->context_parallel), p->context_bytes / G, p->context_comm_bytes / G);
    printf("parameters %.3f B", p->params / 1e9);
    if (p->adapter_bytes > 0)
        printf(" frozen + a LoRA adapter of %.3f M trained (fp32 weights, gradients and moments: the adapter's only)",
               p->trained_params / 1e6);
    printf("; per device (GB = 1e9 bytes):\n");
    printf("  argument %9.3f GB (%8.3f GiB) = parameters %.3f + AdamW moments %.3f + batch %.6f", p->argument_bytes / G,
           p->argument_bytes / Gi, p->param_bytes / G, p->opt_bytes / G, p->batch_bytes / G);
    if (p->compute_copy_bytes > 0)
        printf(" + bf16 compute copy %.3f", p->compute_copy_bytes / G);
    printf("\n");
    printf("  temp     %9.3f GB (%8.3f GiB) = checkpoints %.3f + working set %.3f + carries %.3f + gradients %.3f"
           " + gathered weights %.3f%s",
           p->temp_bytes / G, p->temp_bytes / Gi, p->checkpoint_bytes / G, p->work_bytes / G, p->carry_bytes / G,
           p->grad_bytes / G, p->gathered_bytes / G, "");
    if (p->reduce_bytes > 0)
        printf(" + gradient reduction %.3f", p->reduce_bytes / G);
    if (p->host_bytes > 0)
        printf(" + offload staging %.3f", p->staging_bytes / G);
    if (p->context_bytes > 0)
        printf(" + context link %.3f", p->context_bytes / G);
    printf("\n");
    printf("  total    %9.3f GB (%8.3f GiB)\n", p->peak_bytes / G, p->peak_bytes / Gi);
    if (p->comm_bytes > 0)
        printf("  sent     %9.3f GB per step by %s (%lld micro-batch(es) per device: %s)\n", p->comm_bytes / G,
               pc->fsdp ? "this device" : "each device", (long long)(pc->accum > 1 ? pc->accum : 1),
               pc->fsdp ? "every layer gathered for its forward and its backward, its gradient reduce-scattered"
                        : "each gradient to its owners, the sum back");
    printf("  head     %9.3f GB of the working set: final norm, one %lld-row logits chunk, per-row losses\n",
           p->head_bytes / G, (long long)p->head_rows);
    if (p->host_bytes > 0)
        printf("  host     %9.3f GB (%8.3f GiB) of offloaded checkpoints\n", p->host_bytes / G, p->host_bytes / Gi);
    printf("checkpoints by name (all layers):%s\n", p->host_bytes > 0 ? "       device           host" : "");
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        if (p->by_name[c] > 0 || p->host_by_name[c] > 0) {
            printf("  %-22s %10.3f GB", hyla_ckpt_name_str((hyla_ckpt_name)c), p->by_name[c] / G);
            if (p->host_bytes > 0)
                printf("  %10.3f GB", p->host_by_name[c] / G);
            printf("\n");
        }
    if (pc->act_bytes == 2) {
        printf("bf16 compute: every checkpoint is stored as bf16 on both tiers except these fp32 ones (device + host):");
        int any = 0;
        for (int c = 0; c <= HYLA_CK__COUNT; c++)
            if (p->fp32_only_by_name[c] > 0) {
                printf("%s %s %.3f GB", any ? "," : "", hyla_ckpt_name_str((hyla_ckpt_name)c), p->fp32_only_by_name[c] / G);
                any = 1;
            }
        printf("%s; the working set holds the fp32 forms of one layer's tensors\n", any ? "" : " none");
    }
    printf("by layer kind: linear attention %.3f GB, full attention %.3f GB", p->by_kind[0] / G, p->by_kind[1] / G);
    if (p->host_bytes > 0)
        printf(" (host: %.3f GB, %.3f GB)", p->host_by_kind[0] / G, p->host_by_kind[1] / G);
    printf("\n");
    double peak = 0;
    int at = 0;
    for (int i = 0; i < p->n_timeline; i++)
        if (p->timeline[i] > peak)
            peak = p->timeline[i], at = i;
    printf("activation timeline: %d ops; peak %.3f GB at op %d\n", p->n_timeline, peak / G, at);
}

int hyla_cmd_plan(int argc, char **argv)
{
    const char *remat = "full", *unit_s = "layer", *pd = "f32", *gd = "f32", *od = "f32", *ad = "f32", *shard = "fsdp";
    int64_t batch = 1, seq = 4096, devices = 1, lora_rank = 0, accum = 1, expert_groups = 1, threads = 0, rank = 0;
    int64_t context_parallel = 1;
    int64_t infer_prompt = 0, max_new = 128;
    int json = 0, per_layer = 0, act_bf16 = 0, no_prefetch = 0, overlap_reduce = 0;
    double mtp_weight = 0;
    const char *svg = NULL, *budget_s = NULL, *host_s = NULL, *lora_targets = NULL;
    const hyla_opt opts[] = {
        {"--batch", OPT_INT, &batch, "N", "sequences per device (default 1)", 1, 1 << 20},
        {"--seq", OPT_INT, &seq, "N", "tokens per sequence (default 4096)", 2, 1 << 24},
        {"--remat", OPT_STRING, &remat, "POLICY", "remat policy (default full)", 0, 0},
        {"--remat-unit", OPT_STRING, &unit_s, "UNIT", "layer (default), block or part", 0, 0},
        {"--devices", OPT_INT, &devices, "N", "devices the state is sharded over (default 1)", 1, 1 << 20},
        {"--rank", OPT_INT, &rank, "R", "FSDP: plan device R's share (default 0, which holds the largest pieces)", 0,
         1 << 20},
        {"--accum", OPT_INT, &accum, "N", "micro-batches per device per step (default 1; with --shard none or one "
         "device, more than one adds the gradient reduction's buffers)", 1, 1 << 20},
        {"--shard", OPT_STRING, &shard, "fsdp|none", "how parameters, gradients and moments are split (default fsdp)", 0, 0},
        {"--expert-groups", OPT_INT, &expert_groups, "G", "FSDP: gather and reduce-scatter an MoE layer's routed experts "
         "in G groups (must divide the experts), so no device holds a whole MoE layer (default 1)", 1, 1 << 20},
        {"--context-parallel", OPT_INT, &context_parallel, "C", "as hyla train --context-parallel C (C divides --devices): "
         "each device runs a slice of seq / C tokens of every sequence, plus the link between the slices (its "
         "buffers, the kept initial states, its messages)", 1, 1 << 20},
        {"--param-dtype", OPT_STRING, &pd, "f32|bf16", "parameter storage (default f32)", 0, 0},
        {"--grad-dtype", OPT_STRING, &gd, "f32|bf16", "gradient storage (default f32)", 0, 0},
        {"--opt-dtype", OPT_STRING, &od, "f32|bf16", "AdamW moment storage (default f32)", 0, 0},
        {"--act-dtype", OPT_STRING, &ad, "f32|bf16", "activations, checkpoints and matmul inputs (default f32): the "
         "executor's own plan in that dtype", 0, 0},
        {"--json", OPT_FLAG, &json, NULL, "print the plan as JSON", 0, 0},
        {"--infer-prompt", OPT_INT, &infer_prompt, "N", "plan inference instead (hyla generate / serve): a prompt of N "
         "tokens per sequence (--batch sequences), --max-new tokens each; --param-dtype bf16 = bf16 weights", 1,
         (int64_t)1 << 32},
        {"--max-new", OPT_INT, &max_new, "N", "with --infer-prompt: tokens generated per sequence (default 128)", 1,
         (int64_t)1 << 32},
        {"--no-prefetch", OPT_FLAG, &no_prefetch, NULL, "FSDP: as hyla train --no-prefetch (one part gathered at a time)",
         0, 0},
        {"--overlap-reduce", OPT_FLAG, &overlap_reduce, NULL, "FSDP: as hyla train --overlap-reduce (a second gradient "
         "window and the in-flight unit's reduce-scatter staging)", 0, 0},
        {"--threads", OPT_INT, &threads, "N", "threads each device's step runs with (default: all cores; per-thread "
         "kernel scratch is part of the working set; under mpirun hyla train runs 1 per rank)", 0, 4096},
        {"--lora-rank", OPT_INT, &lora_rank, "R", "plan LoRA training of rank R (base frozen: no gradients or moments)", 1,
         65536},
        {"--lora-targets", OPT_STRING, &lora_targets, "LIST", "with --lora-rank: all-linear (default) or module names", 0, 0},
        {"--mtp-loss-weight", OPT_DOUBLE, &mtp_weight, "X", "plan training with the MTP loss (X > 0): the head's layer "
         "as one more remat unit (the model needs an MTP head)", 0, 0},
        {"--update-per-layer", OPT_FLAG, &per_layer, NULL, "optimizer updates each layer during backward (gradients of "
         "one remat unit at a time)", 0, 0},
        {"--svg", OPT_STRING, &svg, "FILE", "draw the live-bytes timeline and per-checkpoint bars", 0, 0},
        {"--memory-budget", OPT_STRING, &budget_s, "SIZE", "with --remat auto: per-device budget, e.g. 40GB or 30GiB", 0, 0},
        {"--host-budget", OPT_STRING, &host_s, "SIZE", "with --remat auto: host bytes offload may use (default: no "
         "limit; 0: never offload)", 0, 0},
        {0},
    };
    const hyla_command_spec spec = {"plan", "CONFIG|DIR|FILE.gguf [options]",
                                    "Predict a training step's memory from a config.json alone (nothing is allocated).", opts,
                                    1, 1, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    hyla_plan_config pc;
    memset(&pc, 0, sizeof pc);
    pc.batch = batch, pc.seq = seq, pc.devices = devices, pc.accum = accum, pc.expert_groups = expert_groups;
    pc.rank = rank;
    pc.context_parallel = context_parallel;
    hyla_cli_set_threads(threads);
    if (strcmp(shard, "fsdp") && strcmp(shard, "none")) {
        fprintf(stderr, "hyla plan: --shard must be fsdp or none, got '%s'\n", shard);
        return 2;
    }
    pc.fsdp = !strcmp(shard, "fsdp");
    pc.no_prefetch = no_prefetch;
    pc.overlap_reduce = overlap_reduce;
    pc.update_per_layer = per_layer;
    pc.mtp = mtp_weight > 0;
    int is_auto = !strcmp(remat, "auto");
    double budget = 0, host_budget = INFINITY;
    if (host_s && strcmp(host_s, "0") && hyla_parse_size(host_s, &host_budget))
        return hyla_cli_fail("plan");
    if (host_s && !strcmp(host_s, "0"))
        host_budget = 0;
    if (is_auto != !!budget_s) {
        fprintf(stderr, "hyla plan: --remat auto and --memory-budget go together\n");
        return 2;
    }
    if ((is_auto ? hyla_parse_size(budget_s, &budget) : hyla_policy_parse(&pc.policy, remat)) ||
        hyla_remat_unit_parse(unit_s, &pc.unit) ||
        dtype_bytes("--param-dtype", pd, &pc.param_bytes) || dtype_bytes("--grad-dtype", gd, &pc.grad_bytes) ||
        dtype_bytes("--opt-dtype", od, &pc.opt_bytes) || hyla_cli_dtype_is_bf16("--act-dtype", ad, 0, &act_bf16))
        return hyla_cli_fail("plan");
    if (lora_rank && pc.param_bytes == 2) /* LoRA over a bf16 base (hyla train --param-dtype bf16): bf16 compute */
        act_bf16 = 1;
    pc.act_bytes = act_bf16 ? 2 : 4;
    struct stat sb;
    char cfg_path[4200];
    if (stat(pos[0], &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", pos[0]);
    else
        snprintf(cfg_path, sizeof cfg_path, "%s", pos[0]);
    hyla_model m;
    memset(&m, 0, sizeof m);
    hyla_layout lay;
    if (hyla_is_gguf_path(pos[0])) { /* its config from the metadata: the fp32 model hyla train makes of it */
        if (infer_prompt) {
            fprintf(stderr, "hyla plan: --infer-prompt plans fp32 / bf16 weights; a GGUF model's are its file's "
                            "tensors (hyla generate --json reports that plan)\n");
            return 2;
        }
        if (hyla_model_gguf_config(pos[0], &m.cfg))
            return hyla_cli_fail("plan");
    } else if (hyla_config_load(&m.cfg, cfg_path)) {
        return hyla_cli_fail("plan");
    }
    hyla_schedule_build(&m.sched, &m.cfg);
    hyla_default_layout(&m.cfg, &lay);
    if (hyla_params_build(&m.table, &m.cfg, &lay))
        return hyla_cli_fail("plan");
    if (infer_prompt) {
        int rc = print_infer_plan(&m, pc.param_bytes == 2, act_bf16, batch, infer_prompt, max_new, json, cfg_path);
        hyla_params_free(&m.table);
        return rc;
    }
    hyla_lora lora;
    memset(&lora, 0, sizeof lora);
    if (lora_targets && !lora_rank) {
        fprintf(stderr, "hyla plan: --lora-targets needs --lora-rank\n");
        hyla_params_free(&m.table);
        return 2;
    }
    if (lora_rank) {
        hyla_lora_options o = {.r = lora_rank, .alpha = 0, .dropout = 0, .targets = lora_targets, .seed = 0};
        if (hyla_lora_create(&lora, &m.table, &o)) {
            hyla_params_free(&m.table);
            return hyla_cli_fail("plan");
        }
        m.lora = &lora;
    }
    hyla_plan p;
    int rc = 0;
    if (is_auto ? hyla_auto_policy(&m, &pc, budget, host_budget, &p) : hyla_plan_compute(&m, &pc, &p)) {
        rc = hyla_cli_fail("plan");
    } else {
        if (is_auto) { /* reusable as --remat custom:... */
            char chosen[2048];
            hyla_policy_format(&pc.policy, chosen, sizeof chosen);
            fprintf(json ? stderr : stdout, "auto policy for %s: custom:%s\n", budget_s, chosen);
        }
        if (json)
            print_json(&p, &pc);
        else
            print_text(&p, &pc, cfg_path);
        char title[4400];
        const char *base = strrchr(cfg_path, '/') ? strrchr(cfg_path, '/') + 1 : cfg_path;
        snprintf(title, sizeof title, "%s: batch %lld x seq %lld, %s / %s, %lld device(s)", base, (long long)batch,
                 (long long)seq, pc.policy.name, hyla_remat_unit_name(pc.unit), (long long)devices);
        if (svg && hyla_plan_write_svg(&p, title, svg))
            rc = hyla_cli_fail("plan");
        hyla_plan_free(&p);
    }
    if (lora_rank)
        hyla_lora_free(&lora);
    hyla_params_free(&m.table);
    return rc;
}
