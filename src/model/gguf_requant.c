/* A GGUF file written again with its matrices in another type (gguf_export.h: hyla_gguf_requantize),
 * as llama.cpp's quantizer writes it from the same file.
 *
 * The file is opened as a model (model/gguf_load.c: its architecture, config and tensors checked),
 * which gives the config the export's tensor map is built from (model/gguf_map.h): the map names
 * every tensor the architecture has, and which ones the converter keeps F32. The types are the
 * export's (hyla_gguf_export_types: the _M mix, the fallbacks), so a file quantized from hyla's F32
 * export and that export's own quantized form are the same. Each tensor's data: its stored bytes
 * when its type does not change (the F32 vectors, norms, routers and conv kernels, which the
 * quantizer copies too), else its values as fp32 (hyla_ggml_to_f32: exact from F32 / F16 / BF16)
 * through the reference quantizers (io/gguf_quantize.c). The tensors keep the file's order. A
 * quantized matrix may become F32 (its values exactly), not another lossy type. */
#include "model/gguf_export.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/gguf_read.h"

typedef struct {
    const hyla_gguf_file *f;
    hyla_ggml_type *type; /* [n_tensors] the new types, in the file's order */
    float *scratch;       /* the largest re-typed tensor's values */
} requant;

static int fill(void *ctx, size_t index, void *dst, size_t nbytes)
{
    const requant *q = ctx;
    const hyla_gguf_tensor *t = hyla_gguf_tensor_at(q->f, index);
    if (q->type[index] == t->type) {
        memcpy(dst, t->data, nbytes);
        return HYLA_OK;
    }
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    const float *values = (const float *)t->data; /* F32: straight from the mapping (its data 32-byte aligned) */
    if (t->type != HYLA_GGML_F32) {
        hyla_ggml_to_f32(t->type, q->scratch, t->data, n);
        values = q->scratch;
    }
    hyla_ggml_from_f32(q->type[index], dst, values, (size_t)n);
    return HYLA_OK;
}

static int is_float(hyla_ggml_type t) { return t == HYLA_GGML_F32 || t == HYLA_GGML_F16 || t == HYLA_GGML_BF16; }

/* q->type for every tensor of the file from the map's types; the largest re-typed tensor's size */
static int choose_types(requant *q, const hyla_model *m, hyla_ggml_type want, int k_m, size_t *n_fallback,
                        size_t *max_floats)
{
    hyla_gguf_map map;
    HYLA_TRY(hyla_gguf_map_build(&map, &m->cfg));
    size_t n = hyla_gguf_n_tensors(q->f);
    hyla_ggml_type *mapped = malloc((map.n + 1) * sizeof *mapped);
    int st = mapped ? hyla_gguf_export_types(&map, &m->cfg, want, k_m, mapped, n_fallback)
                    : hyla_error_set(HYLA_ERR_NOMEM, "gguf requantize: out of memory");
    *max_floats = 0;
    for (size_t i = 0; st == HYLA_OK && i < n; i++) {
        const hyla_gguf_tensor *t = hyla_gguf_tensor_at(q->f, i);
        size_t k = 0;
        while (k < map.n && strcmp(map.t[k].name, t->name))
            k++;
        if (k == map.n) {
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: tensor %s is not one of the %s tensors hyla writes",
                                hyla_gguf_path(q->f), t->name, hyla_gguf_arch_name(&m->cfg));
            break;
        }
        /* a vector stays as stored (the converter wrote it F32); a matrix takes the export's type */
        q->type[i] = mapped[k] == HYLA_GGML_F32 && map.t[k].keep_f32 ? t->type : mapped[k];
        if (q->type[i] != t->type && q->type[i] != HYLA_GGML_F32 && !is_float(t->type)) /* (to F32: exact) */
            st = hyla_error_set(HYLA_ERR_ARG, "%s: tensor %s is stored %s: writing it as %s would round its values a "
                                "second time (give a file with F32, F16 or BF16 matrices)", hyla_gguf_path(q->f),
                                t->name, hyla_ggml_type_name(t->type), hyla_ggml_type_name(q->type[i]));
        size_t floats = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (q->type[i] != t->type && t->type != HYLA_GGML_F32 && floats > *max_floats) /* (F32: read in place) */
            *max_floats = floats;
    }
    free(mapped);
    hyla_gguf_map_free(&map);
    return st;
}

int hyla_gguf_requantize(const char *in, const char *out, hyla_ggml_type want, int k_m, hyla_gguf_export_info *info)
{
    hyla_model m;
    HYLA_TRY(hyla_model_load_gguf(&m, in));
    requant q = {.f = m.gguf};
    size_t n = hyla_gguf_n_tensors(q.f), n_fallback = 0, max_floats = 0, bytes = 0;
    hyla_gguf_writer *w = hyla_gguf_new();
    int st = !w || !(q.type = malloc((n + 1) * sizeof *q.type))
               ? hyla_error_set(HYLA_ERR_NOMEM, "gguf requantize: out of memory")
               : choose_types(&q, &m, want, k_m, &n_fallback, &max_floats);
    if (st == HYLA_OK && !(q.scratch = malloc((max_floats ? max_floats : 1) * sizeof(float))))
        st = hyla_error_set(HYLA_ERR_NOMEM, "gguf requantize: cannot allocate %zu floats", max_floats);
    for (size_t i = 0; st == HYLA_OK && i < hyla_gguf_n_kv(q.f); i++) {
        const hyla_gguf_kv *kv = hyla_gguf_kv_at(q.f, i);
        /* what describes the new file is written below; the data's alignment is the writer's own */
        if (strcmp(kv->key, "general.file_type") && strcmp(kv->key, "general.quantization_version") &&
            strcmp(kv->key, "general.alignment"))
            hyla_gguf_kv_copy(w, kv);
    }
    if (st == HYLA_OK) {
        hyla_gguf_kv_u32(w, "general.file_type", hyla_gguf_file_type(want, k_m));
        hyla_gguf_kv_u32(w, "general.quantization_version", 2);
    }
    for (size_t i = 0; st == HYLA_OK && i < n; i++) {
        const hyla_gguf_tensor *t = hyla_gguf_tensor_at(q.f, i);
        bytes += hyla_ggml_bytes(q.type[i], (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]));
        if (hyla_gguf_add_tensor(w, t->name, t->n_dims, t->ne, q.type[i]) < 0)
            st = HYLA_ERR_ARG;
    }
    if (st == HYLA_OK)
        st = hyla_gguf_write(w, out, fill, &q);
    if (st == HYLA_OK && info) {
        info->n_tensors = n;
        info->n_f16_fallback = n_fallback;
        info->bytes = bytes;
        info->arch = hyla_gguf_arch_name(&m.cfg);
    }
    free(q.type);
    free(q.scratch);
    hyla_gguf_free(w);
    hyla_model_free(&m);
    return st;
}
