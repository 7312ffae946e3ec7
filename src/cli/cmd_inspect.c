/* hyla inspect PATH: config summary, block schedule, parameter counts and tensor table of a
 * model directory or of a bare config.json (no weights needed). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/quant.h"
#include "io/fileio.h"
#include "io/gguf_read.h"
#include "model/model.h"

static void print_summary(const hyla_config *c)
{
    printf("model_type      %s (family %s%s)\n", c->model_type, hyla_family_name(c->family),
           c->text_config_wrapped ? ", text_config wrapper" : "");
    printf("vocab %lld, hidden %lld, layers %lld\n", (long long)c->vocab, (long long)c->hidden, (long long)c->n_layers);
    printf("full attention  heads %lld q / %lld kv x %lld, rotary dim %lld, rope_theta %g\n", (long long)c->n_heads,
           (long long)c->n_kv_heads, (long long)c->head_dim, (long long)c->rotary_dim, c->rope_theta);
    printf("linear attention %lld k / %lld v heads, dk %lld, dv %lld, conv %lld\n", (long long)c->lin_k_heads,
           (long long)c->lin_v_heads, (long long)c->lin_k_dim, (long long)c->lin_v_dim, (long long)c->conv_kernel);
    printf("MoE             %lld experts, top-%lld%s, expert width %lld, shared width %lld, aux coef %g\n",
           (long long)c->n_experts, (long long)c->top_k, c->norm_topk_prob ? " (renormalised)" : "",
           (long long)c->moe_inter, (long long)c->shared_inter, c->router_aux_loss_coef);
    printf("dense MLP width %lld; rms_norm_eps %g; tied embeddings %s\n", (long long)c->inter, c->rms_norm_eps,
           c->tie_word_embeddings ? "yes" : "no");
}

static void print_schedule(const hyla_model *m)
{
    const hyla_config *c = &m->cfg;
    int n_full = 0, n_moe = 0;
    for (int l = 0; l < c->n_layers; l++) {
        n_full += c->layer_kind[l] == HYLA_LAYER_FULL;
        n_moe += c->layer_is_moe[l];
    }
    printf("\nschedule: %lld layers (%lld linear, %d full; %d MoE, %lld dense) in %d blocks\n", (long long)c->n_layers,
           (long long)c->n_layers - n_full, n_full, n_moe, (long long)c->n_layers - n_moe, m->sched.n_blocks);
    for (int b = 0; b < m->sched.n_blocks; b++) {
        char buf[128];
        hyla_schedule_describe_block(&m->sched, c, b, buf, sizeof buf);
        const hyla_block *blk = &m->sched.blocks[b];
        printf("  block %2d  %-36s  ", b, buf);
        for (int l = blk->first_layer; l < blk->first_layer + blk->n_layers; l++)
            printf("%c%s", c->layer_kind[l] == HYLA_LAYER_FULL ? 'A' : 'L', c->layer_is_moe[l] ? "" : "(dense)");
        printf("\n");
    }
}

static void print_counts(const hyla_param_counts *pc)
{
    printf("\nparameters: total %lld (%.3f B), active per token %lld (%.3f B)\n", (long long)pc->total,
           pc->total / 1e9, (long long)pc->active, pc->active / 1e9);
    printf("  embeddings + lm_head %lld, linear-attention mixers %lld, full-attention mixers %lld,\n"
           "  MoE (router + all experts + shared) %lld, dense MLP %lld; active excluding embeddings %lld\n",
           (long long)pc->embedding, (long long)pc->per_kind[0], (long long)pc->per_kind[1],
           (long long)pc->per_kind[2], (long long)pc->per_kind[3], (long long)(pc->active - pc->embedding));
    if (pc->mtp)
        printf("  MTP head (not in the totals, as Hugging Face does not load it): %lld parameters\n", (long long)pc->mtp);
}

/* Per-expert tensors print once per (layer, projection) as experts.{0..E-1}. */
static int is_later_expert(const char *name)
{
    const char *p = strstr(name, ".experts.");
    return p && p[9] >= '0' && p[9] <= '9' && !(p[9] == '0' && p[10] == '.');
}

static void print_tensors(const hyla_model *m, const hyla_st_set *set, int all)
{
    const hyla_param_table *t = &m->table;
    printf("\ntensors (%zu; layout: %s GDN projections, %s experts, prefix %s):\n", t->n_hf,
           t->layout.gdn_grouped ? "grouped qkvz/ba" : "separate qkv/z/b/a",
           t->layout.experts_fused ? "fused" : "per-expert", t->layout.language_model_prefix ? "model.language_model." : "model.");
    for (size_t i = 0; i < t->n_hf; i++) {
        const hyla_hf_tensor *h = &t->hf[i];
        if (!all && is_later_expert(h->name))
            continue;
        char shape[96];
        size_t o = 0;
        for (int d = 0; d < h->ndim; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, d ? ", %lld" : "[%lld", (long long)h->shape[d]);
        snprintf(shape + o, sizeof shape - o, "]");
        const char *dtype = "-";
        if (set) {
            const hyla_st_tensor *st = hyla_st_find(set, h->name);
            dtype = st ? hyla_dtype_name(st->dtype) : "MISSING";
        }
        int param;
        int64_t row;
        hyla_hf_row_dest(t, h, 0, &param, &row);
        const char *name = h->name;
        char collapsed[160];
        const char *ex = strstr(name, ".experts.0.");
        if (!all && ex) {
            snprintf(collapsed, sizeof collapsed, "%.*s.experts.{0..%lld}.%s", (int)(ex - name), name,
                     (long long)m->cfg.n_experts - 1, ex + 11);
            name = collapsed;
        }
        printf("  %-64s %-20s %-5s %s\n", name, shape, dtype, hyla_role_name(t->params[param].role));
    }
}

/* A GGUF model's file: its tensors as stored (ggml shape: row length first), and bytes per type. */
static void print_gguf_tensors(const hyla_gguf_file *f)
{
    size_t bytes[64] = {0}, count[64] = {0}, total = 0, n = hyla_gguf_n_tensors(f);
    printf("\ntensors in the file (%zu, GGUF v%u; ggml shape, row length first):\n", n, hyla_gguf_version(f));
    for (size_t i = 0; i < n; i++) {
        const hyla_gguf_tensor *t = hyla_gguf_tensor_at(f, i);
        char shape[96];
        size_t o = 0;
        for (int d = 0; d < t->n_dims; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, d ? ", %lld" : "[%lld", (long long)t->ne[d]);
        snprintf(shape + o, sizeof shape - o, "]");
        printf("  %-48s %-22s %-6s %12zu bytes\n", t->name, shape, hyla_ggml_type_name(t->type), t->nbytes);
        bytes[t->type & 63] += t->nbytes, count[t->type & 63]++, total += t->nbytes;
    }
    printf("\nby type:");
    for (int k = 0; k < 64; k++)
        if (count[k])
            printf("  %s %zu (%.1f MB)", hyla_ggml_type_name((hyla_ggml_type)k), count[k], (double)bytes[k] / 1e6);
    printf("\ntensor bytes    %zu (%.1f MB), read in place\n", total, (double)total / 1e6);
}

static void add_gguf_json(cJSON *o, const hyla_gguf_file *f)
{
    cJSON *g = cJSON_AddObjectToObject(o, "gguf");
    cJSON *types = cJSON_AddObjectToObject(g, "tensor_types");
    size_t total = 0, n = hyla_gguf_n_tensors(f);
    cJSON_AddNumberToObject(g, "version", hyla_gguf_version(f));
    for (size_t i = 0; i < n; i++) {
        const hyla_gguf_tensor *t = hyla_gguf_tensor_at(f, i);
        const char *name = hyla_ggml_type_name(t->type);
        cJSON *c = cJSON_GetObjectItem(types, name);
        if (c)
            cJSON_SetNumberValue(c, c->valuedouble + 1);
        else
            cJSON_AddNumberToObject(types, name, 1);
        total += t->nbytes;
    }
    cJSON_AddNumberToObject(g, "tensors", (double)n);
    cJSON_AddNumberToObject(g, "tensor_bytes", (double)total);
}

static int emit_json(const hyla_model *m, const hyla_param_counts *pc)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", m->cfg.model_type);
    cJSON_AddStringToObject(o, "family", hyla_family_name(m->cfg.family));
    cJSON_AddNumberToObject(o, "layers", (double)m->cfg.n_layers);
    cJSON *blocks = cJSON_AddArrayToObject(o, "blocks");
    for (int b = 0; b < m->sched.n_blocks; b++) {
        cJSON *blk = cJSON_CreateObject();
        cJSON_AddNumberToObject(blk, "first_layer", m->sched.blocks[b].first_layer);
        cJSON_AddNumberToObject(blk, "n_layers", m->sched.blocks[b].n_layers);
        cJSON_AddBoolToObject(blk, "remainder", m->sched.blocks[b].is_remainder);
        cJSON_AddItemToArray(blocks, blk);
    }
    cJSON_AddNumberToObject(o, "params_total", (double)pc->total);
    cJSON_AddNumberToObject(o, "params_active", (double)pc->active);
    cJSON_AddNumberToObject(o, "params_embedding", (double)pc->embedding);
    cJSON_AddNumberToObject(o, "params_mtp", (double)pc->mtp);
    cJSON_AddNumberToObject(o, "tensors", (double)m->table.n_hf);
    if (m->gguf)
        add_gguf_json(o, m->gguf);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s)
        return 1;
    printf("%s\n", s);
    free(s);
    return 0;
}

/* The summary, schedule and parameter counts (or all of it as JSON); the tensor table follows. */
static int print_model(const hyla_model *m, int json)
{
    hyla_param_counts pc;
    hyla_params_count(&m->table, &pc);
    if (json)
        return emit_json(m, &pc);
    print_summary(&m->cfg);
    print_schedule(m);
    print_counts(&pc);
    return 0;
}

int hyla_cmd_inspect(int argc, char **argv)
{
    int json = 0, all = 0;
    const hyla_opt opts[] = {
        {"--json", OPT_FLAG, &json, NULL, "print the summary as JSON", 0, 0},
        {"--all-tensors", OPT_FLAG, &all, NULL, "list every per-expert tensor instead of one line per projection", 0, 0},
        {0},
    };
    const hyla_command_spec spec = {"inspect", "PATH [options]",
                                    "PATH is a model directory, a config.json file (weights optional) or a .gguf file "
                                    "(loaded and checked as generate would, its tensors listed as stored).",
                                    opts, 1, 1, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;

    if (hyla_is_gguf_path(pos[0])) { /* the whole load: what inspect says is what generate will take */
        hyla_model g;
        if (hyla_model_load_gguf(&g, pos[0]))
            return hyla_cli_fail("inspect");
        int rc = print_model(&g, json);
        if (!json)
            print_gguf_tensors(g.gguf);
        hyla_model_free(&g);
        return rc;
    }

    struct stat sb;
    int is_dir = stat(pos[0], &sb) == 0 && S_ISDIR(sb.st_mode);
    char cfg_path[4096];
    if (is_dir) {
        if (hyla_path_join(cfg_path, sizeof cfg_path, pos[0], "config.json"))
            return hyla_cli_fail("inspect");
    } else {
        snprintf(cfg_path, sizeof cfg_path, "%s", pos[0]);
    }
    hyla_model m;
    memset(&m, 0, sizeof m);
    if (hyla_config_load(&m.cfg, cfg_path))
        return hyla_cli_fail("inspect");
    hyla_schedule_build(&m.sched, &m.cfg);
    hyla_st_set set;
    int have_set = 0;
    hyla_layout layout;
    hyla_default_layout(&m.cfg, &layout);
    char probe[4096], probe2[4096];
    if (is_dir && !hyla_path_join(probe, sizeof probe, pos[0], "model.safetensors") &&
        !hyla_path_join(probe2, sizeof probe2, pos[0], "model.safetensors.index.json") &&
        (hyla_file_exists(probe) || hyla_file_exists(probe2))) {
        if (hyla_st_open(&set, pos[0]) || hyla_model_detect_layout(&set, &m.cfg, &layout, pos[0]))
            return hyla_cli_fail("inspect");
        have_set = 1;
    }
    if (hyla_params_build(&m.table, &m.cfg, &layout)) {
        if (have_set)
            hyla_st_close(&set);
        return hyla_cli_fail("inspect");
    }
    int rc = print_model(&m, json);
    if (!json) {
        print_tensors(&m, have_set ? &set : NULL, all);
        if (!have_set)
            printf("\n(no weights: tensor table derived from the config)\n");
    }
    if (have_set)
        hyla_st_close(&set);
    hyla_params_free(&m.table);
    return rc;
}
