/* AdamW with decoupled weight decay, global-norm gradient clipping, and learning-rate schedules
 * (warmup + cosine, warmup-stable-decay). Semantics follow torch.optim.AdamW and
 * torch.nn.utils.clip_grad_norm_ (tests/reference/README.md states them exactly). */
#ifndef HYLA_TRAIN_OPTIMIZER_H
#define HYLA_TRAIN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/exact_sum.h"
#include "model/params.h"

typedef struct {
    double lr;            /* current learning rate (set per step by the schedule) */
    double beta1, beta2, eps;
    double weight_decay;  /* applied to parameters with 2+ dimensions only (no norms, dt_bias, A_log) */
    double clip;          /* max global grad norm; <= 0 disables */
} hyla_adamw_config;

typedef struct {
    hyla_adamw_config cfg;
    int64_t step;         /* completed updates */
    float *m, *v;         /* [table.total_floats] first and second moments, owned */
    size_t n_floats;
    double bc1, bc2;      /* bias corrections of the current step (hyla_adamw_begin) */
    /* bf16 compute (model/precision.c): the model's bf16 copy, table layout; every update of a
     * matrix parameter writes its rounded weights there in the same pass. NULL: none */
    uint16_t *bf16_copy;
    /* update the MTP head's parameters (hyla_param.mtp); 0: they are left untouched, as they are
     * while no MTP loss is computed */
    int train_mtp;
    int only_mtp;          /* update the MTP head's parameters only (a frozen trunk) */
} hyla_adamw;

int hyla_adamw_init(hyla_adamw *opt, const hyla_adamw_config *cfg, size_t n_floats);
void hyla_adamw_free(hyla_adamw *opt);

/* Global L2 norm of the gradients over every parameter of the table (each parameter once), in a
 * form sharding reproduces bit for bit: each parameter is cut into blocks of HYLA_SHARD_ALIGN
 * elements (parallel/shard.h; a shard piece holds whole blocks), a block's squares are summed in
 * element order in double, and the block sums are added exactly (core/exact_sum.h), so pieces
 * summed on their owners and merged give the same value. */
double hyla_grad_norm(const hyla_param_table *t, const float *grads);
/* out[b] = sum of squares of block b of g[0..len) (len from a block boundary). */
void hyla_grad_block_sums(const float *g, int64_t len, double *out);
/* acc += the block sums of g[0..len) (g at a block boundary of its parameter). */
void hyla_grad_sumsq_add(hyla_exact_sum *acc, const float *g, int64_t len);
/* The clipping factor for a pre-clip norm (1 when off or below the clip). */
double hyla_clip_scale(const hyla_adamw_config *c, double norm);
/* One AdamW update of every parameter of t with its gradient scaled by `scale` (what
 * hyla_adamw_step does after the norm; t may be a shard's table: offsets into weights, grads
 * and the moments). */
int hyla_adamw_apply(hyla_adamw *opt, const hyla_param_table *t, float *weights, const float *grads, double scale);
/* HYLA_ERR_NUMERIC naming the first parameter of t with a non-finite gradient, else HYLA_OK. */
int hyla_grad_check_finite(const hyla_adamw *opt, const hyla_param_table *t, const float *grads);

/* Clip (if cfg.clip > 0 and norm > clip: scale by clip / (norm + 1e-6)) and apply one AdamW
 * update with learning rate opt->cfg.lr; *norm_out = the pre-clip norm. A non-finite gradient
 * is an error naming the first such tensor, and nothing is updated; an update that leaves a
 * weight non-finite is an error naming the tensor (the weights are then broken: stop). */
int hyla_adamw_step(hyla_adamw *opt, const hyla_param_table *t, float *weights, float *grads, double *norm_out);

/* The same update in pieces, for per-layer updates during backward (no clipping: a global
 * norm needs every gradient first): hyla_adamw_begin once per step, then
 * hyla_adamw_update_param once per parameter with its gradient g [p->numel]; adds the sum of
 * squares of g to *sumsq (a non-finite g is an error, p untouched). Bit-identical to hyla_adamw_step with clipping off. */
void hyla_adamw_begin(hyla_adamw *opt);
int hyla_adamw_update_param(hyla_adamw *opt, const hyla_param *p, float *weights, const float *g, double *sumsq);

typedef enum { HYLA_SCHED_COSINE = 0, HYLA_SCHED_WSD = 1, HYLA_SCHED_CONSTANT = 2 } hyla_schedule_kind;

typedef struct {
    hyla_schedule_kind kind;
    double peak, min_lr;
    int64_t warmup, total;
    double decay_fraction; /* WSD: final fraction of the steps spent decaying linearly to min_lr */
} hyla_lr_schedule;

int hyla_lr_schedule_parse(const char *text, hyla_schedule_kind *out);
/* Learning rate of 0-based step s: linear warmup lr*(s+1)/warmup, then cosine (or stable then
 * linear decay for WSD) from peak to min_lr at s = total - 1... see optimizer.c. */
double hyla_lr_at(const hyla_lr_schedule *s, int64_t step);

#endif
