/* libFuzzer harness: a sharded model directory -> hyla_st_open.
 *
 * Input layout: sections [u32 LE n][n bytes]: first model.safetensors.index.json, then up to
 * FUZZ_MAX_SHARDS shard files (a length running past the end takes what is left; bytes after
 * the last shard are ignored). With S shard sections the files are named
 * model-0000K-of-0000S.safetensors, as hyla's writer names them. */
#include "fuzz_util.h"

#include "core/error.h"
#include "io/safetensors.h"

#define FUZZ_MAX_SHARDS 3

static size_t take(const uint8_t **p, size_t *left, const uint8_t **out)
{
    size_t n;
    if (*left < 4) {
        n = 0, *left = 0;
    } else {
        n = fuzz_le32(*p);
        *p += 4, *left -= 4;
        if (n > *left)
            n = *left;
    }
    *out = *p;
    *p += n, *left -= n;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[PATH_MAX];
    char path[PATH_MAX + 64], name[64];
    if (!dir[0])
        fuzz_join(dir, sizeof dir, fuzz_tmpdir("st_index"), "model");
    fuzz_remove_tree(dir);
    if (mkdir(dir, 0700) != 0)
        fuzz_die(dir);

    const uint8_t *p = data, *part;
    size_t left = size;
    size_t n = take(&p, &left, &part);
    fuzz_write_file(fuzz_join(path, sizeof path, dir, "model.safetensors.index.json"), part, n);
    /* shard sections: count them first so that the names say -of-S */
    const uint8_t *parts[FUZZ_MAX_SHARDS];
    size_t lens[FUZZ_MAX_SHARDS];
    int n_shards = 0;
    while (left > 0 && n_shards < FUZZ_MAX_SHARDS) {
        lens[n_shards] = take(&p, &left, &parts[n_shards]);
        n_shards++;
    }
    for (int k = 0; k < n_shards; k++) {
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        fuzz_write_file(fuzz_join(path, sizeof path, dir, name), parts[k], lens[k]);
    }

    hyla_st_set s;
    if (hyla_st_open(&s, dir) == HYLA_OK) {
        size_t count = hyla_st_count(&s);
        for (size_t i = 0; i < count; i++) {
            const hyla_st_tensor *x = hyla_st_at(&s, i);
            if (!x || hyla_st_find(&s, x->name) != x || x->file < 0 || x->file >= s.n_files)
                abort();
            if (x->nbytes) {
                volatile unsigned char sink = ((const unsigned char *)x->data)[0] ^
                                              ((const unsigned char *)x->data)[x->nbytes - 1];
                (void)sink;
            }
        }
    }
    hyla_st_close(&s);
    return 0;
}
