#include "cli/dtype_flags.h"

#include <string.h>

#include "core/error.h"

int hyla_cli_dtype_is_bf16(const char *flag, const char *value, int dflt, int *is_bf16)
{
    if (!value)
        *is_bf16 = dflt;
    else if (!strcmp(value, "f32") || !strcmp(value, "fp32"))
        *is_bf16 = 0;
    else if (!strcmp(value, "bf16"))
        *is_bf16 = 1;
    else
        return hyla_error_set(HYLA_ERR_ARG, "%s must be f32 or bf16, got '%s'", flag, value);
    return HYLA_OK;
}

int hyla_cli_precision(const hyla_cli_dtypes *d, int training, int *compute_bf16, int *weights_bf16)
{
    int act, param, grad, opt;
    HYLA_TRY(hyla_cli_dtype_is_bf16("--param-dtype", d->param, 0, &param));
    HYLA_TRY(hyla_cli_dtype_is_bf16("--act-dtype", d->act, param, &act));
    HYLA_TRY(hyla_cli_dtype_is_bf16("--grad-dtype", d->grad, 0, &grad));
    HYLA_TRY(hyla_cli_dtype_is_bf16("--opt-dtype", d->opt, 0, &opt));
    if (training && ((param && training != HYLA_TRAIN_FROZEN_BASE) || grad || opt))
        return hyla_error_set(HYLA_ERR_ARG, "%s bf16: training keeps fp32 master weights, gradients and AdamW moments "
                              "(a bf16 weight cannot take updates below its 2^-8 spacing); use --act-dtype bf16 for "
                              "mixed precision%s", param ? "--param-dtype" : grad ? "--grad-dtype" : "--opt-dtype",
                              param ? " (a LoRA run's frozen base may be bf16)" : "");
    if (param && !act)
        return hyla_error_set(HYLA_ERR_ARG, "--param-dtype bf16 with --act-dtype f32: bf16 weights are multiplied in "
                              "bf16 GEMMs, whose activation inputs are bf16 too");
    *compute_bf16 = act;
    *weights_bf16 = param;
    return HYLA_OK;
}
