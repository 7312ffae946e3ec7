/* libFuzzer harness: one .gguf file -> hyla_model_load_gguf (config from the metadata, the tensor
 * map inverted, matrices pointed at in place). On success the model runs one forward step over
 * two tokens, so every row pointer and vector it holds is used. */
#include "fuzz_util.h"

#include "core/error.h"
#include "engine/forward.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    if (!path[0])
        fuzz_join(path, sizeof path, fuzz_tmpdir("gguf_model"), "model.gguf");
    fuzz_write_file(path, data, size);
    hyla_model m;
    if (hyla_model_load_gguf(&m, path) != HYLA_OK)
        return 0;
    if (m.cfg.vocab <= 4096 && m.cfg.hidden <= 256 && m.cfg.n_layers <= 8) { /* bounded work per input */
        int32_t tokens[2] = {0, (int32_t)(m.cfg.vocab - 1)};
        hyla_forward_out out;
        hyla_forward(&m, tokens, NULL, 1, 2, HYLA_DELTA_CHUNKED, NULL, &out);
    }
    hyla_model_free(&m);
    return 0;
}
