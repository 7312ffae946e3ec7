/* Opt-in wall-clock profile by named section (for benchmarks; off by default and then nearly
 * free). Not thread-safe: sections are timed on the calling thread around parallel work. */
#ifndef HYLA_CORE_PROFILE_H
#define HYLA_CORE_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#define HYLA_PROF_MAX 64

typedef struct {
    int enabled;
    int n;
    const char *name[HYLA_PROF_MAX]; /* static strings, compared by address then content */
    double seconds[HYLA_PROF_MAX];
    double calls[HYLA_PROF_MAX];
    double flops[HYLA_PROF_MAX];     /* GEMM flops done since the previous section closed (see below) */
    double gemm_seconds, gemm_flops; /* every hyla_gemm call (also inside the sections) */
    double flops_mark;               /* gemm_flops when the last section closed */
} hyla_profile;

extern hyla_profile hyla_prof;

double hyla_now(void); /* monotonic seconds */
void hyla_prof_reset(void);
void hyla_prof_add(const char *name, double seconds);
/* GEMM work done inside a parallel region (hyla_gemm counts only calls made outside one). */
void hyla_prof_gemm_add(double flops, double seconds);
/* JSON array [{"op": name, "seconds": s, "calls": c, "gemm_flops": f}, ...] to f. A section's
 * GEMM flops are those counted between the previous section's close and its own: exact for
 * sections that follow one another (the ops of a step); a section that encloses others keeps only
 * the flops after the last of them closed. */
void hyla_prof_print_json(FILE *f);

#define HYLA_PROF_BEGIN() (hyla_prof.enabled ? hyla_now() : 0.0)
#define HYLA_PROF_END(name, t0)                           \
    do {                                                  \
        if (hyla_prof.enabled)                            \
            hyla_prof_add((name), hyla_now() - (t0));     \
    } while (0)

#endif
