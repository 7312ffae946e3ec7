/* Compute precision of a model (model.h): the bf16 compute copy of its matrix parameters.
 *
 * In bf16 compute every projection (hyla_op_linear), the embedding lookup and lm_head read w16:
 * the matrix parameters rounded to bf16 (nearest even), at the same table offsets as w. Norm
 * weights, biases, the conv kernel, A_log, dt_bias and the router stay fp32 in w (they feed fp32
 * arithmetic: norm statistics, gates, the router's softmax and top-k). With fp32 master weights
 * (training) the copy is refreshed from w after every update; with bf16 weights only
 * (inference, --param-dtype bf16) w never holds the matrices: its pages for them are never
 * written, or released, so they are not resident (w and w16 are anonymous mappings). */
#include "model/model.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/pages.h"

int hyla_role_is_matrix(hyla_role r)
{
    switch (r) {
    case HYLA_P_EMBED: case HYLA_P_LM_HEAD:
    case HYLA_P_GDN_QKV: case HYLA_P_GDN_Z: case HYLA_P_GDN_B: case HYLA_P_GDN_A: case HYLA_P_GDN_OUT:
    case HYLA_P_ATTN_Q: case HYLA_P_ATTN_K: case HYLA_P_ATTN_V: case HYLA_P_ATTN_O:
    case HYLA_P_MOE_GATE_UP: case HYLA_P_MOE_DOWN:
    case HYLA_P_SHARED_GATE_UP: case HYLA_P_SHARED_DOWN: case HYLA_P_SHARED_EXPERT_GATE:
    case HYLA_P_MLP_GATE_UP: case HYLA_P_MLP_DOWN: case HYLA_P_MTP_FC:
        return 1;
    default:
        return 0;
    }
}

void *hyla_model_map(size_t bytes) { return hyla_pages_map(bytes); }

void hyla_model_unmap(void *p, size_t bytes) { hyla_pages_unmap(p, bytes); }

int hyla_model_alloc_bf16(hyla_model *m)
{
    if (m->w16)
        return HYLA_OK;
    m->w16_bytes = m->table.total_floats * sizeof(uint16_t);
    if (!(m->w16 = hyla_model_map(m->w16_bytes)))
        return hyla_error_set(HYLA_ERR_NOMEM, "cannot allocate %zu bytes for the bf16 weights", m->w16_bytes);
    m->compute_dtype = HYLA_DT_BF16;
    return HYLA_OK;
}

void hyla_model_refresh_bf16_range(hyla_model *m, int i, int64_t a, int64_t b)
{
    const hyla_param *p = &m->table.params[i];
    if (m->w16 && m->matrices_in_w && hyla_role_is_matrix(p->role))
        hyla_bf16_pack(m->w16 + p->offset + a, m->w + p->offset + a, b - a);
}

void hyla_model_refresh_bf16_param(hyla_model *m, int i) { hyla_model_refresh_bf16_range(m, i, 0, m->table.params[i].numel); }

void hyla_model_refresh_bf16(hyla_model *m)
{
    for (int i = 0; i < m->table.n_params; i++)
        hyla_model_refresh_bf16_param(m, i);
}

void hyla_model_release_pages(void *start, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)start + page - 1) & ~(page - 1), b = ((uintptr_t)start + bytes) & ~(page - 1);
    if (b > a) {
        madvise((void *)a, b - a, MADV_DONTNEED);
#ifdef MADV_NOHUGEPAGE
        /* and 4 KB pages from now on (hyla_pages_map asked for huge ones): a page touched again
         * later brings back 4 KB, not 2 MB, and khugepaged does not refill the range */
        madvise((void *)a, b - a, MADV_NOHUGEPAGE);
#endif
    }
}

void hyla_model_zero_pages(void *start, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), s = (uintptr_t)start, e = s + bytes;
    uintptr_t a = (s + page - 1) & ~(page - 1), b = e & ~(page - 1);
    if (b <= a) {
        memset(start, 0, bytes);
        return;
    }
    memset(start, 0, a - s); /* the edges share their pages with neighbours: written */
    memset((void *)b, 0, e - b);
    hyla_model_release_pages((void *)a, b - a); /* the whole pages: read back as zeros */
}

/* Give back the pages of w that lie wholly inside matrix parameters (their values now live in
 * w16 only). */
static void release_fp32_matrices(hyla_model *m)
{
    for (int i = 0; i < m->table.n_params; i++) {
        const hyla_param *p = &m->table.params[i];
        if (hyla_role_is_matrix(p->role))
            hyla_model_release_pages(m->w + p->offset, (size_t)p->numel * sizeof(float));
    }
}

int hyla_model_set_compute_bf16(hyla_model *m, int weights_bf16_only)
{
    if (m->lora && weights_bf16_only)
        return hyla_error_set(HYLA_ERR_ARG, "--param-dtype bf16: a model training an adapter keeps its base weights "
                                            "in fp32 (use --act-dtype bf16 alone)");
    HYLA_TRY(hyla_model_alloc_bf16(m));
    if (m->matrices_in_w && !m->source_set && !m->pieces) /* (opened deferred: no weights in w yet) */
        hyla_model_refresh_bf16(m);
    if (weights_bf16_only && m->matrices_in_w) {
        release_fp32_matrices(m);
        m->matrices_in_w = 0;
    }
    return HYLA_OK;
}

const uint16_t *hyla_model_param_bf16(const hyla_model *m, hyla_role role, int layer)
{
    if (!m->w16 || !hyla_role_is_matrix(role))
        return NULL;
    if (role == HYLA_P_LM_HEAD && m->cfg.tie_word_embeddings)
        role = HYLA_P_EMBED, layer = -1;
    int i = hyla_param_find(&m->table, role, layer);
    return i < 0 ? NULL : m->w16 + m->table.params[i].offset;
}
