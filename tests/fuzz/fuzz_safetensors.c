/* libFuzzer harness: one .safetensors file -> hyla_st_open_file.
 * On success every tensor must be findable by name and its view must lie inside the mapping
 * (first and last element converted to f32). */
#include "fuzz_util.h"

#include "core/error.h"
#include "io/safetensors.h"

static void touch_tensor(const hyla_st_tensor *x)
{
    size_t es = hyla_dtype_size(x->dtype);
    if (!es || !x->nbytes)
        return;
    float f[2];
    const unsigned char *p = x->data;
    hyla_dtype_to_f32(&f[0], p, x->dtype, 1);
    hyla_dtype_to_f32(&f[1], p + x->nbytes - es, x->dtype, 1);
    volatile float sink = f[0] + f[1];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    if (!path[0])
        fuzz_join(path, sizeof path, fuzz_tmpdir("safetensors"), "model.safetensors");
    fuzz_write_file(path, data, size);

    hyla_st_set s;
    if (hyla_st_open_file(&s, path) == HYLA_OK) {
        size_t n = hyla_st_count(&s);
        for (size_t i = 0; i < n; i++) {
            const hyla_st_tensor *x = hyla_st_at(&s, i);
            if (!x || hyla_st_find(&s, x->name) != x)
                abort(); /* every tensor must be found under its own name */
            touch_tensor(x);
        }
        if (hyla_st_at(&s, n))
            abort();
    }
    hyla_st_close(&s);
    return 0;
}
