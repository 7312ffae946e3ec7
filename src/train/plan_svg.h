/* A picture of a memory plan (hyla plan): one self-contained SVG.
 *
 * Top: the step's memory over op index, forward then backward. The per-device arguments
 * (parameters, AdamW moments, batch) and the step-long temp parts (gradients, gathered
 * weights, carries) are flat bands at the bottom; the live activations (checkpoints + working
 * set, hyla_plan.timeline) are a filled area on top of them. A dashed vertical marker at the
 * timeline's maximum ("peak") separates forward from backward, and a dashed horizontal line
 * shows the plan's total (argument + temp). Bottom: kept checkpoint bytes per name, largest
 * first, with a share bar and one colour per name. Header: title, total, argument, temp.
 * GB = 1e9 bytes, as in the text report. */
#ifndef HYLA_TRAIN_PLAN_SVG_H
#define HYLA_TRAIN_PLAN_SVG_H

#include "train/plan.h"

/* Write the picture of `p` to `path` atomically (hyla_write_file_atomic). `title` may be NULL.
 * Returns HYLA_OK, HYLA_ERR_ARG (NULL plan or path), HYLA_ERR_NOMEM, or HYLA_ERR_IO naming
 * the path. */
int hyla_plan_write_svg(const hyla_plan *p, const char *title, const char *path);

#endif
