/* The precision flags, with one meaning for every command that takes them (train, plan, forward,
 * generate, eval, serve): --act-dtype (activations, checkpoints and the inputs of every matmul),
 * --param-dtype (stored weights), --grad-dtype (parameter gradients), --opt-dtype (AdamW moments),
 * each f32 or bf16. What a command does with them is hyla_cli_precision's rule. */
#ifndef HYLA_CLI_DTYPE_FLAGS_H
#define HYLA_CLI_DTYPE_FLAGS_H

typedef struct {
    const char *act, *param, *grad, *opt; /* flag values, NULL: not given */
} hyla_cli_dtypes;

#define HYLA_OPT_ACT_DTYPE(d)                                                                                          \
    {"--act-dtype", OPT_STRING, &(d).act, "f32|bf16",                                                                  \
     "activations and matmul inputs (default f32; bf16: bf16 GEMMs with fp32 accumulation)", 0, 0}
#define HYLA_OPT_PARAM_DTYPE(d)                                                                                        \
    {"--param-dtype", OPT_STRING, &(d).param, "f32|bf16",                                                              \
     "weights in memory (default f32; bf16: BF16 tensors as stored, others rounded once; implies --act-dtype bf16)", 0, 0}
#define HYLA_OPT_GRAD_DTYPE(d) {"--grad-dtype", OPT_STRING, &(d).grad, "f32|bf16", "parameter gradients (default f32)", 0, 0}
#define HYLA_OPT_OPT_DTYPE(d) {"--opt-dtype", OPT_STRING, &(d).opt, "f32|bf16", "AdamW moments (default f32)", 0, 0}

/* Parse one flag's value: f32 (or fp32) -> 0, bf16 -> 1; NULL -> dflt. Else an error naming it. */
int hyla_cli_dtype_is_bf16(const char *flag, const char *value, int dflt, int *is_bf16);

/* What runs: compute_bf16 (bf16 activations and GEMMs) and weights_bf16 (bf16 weights only, no
 * fp32 copy). Inference (training = 0): --param-dtype bf16 implies bf16 compute; bf16 weights with
 * --act-dtype f32 are refused. Training: fp32 master weights, gradients and moments (bf16 ones
 * are refused: a bf16 weight cannot take updates smaller than its 2^-8 spacing without stochastic
 * rounding, which hyla does not do), bf16 compute with --act-dtype bf16. training =
 * HYLA_TRAIN_FROZEN_BASE (LoRA: the base takes no updates): --param-dtype bf16 is the base read as
 * bf16 only, as in inference; the adapter, its gradients and moments stay fp32. */
#define HYLA_TRAIN_FROZEN_BASE 2
int hyla_cli_precision(const hyla_cli_dtypes *d, int training, int *compute_bf16, int *weights_bf16);

#endif
