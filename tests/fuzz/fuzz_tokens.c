/* libFuzzer harness: a HYLATOK1 or HYLATOK2 token file -> hyla_data_open_tokens (model vocabulary
 * 151936, Qwen3's), then small batches through hyla_data_next (which wraps at the end; documents
 * with labels, shuffled over several epochs). */
#include "fuzz_util.h"

#include "core/error.h"
#include "train/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    if (!path[0])
        fuzz_join(path, sizeof path, fuzz_tmpdir("tokens"), "tokens.bin");
    fuzz_write_file(path, data, size);

    hyla_data d;
    if (hyla_data_open_tokens(&d, path, 151936) == HYLA_OK) {
        if (d.n_tokens < 1 || !d.tokens)
            abort();
        int32_t batch[2 * 5], labels[2 * 5];
        d.shuffle = 1;
        for (int k = 0; k < 3; k++) {
            if (hyla_data_next(&d, batch, hyla_data_labelled(&d) ? labels : NULL, 2, 5) != HYLA_OK)
                break; /* out of memory only */
            for (int i = 0; i < 10; i++)
                if (batch[i] < 0 || batch[i] >= 151936 || (hyla_data_labelled(&d) && (labels[i] < -100 || labels[i] >= 151936)))
                    abort();
        }
    }
    hyla_data_close(&d);
    return 0;
}
