#include "infer/infer_plan.h"

#include <string.h>

#include "core/arena.h"
#include "core/error.h"
#include "core/quant.h"
#include "io/gguf_read.h"
#include "engine/executor.h"
#include "infer/generate.h"
#include "model/infer_state.h"

/* Resident weight bytes as the loader leaves them: the fp32 arena holds every parameter, or only
 * the non-matrices when the matrices are bf16 only (their fp32 pages are never touched); the bf16
 * arena holds the matrices. */
static size_t weight_bytes(const hyla_param_table *t, int weights_bf16, int compute_bf16)
{
    size_t f32 = 0, b16 = 0;
    for (int i = 0; i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        int matrix = hyla_role_is_matrix(p->role);
        if (!(matrix && weights_bf16))
            f32 += (size_t)p->numel * sizeof(float);
        if (matrix && (weights_bf16 || compute_bf16))
            b16 += (size_t)p->numel * sizeof(uint16_t);
    }
    return f32 + b16;
}

/* A GGUF model (model/gguf_load.c): the vectors in the fp32 arena, the matrices' rows in the mapped
 * file (resident once read: every decode step reads them all), the row tables pointing at them,
 * and the file's metadata (its header pages, the vocabulary's string tables). */
static size_t gguf_weight_bytes(const hyla_model *m)
{
    size_t bytes = hyla_gguf_metadata_bytes(m->gguf);
    for (int i = 0; i < m->table.n_params; i++) {
        const hyla_qmat *q = &m->qw[i];
        if (!q->row) {
            bytes += (size_t)m->table.params[i].numel * sizeof(float);
            continue;
        }
        bytes += hyla_qmat_bytes(q) + (size_t)q->rows * (sizeof *q->row + (q->row_type ? 1 : 0)) + (q->col_map ? (size_t)q->cols * 4 : 0);
    }
    return bytes;
}

/* A model whose compute dtype is bf16 plans bf16 scratch; the planning pass reads only that. */
static size_t executor_bytes(hyla_model *m, int compute_bf16, int64_t B, int64_t T, hyla_delta_mode mode, size_t *head)
{
    hyla_executor ex;
    hyla_dtype saved = m->compute_dtype;
    m->compute_dtype = compute_bf16 ? HYLA_DT_BF16 : HYLA_DT_F32;
    int st = hyla_executor_plan_infer(&ex, m, B, T, mode);
    m->compute_dtype = saved;
    if (st != HYLA_OK)
        return 0;
    size_t bytes = hyla_executor_resident_bytes(&ex);
    if (head)
        *head = ex.head_bytes;
    hyla_executor_free(&ex);
    return bytes;
}

int hyla_infer_plan_make(const hyla_model *m, int weights_bf16, int compute_bf16, int64_t B, int64_t prompt,
                         int64_t max_new, hyla_infer_plan *out)
{
    memset(out, 0, sizeof *out);
    if (B < 1 || prompt < 1 || max_new < 1)
        return hyla_error_set(HYLA_ERR_ARG, "inference plan: need batch, prompt and max-new >= 1");
    const hyla_config *cfg = &m->cfg;
    hyla_model view = *m; /* the planning pass reads the config, the table and the compute dtype */
    int bf16 = weights_bf16 || compute_bf16;
    out->weights = m->qw ? gguf_weight_bytes(m) : weight_bytes(&m->table, weights_bf16, compute_bf16);
    out->caches = hyla_infer_state_bytes(cfg, B, prompt + max_new);
    size_t V = (size_t)cfg->vocab;
    out->sampling = (size_t)B * V * sizeof(float) + V * (sizeof(float) + sizeof(int32_t)) +
                    (size_t)(B * max_new) * sizeof(int32_t);
    int64_t piece = prompt < HYLA_PREFILL_CHUNK ? prompt : HYLA_PREFILL_CHUNK; /* the largest prefill call */
    out->prefill = executor_bytes(&view, bf16, 1, piece, HYLA_DELTA_CHUNKED, &out->prefill_head);
    if (!out->prefill)
        return hyla_error_set(HYLA_ERR_ARG, "inference plan: %s", hyla_error_message());
    out->decode = max_new > 1 ? executor_bytes(&view, bf16, B, 1, HYLA_DELTA_RECURRENT, NULL) : 0;
    out->peak = out->weights + out->caches + out->sampling + (out->prefill > out->decode ? out->prefill : out->decode);
    return HYLA_OK;
}
