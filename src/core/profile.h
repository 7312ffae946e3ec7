/* Opt-in per-op wall-clock profile (for benchmarks; off by default and then nearly free).
 * Not thread-safe: sections are timed on the calling (main) thread around parallel work. */
#ifndef HYLA_CORE_PROFILE_H
#define HYLA_CORE_PROFILE_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    HYLA_PROF_GEMM,          /* every hyla_gemm call (also counted inside the sections below) */
    HYLA_PROF_NORM,          /* RMSNorm / residual adds / embedding */
    HYLA_PROF_GDN_PROJ,      /* GDN input and output projections */
    HYLA_PROF_GDN_CONV,      /* conv + silu, l2norm, gates */
    HYLA_PROF_GDN_DELTA,     /* delta rule */
    HYLA_PROF_GDN_NORM,      /* gated RMSNorm */
    HYLA_PROF_ATTN_PROJ,     /* q/k/v/o projections */
    HYLA_PROF_ATTN_CORE,     /* q/k norm, RoPE, softmax attention, gate */
    HYLA_PROF_MOE_ROUTE,     /* router GEMM, softmax/top-k, grouping */
    HYLA_PROF_MOE_EXPERTS,   /* routed expert SwiGLUs incl. gather/scatter */
    HYLA_PROF_MOE_SHARED,    /* shared expert and its gate */
    HYLA_PROF_MLP,           /* dense SwiGLU */
    HYLA_PROF_LM_HEAD,       /* final norm + lm_head */
    HYLA_PROF_LOSS,          /* cross-entropy + aux */
    HYLA_PROF__COUNT
} hyla_prof_section;

typedef struct {
    int enabled;
    double seconds[HYLA_PROF__COUNT];
    double gemm_flops;       /* 2*M*N*K summed over hyla_gemm calls */
} hyla_profile;

extern hyla_profile hyla_prof;

double hyla_now(void); /* monotonic seconds */
const char *hyla_prof_name(hyla_prof_section s);
void hyla_prof_reset(void);

#define HYLA_PROF_BEGIN() (hyla_prof.enabled ? hyla_now() : 0.0)
#define HYLA_PROF_END(section, t0)                                \
    do {                                                          \
        if (hyla_prof.enabled)                                    \
            hyla_prof.seconds[section] += hyla_now() - (t0);      \
    } while (0)

#endif
