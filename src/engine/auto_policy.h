/* --remat auto: choose device, offload or remat per checkpoint name to fit a memory budget at the
 * least estimated extra time.
 *
 * Costs, in seconds per byte of checkpoint taken off the device:
 *   remat   - recompute FLOPs of the op producing the name, at measured GEMM / elementwise speeds;
 *   offload - the round trip to the host store at its measured speed, times the share of copy
 *             time the step's compute cannot hide (estimated from the step's FLOPs if every
 *             candidate name were offloaded; at least 5% for synchronisation).
 * Start from every name on device; order all (name, remat) and (name, offload) moves by cost
 * (names one GEMM produces together, mlpwi_0/1 and moe_mlpwi_0/1, move as a pair: keeping one
 * alone saves no recompute);
 * apply them in that order (a name on the host may still move to remat, never back), keeping a
 * move only if the planned peak drops and the host bytes stay within the host budget. The
 * sequence does not depend on the budget, and the budget picks the shortest prefix that fits, so
 * the predicted peak is monotone non-increasing as the budget falls. A budget below the last
 * prefix's peak is an error that states that minimum. */
#ifndef HYLA_ENGINE_AUTO_POLICY_H
#define HYLA_ENGINE_AUTO_POLICY_H

#include "engine/plan.h"

/* pc->policy is ignored and replaced by the chosen one; *out receives its plan. host_budget:
 * bytes the host store may hold (0: offload nothing; INFINITY: no limit). */
int hyla_auto_policy(const hyla_model *m, hyla_plan_config *pc, double budget_bytes, double host_budget, hyla_plan *out);
/* Parse "40GB", "512MiB", "1.5e9" (bytes; GB = 1e9, GiB = 2^30). */
int hyla_parse_size(const char *text, double *bytes);

#endif
