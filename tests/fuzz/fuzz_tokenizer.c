/* libFuzzer harness: a tokenizer.json -> hyla_tokenizer_load; on success encode a fixed text,
 * decode the ids and check decode(encode(x)) == x (the tokenizer's documented guarantee). */
#include "fuzz_util.h"

#include "core/error.h"
#include "io/tokenizer.h"

static const char sample[] = "Hello, world! 123 foo_bar  \n\t<|im_start|>user\xe4\xbd\xa0\xe5\xa5\xbd \xff\xc3 done.";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    if (!path[0])
        fuzz_join(path, sizeof path, fuzz_tmpdir("tokenizer"), "tokenizer.json");
    fuzz_write_file(path, data, size);

    hyla_tokenizer *t = NULL;
    if (hyla_tokenizer_load(&t, path) != HYLA_OK) {
        if (t)
            abort(); /* *out must be NULL on failure */
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (hyla_tokenizer_encode(t, sample, sizeof sample - 1, &ids, &n) == HYLA_OK) {
        size_t vs = hyla_tokenizer_vocab_size(t);
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || (size_t)ids[i] >= vs)
                abort();
        char *back = NULL;
        size_t len = 0;
        if (hyla_tokenizer_decode(t, ids, n, &back, &len) != HYLA_OK)
            abort(); /* ids from encode must decode */
        if (len != sizeof sample - 1 || memcmp(back, sample, len))
            abort(); /* decode(encode(x)) == x */
        free(back);
    }
    free(ids);
    hyla_tokenizer_token_id(t, "<|im_end|>");
    hyla_tokenizer_token_id(t, "a");
    hyla_tokenizer_free(t);
    return 0;
}
