#include "model/lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/rng.h"

/* ---- module selection ---------------------------------------------------------------------- */

/* A module of the MTP head (mtp.fc, mtp.layers.J.*): adapted only when named (PEFT's all-linear
 * sees the Hugging Face model, which does not load the head). */
static int is_mtp_module(const hyla_hf_tensor *h) { return !strncmp(h->name, "mtp.", 4); }

/* A linear module of a decoder layer or of the MTP head: a 2-D HF weight "M.weight" that is not a
 * router (the embedding and lm_head are neither). */
static int is_linear_module(const hyla_hf_tensor *h)
{
    size_t len = strlen(h->name);
    if ((h->layer < 0 && !is_mtp_module(h)) || h->ndim != 2 || len < 8 || strcmp(h->name + len - 7, ".weight"))
        return 0;
    return !(len >= 16 && !strcmp(h->name + len - 16, ".mlp.gate.weight"));
}

/* Does module name `mod` (no ".weight") match target suffix `tg` of length n, as PEFT matches? */
static int suffix_match(const char *mod, const char *tg, size_t n)
{
    size_t ml = strlen(mod);
    if (n == 0 || n > ml || strncmp(mod + ml - n, tg, n))
        return 0;
    return ml == n || mod[ml - n - 1] == '.';
}

static int module_name(const hyla_hf_tensor *h, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%.*s", (int)(strlen(h->name) - 7), h->name);
}

/* selected[i] for every HF tensor; a target naming nothing is an error. */
static int select_modules(const hyla_param_table *t, const char *targets, unsigned char *selected)
{
    int all = !targets || !strcmp(targets, "all-linear");
    char mod[128];
    for (size_t i = 0; i < t->n_hf; i++) {
        selected[i] = 0;
        if (!is_linear_module(&t->hf[i]))
            continue;
        if (all) {
            selected[i] = !is_mtp_module(&t->hf[i]);
            continue;
        }
        module_name(&t->hf[i], mod, sizeof mod);
        for (const char *p = targets; *p;) {
            size_t n = strcspn(p, ",");
            if (suffix_match(mod, p, n))
                selected[i] = 1;
            p += n + (p[n] == ',');
        }
    }
    if (all)
        return HYLA_OK;
    for (const char *p = targets; *p;) { /* every name must match something */
        size_t n = strcspn(p, ",");
        int hit = 0;
        for (size_t i = 0; i < t->n_hf && !hit; i++) {
            module_name(&t->hf[i], mod, sizeof mod);
            hit = is_linear_module(&t->hf[i]) && suffix_match(mod, p, n);
        }
        if (!hit) {
            int fused = 0; /* routed experts stored as 3-D tensors: no Linear modules */
            for (size_t i = 0; i < t->n_hf && !fused; i++)
                fused = t->hf[i].ndim == 3 && strstr(t->hf[i].name, ".mlp.experts.") != NULL;
            if (n == 0)
                return hyla_error_set(HYLA_ERR_ARG, "--lora-targets: empty name in '%s'", targets);
            if (fused && memmem(p, n, "experts", 7))
                return hyla_error_set(HYLA_ERR_ARG, "--lora-targets: '%.*s': this model stores its routed experts fused "
                                      "(mlp.experts.gate_up_proj, 3-D), which has no linear modules to adapt; convert it "
                                      "to the per-expert layout to adapt experts", (int)n, p);
            int grouped = 0; /* Qwen3-Next stores the GDN input projections grouped */
            for (size_t i = 0; i < t->n_hf && !grouped; i++)
                grouped = strstr(t->hf[i].name, ".in_proj_qkvz.") != NULL;
            if (grouped && n >= 9 && !strncmp(p, "in_proj_", 8) && n <= 11)
                return hyla_error_set(HYLA_ERR_ARG, "--lora-targets: '%.*s': this model stores the GDN input projections "
                                      "grouped; adapt them as in_proj_qkvz and in_proj_ba", (int)n, p);
            return hyla_error_set(HYLA_ERR_ARG, "--lora-targets: '%.*s' matches no linear module of this model (e.g. "
                                  "q_proj, k_proj, v_proj, o_proj, in_proj_qkvz, in_proj_qkv, out_proj, gate_proj, "
                                  "up_proj, down_proj, or all-linear)", (int)n, p);
        }
        p += n + (p[n] == ',');
    }
    return HYLA_OK;
}

/* ---- building the arena ----------------------------------------------------------------------- */

/* An adapter parameter of base parameter `base` (its role, and whether it belongs to the MTP head,
 * which the optimizer freezes or trains alone as the MTP loss says). */
static void add_param(hyla_param_table *lt, const hyla_param *base, int layer, int64_t rows, int64_t cols, size_t *offset)
{
    hyla_param *p = &lt->params[lt->n_params++];
    memset(p, 0, sizeof *p);
    p->role = base->role;
    p->mtp = base->mtp;
    p->layer = layer;
    p->ndim = 2;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = rows * cols;
    p->offset = *offset;
    *offset += hyla_param_span(p);
}

static int cmp_seg_param(const void *a, const void *b, void *ctx)
{
    const hyla_lora_segment *s = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (s[x].param != s[y].param)
        return s[x].param < s[y].param ? -1 : 1;
    return (x > y) - (x < y);
}

/* Modules for the selected HF tensors; allocates the arena (zeroed). */
static int build(hyla_lora *L, const hyla_param_table *t, const unsigned char *selected, int64_t r)
{
    int nm = 0;
    for (size_t i = 0; i < t->n_hf; i++)
        nm += selected[i] != 0;
    if (nm == 0)
        return hyla_error_set(HYLA_ERR_ARG, "LoRA: no module selected");
    L->r = r;
    L->modules = calloc((size_t)nm, sizeof *L->modules);
    L->segments = calloc(2 * (size_t)nm, sizeof *L->segments);
    L->table.params = calloc(3 * (size_t)nm, sizeof *L->table.params);
    L->seg_by_param = calloc((size_t)t->n_params + 1, sizeof *L->seg_by_param);
    L->seg_order = calloc(2 * (size_t)nm, sizeof *L->seg_order);
    if (!L->modules || !L->segments || !L->table.params || !L->seg_by_param || !L->seg_order)
        return hyla_error_set(HYLA_ERR_NOMEM, "LoRA: out of memory");
    L->table.cfg = t->cfg;
    size_t off = 0;
    for (size_t i = 0; i < t->n_hf; i++) {
        if (!selected[i])
            continue;
        const hyla_hf_tensor *h = &t->hf[i];
        hyla_lora_module *md = &L->modules[L->n_modules];
        module_name(h, md->name, sizeof md->name);
        md->hf = i;
        md->in = h->row_len;
        md->out = h->rows;
        md->seg0 = L->n_segments;
        if (md->in > L->max_in)
            L->max_in = md->in;
        if (md->out > L->max_out)
            L->max_out = md->out;
        int p0;
        int64_t row;
        hyla_hf_row_dest(t, h, 0, &p0, &row);
        /* its layer: the trunk layer, n_layers + j for MTP layer j, -1 for the head's fc */
        int layer = hyla_param_find_layer(t, &t->params[p0]);
        md->layer = layer;
        md->a_offset = off;
        add_param(&L->table, &t->params[p0], layer, r, md->in, &off);
        /* the internal parameters this module's rows land on, each a contiguous row range */
        int params[2] = {-1, -1};
        int64_t lo[2] = {0, 0}, hi[2] = {0, 0}, cnt[2] = {0, 0};
        for (int64_t k = 0; k < h->rows; k++) {
            int p;
            hyla_hf_row_dest(t, h, k, &p, &row);
            int j = params[0] == p ? 0 : params[1] == p ? 1 : params[0] < 0 ? 0 : params[1] < 0 ? 1 : -1;
            if (j < 0)
                return hyla_error_set(HYLA_ERR_MODEL, "LoRA: module '%s' spans more than two parameters", md->name);
            if (params[j] < 0) {
                params[j] = p;
                lo[j] = hi[j] = row;
            }
            lo[j] = row < lo[j] ? row : lo[j];
            hi[j] = row > hi[j] ? row : hi[j];
            cnt[j]++;
        }
        for (int j = 0; j < 2 && params[j] >= 0; j++) {
            if (hi[j] - lo[j] + 1 != cnt[j])
                return hyla_error_set(HYLA_ERR_MODEL, "LoRA: module '%s' rows are not contiguous internally", md->name);
            hyla_lora_segment *s = &L->segments[L->n_segments++];
            s->layer = layer;
            s->param = params[j];
            s->row0 = lo[j];
            s->rows = cnt[j];
            s->module = L->n_modules;
            s->b_offset = off;
            add_param(&L->table, &t->params[params[j]], layer, cnt[j], r, &off);
            md->n_seg++;
            if (t->params[params[j]].role == HYLA_P_MOE_GATE_UP || t->params[params[j]].role == HYLA_P_MOE_DOWN)
                L->experts = 1;
        }
        L->n_modules++;
    }
    L->table.total_floats = off;
    size_t bytes = (off ? off : 1) * sizeof(float);
    L->w = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!L->w)
        return hyla_error_set(HYLA_ERR_NOMEM, "LoRA: cannot allocate %zu adapter floats", off);
    memset(L->w, 0, off * sizeof(float));
    /* per-parameter segment lists */
    for (int s = 0; s < L->n_segments; s++)
        L->seg_order[s] = s;
    qsort_r(L->seg_order, (size_t)L->n_segments, sizeof(int), cmp_seg_param, L->segments);
    int k = 0;
    for (int p = 0; p <= t->n_params; p++) {
        L->seg_by_param[p] = k;
        while (p < t->n_params && k < L->n_segments && L->segments[L->seg_order[k]].param == p)
            k++;
    }
    return HYLA_OK;
}

static void set_scaling(hyla_lora *L)
{
    L->scaling = L->use_rslora ? L->alpha / sqrt((double)L->r) : L->alpha / (double)L->r;
}

static int check_options(const hyla_lora_options *o)
{
    if (o->r < 1 || o->r > 65536)
        return hyla_error_set(HYLA_ERR_ARG, "--lora-rank must be in [1, 65536], got %lld", (long long)o->r);
    if (!(o->dropout >= 0 && o->dropout < 1))
        return hyla_error_set(HYLA_ERR_ARG, "--lora-dropout must be in [0, 1), got %g", o->dropout);
    if (!isfinite(o->alpha))
        return hyla_error_set(HYLA_ERR_ARG, "--lora-alpha must be a finite number");
    return HYLA_OK;
}

int hyla_lora_create_modules(hyla_lora *L, const hyla_param_table *t, const unsigned char *selected,
                             const hyla_lora_options *o)
{
    memset(L, 0, sizeof *L);
    HYLA_TRY(check_options(o));
    for (size_t i = 0; i < t->n_hf; i++)
        if (selected[i] && !is_linear_module(&t->hf[i]))
            return hyla_error_set(HYLA_ERR_MODEL, "LoRA: '%s' is not a projection of a decoder layer or of the MTP "
                                  "head (the router and lm_head are not adapted)", t->hf[i].name);
    int rc = build(L, t, selected, o->r);
    if (rc != HYLA_OK) {
        hyla_lora_free(L);
        return rc;
    }
    if (!o->targets || strlen(o->targets) >= sizeof L->targets)
        snprintf(L->targets, sizeof L->targets, "%d listed modules", L->n_modules);
    else
        snprintf(L->targets, sizeof L->targets, "%s", o->targets);
    L->alpha = o->alpha > 0 ? o->alpha : (double)o->r;
    L->use_rslora = o->use_rslora;
    L->dropout = o->dropout;
    L->dropout_seed = o->seed ^ 0x6c6f7261ull;
    set_scaling(L);
    hyla_rng rng;
    hyla_rng_seed(&rng, o->seed ^ 0x4c6f5241ull);
    for (int i = 0; i < L->n_modules; i++) { /* A: PEFT's kaiming_uniform_(a=sqrt(5)); B stays zero */
        const hyla_lora_module *md = &L->modules[i];
        double bound = 1.0 / sqrt((double)md->in);
        float *A = L->w + md->a_offset;
        for (int64_t k = 0; k < L->r * md->in; k++)
            A[k] = (float)((2.0 * hyla_rng_uniform(&rng) - 1.0) * bound);
    }
    return HYLA_OK;
}

int hyla_lora_create(hyla_lora *L, const hyla_param_table *t, const hyla_lora_options *o)
{
    memset(L, 0, sizeof *L);
    HYLA_TRY(check_options(o));
    unsigned char *sel = calloc(t->n_hf ? t->n_hf : 1, 1);
    if (!sel)
        return hyla_error_set(HYLA_ERR_NOMEM, "LoRA: out of memory");
    int rc = select_modules(t, o->targets, sel);
    hyla_lora_options named = *o;
    named.targets = o->targets ? o->targets : "all-linear";
    if (rc == HYLA_OK)
        rc = hyla_lora_create_modules(L, t, sel, &named);
    free(sel);
    return rc;
}

void hyla_lora_free(hyla_lora *L)
{
    free(L->modules);
    free(L->segments);
    free(L->table.params);
    free(L->seg_by_param);
    free(L->seg_order);
    free(L->w);
    memset(L, 0, sizeof *L);
}

static int covers(const hyla_lora *L, int param) { return L && L->seg_by_param[param + 1] > L->seg_by_param[param]; }

/* ---- compute ------------------------------------------------------------------------------------ */

int64_t hyla_lora_scratch_floats(const hyla_lora *L, int64_t rows)
{
    if (!L)
        return 0;
    int64_t n = L->experts ? rows * L->table.cfg.top_k : rows; /* expert calls run up to n*k slot rows */
    if (n < rows)
        n = rows;
    return n * (L->max_in + 2 * L->r) + L->r * (L->max_out > L->max_in ? L->max_out : L->max_in);
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* PEFT's inverted dropout on the A path's input, as a pure function of (seed, step, module, row,
 * column): a recompute in backward sees the same mask. */
static uint64_t mask_base(const hyla_lora *L, int module)
{
    return mix64(L->dropout_seed ^ mix64((uint64_t)L->dropout_step * 0x100000001b3ull + (uint64_t)module));
}
static int dropped(uint64_t base, int64_t i, int64_t j, double p)
{
    uint64_t h = mix64(base ^ mix64((uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)j));
    return (double)(h >> 11) * 0x1.0p-53 < p;
}
static int dropout_on(const hyla_lora *L) { return L->training && L->dropout > 0; }

static const float *a_input(const hyla_lora *L, int module, const float *x, int64_t n, int64_t in, float *buf)
{
    if (!dropout_on(L))
        return x;
    uint64_t base = mask_base(L, module);
    float keep = (float)(1.0 / (1.0 - L->dropout));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < in; j++)
            buf[i * in + j] = dropped(base, i, j, L->dropout) ? 0.0f : x[i * in + j] * keep;
    return buf;
}

/* The next segment of `param` (from list position *k on) inside rows [row0, row0 + out), or NULL. */
static const hyla_lora_segment *segment_in(const hyla_lora *L, int param, int64_t row0, int64_t out, int *k)
{
    while (*k < L->seg_by_param[param + 1]) {
        const hyla_lora_segment *sg = &L->segments[L->seg_order[(*k)++]];
        if (sg->row0 >= row0 && sg->row0 + sg->rows <= row0 + out)
            return sg;
    }
    return NULL;
}

/* xa[n, r] = x[n, in] A^T through at [in, r] = A^T (scratch) */
static void lora_down(float *xa, const float *x, const float *A, int64_t n, int64_t in, int64_t r, float *at)
{
    for (int64_t p = 0; p < r; p++)
        for (int64_t k = 0; k < in; k++)
            at[k * r + p] = A[p * in + k];
    hyla_lowrank_reduce(xa, x, in, at, n, in, r, 1.0f, 0);
}

void hyla_lora_fwd(const hyla_lora *L, int param, int64_t row0, int64_t out, float *y, const float *x, int64_t n,
                   int64_t in, float *scratch)
{
    if (!covers(L, param) || n == 0)
        return;
    int64_t r = L->r;
    float s = (float)L->scaling;
    float *xd = scratch, *xa = scratch + n * L->max_in, *bt = xa + 2 * n * r;
    const hyla_lora_segment *sg;
    for (int k = L->seg_by_param[param]; (sg = segment_in(L, param, row0, out, &k));) {
        const hyla_lora_module *md = &L->modules[sg->module];
        const float *xin = a_input(L, sg->module, x, n, in, xd), *B = L->w + sg->b_offset;
        lora_down(xa, xin, L->w + md->a_offset, n, in, r, bt);
        for (int64_t j = 0; j < sg->rows; j++) /* bt [r, rows] = B^T */
            for (int64_t p = 0; p < r; p++)
                bt[p * sg->rows + j] = B[j * r + p];
        hyla_lowrank_expand(y + (sg->row0 - row0), out, xa, r, bt, sg->rows, n, sg->rows, r, s, 1); /* y += s xa B^T */
    }
}

void hyla_lora_bwd(const hyla_lora *L, float *grads, int param, int64_t row0, int64_t out, float *dx, const float *dy,
                   const float *x, int64_t n, int64_t in, float *scratch)
{
    if (!covers(L, param) || n == 0)
        return;
    int64_t r = L->r;
    float s = (float)L->scaling;
    float *xd = scratch, *xa = scratch + n * L->max_in, *dxa = xa + n * r, *at = dxa + n * r;
    const hyla_lora_segment *sg;
    for (int k = L->seg_by_param[param]; (sg = segment_in(L, param, row0, out, &k));) {
        const hyla_lora_module *md = &L->modules[sg->module];
        const float *xin = a_input(L, sg->module, x, n, in, xd);
        const float *A = L->w + md->a_offset, *B = L->w + sg->b_offset, *dyc = dy + (sg->row0 - row0);
        lora_down(xa, xin, A, n, in, r, at);                                               /* xa [n, r] */
        hyla_lowrank_gather(grads + sg->b_offset, dyc, out, xa, n, sg->rows, r, s);        /* dB += s dy^T xa */
        hyla_lowrank_reduce(dxa, dyc, out, B, n, sg->rows, r, s, 0);                       /* dxa = s dy B */
        hyla_gemm(1, 0, r, in, n, 1.0f, dxa, r, xin, in, 1.0f, grads + md->a_offset, in);  /* dA += dxa^T xin */
        if (dx && !dropout_on(L)) {
            hyla_lowrank_expand(dx, in, dxa, r, A, in, n, in, r, 1.0f, 1); /* dx += dxa A */
        } else if (dx) { /* through the mask: d xin / dx = keep where kept, 0 where dropped */
            hyla_lowrank_expand(xd, in, dxa, r, A, in, n, in, r, 1.0f, 0); /* xin is no longer needed */
            uint64_t base = mask_base(L, sg->module);
            float keep = (float)(1.0 / (1.0 - L->dropout));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < in; j++)
                    if (!dropped(base, i, j, L->dropout))
                        dx[i * in + j] += xd[i * in + j] * keep;
        }
    }
}
