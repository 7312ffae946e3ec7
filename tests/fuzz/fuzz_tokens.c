/* libFuzzer harness: a HYLATOK1 or HYLATOK2 token file -> hyla_data_open_tokens (model vocabulary
 * 151936, Qwen3's), then small batches through hyla_data_next (which wraps at the end; documents
 * with labels, shuffled over several epochs; packed when the last byte is odd: every row tiled
 * by documents, a document's last token unlabelled). */
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
        d.pack = size > 0 && (data[size - 1] & 1);
        for (int k = 0; k < 3; k++) {
            if (hyla_data_next(&d, batch, hyla_data_labelled(&d) ? labels : NULL, 2, 5) != HYLA_OK)
                break; /* out of memory only */
            for (int i = 0; i < 10; i++)
                if (batch[i] < 0 || batch[i] >= 151936 || (hyla_data_labelled(&d) && (labels[i] < -100 || labels[i] >= 151936)))
                    abort();
            if (!d.pack || !hyla_data_labelled(&d))
                continue;
            int64_t at = 0; /* the tiling: pieces of >= 1 token, none crossing a row, covering both rows */
            for (int64_t j = 0; j < d.n_seg; j++) {
                if (d.seg_len[j] < 1 || at / 5 != (at + d.seg_len[j] - 1) / 5 || labels[at + d.seg_len[j] - 1] != -100)
                    abort();
                at += d.seg_len[j];
            }
            if (at != 10)
                abort();
        }
    }
    hyla_data_close(&d);
    return 0;
}
