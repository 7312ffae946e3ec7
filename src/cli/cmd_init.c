/* hyla init --out DIR (--preset NAME | --config FILE): a randomly initialised model (spec §6). */
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "io/fileio.h"
#include "model/model.h"
#include "model/presets.h"

int hyla_cmd_init(int argc, char **argv)
{
    const char *out = NULL, *preset = NULL, *config = NULL, *dtype_s = "f32";
    int64_t seed = 1, shard_mb = 0, mtp_layers = -1;
    const hyla_opt opts[] = {
        {"--out", OPT_STRING, &out, "DIR", "output model directory (required)", 0, 0},
        {"--preset", OPT_STRING, &preset, "NAME", "built-in config (tiny-hybrid, bench-100m, bench-387m)", 0, 0},
        {"--config", OPT_STRING, &config, "FILE", "a Hugging Face config.json", 0, 0},
        {"--seed", OPT_INT, &seed, "N", "initialisation seed (default 1)", 0, INT64_MAX},
        {"--dtype", OPT_STRING, &dtype_s, "f32|bf16|f16", "tensor dtype on disk (default f32)", 0, 0},
        {"--shard-mb", OPT_INT, &shard_mb, "N", "split into shards of at most N MiB (0: one file)", 0, 1 << 20},
        {"--mtp-layers", OPT_INT, &mtp_layers, "N", "MTP head layers (default: as the config says; 0 = none)", 0,
         HYLA_MAX_MTP_LAYERS},
        {0},
    };
    const hyla_command_spec spec = {"init", "--out DIR (--preset NAME | --config FILE) [options]",
                                    "Write a randomly initialised model (Hugging Face format).", opts, 0, 0, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (!out || (!preset == !config)) {
        fprintf(stderr, "hyla init: need --out and exactly one of --preset or --config\n");
        return 2;
    }
    hyla_dtype dtype;
    if (hyla_parse_dtype_flag("init", "--dtype", dtype_s, &dtype))
        return 2;
    char *text = NULL;
    const char *origin = config;
    if (preset) {
        const char *j = hyla_preset_json(preset);
        if (!j) {
            fprintf(stderr, "hyla init: unknown preset '%s' (known: %s)\n", preset, hyla_preset_names());
            return 2;
        }
        text = strdup(j);
        origin = preset;
    } else if (hyla_read_text_file(config, &text, NULL)) {
        return hyla_cli_fail("init");
    }
    hyla_config cfg;
    hyla_model m;
    hyla_layout lay;
    int rc = 0;
    if (hyla_config_parse(&cfg, text, origin)) {
        rc = hyla_cli_fail("init");
    } else if (mtp_layers >= 0 && cfg.n_layers + mtp_layers > HYLA_MAX_LAYERS) {
        fprintf(stderr, "hyla init: --mtp-layers %lld: more than %d layers in all\n", (long long)mtp_layers, HYLA_MAX_LAYERS);
        rc = 2;
    } else {
        if (mtp_layers >= 0 && mtp_layers != cfg.n_mtp_layers) { /* the config written says so too */
            hyla_config_set_mtp_layers(&cfg, mtp_layers);
            char *j = hyla_config_to_json(&cfg);
            if (j)
                free(text), text = j;
        }
        hyla_default_layout(&cfg, &lay);
        if (hyla_model_init(&m, &cfg, &lay, (uint64_t)seed, dtype)) {
            rc = hyla_cli_fail("init");
        } else {
            m.config_json = text; /* saved verbatim; owned by the model now */
            text = NULL;
            if (hyla_model_save(&m, out, NULL, (size_t)shard_mb << 20))
                rc = hyla_cli_fail("init");
            else
                printf("wrote %s: %zu tensors, %zu parameters\n", out, m.table.n_hf, (size_t)m.table.total_floats);
            hyla_model_free(&m);
        }
    }
    free(text);
    return rc;
}
