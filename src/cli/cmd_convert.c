/* hyla convert IN OUT: re-save a model in another tensor layout or sharding (dtype-preserving),
 * or in another dtype (--dtype: round to nearest even; config.json's torch_dtype follows);
 * --to gguf writes OUT as one GGUF file for llama.cpp (model/gguf_export.h). IN may be a .gguf
 * file: to safetensors, its tensors dequantized to fp32 (the values its blocks hold), saved as a
 * Hugging Face directory (config.json from its metadata; no tokenizer files); to gguf, its
 * matrices in --type as llama.cpp's quantizer writes them, the rest of the file as it was. */
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "io/gguf_read.h"
#include "model/gguf_export.h"
#include "model/model.h"

static int convert_to_gguf(const char *in, const char *out, const char *type_s, const char *vocab)
{
    static const struct { const char *name; hyla_ggml_type type; int k_m; } types[] = {
        {"f32", HYLA_GGML_F32, 0}, {"f16", HYLA_GGML_F16, 0}, {"bf16", HYLA_GGML_BF16, 0}, {"q8_0", HYLA_GGML_Q8_0, 0},
        {"q6_k", HYLA_GGML_Q6_K, 0}, {"q5_k_m", HYLA_GGML_Q5_K, 1}, {"q4_k_m", HYLA_GGML_Q4_K, 1},
        {"q5_k", HYLA_GGML_Q5_K, 0}, {"q4_k", HYLA_GGML_Q4_K, 0}, {"q3_k_m", HYLA_GGML_Q3_K, 1},
        {"q2_k", HYLA_GGML_Q2_K, 1}};
    int found = -1;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(type_s ? type_s : "f32", types[i].name))
            found = (int)i;
    if (found < 0) {
        fprintf(stderr, "hyla convert: --type must be f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m, q5_k, q4_k, q3_k_m "
                        "or q2_k, got '%s'\n", type_s);
        return 2;
    }
    hyla_gguf_export_info info;
    int rc, loaded = 0;
    hyla_model m;
    if (hyla_is_gguf_path(in)) /* the file's tensors re-typed as llama.cpp's quantizer would */
        rc = hyla_gguf_requantize(in, out, types[found].type, types[found].k_m, &info);
    else if (!(rc = hyla_model_load(&m, in)) && (loaded = 1))
        rc = hyla_model_export_gguf(&m, out, types[found].type, types[found].k_m, vocab, &info);
    if (rc)
        rc = hyla_cli_fail("convert");
    if (!rc) {
        printf("wrote %s (GGUF, architecture %s, %zu tensors, %.1f MB, matrices %s%s", out, info.arch, info.n_tensors,
               info.bytes / 1e6, hyla_ggml_type_name(types[found].type),
               types[found].k_m ? " with llama.cpp's mix for the preset" : "");
        if (info.n_f16_fallback)
            printf("; %zu with rows not whole blocks as %s", info.n_f16_fallback,
                   types[found].type == HYLA_GGML_Q8_0 ? "F16" : "Q8_0 (or F16)");
        printf(")\n");
    }
    if (loaded)
        hyla_model_free(&m);
    return rc;
}

int hyla_cmd_convert(int argc, char **argv)
{
    const char *gdn = NULL, *experts = NULL, *prefix = NULL, *dtype_s = NULL, *to = NULL, *type_s = NULL, *vocab = NULL;
    int64_t shard_mb = 0;
    const hyla_opt opts[] = {
        {"--gdn-layout", OPT_STRING, &gdn, "grouped|separate", "Qwen3-Next in_proj_qkvz/ba or Qwen3.5 in_proj_qkv/z/b/a", 0, 0},
        {"--experts", OPT_STRING, &experts, "fused|per-expert", "experts.gate_up_proj/down_proj or experts.J.*_proj", 0, 0},
        {"--prefix", OPT_STRING, &prefix, "model|language_model", "tensor name prefix model. or model.language_model.", 0, 0},
        {"--shard-mb", OPT_INT, &shard_mb, "N", "split into shards of at most N MiB (0: one file)", 0, 1 << 20},
        {"--dtype", OPT_STRING, &dtype_s, "f32|bf16|f16", "save every tensor in this dtype (default: as loaded)", 0, 0},
        {"--to", OPT_STRING, &to, "safetensors|gguf", "output format (default safetensors: a Hugging Face directory; "
                                                      "gguf: one file for llama.cpp)", 0, 0},
        {"--tokenizer", OPT_STRING, &vocab, "FILE.gguf", "--to gguf: the vocabulary (tokenizer.*) copied from this "
         "GGUF file, e.g. the one a checkpoint was trained from (default: IN's tokenizer.json)", 0, 0},
        {"--type", OPT_STRING, &type_s, "f32|f16|bf16|q8_0|q6_k|q5_k_m|q4_k_m|q5_k|q4_k|q3_k_m|q2_k",
         "--to gguf: type of the matrices (default f32; quantized types as llama.cpp's quantizer writes them, "
         "_m and q2_k with its per-tensor mix)", 0, 0},
        {0},
    };
    const hyla_command_spec spec = {"convert", "IN OUT [options]",
                                    "Load the model in IN and save it to OUT (tensor bytes preserved exactly unless --dtype).",
                                    opts, 2, 2, NULL};
    const char *pos[2];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (to && strcmp(to, "gguf") && strcmp(to, "safetensors")) {
        fprintf(stderr, "hyla convert: --to must be safetensors or gguf, got '%s'\n", to);
        return 2;
    }
    int gguf = to && !strcmp(to, "gguf");
    const char *bad = gguf ? (gdn ? "--gdn-layout" : experts ? "--experts" : prefix ? "--prefix" : dtype_s ? "--dtype"
                              : shard_mb ? "--shard-mb" : NULL)
                           : (type_s ? "--type" : NULL);
    if (bad) {
        fprintf(stderr, "hyla convert: %s does not apply to --to %s%s\n", bad, gguf ? "gguf" : "safetensors",
                gguf ? " (use --type for the GGUF tensor type)" : " (it is a --to gguf option)");
        return 2;
    }
    if (vocab && (!gguf || hyla_is_gguf_path(pos[0]) || !hyla_is_gguf_path(vocab))) {
        fprintf(stderr, "hyla convert: --tokenizer takes a .gguf file, for --to gguf from a model directory (a GGUF "
                        "input keeps its own vocabulary)\n");
        return 2;
    }
    if (gguf)
        return convert_to_gguf(pos[0], pos[1], type_s, vocab);
    struct { const char *val, *flag, *a, *b; } choices[3] = {
        {gdn, "--gdn-layout", "grouped", "separate"},
        {experts, "--experts", "fused", "per-expert"},
        {prefix, "--prefix", "language_model", "model"},
    };
    for (int i = 0; i < 3; i++)
        if (choices[i].val && strcmp(choices[i].val, choices[i].a) && strcmp(choices[i].val, choices[i].b)) {
            fprintf(stderr, "hyla convert: %s must be %s or %s, got '%s'\n", choices[i].flag, choices[i].a, choices[i].b,
                    choices[i].val);
            return 2;
        }
    hyla_dtype dtype = HYLA_DT_F32;
    if (dtype_s && hyla_parse_dtype_flag("convert", "--dtype", dtype_s, &dtype))
        return 2;
    hyla_model m;
    if (hyla_is_gguf_path(pos[0]) ? hyla_model_load_gguf(&m, pos[0]) || hyla_model_gguf_dequantize(&m)
                                  : hyla_model_load(&m, pos[0]))
        return hyla_cli_fail("convert");
    if (dtype_s)
        hyla_model_set_save_dtype(&m, dtype);
    hyla_layout lay = m.table.layout;
    if (gdn)
        lay.gdn_grouped = !strcmp(gdn, "grouped");
    if (experts)
        lay.experts_fused = !strcmp(experts, "fused");
    if (prefix)
        lay.language_model_prefix = !strcmp(prefix, "language_model");
    int rc = hyla_model_save(&m, pos[1], &lay, (size_t)shard_mb << 20) ? hyla_cli_fail("convert") : 0;
    if (!rc)
        printf("wrote %s (%zu tensors)\n", pos[1], m.table.n_hf);
    hyla_model_free(&m);
    return rc;
}
