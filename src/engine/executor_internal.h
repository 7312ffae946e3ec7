/* Internal to the executor's two files (executor.c: the step; executor_setup.c: construction). */
#ifndef HYLA_ENGINE_EXECUTOR_INTERNAL_H
#define HYLA_ENGINE_EXECUTOR_INTERNAL_H

#include <stdint.h>

#include "engine/executor.h"

/* The remat units over ex->n_layers layers (the trunk's, then the MTP layer's: n_trunk_units). */
void hyla_executor_build_units(hyla_executor *ex);
/* One sequence per row of T (no packing). */
void hyla_executor_rows_as_sequences(hyla_executor *ex);
/* A step: forward; with grads, the backward (the MTP loss's first, when on). */
int hyla_executor_run_step(hyla_executor *ex, const int32_t *tokens, float *grads, float *logits, float ce_scale,
                           float aux_scale, hyla_step_loss *loss);

#endif
