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

void hyla_prof_reset(void)
{
    int enabled = hyla_prof.enabled;
    memset(&hyla_prof, 0, sizeof hyla_prof);
    hyla_prof.enabled = enabled;
}

void hyla_prof_gemm_add(double flops, double seconds)
{
    hyla_prof.gemm_flops += flops;
    hyla_prof.gemm_seconds += seconds;
}

void hyla_prof_add(const char *name, double seconds)
{
    int i = 0;
    while (i < hyla_prof.n && hyla_prof.name[i] != name && strcmp(hyla_prof.name[i], name))
        i++;
    if (i == hyla_prof.n) {
        if (hyla_prof.n == HYLA_PROF_MAX)
            return;
        hyla_prof.name[hyla_prof.n++] = name;
    }
    hyla_prof.seconds[i] += seconds;
    hyla_prof.calls[i] += 1;
    hyla_prof.flops[i] += hyla_prof.gemm_flops - hyla_prof.flops_mark;
    hyla_prof.flops_mark = hyla_prof.gemm_flops;
}

void hyla_prof_print_json(FILE *f)
{
    fprintf(f, "[");
    for (int i = 0; i < hyla_prof.n; i++)
        fprintf(f, "%s{\"op\": \"%s\", \"seconds\": %.6f, \"calls\": %.0f, \"gemm_flops\": %.6g}", i ? ", " : "",
                hyla_prof.name[i], hyla_prof.seconds[i], hyla_prof.calls[i], hyla_prof.flops[i]);
    fprintf(f, "]");
}
