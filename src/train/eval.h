/* Evaluation: the mean next-token loss of a model over every target of a data source, once.
 *
 * Documents are evaluated each on its own rows (train/data.h: rows of T tokens overlapping by
 * one, so every target is scored exactly once, each row starting without the context before it),
 * in file order. A stream (token file without documents, or a text file) is evaluated as one
 * document. Rows go through the forward-only executor B at a time; a short last batch is padded
 * with ignored rows, which change nothing. pack: documents share rows instead (train/data.h
 * packing; each still computed as if alone), the same loss within fp32 rounding. */
#ifndef HYLA_TRAIN_EVAL_H
#define HYLA_TRAIN_EVAL_H

#include <stdint.h>

#include "engine/executor.h"
#include "model/model.h"
#include "parallel/comm.h"
#include "train/data.h"

typedef struct {
    double loss;        /* mean -log p over the targets (nats) */
    double perplexity;  /* exp(loss) */
    int64_t targets;    /* tokens scored */
    int64_t rows;
    double seconds;
} hyla_eval_result;

/* Across ranks (hyla train under mpirun): the batches go round-robin over comm's ranks (batch b
 * on rank b mod N, a rank out of batches runs an empty one so all stay in step), the weights
 * come from `weights` (FSDP's gathered layers; NULL: the model's arena), and the per-batch sums
 * are exchanged and added in batch order on every rank: the result is one process's, bit for bit
 * (at the same thread count). NULL: one process. */
typedef struct {
    hyla_comm *comm;
    const hyla_weight_source *weights;
} hyla_eval_ranks;

/* Evaluate `m` on `d` (not modified: its position and shuffling are left alone). */
int hyla_evaluate(const hyla_model *m, const hyla_data *d, int64_t T, int64_t B, int pack, const hyla_eval_ranks *ranks,
                  hyla_eval_result *out);

#endif
