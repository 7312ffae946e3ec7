/* Training checkpoints: everything needed to continue a run bit-identically.
 *
 * Directory layout:
 *   config.json, model.safetensors (or shards)  parameters, F32 (BF16 after bf16-compute training),
 *                                               in the model's HF layout
 *   optimizer/model.safetensors                 AdamW moments: exp_avg.NAME, exp_avg_sq.NAME
 *                                               (NAME = internal parameter, e.g. layers.3.gdn_qkv);
 *                                               with a BF16 model, the fp32 master weights master.NAME
 *   trainer_state.json                          step, data position and source, seed, schedule
 * Written into DIR.tmp.PID; only when complete is it exchanged with DIR in one atomic
 * renameat2(RENAME_EXCHANGE), so at every instant DIR is a complete checkpoint (the previous or
 * the new one); a crash leaves at most a stale DIR.tmp.PID, which loading ignores. */
#ifndef HYLA_TRAIN_CHECKPOINT_H
#define HYLA_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "model/lora.h"
#include "model/model.h"
#include "train/optimizer.h"

typedef struct {
    int64_t step;          /* completed optimizer steps */
    int64_t data_pos;
    uint64_t seed;
    char data_source[512];
    char run[8192];        /* the run's settings as a JSON object (the caller's: hyla train writes every
                            * hyperparameter and the data's content hash); "" when absent */
} hyla_train_state;

int hyla_checkpoint_save(const char *dir, const hyla_model *m, const hyla_adamw *opt, const hyla_train_state *st);
/* Loads the model (hyla_model_load), then the moments into opt (already initialised for this
 * model) and the state. Every mismatch names the file and tensor or field. */
int hyla_checkpoint_load(const char *dir, hyla_model *m, hyla_adamw *opt, hyla_train_state *st);
/* The model part only (e.g. to size the optimizer before loading its state). */
int hyla_checkpoint_load_model(const char *dir, hyla_model *m);
int hyla_checkpoint_load_state(const char *dir, const hyla_model *m, hyla_adamw *opt, hyla_train_state *st);
/* FSDP's resume: this rank's pieces of the moments (opt holds pieces, layout `shard`, first
 * elements elem0[]) and, if saved (bf16 compute), of the fp32 master weights into w_pieces; the
 * state. Only those ranges of the optimizer file are read. */
int hyla_checkpoint_load_state_pieces(const char *dir, const hyla_param_table *t, const hyla_param_table *shard,
                                      const int64_t *elem0, hyla_adamw *opt, float *w_pieces, hyla_train_state *st);
/* trainer_state.json alone (step, data position, settings), e.g. to restore flags before loading;
 * _opt: the optimizer's step count into opt too. */
int hyla_checkpoint_read_state(const char *dir, hyla_train_state *st);
int hyla_checkpoint_read_state_opt(const char *dir, hyla_adamw *opt, hyla_train_state *st);
/* DIR/trainer_state.json (a checkpoint's temporary directory). */
int hyla_checkpoint_write_state(const char *dir, const hyla_adamw *opt, const hyla_train_state *st);

/* LoRA runs: the checkpoint is a PEFT adapter directory (adapter_config.json +
 * adapter_model.safetensors, loadable by PEFT and by --adapter) plus optimizer/model.safetensors
 * (moments exp_avg.adapter.I / exp_avg_sq.adapter.I of adapter-arena parameter I) and
 * trainer_state.json; the base model is not copied (its path is in the run settings). */
int hyla_checkpoint_is_adapter(const char *dir);
int hyla_checkpoint_save_adapter(const char *dir, const hyla_lora *L, const hyla_param_table *base, const hyla_adamw *opt,
                                 const hyla_train_state *st, const char *base_model);
/* Moments and state of an adapter checkpoint into opt (initialised for L) and st. */
int hyla_checkpoint_load_adapter_state(const char *dir, const hyla_lora *L, hyla_adamw *opt, hyla_train_state *st);

#endif
