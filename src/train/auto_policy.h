/* --remat auto: choose device or remat per checkpoint name to fit a memory budget at the least
 * estimated recompute time (offload is not available yet, so the choice is device / remat).
 *
 * Start from every name on device; order the names by estimated recompute seconds per byte
 * saved (recompute FLOPs of the op producing the name, at measured GEMM / elementwise speeds);
 * remat them in that order, keeping a name rematerialised only if the planned peak drops. The
 * sequence does not depend on the budget, and the budget picks the shortest prefix that fits,
 * so the predicted peak is monotone non-increasing as the budget falls. A budget below the
 * last prefix's peak is an error that states that minimum. */
#ifndef HYLA_TRAIN_AUTO_POLICY_H
#define HYLA_TRAIN_AUTO_POLICY_H

#include "train/plan.h"

/* pc->policy is ignored and replaced by the chosen one; *out receives its plan. */
int hyla_auto_policy(const hyla_model *m, hyla_plan_config *pc, double budget_bytes, hyla_plan *out);
/* Parse "40GB", "512MiB", "1.5e9" (bytes; GB = 1e9, GiB = 2^30). */
int hyla_parse_size(const char *text, double *bytes);

#endif
