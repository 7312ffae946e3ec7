#include "core/profile.h"

#include <string.h>
#include <time.h>

hyla_profile hyla_prof;

double hyla_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const names[HYLA_PROF__COUNT] = {
    "gemm (all)", "norms+residual+embed", "gdn projections", "gdn conv+l2norm+gates", "gdn delta rule",
    "gdn gated norm", "attn projections", "attn core", "moe routing", "moe experts", "moe shared expert",
    "dense mlp", "final norm+lm_head", "losses",
};

const char *hyla_prof_name(hyla_prof_section s) { return names[s]; }

void hyla_prof_reset(void)
{
    int enabled = hyla_prof.enabled;
    memset(&hyla_prof, 0, sizeof hyla_prof);
    hyla_prof.enabled = enabled;
}
