/* FSDP across the ranks of a communicator (shard fsdp): every rank owns one piece of every
 * parameter (parallel/shard.h) and keeps only the pieces of the fp32 weights, of the step's summed
 * gradient and (in the trainer's optimizer) of the AdamW moments.
 *
 * Weights. The model's weight arena is an anonymous mapping whose pages are resident only while
 * a part of the model is gathered: the executor acquires a layer (or the embedding, or the final
 * norm + lm_head) just before using it and releases it after (engine/executor.h,
 * hyla_weight_source); a gather writes every rank's pieces into the arena, a release gives the
 * pages back (madvise; a page shared with a neighbouring part is kept and re-written by the next
 * gather). `gathered_peak` is the high-water of gathered floats in steps (a checkpoint's or an
 * evaluation's whole-model gather, hyla_fsdp_gather_all, is outside the step and not counted).
 *
 * Prefetch. A micro-batch acquires its parts in a fixed order (hyla_fsdp_parts); when part k is
 * acquired the gather of part k + 1 is started (non-blocking) and runs while part k computes
 * (every op polls it); acquiring k + 1 waits for what is left. So two parts are gathered at
 * once. A part acquired twice in a row (a layer split over part units) stays gathered. Nothing is
 * prefetched across a micro-batch's end (the update may change the pieces in between).
 *
 * Gradients. The executor writes one remat unit's layer gradients into a window and the
 * non-layer ones into a compact head (hyla_layer_updates); as soon as a unit's gradients are
 * complete each rank reduce-scatters them: the owner of every piece adds the ranks' copies in
 * rank order (parallel/shard_comm.h), so the sum is in micro-batch order, as one process adds them.
 * The head is reduce-scattered after the micro-batch.
 *
 * Update. The global norm sums fixed blocks of squares exactly (train/optimizer.h): each owner
 * sums its pieces' blocks, the exact partial sums are gathered and merged. AdamW then updates the
 * pieces: the weights, gradients and moments are bit-identical to one process's. */
#ifndef HYLA_TRAIN_FSDP_H
#define HYLA_TRAIN_FSDP_H

#include <stddef.h>
#include <stdint.h>

#include "core/exact_sum.h"
#include "parallel/comm.h"
#include "parallel/shard_comm.h"
#include "engine/executor.h"
#include "model/model.h"
#include "train/optimizer.h"

typedef struct {
    hyla_comm *comm;
    hyla_model *m;              /* not owned; its arena holds only what is gathered */
    hyla_param_table shard;     /* the model's parameters as this rank's pieces: offset into the shard
                                 * arrays, numel = the piece's length (params owned; the rest borrowed) */
    int64_t *piece_elem0;       /* [n_params] first element of this rank's piece */
    float *w;                   /* [shard.total_floats] fp32 weights (master pieces) */
    float *grad;                /* the step's summed gradient pieces: [shard.total_floats]; per-layer
                                 * updates: the head's pieces (compact) + one unit's (piece_grad) */
    int per_layer;              /* update each unit's pieces as soon as they are summed (accum 1, no clip) */
    int frozen;                 /* the weights take no gradient (a LoRA adapter trains beside them): pieces
                                 * and gathers only; grad, stage and sums are NULL */
    int mtp;                    /* the MTP loss trains the MTP head: its gradients are summed (else frozen) */
    size_t head_pieces;         /* floats of the non-layer parameters' pieces (compact) */
    size_t grad_floats;         /* floats of grad */
    float *stage;               /* [hyla_shard_comm_floats] reduce-scatter staging */
    hyla_exact_sum *sums;       /* [ranks] every rank's exact sum of its blocks of squares (the norm) */
    size_t *layer_lo, *layer_hi;/* [n_layers] shard ranges of each layer's pieces */
    size_t unit_lo;             /* per-layer: shard offset of the unit whose pieces are in grad */
    int prefetch;               /* start part k + 1's gather when part k is acquired */
    int outside;                /* acquisitions outside a step (evaluation, sampling): no prefetch, not
                                 * counted in gathered_peak (hyla_fsdp_outside_step) */
    int (*parts)[2], n_parts;   /* a micro-batch's acquisitions in order (hyla_fsdp_parts) */
    int next;                   /* index in parts of the next acquisition */
    int inflight;               /* part whose gather is in flight, or -1 */
    int kept;                   /* part (index) left gathered for an identical next acquisition, or -1 */
    hyla_shard_requests reqs;   /* the prefetch's calls */
    /* Overlapped reduce-scatters (--overlap-reduce, with the prefetch; not frozen): a unit's are started when its
     * backward ends and finished when the next unit's ends (or at the step's end), while that
     * unit computes from the other window (the trainer's two windows). */
    int overlap;
    float *rs_stage;            /* [rs_stage_floats] every rank's copies of this rank's pieces of one unit */
    size_t rs_stage_floats;
    hyla_shard_requests rs_reqs;/* the started reduce-scatters' calls */
    int rs_layer0, rs_layer1;   /* the unit started and not finished (rs_layer0 < 0: none) */
    int rs_first;               /* ... its round is the step's first */
    double wait_seconds;        /* compute waiting for gathers (blocking ones and prefetches' rest), since reset */
    double reduce_wait_seconds; /* ... for overlapped reduce-scatters to finish, since reset */
    float *save_full[3];        /* a save: the whole-table arrays of the weights and both moments (HYLA_FETCH_*) */
    const float *save_pieces[3];/* ... and this rank's pieces of each */
    int save_part[3];           /* the layer of each now in (-1: the non-layer parameters; INT_MIN: none) */
    hyla_exact_sum sumsq;       /* per-layer: this rank's squares of the step's gradient so far */
    size_t gathered, gathered_peak; /* bytes gathered now / at most in a step (fp32, and bf16 compute's copy) */
    size_t head_floats;         /* floats of the compact head gradient (executor layout) */
    const hyla_executor *ex;    /* for the compact head's index, the window (expert groups) */
    hyla_weight_source source;
    /* Expert groups (fsdp_experts.c; groups 1: the routed experts are gathered with their layer) */
    int groups;
    hyla_expert_source experts;
    int expert_status;          /* the first failure of the step's group gathers / reduces */
    int grp_layer, grp_role;    /* the group whose gather is in flight (layer -1: none), experts from grp_e0 */
    int64_t grp_e0;
    hyla_shard_requests grp_reqs;
    int grp_seq_next;           /* index in the executor's expert_seq of the next experts call expected */
    int round_first;            /* the micro-batch is the step's first round (set by the trainer) */
    double group_reduce_seconds;/* the groups' reduce-scatters (blocking, or their waits), since reset */
    /* ... overlapped (--overlap-reduce): a group's started when its backward ends, finished when the
     * next group's ends or its unit's gradients are reduced (hyla_fsdp_experts_finish) */
    float *grp_stage;           /* [grp_stage_floats] every rank's copies of this rank's piece of one group */
    size_t grp_stage_floats;
    hyla_shard_requests grp_rs_reqs;
    int grp_rs_i;               /* the parameter of the group in flight (-1: none) ... */
    int64_t grp_rs_a, grp_rs_b; /* ... its element range, */
    float *grp_rs_window;       /* ... where its gradient rows are in the window (zeroed when finished) */
    int grp_rs_first;
    /* ... and the non-layer gradients complete after the loss head (all but the embedding's:
     * hyla_fsdp_head_early): started then, finished with the embedding's after the micro-batch */
    float *head_stage;
    size_t head_stage_floats;
    hyla_shard_requests head_reqs;
    int head_started, head_first;
    /* per-layer updates with overlapped reduce-scatters and expert groups: the previous unit's
     * reduce-scatters finished and its pieces updated (the trainer's) before this unit's first
     * group sum lands in the unit's pieces */
    int (*finish_unit)(void *ctx);
    void *finish_ctx;
} hyla_fsdp;

/* Take this rank's pieces of m's weights (every rank must hold the same m), then release the
 * arena's pages; a model opened deferred (model.h) has none yet: its pieces come later
 * (hyla_fsdp_take_param, or a sharded checkpoint's resume). ex: the step's executor (its units
 * size the per-layer gradient window). frozen: no gradient (LoRA's base); overlap:
 * --overlap-reduce. */
int hyla_fsdp_init(hyla_fsdp *f, hyla_comm *comm, hyla_model *m, const hyla_executor *ex, int per_layer, int prefetch,
                   int frozen, int overlap, int expert_groups);

void hyla_fsdp_free(hyla_fsdp *f);
/* Bytes the FSDP state owns: weight and gradient pieces, staging, the norm's partial sums (the moments are
 * the optimizer's). */
size_t hyla_fsdp_bytes(const hyla_fsdp *f);

/* A unit's layer gradients (window, table offset lo) or the compact head, into the pieces;
 * first: the step's first round. Collective. */
int hyla_fsdp_reduce_layers(hyla_fsdp *f, int layer0, int layer1, const float *window, size_t lo, int first);
/* Overlapped: start layers [layer0, layer1]'s reduce-scatters from `window` (which must stay
 * untouched until the finish); finish the one started (nothing if none): its sums in place in
 * rank order, its layer range in *layer0 / *layer1 (-1 if none). */
int hyla_fsdp_reduce_start(hyla_fsdp *f, int layer0, int layer1, const float *window, size_t lo, int first);
int hyla_fsdp_reduce_finish(hyla_fsdp *f, int *layer0, int *layer1);
int hyla_fsdp_reduce_head(hyla_fsdp *f, const float *head, int first);
/* Overlapped (--overlap-reduce): the early head gradients' reduce-scatters started when the loss
 * head is done (hyla_fsdp_reduce_head finishes them, then reduces the rest). */
int hyla_fsdp_reduce_head_start(hyla_fsdp *f, const float *head, int first);
/* The MTP loss trains the MTP head (its gradients reduced); with overlap, the head's staging. */
int hyla_fsdp_set_mtp(hyla_fsdp *f, int mtp);
/* Per-layer updates: AdamW (begun for the step) on the pieces just summed (layers [layer0, layer1],
 * or the head: layer0 < 0), their squares added to f->sumsq. */
int hyla_fsdp_update(hyla_fsdp *f, hyla_adamw *opt, int layer0, int layer1);
/* The global gradient norm (same value on every rank): of the summed pieces, or (per-layer) of
 * the squares gathered in f->sumsq during the step, which it resets. Collective. */
int hyla_fsdp_grad_norm(hyla_fsdp *f, double *norm);
/* A checkpoint's save, one part at a time: rank 0 writes a normal checkpoint (the whole model and
 * moments) while every rank holds at most one layer (or the non-layer parameters) of each of
 * the weights and both moments. save_begin on every rank (m_full, v_full: whole-table moment
 * arrays that are mappings, hyla_model_map, pages resident only while a part is in); then rank 0
 * saves with m->fetch = hyla_fsdp_fetch (each request broadcast, every rank gathers that part),
 * while the others run hyla_fsdp_serve until rank 0's hyla_fsdp_save_end; save_finish on every
 * rank gives the pages back. Collective. */
void hyla_fsdp_save_begin(hyla_fsdp *f, float *m_full, float *v_full, const float *m_pieces, const float *v_pieces);
int hyla_fsdp_fetch(void *ctx, int vector, int layer);
int hyla_fsdp_serve(hyla_fsdp *f);
int hyla_fsdp_save_end(hyla_fsdp *f);
void hyla_fsdp_save_finish(hyla_fsdp *f);
/* Every weight gathered whole into the model's arena (an evaluation or sampling), or released again. */
int hyla_fsdp_gather_all(hyla_fsdp *f);
/* Evaluation and sampling through the weight source between steps (on), every rank alike: each
 * part gathered when acquired, no prefetch (their order is not a step's), outside the step's
 * gathered high-water; off: everything released again. */
int hyla_fsdp_outside_step(hyla_fsdp *f, int on);
void hyla_fsdp_release_all(hyla_fsdp *f);
/* A whole-table vector (e.g. a moment read from a checkpoint) -> this rank's pieces. */
void hyla_fsdp_take_pieces(const hyla_fsdp *f, const float *full, float *pieces);
/* The sharded load: parameter i's weights are in the model's arena: take this rank's piece and
 * give the arena's pages back. */
void hyla_fsdp_take_param(hyla_fsdp *f, int i);
/* Where parameter i's summed gradient piece lives (per-layer updates: in the current unit's). */
float *hyla_fsdp_piece_grad(const hyla_fsdp *f, int i);
/* Expert groups (fsdp_experts.c): set up the source (groups > 1: the weight source's experts);
 * wait for a group gather in flight (between steps). */
void hyla_fsdp_experts_init(hyla_fsdp *f, int groups);
int hyla_fsdp_experts_drain(hyla_fsdp *f);
/* Overlapped group reduce-scatters: finish the one in flight (its sums in place, its window rows zeroed). */
int hyla_fsdp_experts_finish(hyla_fsdp *f);
/* Is p gathered group by group (expert groups on, a routed expert tensor)? */
int hyla_fsdp_grouped(const hyla_fsdp *f, const hyla_param *p);

#endif
