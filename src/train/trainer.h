/* One optimizer step = `accum` micro-batches through the executor, gradient clipping, AdamW.
 *
 * Data parallel (cfg.comm of N > 1 ranks): a step is N x accum micro-batches; every rank is
 * handed all of them (tokens [N * accum, batch, seq]) and runs global micro-batch g when
 * g mod N == its rank. The step's gradient is the sum of the micro-batch gradients in g order
 * (parallel/grad_reduce.h), so N ranks with --accum A give bit for bit what one process with
 * --accum N*A gives; every rank then holds the whole gradient and applies the same update
 * (replicated weights and moments: shard "none"). With cfg.fsdp every rank keeps only its
 * pieces of the weights, the summed gradient and the moments (train/fsdp.h); the result is the
 * same, bit for bit.
 *
 * Loss of a step (spec §3.8 with gradient accumulation): ce = sum of -log p over every labelled
 * position of all micro-batches / their count; aux = mean over micro-batches of each
 * micro-batch's router aux loss; loss = ce + router_aux_loss_coef * aux (+ mtp_weight x the MTP
 * head's mean cross-entropy over all its targets of the step; --mtp-only: that mean alone). */
#ifndef HYLA_TRAIN_TRAINER_H
#define HYLA_TRAIN_TRAINER_H

#include <stdint.h>

#include "model/model.h"
#include "parallel/comm.h"
#include "parallel/grad_reduce.h"
#include "engine/executor.h"
#include "train/context.h"
#include "train/fsdp.h"
#include "train/optimizer.h"

typedef struct {
    hyla_policy policy;
    hyla_remat_unit unit;
    int64_t batch, seq, accum;
    hyla_adamw_config adamw;
    hyla_lr_schedule schedule;
    const char *offload_store; /* host store path for offloaded checkpoints (NULL: anonymous temp file) */
    size_t offload_limit;      /* its size limit in bytes (0: none) */
    /* update each layer as soon as its gradients are complete (during backward), so only one
     * remat unit's layer gradients exist at a time; needs accum == 1 and no clipping */
    int update_per_layer;
    hyla_comm *comm;           /* the ranks of a data-parallel run (NULL: one process) */
    int fsdp;                  /* shard fsdp over comm's ranks (train/fsdp.h); else replicated ("none") */
    int no_prefetch;           /* FSDP: gather each part only when it is acquired (measurement) */
    int overlap_reduce;        /* FSDP (with the prefetch): overlap a unit's reduce-scatters with the next unit's backward */
    int expert_groups;         /* FSDP: routed experts gathered / reduce-scattered this many groups at a time
                                * (train/fsdp.h; 0, 1: with their layer) */
    /* context parallelism (train/context.h; 0, 1: off): every sequence is cut into this many slices,
     * one per rank of a group of C consecutive ranks (C divides the ranks); `seq` is then a slice's
     * length, and the step's micro-batches are slices: micro-batch g (rank g % N runs it) is slice
     * g % C of the sequences of group (g % N) / C in round g / N (hyla train makes them) */
    int context_parallel;
    /* the MTP loss (engine/mtp_loss.h, docs/mtp.md): loss = main + mtp_weight x the MTP head's mean
     * cross-entropy over its targets (0: off, the head untouched); mtp_only: the MTP loss alone
     * and only the head's parameters updated (a frozen trunk) */
    double mtp_weight;
    int mtp_only;
} hyla_train_config;

typedef struct {
    double loss, ce, aux;   /* aux NaN without MoE */
    double mtp;             /* the MTP head's mean cross-entropy (NaN without an MTP loss) */
    int64_t mtp_targets;
    double lr, grad_norm;
    int64_t tokens;         /* tokens processed this step (all micro-batches) */
    int64_t targets;        /* labelled positions (the loss's denominator) */
    double seconds;
    /* offload (zero without): bytes sent to the host store and read back, the I/O thread's copy
     * time, and how long compute waited for copies; hidden = 1 - waited / copy time */
    uint64_t offload_bytes;
    double copy_seconds, copy_wait_seconds;
    /* data parallel: bytes this rank sent to others and seconds in collectives this step */
    uint64_t comm_bytes;
    double comm_seconds;
    double gather_wait_seconds; /* FSDP: compute waiting for weight gathers (what the prefetch did not hide) */
    double reduce_seconds;      /* in the gradient reductions' calls (reduce-scatters, the ordered sums) */
    double context_seconds;     /* context parallelism: in the link's messages (none hidden: they block) */
    double context_chain_seconds; /* ... of it passing the delta-rule state along the ranks (and waiting for it) */
    double context_chain_wait_seconds; /* ... of that waiting for the state */
    double context_chain_run_seconds[2]; /* the delta rule's time inside the chain, forward / backward (what a
                                          * chain run rank after rank would make the ranks after wait) */
    double reduce_wait_seconds; /* ... of it waiting for them: FSDP with --overlap-reduce overlaps a unit's
                                 * (and an expert group's, and the early head gradients') reduce-scatters
                                 * with the backward, the embedding's blocks; else all of it */
} hyla_step_stats;

typedef struct {
    hyla_model *model;      /* not owned; weights updated in place */
    hyla_train_config cfg;
    hyla_executor ex;
    hyla_adamw opt;
    float *grads;           /* [table.total_floats]; with update_per_layer: the compact head instead. With
                             * a reducer: one micro-batch's gradient, then the step's sum */
    hyla_grad_reducer reducer; /* N > 1 ranks or accum > 1: the ordered sum of micro-batch gradients */
    int reducing;
    hyla_grad_reducer window_reducer; /* per-layer updates with shard none over N > 1 ranks: each unit's
                                       * window summed over the ranks before its layers' update */
    int window_reducing;
    double reduce_seconds;  /* this step's so far (hyla_step_stats.reduce_seconds) */
    hyla_fsdp fsdp;         /* cfg.fsdp: the pieces; the optimizer's moments are pieces too */
    hyla_context context;   /* cfg.context_parallel > 1: the link between the slices */
    const int64_t *context_past; /* [G][B] each micro-batch's rows' continuing tokens (packed slices), or NULL */
    int64_t *slice_past;    /* [B] unpacked slices: this rank's slice start in every row */
    const int32_t *context_next; /* [G][B][2] each micro-batch's rows' token after the slice and its target
                                  * (token -1: the row's last sequence ends in the slice); the MTP loss */
    int sharded, round_first;
    double *loss_parts;     /* [N][accum][2] every rank's micro-batch ce sums and aux losses */
    float *grad_window;     /* update_per_layer: one unit's layer gradients */
    float *grad_window2;    /* FSDP with overlapped reduce-scatters: the other unit's, in flight */
    size_t grad_floats;     /* floats of gradient storage (grads + grad_window; expert groups: the
                             * window's resident floats, one group of expert rows at a time) */
    size_t window_bytes;    /* expert groups: the window's mapping (hyla_pages_map_small) */
    size_t head_floats;     /* floats of grads (the whole table, or the compact head) */
    hyla_layer_updates updates;
    double step_sumsq;      /* update_per_layer: sum of squared gradients applied this step */
    hyla_host_store *store; /* owned; only when the policy offloads */
    /* router replay: micro-batch i of the run uses rows [r, r + batch*seq) of the file, r
     * advancing by batch*seq per micro-batch (replay_row), laid out [layers][rows][k]. */
    const struct hyla_routing_s *replay;
    int64_t replay_row;
    int32_t *replay_buf;    /* [layers][batch*seq][k] */
    const int64_t *seg_len; /* packing: the next step's document tiling (hyla_trainer_set_segments), or NULL */
    int64_t n_seg;
} hyla_trainer;

/* Packing: the next step's [accum, batch, seq] tokens are tiled by documents seg_len[0..n_seg)
 * (not owned; each micro-batch's rows tiled by its own; see hyla_executor_set_segments). Applies
 * to one step. */
void hyla_trainer_set_segments(hyla_trainer *tr, const int64_t *seg_len, int64_t n_seg);

/* Replay routing from r (not owned) in the following steps; HYLA_ERR_ARG if it cannot cover
 * `steps` more steps. */
int hyla_trainer_set_replay(hyla_trainer *tr, const struct hyla_routing_s *r, int64_t steps);

int hyla_trainer_init(hyla_trainer *tr, hyla_model *model, const hyla_train_config *cfg);
void hyla_trainer_free(hyla_trainer *tr);
/* tokens: [N * accum, batch, seq] (N = ranks, 1 without comm); token ids must be in range (checked). labels: the same shape
 * (-100 = not a target), or NULL for next-token labels within each sequence; ce is the mean over
 * the step's targets. */
int hyla_trainer_step(hyla_trainer *tr, const int32_t *tokens, const int32_t *labels, hyla_step_stats *stats);
/* Context parallelism with packed documents: for the next step, past[g B + b] = the tokens of the
 * document row b of micro-batch g continues from before its slice (0: none); NULL: unpacked rows
 * (each slice continues its whole row). */
void hyla_trainer_set_context_past(hyla_trainer *tr, const int64_t *past);
/* ... and next[(g B + b) 2 + {0, 1}]: the token after row b's slice in micro-batch g and its
 * target, token -1 where the row's last sequence ends in the slice (the MTP loss needs them). */
void hyla_trainer_set_context_next(hyla_trainer *tr, const int32_t *next);

/* Bytes of gradient storage (the whole table, or the head + one unit's window; with a reducer
 * its shard and windows; FSDP: the head, one unit's window, the summed pieces, the reduce-scatter
 * staging and the norm's blocks). */
size_t hyla_trainer_gradient_bytes(const hyla_trainer *tr);
/* Bytes of fp32 weights this rank holds for the step: the whole table, or (FSDP) its pieces plus
 * the high-water of gathered weights so far. */
size_t hyla_trainer_weight_bytes(const hyla_trainer *tr);


/* Bytes of the step's device activation arenas (checkpoint + work + offload staging) and fixed
 * step buffers. */
size_t hyla_trainer_activation_bytes(const hyla_trainer *tr);

#endif
