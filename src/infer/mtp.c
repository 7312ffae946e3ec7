/* The MTP head at inference: the input stage (embedding and hidden, normed and joined by fc),
 * MTP layer 0's ops over its own KV cache, mtp.norm and the shared lm_head. */
#include "infer/mtp.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/bf16.h"
#include "core/error.h"
#include "infer/generate.h"
#include "model/layer_ops.h"
#include "ops/ops.h"

/* The head's layer as a one-layer config (its KV cache): layer 0 = MTP layer 0. */
static void head_config(const hyla_config *cfg, hyla_config *one)
{
    *one = *cfg;
    one->n_layers = 1;
    one->n_mtp_layers = 0;
    one->layer_kind[0] = HYLA_LAYER_FULL;
    one->layer_is_moe[0] = cfg->layer_is_moe[cfg->n_layers];
}

/* Floats of everything one call of n rows uses, in the order run() carves them. */
static size_t call_floats(const hyla_model *m, int64_t n, int64_t T)
{
    const hyla_config *cfg = &m->cfg;
    int layer = (int)cfg->n_layers;
    const hyla_layer_op *ops[HYLA_MAX_LAYER_OPS];
    int n_ops = hyla_layer_ops(cfg, layer, ops);
    int64_t H = cfg->hidden, total = 0, scratch = 0;
    total += hyla_span_floats(n * 2 * H);                                /* joined normed inputs */
    for (int s = 0; s < HYLA_S__COUNT; s++)                              /* every slot of the layer */
        total += hyla_span_floats(hyla_slot_floats(cfg, layer, (hyla_slot)s, n));
    /* the projections' operands: bf16 compute's rounded ones, or a GGUF model's gathered rows */
    int64_t proj = m->w16 ? hyla_bf16_scratch_floats(cfg, n) : m->qw ? hyla_quant_scratch_floats(cfg, n) : 0;
    for (int i = 0; i < n_ops; i++) {
        int64_t own = ops[i]->fwd_scratch(cfg, n, T) + proj;
        scratch = own > scratch ? own : scratch;
    }
    int64_t fc_scratch = proj;  /* fc's operands */
    int64_t head = hyla_head_scratch_floats(m, n);
    scratch = fc_scratch > scratch ? fc_scratch : scratch;
    scratch = head > scratch ? head : scratch;
    total += hyla_span_floats(scratch) + hyla_span_floats(n * H);      /* scratch, normed output */
    return (size_t)total;
}

int hyla_mtp_init(hyla_mtp *h, const hyla_model *m, int64_t B, int64_t max_rows, int64_t max_len)
{
    memset(h, 0, sizeof *h);
    if (m->cfg.n_mtp_layers < 1)
        return hyla_error_set(HYLA_ERR_ARG, "the model has no MTP head (no mtp.* tensors): nothing to draft with");
    if (B < 1 || max_rows < 1)
        return hyla_error_set(HYLA_ERR_ARG, "MTP head: need B >= 1 and max_rows >= 1");
    h->m = m;
    h->B = B;
    h->max_rows = max_rows;
    hyla_config one;
    head_config(&m->cfg, &one);
    HYLA_TRY(hyla_infer_state_init(&h->state, &one, B, max_len));
    h->buf_floats = call_floats(m, B * max_rows, max_rows);
    h->buf = aligned_alloc(64, hyla_align_up(h->buf_floats * sizeof(float)));
    if (!h->buf) {
        hyla_mtp_free(h);
        return hyla_error_set(HYLA_ERR_NOMEM, "MTP head: cannot allocate %zu bytes of activations",
                              h->buf_floats * sizeof(float));
    }
    return HYLA_OK;
}

void hyla_mtp_free(hyla_mtp *h)
{
    if (h->state.layers)
        hyla_infer_state_free(&h->state);
    free(h->buf);
    memset(h, 0, sizeof *h);
}

static float *carve(float **at, int64_t floats)
{
    float *p = *at;
    *at += hyla_span_floats(floats);
    return p;
}

/* x [n, H] = fc([norm_e(embed(u)) ; norm_h(h)]) (bf16 compute: operands rounded as a projection's). */
static void input_stage(const hyla_model *m, hyla_op_ctx *c, float *x, float *joined, const int32_t *tokens,
                        const float *hidden, int64_t n)
{
    int64_t H = m->cfg.hidden;
    hyla_mtp_join_inputs(m, joined, tokens, hidden, n);
    hyla_op_ctx g = *c;
    g.layer = -1; /* fc is one of the head's global parameters */
    hyla_op_linear(&g, HYLA_P_MTP_FC, 0, x, joined, n, 2 * H, H);
    if (m->w16)
        hyla_bf16_round(x, n * H);
}

int hyla_mtp_run(hyla_mtp *h, const int32_t *tokens, const float *hidden, int64_t T, float *out_hidden,
                 float *logits, int last_only)
{
    const hyla_model *m = h->m;
    const hyla_config *cfg = &m->cfg;
    int64_t B = h->B, n = B * T, H = cfg->hidden, V = cfg->vocab;
    if (T < 1 || T > h->max_rows)
        return hyla_error_set(HYLA_ERR_ARG, "MTP head: %lld rows per sequence (1..%lld)", (long long)T, (long long)h->max_rows);
    for (int64_t b = 0; b < B; b++)
        if (h->state.len[b] + T > h->state.max_len)
            return hyla_error_set(HYLA_ERR_ARG, "MTP head: sequence %lld: %lld cached + %lld new positions exceed %lld",
                                  (long long)b, (long long)h->state.len[b], (long long)T, (long long)h->state.max_len);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return hyla_error_set(HYLA_ERR_ARG, "MTP head: token id %d out of range [0, %lld)", tokens[i], (long long)V);
    int layer = (int)cfg->n_layers;
    const hyla_layer_op *ops[HYLA_MAX_LAYER_OPS];
    int n_ops = hyla_layer_ops(cfg, layer, ops);

    int64_t pos[n], row0[B], seq_len[B];
    for (int64_t b = 0; b < B; b++) {
        row0[b] = b * T, seq_len[b] = T;
        for (int64_t t = 0; t < T; t++)
            pos[b * T + t] = h->state.len[b] + t;
    }
    int64_t aux_rows = 0;
    hyla_op_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.layer = layer;
    c.B = B, c.T = T, c.n = n;
    c.pos = pos;
    c.n_seq = B, c.seq_row0 = row0, c.seq_len = seq_len;
    c.delta_mode = HYLA_DELTA_RECURRENT;
    c.aux_rows = &aux_rows; /* aux_counts NULL: no router statistics at inference */
    c.state = &h->state.layers[0];
    c.past = h->state.len;
    c.max_len = h->state.max_len;

    float *at = h->buf;
    float *joined = carve(&at, n * 2 * H);
    hyla_tape tape;
    for (int s = 0; s < HYLA_S__COUNT; s++)
        tape.p[s] = carve(&at, hyla_slot_floats(cfg, layer, (hyla_slot)s, n));
    float *xn = carve(&at, n * H), *scratch = at;
    c.bf16_scratch = scratch; /* the ops' own scratch comes first: set per op below */

    input_stage(m, &c, tape.p[HYLA_S_X], joined, tokens, hidden, n);
    for (int i = 0; i < n_ops; i++) {
        int64_t own = ops[i]->fwd_scratch(cfg, n, T);
        c.bf16_scratch = scratch + own;
        ops[i]->fwd(&c, &tape, scratch);
        if (m->w16)
            for (int o = 0; o < ops[i]->n_out; o++)
                if (hyla_slot_is_bf16(ops[i]->out[o]))
                    hyla_bf16_round(tape.p[ops[i]->out[o]], hyla_slot_floats(cfg, layer, ops[i]->out[o], n));
    }
    for (int64_t b = 0; b < B; b++)
        h->state.len[b] += T;

    const float *wn = hyla_model_param(m, HYLA_P_MTP_NORM, -1);
    hyla_rmsnorm1p_fwd(xn, NULL, tape.p[HYLA_S_Y], wn, n, H, (float)cfg->rms_norm_eps);
    if (m->w16)
        hyla_bf16_round(xn, n * H);
    if (out_hidden)
        memcpy(out_hidden, xn, (size_t)(n * H) * sizeof *xn);
    if (!logits)
        return HYLA_OK;
    if (!last_only) {
        hyla_head_linear(m, logits, xn, n, scratch);
        return HYLA_OK;
    }
    for (int64_t b = 0; b < B; b++) /* each sequence's last row, packed */
        if (b * T + T - 1 != b)
            memmove(xn + b * H, xn + (b * T + T - 1) * H, (size_t)H * sizeof *xn);
    hyla_head_linear(m, logits, xn, B, scratch);
    return HYLA_OK;
}

#define SEQUENCE_ROWS 64 /* head rows per call over a sequence */

int hyla_mtp_sequence_logits(const hyla_model *m, const int32_t *tokens, int64_t T, float *hidden,
                             int (*emit)(void *ctx, int64_t row0, int64_t rows, const float *logits), void *ctx)
{
    int64_t H = m->cfg.hidden, V = m->cfg.vocab;
    if (T < 2)
        return hyla_error_set(HYLA_ERR_ARG, "MTP head: a sequence of %lld tokens has no (next token, hidden) pair",
                              (long long)T);
    hyla_infer_state st;
    HYLA_TRY(hyla_infer_state_init(&st, &m->cfg, 1, T));
    hyla_mtp head;
    int rc = hyla_mtp_init(&head, m, 1, SEQUENCE_ROWS, T);
    float *h = rc == HYLA_OK ? (hidden ? hidden : malloc((size_t)(T * H) * sizeof *h)) : NULL;
    float *last = rc == HYLA_OK ? malloc((size_t)V * sizeof *last) : NULL;
    float *logits = rc == HYLA_OK ? malloc((size_t)(SEQUENCE_ROWS * V) * sizeof *logits) : NULL;
    if (rc == HYLA_OK && (!h || !last || !logits))
        rc = hyla_error_set(HYLA_ERR_NOMEM, "MTP head: out of memory");
    if (rc == HYLA_OK)
        rc = hyla_prefill_sequence_hidden(m, &st, 0, tokens, T, last, NULL, h);
    for (int64_t r0 = 0; rc == HYLA_OK && r0 < T - 1; r0 += SEQUENCE_ROWS) {
        int64_t n = T - 1 - r0 < SEQUENCE_ROWS ? T - 1 - r0 : SEQUENCE_ROWS;
        rc = hyla_mtp_run(&head, tokens + r0 + 1, h + r0 * H, n, NULL, logits, 0);
        if (rc == HYLA_OK)
            rc = emit(ctx, r0, n, logits);
    }
    if (h != hidden)
        free(h);
    free(last);
    free(logits);
    if (head.buf)
        hyla_mtp_free(&head);
    hyla_infer_state_free(&st);
    return rc;
}
