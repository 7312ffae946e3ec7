/* LoRA adapters in the PEFT format, applied by merging: W += scaling * B @ A.
 *
 * An adapter directory holds adapter_config.json ({"peft_type": "LORA", "r", "lora_alpha",
 * "target_modules", "use_rslora", "use_dora", ...}) and adapter_model.safetensors with, for every
 * adapted nn.Linear module M of the Hugging Face model,
 *   base_model.model.M.lora_A.weight  [r, in]
 *   base_model.model.M.lora_B.weight  [out, r]
 * (PEFT's key names). M.weight must be a tensor of the loaded model (in the layout it was loaded
 * with: Qwen3-Next's grouped in_proj_qkvz / in_proj_ba, per-expert mlp.experts.J.*_proj, ...);
 * its rows are mapped to hyla's internal rows exactly as loading maps them. scaling =
 * lora_alpha / r (lora_alpha / sqrt(r) with use_rslora).
 *
 * Merging is one fp32 rounding per weight: the merged forward equals the unmerged adapter forward
 * (W x + s B (A x)) up to fp32 summation order. Refused, with the key or field named: another
 * model's adapter (a module this model lacks, or other shapes), a rank other than r, DoRA,
 * per-module rank/alpha patterns, embedding adapters, modules_to_save, non-finite values. */
#ifndef HYLA_MODEL_ADAPTER_H
#define HYLA_MODEL_ADAPTER_H

#include "model/model.h"

typedef struct {
    int64_t r;
    double alpha, scaling;
    size_t modules;        /* adapted modules merged */
    int use_rslora;
    double dropout;        /* lora_dropout (training only) */
} hyla_adapter_info;

/* DIR/adapter_config.json: r, lora_alpha, scaling, use_rslora, lora_dropout; refuses what hyla
 * cannot apply (non-LoRA, DoRA, rank/alpha patterns, modules_to_save), naming the field. */
int hyla_adapter_read_config(const char *dir, hyla_adapter_info *info);

/* An open adapter directory: its config, and adapter_model.safetensors checked to hold only
 * base_model.model.M.lora_A/B.weight pairs (a tensor of another kind or a lone half is refused,
 * naming it; an empty file too). hyla_adapter_next_module then yields, in file order, each module's
 * HF tensor index in `t` and its A [r, in] and B [out, r] as fp32 (malloc'd, the caller frees),
 * checked against the model: returns 1, 0 after the last, or an error naming the module (not in
 * this model, not 2-D, other shapes, a non-finite value). */
typedef struct {
    hyla_adapter_info info;
    hyla_st_set set;
    char path[4200];
} hyla_adapter_file;
int hyla_adapter_open(hyla_adapter_file *f, const char *dir);
int hyla_adapter_next_module(hyla_adapter_file *f, const hyla_param_table *t, size_t *cursor, size_t *hf, float **A,
                             float **B);
void hyla_adapter_close(hyla_adapter_file *f);

int hyla_model_merge_adapter(hyla_model *m, const char *dir, hyla_adapter_info *info);
/* hyla_model_load(dir), then (adapter != NULL) the adapter merged in; on failure nothing is held. */
int hyla_model_load_adapted(hyla_model *m, const char *dir, const char *adapter, hyla_adapter_info *info);
/* The same for inference in a precision: compute_bf16 (bf16 activations and GEMMs), weights_bf16
 * (bf16 weights only: without an adapter the matrices go straight from the file to the bf16
 * arena, no fp32 copy ever exists; with one, merged in fp32 then converted once). */
int hyla_model_load_inference(hyla_model *m, const char *dir, const char *adapter, hyla_adapter_info *info,
                              int compute_bf16, int weights_bf16);

#endif
