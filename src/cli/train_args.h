/* hyla train's parsed flags, shared by cmd_train.c and train_settings.c. */
#ifndef HYLA_CLI_TRAIN_ARGS_H
#define HYLA_CLI_TRAIN_ARGS_H

#include <stdint.h>

#include "cli/dtype_flags.h"
#include "cli/options.h"
#include "train/checkpoint.h"
#include "train/data.h"

typedef struct {
    const char *model, *config, *preset, *data, *text, *save, *resume, *log_json, *remat, *unit, *schedule;
    const char *sample_prompt, *replay, *budget, *offload_store, *offload_limit, *svg, *jsonl, *tokenizer;
    const char *eval_data, *adapter, *lora_targets;
    hyla_cli_dtypes dtypes;   /* --act-dtype (bf16: mixed precision), --param/grad/opt-dtype (f32 only) */
    int bf16_compute;         /* what they mean (hyla_cli_precision, checked once with the other flags) */
    int bf16_weights;         /* --param-dtype bf16 (LoRA only): the frozen base read as bf16, no fp32 copy */
    int64_t lora_rank;
    double lora_alpha, lora_dropout;
    int adapter_resume;       /* --resume names an adapter checkpoint: the base comes from --model */
    int synthetic, update_per_layer, shuffle, no_shuffle, pack;
    int64_t steps, batch, seq, accum, warmup, seed, threads, save_every, sample_tokens, eval_every;
    int64_t ranks;            /* processes of the run (mpirun -np; 1 without) */
    const char *shard;        /* --shard none|fsdp */
    int fsdp;                 /* what it means (default: fsdp over more than one rank) */
    int no_prefetch;          /* --no-prefetch */
    int overlap_reduce;       /* --overlap-reduce */
    int64_t expert_groups;    /* --expert-groups (OPT_INT fills an int64_t) */
    int64_t context_parallel; /* --context-parallel */
    int save_sharded;         /* --save-sharded: every FSDP rank writes its own pieces (model/pieces.h) */
    uint64_t flags_hash;      /* of the command line, for the ranks' agreement check */
    double lr, min_lr, wd, clip, beta1, beta2, eps, decay_fraction;
    double mtp_loss_weight;   /* -1 until resolved: 0.1 for a model with an MTP head (where the MTP loss runs), else 0 */
    int mtp_only;
    char restored[10][512];    /* storage for string settings restored from a checkpoint */
} train_args;

/* --resume: every setting not given on the command line takes the checkpoint's value; a
 * different value given again is applied with a notice (steps, learning-rate schedule,
 * optimizer, remat) or refused (batch, seq, seed, shuffling, data). The step's micro-batch count
 * (ranks x accum) is kept: --accum defaults to it over the ranks of this run. Prints the notices. */
int train_settings_restore(train_args *a, const hyla_command_spec *spec, const hyla_train_state *st);
/* After the data is open: its content must be what the checkpoint was trained on. */
int train_settings_check_data(const train_args *a, const hyla_data *d, const hyla_train_state *st);
/* The run's settings as JSON (into st->run) for trainer_state.json. */
int train_settings_record(const train_args *a, const hyla_data *d, hyla_train_state *st);

/* Progress: on a terminal one live line (step, loss, tokens/s, elapsed, ETA), otherwise one line
 * per step; at the end a summary (steps, tokens, time, final and best loss, the checkpoint). */
#include "train/trainer.h"
typedef struct {
    int tty;
    double t0;
    int64_t first_step, tokens, best_step;
    double best, last;
} train_progress;
void train_progress_start(train_progress *p, int64_t first_step);
void train_progress_step(train_progress *p, const train_args *a, int64_t step, const hyla_step_stats *s,
                         double activation_mib);
void train_progress_note(train_progress *p); /* before printing another line on a terminal */
void train_progress_end(train_progress *p, const train_args *a, int64_t steps_done);
/* Share of a step's host-copy time that compute did not wait for (1 without offload). */
double train_hidden_fraction(const hyla_step_stats *s);

#endif
