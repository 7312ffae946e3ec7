/* Pictures of a training step's memory: one self-contained SVG each.
 *
 * hyla_plan_write_svg (hyla plan --svg): the planned step over op index, forward then backward.
 * hyla_measured_write_svg (hyla train --svg): a measured step over wall-clock seconds, so the
 * time spent in each op shows as width, with the plan's predicted peak as a dashed reference.
 *
 * Both share one layout. Header: title, the headline figure, the argument / temp breakdown.
 * Device tier: the per-device arguments (parameters, AdamW moments, batch) and the step-long
 * temp parts (gradients, gathered weights, carries, offload staging) are flat bands; the live
 * activation bytes (checkpoints + working set + staging in use) are a filled area on top. A
 * dashed vertical marker at the device maximum ("peak") separates forward from backward. Host
 * tier (only when the policy offloads): the offloaded checkpoints live in the host store over the
 * same axis, hatched. Bottom: checkpoint bytes per name, largest first, one colour per name,
 * solid on device and hatched on host. The plan picture uses GB = 1e9 bytes, as `hyla plan`
 * prints; the measured one MiB = 2^20 bytes, as `hyla train` prints. */
#ifndef HYLA_ENGINE_PLAN_SVG_H
#define HYLA_ENGINE_PLAN_SVG_H

#include "engine/plan.h"

/* Write the picture of `p` to `path` atomically (hyla_write_file_atomic). `title` may be NULL.
 * Returns HYLA_OK, HYLA_ERR_ARG (NULL plan or path), HYLA_ERR_NOMEM, or HYLA_ERR_IO naming
 * the path. */
int hyla_plan_write_svg(const hyla_plan *p, const char *title, const char *path);

/* Write the picture of a measured step: after op i the step had run seconds[i] and held
 * device[i] live activation bytes (hyla_executor measured_device: checkpoints + working set +
 * staging) and host[i] host-store bytes (host may be NULL: none), i < n. `plan` (the same step
 * planned) gives the flat bands, the per-name bars and the predicted peak. Errors as above. */
int hyla_measured_write_svg(const hyla_plan *plan, const double *seconds, const double *device, const double *host, int n,
                            const char *title, const char *path);

#endif
