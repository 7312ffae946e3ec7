/* libFuzzer harness: a training checkpoint's state -> hyla_checkpoint_load_state.
 *
 * At start-up: a tiny model (tests/fuzz/tiny-config.json, or $HYLA_FUZZ_CONFIG) is initialised
 * and saved with hyla_checkpoint_save into the temporary directory. Per input, the first byte
 * chooses what the rest replaces:
 *   even: trainer_state.json
 *   odd:  optimizer/model.safetensors (the AdamW moments)
 * the other file being the original one; then hyla_checkpoint_load_state. Seeds: the same two
 * files of a checkpoint of the same config written by `hyla train --save` (make_corpus.sh). */
#include "fuzz_util.h"

#include "core/error.h"
#include "io/fileio.h"
#include "model/config.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

static hyla_model model;
static hyla_adamw opt;
static char ckpt[PATH_MAX], state_path[PATH_MAX + 64], moments_path[PATH_MAX + 64];
static char *state0, *moments0;
static size_t state0_len, moments0_len;
static int state_dirty, moments_dirty;

static void setup_fail(const char *what)
{
    fprintf(stderr, "fuzz_checkpoint_state: %s: %s\n", what, hyla_error_message());
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char cfg_path[PATH_MAX + 64];
    const char *env = getenv("HYLA_FUZZ_CONFIG");
    if (env && *env)
        snprintf(cfg_path, sizeof cfg_path, "%s", env);
    else
        snprintf(cfg_path, sizeof cfg_path, "%s/tests/fuzz/tiny-config.json", fuzz_repo_root());
    char *text = NULL;
    hyla_config cfg;
    if (hyla_read_text_file(cfg_path, &text, NULL) != HYLA_OK || hyla_config_parse(&cfg, text, cfg_path) != HYLA_OK)
        setup_fail(cfg_path);
    hyla_layout lay;
    hyla_default_layout(&cfg, &lay);
    if (hyla_model_init(&model, &cfg, &lay, 1, HYLA_DT_F32) != HYLA_OK)
        setup_fail("hyla_model_init");
    model.config_json = text;
    hyla_adamw_config ac = {3e-3, 0.9, 0.95, 1e-8, 0.1, 1.0};
    if (hyla_adamw_init(&opt, &ac, model.table.total_floats) != HYLA_OK)
        setup_fail("hyla_adamw_init");
    hyla_train_state st = {3, 17, 1, "synthetic", ""};
    fuzz_join(ckpt, sizeof ckpt, fuzz_tmpdir("checkpoint"), "ckpt");
    if (hyla_checkpoint_save(ckpt, &model, &opt, &st) != HYLA_OK)
        setup_fail("hyla_checkpoint_save");
    fuzz_join(state_path, sizeof state_path, ckpt, "trainer_state.json");
    fuzz_join(moments_path, sizeof moments_path, ckpt, "optimizer/model.safetensors");
    state0 = fuzz_read_file(state_path, &state0_len);
    moments0 = fuzz_read_file(moments_path, &moments0_len);
    if (!state0 || !moments0)
        fuzz_die("reading back the checkpoint");
    /* the original must load */
    hyla_train_state back;
    if (hyla_checkpoint_load_state(ckpt, &model, &opt, &back) != HYLA_OK)
        setup_fail("hyla_checkpoint_load_state on the original");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int moments = data[0] & 1;
    if (moments) {
        fuzz_write_file(moments_path, data + 1, size - 1), moments_dirty = 1;
        if (state_dirty)
            fuzz_write_file(state_path, state0, state0_len), state_dirty = 0;
    } else {
        fuzz_write_file(state_path, data + 1, size - 1), state_dirty = 1;
        if (moments_dirty)
            fuzz_write_file(moments_path, moments0, moments0_len), moments_dirty = 0;
    }
    hyla_train_state st;
    memset(&st, 0, sizeof st);
    if (hyla_checkpoint_load_state(ckpt, &model, &opt, &st) == HYLA_OK) {
        if (st.step < 0 || st.data_pos < 0 || opt.step < 0 || !memchr(st.data_source, 0, sizeof st.data_source))
            abort();
    }
    return 0;
}
