/* Offloaded checkpoints inside the executor (internal to src/train): where an offloaded slot's
 * device staging and host-store place come from, when its copies are issued and awaited. The
 * scheme is described in executor.h; all functions are no-ops without offloaded slots, and in
 * the planning pass they allocate on the dry arenas and issue no copies. */
#ifndef HYLA_ENGINE_OFFLOAD_H
#define HYLA_ENGINE_OFFLOAD_H

#include "engine/executor.h"

/* Start of a step: nothing staged, no copies pending, staging and host stacks empty. */
void hyla_offload_reset(hyla_executor *ex);
/* Reuse staging half h: wait for `pending` (the last copy out of it), then empty it. */
void hyla_offload_reuse_half(hyla_executor *ex, int h, hyla_xfer_ticket pending);
/* The device staging buffer [floats] of offloaded slot s of layer `owner`, in half h, and its
 * place in the host store. */
float *hyla_offload_stage(hyla_executor *ex, int owner, hyla_slot s, int64_t floats, int h);
/* Layer l's op has produced slot s (s == Y: layer l+1's X; l = -1: the embedding's X_0): send it
 * to the host store if it is offloaded; the copy's ticket is layer l's half's. */
void hyla_offload_write(hyla_executor *ex, int l, hyla_slot s);
/* After the forward: wait for every write, start reading back the last two units. */
void hyla_offload_begin_backward(hyla_executor *ex);
/* Start reading unit u's offloaded checkpoints back into half u & 1 (u < 0: nothing). */
void hyla_offload_prefetch_unit(hyla_executor *ex, int u);
/* Wait for unit u's reads and hand the buffers to the tapes; the step's first store error. */
int hyla_offload_activate_unit(hyla_executor *ex, int u);

#endif
