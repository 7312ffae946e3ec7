/* hyla merge DIR --adapter A --out OUT: a Hugging Face model with the LoRA adapter merged in. */
#include <stdio.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/adapter.h"

int hyla_cmd_merge(int argc, char **argv)
{
    const char *adapter = NULL, *out = NULL, *dtype_s = NULL;
    const hyla_opt opts[] = {
        {"--adapter", OPT_STRING, &adapter, "DIR", "the LoRA adapter (PEFT format: adapter_config.json, "
         "adapter_model.safetensors; required)", 0, 0},
        {"--out", OPT_STRING, &out, "DIR", "output model directory (required)", 0, 0},
        {"--dtype", OPT_STRING, &dtype_s, "f32|bf16|f16", "save the merged tensors in this dtype (default: as loaded)", 0, 0},
        {0},
    };
    const hyla_command_spec spec = {"merge", "DIR --adapter A --out OUT [--dtype D]",
                                    "Merge a LoRA adapter into the model in DIR (W += scaling * B A) and save it.", opts, 1, 1,
                                    NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (!adapter || !out) {
        fprintf(stderr, "hyla merge: --adapter and --out are required\n");
        return 2;
    }
    hyla_dtype dtype = HYLA_DT_F32;
    if (dtype_s && hyla_parse_dtype_flag("merge", "--dtype", dtype_s, &dtype))
        return 2;
    hyla_model m;
    hyla_adapter_info info;
    if (hyla_model_load_adapted(&m, pos[0], adapter, &info))
        return hyla_cli_fail("merge");
    if (dtype_s)
        hyla_model_set_save_dtype(&m, dtype);
    int rc = hyla_model_save(&m, out, NULL, 0) ? hyla_cli_fail("merge") : 0;
    if (!rc)
        printf("wrote %s: %zu LoRA modules merged (r %lld, alpha %g, scaling %g)\n", out, info.modules,
               (long long)info.r, info.alpha, info.scaling);
    hyla_model_free(&m);
    return rc;
}
