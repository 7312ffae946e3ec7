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
    double gemm_seconds, gemm_flops; /* every hyla_gemm call (also inside the sections) */
} hyla_profile;

extern hyla_profile hyla_prof;

double hyla_now(void); /* monotonic seconds */
void hyla_prof_reset(void);
void hyla_prof_add(const char *name, double seconds);
/* GEMM work done inside a parallel region (hyla_gemm counts only calls made outside one). */
void hyla_prof_gemm_add(double flops, double seconds);
/* JSON array [{"op": name, "seconds": s, "calls": c}, ...] to f. */
void hyla_prof_print_json(FILE *f);

#define HYLA_PROF_BEGIN() (hyla_prof.enabled ? hyla_now() : 0.0)
#define HYLA_PROF_END(name, t0)                           \
    do {                                                  \
        if (hyla_prof.enabled)                            \
            hyla_prof_add((name), hyla_now() - (t0));     \
    } while (0)

#endif
