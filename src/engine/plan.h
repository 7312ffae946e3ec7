/* Memory plan of one training step (of the adapter alone when the model carries a LoRA adapter:
 * base weights frozen, so gradients and moments exist for the adapter's parameters only), computed without allocating it (hyla plan).
 *
 * Activation figures come from the executor's own planning pass (hyla_executor_plan) in the
 * activation dtype (act_bytes 4: fp32, 2: bf16 compute): the exact sizes its arenas take in a
 * real step. Argument bytes follow XLA's terms: what persists
 * across steps (parameters, optimizer moments, the batch). With FSDP-style sharding over
 * `devices`, parameters, gradients and moments are split evenly; each layer's weights are
 * gathered whole as a transient. Offloaded checkpoints are host bytes; their device cost is
 * the two staging halves (staging_bytes, part of temp). GB = 1e9 bytes. */
#ifndef HYLA_ENGINE_PLAN_H
#define HYLA_ENGINE_PLAN_H

#include <stdint.h>

#include "model/model.h"
#include "engine/executor.h"

typedef struct {
    int64_t batch, seq, devices;
    hyla_policy policy;
    hyla_remat_unit unit;
    int fsdp;                       /* shard parameters / gradients / moments over devices */
    int64_t accum;                  /* micro-batches per device per step (0 or 1: one) */
    int64_t expert_groups;          /* FSDP: routed experts gathered / reduce-scattered in this many groups (0, 1: whole layer) */
    int no_prefetch;                /* FSDP: no gather runs ahead (hyla train --no-prefetch) */
    int overlap_reduce;             /* FSDP: overlapped reduce-scatters (hyla train --overlap-reduce) */
    int64_t rank;                   /* FSDP: the device planned, 0 .. devices - 1 (rank 0 holds the largest pieces) */
    int update_per_layer;           /* optimizer applied per layer in backward: gradients of one unit live at once */
    int mtp;                        /* the MTP loss on: the head's layer runs as one more unit (engine/mtp_loss.h) */
    double param_bytes, grad_bytes, opt_bytes; /* per element (what-if storage for the sharded settings) */
    double act_bytes;               /* 4: fp32, 2: bf16 compute (what hyla executes) */
    int64_t context_parallel;       /* > 1: every sequence of `seq` cut into this many slices, one per device of
                                     * a group of C (C divides devices; train/context.h): the step runs slices
                                     * of seq / C, the link's messages are device rank % C's */
} hyla_plan_config;

typedef struct {
    int64_t params;                 /* parameter count (the base model) */
    int64_t trained_params;         /* parameters with gradients and moments: all, or (LoRA) the adapter's */
    double adapter_bytes;           /* LoRA: the adapter's fp32 weights (part of argument_bytes) */
    double compute_copy_bytes;      /* bf16 compute on one device: the bf16 copy of the matrix parameters,
                                     * made once per step (part of argument_bytes); sharded (FSDP), the
                                     * gathered layer is the copy */
    double param_bytes, opt_bytes, batch_bytes, argument_bytes;           /* per device */
    double checkpoint_bytes, work_bytes, staging_bytes, carry_bytes, grad_bytes, gathered_bytes, temp_bytes;
    double reduce_bytes;            /* shard none with devices > 1 or accum > 1: the ordered gradient sum's
                                     * shard and exchange windows (parallel/grad_reduce.h; part of temp) */
    int64_t experts_per_group;      /* routed experts FSDP holds whole at once (all of a layer's without groups) */
    double comm_bytes;              /* bytes one device sends per step (FSDP: device pc->rank) */
    double host_bytes;              /* offloaded checkpoints in the host tier */
    double head_bytes;              /* the loss head's working set (part of work_bytes): O(head_rows x vocab) */
    int64_t head_rows;              /* rows per logits chunk (hyla_head_rows) */
    double by_name[HYLA_CK__COUNT + 1]; /* kept (device) checkpoint bytes per name (last: internal) */
    double by_kind[2];              /* kept checkpoint bytes in linear / full layers */
    double host_by_name[HYLA_CK__COUNT + 1], host_by_kind[2]; /* offloaded bytes, the same way */
    /* bf16 compute: the checkpoints that stay fp32 (gate logits and gates, RoPE tables, LSE, the
     * router's logits, probabilities, weights and index tables), device and host together, per
     * name; every other checkpoint tensor (bf16_tensors of them) is stored as bf16. The working
     * set (work_bytes) holds fp32 forms in both dtypes. Zero in fp32. */
    double fp32_only_by_name[HYLA_CK__COUNT + 1], fp32_only_bytes;
    int64_t bf16_tensors;
    int n_timeline;
    double *timeline;               /* live device activation bytes after each op (forward then backward), owned */
    double *host_timeline;          /* live host bytes at the same points, owned */
    double *staging_timeline;       /* offload staging in use at the same points (within timeline), owned */
    int n_forward;                  /* timeline samples of the forward; backward starts at this index */
    double peak_bytes;              /* argument + temp (device) */
    /* context parallelism: the link's buffers, kept states and exchanges (part of temp), and the
     * bytes its messages send per step (part of comm_bytes) */
    double context_bytes, context_comm_bytes;
    int64_t context_calls[3][3];    /* the executor's planning pass (executor.h) */
} hyla_plan;

int hyla_plan_compute(const hyla_model *m, const hyla_plan_config *pc, hyla_plan *out);
void hyla_plan_free(hyla_plan *p);

#endif
