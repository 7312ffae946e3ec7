/* Sharded checkpoints: every rank's pieces in a file of its own (hyla train --save-sharded).
 *
 * Directory layout (beside config.json, the source's companion files, trainer_state.json):
 *   pieces/rank-RRRRR-of-NNNNN.safetensors  rank R's pieces (parallel/shard.h: FSDP's layout over N
 *                                           ranks) of every parameter: weight.NAME, exp_avg.NAME,
 *                                           exp_avg_sq.NAME, F32 [piece length] (an empty piece has
 *                                           no tensors); NAME = the internal parameter (e.g.
 *                                           layers.3.gdn_qkv), fp32 whatever the model saves as
 *   carried.safetensors                     the source's tensors hyla does not use (mtp.* of a config
 *                                           without MTP layers, model.visual.*), byte for byte, if any
 *   hyla-pieces.json                        the index: format "hyla-pieces-1", ranks, the piece rule,
 *                                           the Hugging Face layout and dtype a consolidation writes,
 *                                           every parameter's name and length, every file's size.
 * The index is written last, into the checkpoint's temporary directory, which is then published
 * whole (io/outdir.h): a checkpoint is complete or not there.
 *
 * Reading takes any element range of a parameter from the files whose pieces overlap it, so a
 * checkpoint written on N ranks resumes on any rank count, or on one process (whole tensors).
 * The files are mapped, not read: only the ranges copied are ever touched. */
#ifndef HYLA_MODEL_PIECES_H
#define HYLA_MODEL_PIECES_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define HYLA_PIECES_INDEX "hyla-pieces.json"
#define HYLA_PIECES_CARRIED "carried.safetensors"

enum { HYLA_PIECE_W = 0, HYLA_PIECE_M = 1, HYLA_PIECE_V = 2 }; /* weights, exp_avg, exp_avg_sq */

typedef struct hyla_pieces_s hyla_pieces;

/* Does DIR hold a sharded checkpoint (its index)? */
int hyla_pieces_is_dir(const char *dir);

/* Rank `rank` of `ranks` writes DIR/pieces/rank-...safetensors: its pieces (lengths by
 * hyla_shard_piece, data at shard->params[i].offset of w, m, v: the FSDP shard arrays). */
int hyla_pieces_write_rank(const char *dir, const hyla_param_table *table, const hyla_param_table *shard, int ranks,
                           int rank, const float *w, const float *m, const float *v);
/* After every rank's file is written: the carried tensors and, last, the index (rank 0). */
int hyla_pieces_write_index(const char *dir, const hyla_model *model, int ranks, hyla_dtype save_dtype);

/* Open DIR's index and map every rank file, checked against the model built from DIR's
 * config.json (every parameter's name and length, every file's size and tensors). */
int hyla_pieces_open(hyla_pieces **out, const char *dir, const hyla_param_table *table);
void hyla_pieces_close(hyla_pieces *pc);
/* Elements [elem0, elem0 + len) of parameter `param`'s vector `vector` (HYLA_PIECE_*) into dst. */
void hyla_pieces_read(const hyla_pieces *pc, int vector, int param, int64_t elem0, int64_t len, float *dst);
int hyla_pieces_ranks(const hyla_pieces *pc);

/* A model from a sharded checkpoint: config.json, the layout and save dtype of the index, the
 * carried tensors. whole: every weight read into w (any command that loads a model); else w is
 * an untouched mapping and m->pieces stays open: the trainer's resume reads its own pieces from
 * it (hyla_model_close_pieces after), and a save (hyla convert) reads one layer at a time
 * through m->fetch, the previous layer's pages given back. */
int hyla_model_load_pieces(hyla_model *m, const char *dir, int whole);
void hyla_model_close_pieces(hyla_model *m);

#endif
