/* A loaded model: validated config, block schedule, parameter table and the fp32 weight arena.
 *
 * Weights are converted to fp32 on load (F32 / BF16 / F16 sources; the conversions are exact
 * so saving in the source dtype reproduces the original bytes). The model owns everything it
 * points to. */
#ifndef HYLA_MODEL_MODEL_H
#define HYLA_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/params.h"
#include "model/schedule.h"

typedef struct {
    hyla_config cfg;
    hyla_schedule sched;
    hyla_param_table table;
    float *w;                  /* [table.total_floats], 64-byte aligned, owned */
    unsigned char *hf_dtype;   /* [table.n_hf] hyla_dtype each HF tensor was loaded from / saves as */
    unsigned char *param_dtype; /* [table.n_params] dtype of the HF tensor that filled each param */
    char *config_json;         /* original config.json text (saved verbatim), owned */
    char *source_dir;          /* directory it was loaded from, owned; NULL for a new model. Its other
                                * files (tokenizer, chat template, generation config, ...) are copied
                                * into every save */
    struct hyla_st_set_s *carried_set; /* the source's safetensors, kept mapped when it holds tensors hyla
                                        * does not use (mtp.*, model.visual.*), owned; else NULL */
    size_t *carried;           /* [n_carried] their indices in carried_set: saved byte for byte */
    size_t n_carried;
    /* A trainable LoRA adapter run unmerged beside the projections (model/lora.h), not owned, or
     * NULL. While set, training trains only the adapter: the base weights are frozen (no
     * gradients, no moments) and the executor's gradient argument is the adapter's arena. */
    struct hyla_lora_s *lora;
} hyla_model;

/* Load DIR (config.json + model.safetensors or a sharded index). Checks every tensor: missing,
 * unexpected (mtp.* and model.visual.* are ignored) and mis-shaped tensors are named. */
int hyla_model_load(hyla_model *m, const char *dir);

/* Create a model with spec §6 initialisation (seeded). Tensors save as `dtype`. */
int hyla_model_init(hyla_model *m, const hyla_config *cfg, const hyla_layout *layout, uint64_t seed,
                    hyla_dtype dtype);

/* Save as a Hugging Face directory: config.json and safetensors (sharded when larger than
 * max_shard_bytes; 0 = one file) in `layout` (NULL: the layout it was loaded with). The
 * directory is published whole (io/outdir.h): `dir` may be absent, empty or a model hyla
 * wrote; anything else is refused. */
int hyla_model_save(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes);
/* Save every tensor as `dtype` from now on (round to nearest even from the fp32 values). */
void hyla_model_set_save_dtype(hyla_model *m, hyla_dtype dtype);
/* The same files written into the existing directory `dir` (a checkpoint's temporary one). */
int hyla_model_write_files(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes);

void hyla_model_free(hyla_model *m);

/* The HF layout of the tensors in `set` (grouped/separate GDN projections, fused/per-expert
 * experts, name prefix); defaults by family where the model has no such tensors. */
int hyla_model_detect_layout(const hyla_st_set *set, const hyla_config *cfg, hyla_layout *lay, const char *dir);
/* Layout a family's Hugging Face checkpoints use by default. */
void hyla_default_layout(const hyla_config *cfg, hyla_layout *lay);
/* mtp.*, model.visual.* and (tied models) lm_head.weight are skipped on load, as in HF. */
int hyla_model_is_ignored_tensor(const char *name, const hyla_config *cfg);

/* View of a parameter's fp32 data; NULL if the model has no such parameter.
 * LM_HEAD of a tied model returns EMBED. */
float *hyla_model_param(const hyla_model *m, hyla_role role, int layer);

#endif
