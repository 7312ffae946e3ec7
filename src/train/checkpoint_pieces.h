/* Sharded checkpoints from FSDP training (the format: model/pieces.h).
 *
 * Save (collective, every rank calls it): rank 0 begins the checkpoint's temporary directory
 * (io/outdir.h) and broadcasts its path; every rank writes its own pieces of the fp32 weights and
 * both AdamW moments there, in parallel; the ranks exchange their statuses; rank 0 then writes
 * config.json, the companion files, the carried tensors, trainer_state.json and, last, the index,
 * and publishes the directory. If any rank failed, nothing is published (the previous checkpoint
 * stays) and every rank returns an error naming the failed rank. The ranks must share the
 * directory's file system.
 *
 * Resume (any rank count, or one process): the model comes from hyla_model_load_pieces(m, dir,
 * whole = 0); this reads what this process keeps: with FSDP its pieces of the weights and
 * moments under the new rank count, else every tensor and the whole moments. */
#ifndef HYLA_TRAIN_CHECKPOINT_PIECES_H
#define HYLA_TRAIN_CHECKPOINT_PIECES_H

#include "parallel/comm.h"
#include "train/checkpoint.h"
#include "train/fsdp.h"

int hyla_checkpoint_save_pieces(const char *dir, hyla_comm *comm, hyla_model *m, const hyla_fsdp *f,
                                const hyla_adamw *opt, const hyla_train_state *st);
/* f: this rank's FSDP state (its shard layout; f->w and opt's moments are pieces), or NULL (m->w
 * and opt whole). Reads trainer_state.json into st and opt's step; closes m's pieces. */
int hyla_checkpoint_resume_pieces(const char *dir, hyla_model *m, hyla_fsdp *f, hyla_adamw *opt, hyla_train_state *st);

#endif
