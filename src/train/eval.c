#include "train/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "engine/executor.h"

/* A documents view of d: itself, or (stream) its tokens as one document with every token a target. */
static int as_documents(const hyla_data *d, hyla_data *docs)
{
    if (d->synthetic)
        return hyla_error_set(HYLA_ERR_ARG, "evaluation needs a data file (not synthetic data)");
    int32_t *ids = malloc((size_t)d->n_tokens * sizeof *ids);
    unsigned char *mask = malloc((size_t)d->n_tokens);
    int64_t n_docs = d->mask ? d->n_docs : 1, *starts = malloc((size_t)(n_docs + 1) * sizeof *starts);
    if (!ids || !mask || !starts) {
        free(ids), free(mask), free(starts);
        return hyla_error_set(HYLA_ERR_NOMEM, "evaluation: out of memory");
    }
    memcpy(ids, d->tokens, (size_t)d->n_tokens * sizeof *ids);
    if (d->mask) {
        memcpy(mask, d->mask, (size_t)d->n_tokens);
        memcpy(starts, d->doc_start, (size_t)(n_docs + 1) * sizeof *starts);
    } else {
        memset(mask, 1, (size_t)d->n_tokens);
        starts[0] = 0, starts[1] = d->n_tokens;
    }
    return hyla_data_set_documents(docs, ids, mask, d->n_tokens, starts, n_docs, d->vocab, d->source);
}

/* Batch sums of the N batches of a round, each rank's in its slot, then added in batch order. */
static int add_round(hyla_comm *comm, const double *mine, double *all, double *ce, int64_t *count)
{
    HYLA_TRY(comm->allgather(comm, mine, all, 2 * sizeof(double)));
    for (int r = 0; r < comm->size; r++) {
        *ce += all[2 * r];
        *count += (int64_t)all[2 * r + 1];
    }
    return HYLA_OK;
}

int hyla_evaluate(const hyla_model *m, const hyla_data *d, int64_t T, int64_t B, int pack, const hyla_eval_ranks *ranks,
                  hyla_eval_result *out)
{
    memset(out, 0, sizeof *out);
    if (T < 2 || B < 1)
        return hyla_error_set(HYLA_ERR_ARG, "evaluation: need seq >= 2 and batch >= 1");
    hyla_data docs;
    HYLA_TRY(as_documents(d, &docs));
    int64_t rows = hyla_data_rows_per_epoch(&docs, T); /* pieces (packed: several to a row) */
    docs.pack = pack;
    int64_t *segs = pack ? malloc((size_t)(B * T) * sizeof *segs) : NULL;
    hyla_policy nothing;
    hyla_policy_parse(&nothing, "full");
    hyla_executor ex;
    int st = hyla_executor_init(&ex, m, &nothing, HYLA_UNIT_LAYER, B, T, HYLA_DELTA_CHUNKED, 1);
    hyla_comm *comm = ranks && ranks->comm && ranks->comm->size > 1 ? ranks->comm : NULL;
    int N = comm ? comm->size : 1, me = comm ? comm->rank : 0;
    if (ranks)
        ex.weights = ranks->weights;
    int32_t *tokens = malloc((size_t)(B * T) * sizeof *tokens), *labels = malloc((size_t)(B * T) * sizeof *labels);
    double *sums = malloc((size_t)N * 2 * sizeof *sums);
    if (st == HYLA_OK && (!tokens || !labels || !sums || (pack && !segs)))
        st = hyla_error_set(HYLA_ERR_NOMEM, "evaluation: out of memory");
    double t0 = hyla_now(), ce = 0, mine[2] = {0, 0};
    int64_t count = 0, packed_rows = 0;
    /* every rank reads every batch (the data walk is sequential); batch b is rank b mod N's */
    for (int64_t r = 0, b = 0; st == HYLA_OK && (docs.pos < rows || (comm && b % N)); r += B, b++) {
        int64_t n = 0, n_seg = 0;
        if (docs.pos >= rows) { /* a round's tail after the data: an empty batch, so every rank runs one */
            for (int64_t i = 0; i < B * T; i++)
                tokens[i] = 0, labels[i] = -100;
            for (int64_t i = 0; pack && i < B; i++)
                segs[n_seg++] = T;
            goto run;
        }
        if (!pack) {
            n = rows - r < B ? rows - r : B;
            st = hyla_data_next(&docs, tokens, labels, n, T);
        }
        for (; pack && st == HYLA_OK && n < B && docs.pos < rows; n++) { /* a row at a time: stop at the last piece */
            st = hyla_data_next(&docs, tokens + n * T, labels + n * T, 1, T);
            memcpy(segs + n_seg, docs.seg_len, (size_t)docs.n_seg * sizeof *segs);
            n_seg += docs.n_seg;
        }
        for (int64_t i = n * T; i < B * T; i++) /* padding rows: nothing to score */
            tokens[i] = 0, labels[i] = -100;
        for (int64_t i = n; pack && i < B; i++)
            segs[n_seg++] = T;
        packed_rows += n;
    run:;
        hyla_step_loss l = {0};
        if (b % N != me) { /* another rank's: read past, and at its round's end the round's sums */
            if (comm && b % N == N - 1 && st == HYLA_OK)
                st = add_round(comm, mine, sums, &ce, &count);
            continue;
        }
        if (st == HYLA_OK && pack)
            st = hyla_executor_set_segments(&ex, segs, n_seg);
        if (st == HYLA_OK)
            st = hyla_executor_forward(&ex, tokens, labels, NULL, &l);
        if (!comm) {
            ce += l.ce_sum;
            count += l.ce_count;
        } else {
            mine[0] = l.ce_sum, mine[1] = (double)l.ce_count;
            if (b % N == N - 1 && st == HYLA_OK)
                st = add_round(comm, mine, sums, &ce, &count);
        }
    }
    if (st == HYLA_OK) {
        out->loss = count ? ce / (double)count : NAN;
        out->perplexity = exp(out->loss);
        out->targets = count;
        out->rows = pack ? packed_rows : rows;
        out->seconds = hyla_now() - t0;
        if (!isfinite(out->loss))
            st = hyla_error_set(HYLA_ERR_NUMERIC, "evaluation on %s: the loss is not finite", d->source);
    }
    if (ex.tapes)
        hyla_executor_free(&ex);
    free(tokens);
    free(labels);
    free(segs);
    free(sums);
    hyla_data_close(&docs);
    return st;
}
