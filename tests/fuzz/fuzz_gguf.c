/* libFuzzer harness: bytes -> hyla_gguf_parse (the GGUF reader, from memory).
 * On success every key, array element and tensor handed out must lie inside the input: each is
 * read (first and last byte of every tensor, every string of every string array), and every
 * tensor must be found under its own name. Then its vocabulary: the tokenizer it stands for
 * (hyla_tokenizer_from_gguf) and, when that loads, the tokenizer.json / tokenizer_config.json a
 * directory saved from it holds (hyla_tokenizer_gguf_write_files, into a scratch directory). */
#include "fuzz_util.h"

#include "core/error.h"
#include "io/gguf_read.h"
#include "io/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hyla_gguf_file *f;
    if (hyla_gguf_parse(&f, data, size, "fuzz.gguf") != HYLA_OK)
        return 0;
    volatile unsigned sink = 0;
    for (size_t i = 0; i < hyla_gguf_n_kv(f); i++) {
        const hyla_gguf_kv *kv = hyla_gguf_kv_at(f, i);
        if (hyla_gguf_find_kv(f, kv->key) != kv)
            abort();
        for (uint64_t j = 0; kv->type == HYLA_GGUF_ARRAY && j < kv->count; j++) {
            size_t len;
            const char *s = hyla_gguf_arr_str(kv, j, &len);
            sink += s && len ? (unsigned char)s[0] + (unsigned char)s[len - 1] : (unsigned)hyla_gguf_arr_int(kv, j);
        }
    }
    for (size_t i = 0; i < hyla_gguf_n_tensors(f); i++) {
        const hyla_gguf_tensor *t = hyla_gguf_tensor_at(f, i);
        if (hyla_gguf_find_tensor(f, t->name) != t || t->data < data || t->data + t->nbytes > data + size)
            abort();
        if (t->nbytes)
            sink += t->data[0] + t->data[t->nbytes - 1];
    }
    (void)sink;
    hyla_tokenizer *tok;
    if (hyla_tokenizer_from_gguf(&tok, f) == HYLA_OK) {
        hyla_tokenizer_free(tok);
        hyla_tokenizer_gguf_write_files(f, fuzz_tmpdir("gguf_vocab"));
    }
    hyla_gguf_close(f);
    return 0;
}
