/* libFuzzer harness: model.safetensors of a model directory -> hyla_model_load, with the tiny
 * config (tests/fuzz/tiny-config.json or $HYLA_FUZZ_CONFIG) as its config.json: tensor names,
 * layouts (grouped/separate GDN, fused/per-expert experts, prefixes), shapes and dtypes. */
#include "fuzz_util.h"

#include "core/error.h"
#include "model/model.h"

static char dir[PATH_MAX], st_path[PATH_MAX + 64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char cfg_path[PATH_MAX + 64], dst[PATH_MAX + 64];
    const char *env = getenv("HYLA_FUZZ_CONFIG");
    if (env && *env)
        snprintf(cfg_path, sizeof cfg_path, "%s", env);
    else
        snprintf(cfg_path, sizeof cfg_path, "%s/tests/fuzz/tiny-config.json", fuzz_repo_root());
    size_t n;
    char *text = fuzz_read_file(cfg_path, &n);
    if (!text) {
        fprintf(stderr, "fuzz_model_load: cannot read %s (set HYLA_FUZZ_CONFIG)\n", cfg_path);
        exit(1);
    }
    fuzz_join(dir, sizeof dir, fuzz_tmpdir("model_load"), "model");
    if (mkdir(dir, 0700) != 0)
        fuzz_die(dir);
    fuzz_write_file(fuzz_join(dst, sizeof dst, dir, "config.json"), text, n);
    free(text);
    fuzz_join(st_path, sizeof st_path, dir, "model.safetensors");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write_file(st_path, data, size);
    hyla_model m;
    memset(&m, 0, sizeof m);
    if (hyla_model_load(&m, dir) == HYLA_OK)
        hyla_model_free(&m);
    return 0;
}
