/* libFuzzer harness: a JSONL document file -> hyla_jsonl_read with the real Qwen3 tokenizer (loaded
 * once; it has the ChatML tokens), then the documents through hyla_data_set_documents and a few
 * shuffled rows. Every id must be in range, the mask 0/1, the document starts ordered. Tokenizer
 * path as in fuzz_tokenizer_encode ($HYLA_FUZZ_TOKENIZER or REPO/tests/tokenizer/qwen3/). */
#include "core/error.h"
#include "io/tokenizer.h"

#include "fuzz_util.h"
#include "train/data.h"

static hyla_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    tok = fuzz_qwen_tokenizer("fuzz_jsonl");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    if (!path[0])
        fuzz_join(path, sizeof path, fuzz_tmpdir("jsonl"), "docs.jsonl");
    fuzz_write_file(path, data, size);
    int32_t *ids;
    unsigned char *mask;
    int64_t n, *starts, docs;
    if (hyla_jsonl_read(path, tok, &ids, &mask, &n, &starts, &docs, NULL) != HYLA_OK)
        return 0;
    int64_t V = (int64_t)hyla_tokenizer_vocab_size(tok);
    if (docs < 1 || starts[0] != 0 || starts[docs] != n)
        abort();
    for (int64_t k = 0; k < docs; k++)
        if (starts[k + 1] < starts[k])
            abort();
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V || mask[i] > 1)
            abort();
    hyla_data d;
    if (hyla_data_set_documents(&d, ids, mask, n, starts, docs, V, path) == HYLA_OK) { /* takes the arrays */
        d.shuffle = 1;
        int32_t rows[3 * 8], labels[3 * 8];
        for (int k = 0; k < 2 && hyla_data_next(&d, rows, labels, 3, 8) == HYLA_OK; k++)
            for (int i = 0; i < 24; i++)
                if (rows[i] < 0 || rows[i] >= V || labels[i] < -100 || labels[i] >= V)
                    abort();
        hyla_data_close(&d);
    }
    return 0;
}
