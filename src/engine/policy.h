/* Remat policies (MaxText names, spec/maxtext.md §1): for each checkpoint name, kept on device,
 * offloaded to the host tier or rematerialised. */
#ifndef HYLA_ENGINE_POLICY_H
#define HYLA_ENGINE_POLICY_H

#include "model/checkpoint_names.h"

typedef enum { HYLA_KEEP_REMAT = 0, HYLA_KEEP_DEVICE = 1, HYLA_KEEP_OFFLOAD = 2 } hyla_keep;

typedef struct {
    char name[32];                 /* "minimal", "custom", ... */
    hyla_keep where[HYLA_CK__COUNT];
    int keep_internal;             /* `none`: keep unnamed tensors too (no recompute at all) */
} hyla_policy;

/* Parse a policy: a preset name, or `custom:name=device|remat|offload,...` / a bare
 * `name=...,...` list (unlisted names: decoder_layer_input device, rest remat). Unknown names and
 * values are HYLA_ERR_ARG errors naming them. */
int hyla_policy_parse(hyla_policy *p, const char *text);
/* `name=where,...` for every name (reusable as a custom policy). */
void hyla_policy_format(const hyla_policy *p, char *buf, unsigned long cap);
const char *hyla_policy_presets(void);

#endif
