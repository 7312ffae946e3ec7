/* The machine's DRAM read bandwidth, measured in the bench's own run: every thread of the
 * OpenMP team streams its share of a buffer far larger than the caches (1 GiB) with 512-bit loads
 * into four independent sums, in passes without and with a software prefetch 4 KB ahead (either can
 * be the faster one on a given VM: 76 vs 80 GB/s, then 69 vs 78, on the Zen 5 here); the best of
 * six passes (GB/s = 1e9 bytes/s), so a kernel's % of it is against the most the machine gave. Benches report their
 * bandwidth as a % of this figure, measured beside them, not of a datasheet's or another
 * machine's. The buffer is mapped as hyla maps its weights (hyla_pages_map: huge pages where the
 * kernel gives them; 4 KB pages read ~30% slower here), so the figure is the peak hyla's own
 * buffers could reach. dram_read_gbs_passes: fewer passes over a smaller buffer (512 MiB, 2 passes: ~0.1 s),
 * for a figure taken right beside a measurement; dram_buffer + dram_read_gbs_buffer: passes over one
 * buffer kept mapped, for figures taken between the windows of a measurement. Header-only: one bench
 * per binary. */
#ifndef HYLA_BENCH_DRAM_BANDWIDTH_H
#define HYLA_BENCH_DRAM_BANDWIDTH_H

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/pages.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* One pass over a[n] (n a multiple of 64 floats), without or with a prefetch 4 KB ahead: GB/s.
 * *sink gets the sum (keeps the loads alive). */
static double dram_read_pass(const float *a, size_t n, int prefetch, double *sink)
{
    double t0 = omp_get_wtime(), total = 0.0;
#pragma omp parallel reduction(+ : total)
    {
#if defined(__AVX512F__)
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i += 64) {
            if (prefetch) /* the iteration's 4 lines, 4 KB ahead (past the end: a prefetch does not fault) */
                for (int l = 0; l < 64; l += 16)
                    _mm_prefetch((const char *)(a + i + 1024 + l), _MM_HINT_T0);
            s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
            s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
            s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
            s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
        }
        total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
#else
        (void)prefetch;
        float s[8] = {0};
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i += 8)
            for (int j = 0; j < 8; j++)
                s[j] += a[i + j];
        for (int j = 0; j < 8; j++)
            total += s[j];
#endif
    }
    double gbs = (double)(n * sizeof(float)) / (omp_get_wtime() - t0) * 1e-9;
    *sink += total;
    return gbs;
}

/* A buffer of `mib` MiB mapped as hyla maps its weights and made resident (not the zero page), for
 * dram_read_pass; NULL when it cannot be mapped. Free with dram_buffer_free. */
static float *dram_buffer(size_t mib)
{
    float *a = hyla_pages_map(mib << 20);
    if (a)
        memset(a, 0, mib << 20);
    return a;
}

static void dram_buffer_free(float *a, size_t mib) { hyla_pages_unmap(a, mib << 20); }

/* The best of `passes` passes (alternately without and with the prefetch) over a[mib MiB]. */
static double dram_read_gbs_buffer(const float *a, size_t mib, int passes)
{
    double best = 0.0, sink = 0.0;
    for (int pass = 0; pass < passes; pass++) {
        double gbs = dram_read_pass(a, mib << 18, pass & 1, &sink);
        if (gbs > best)
            best = gbs;
    }
    return sink == 1.0 ? 0.0 : best; /* (sink is 0: keeps the sums alive) */
}

/* The best of `passes` passes over a buffer of `mib` MiB mapped for them. */
static double dram_read_gbs_passes(int passes, size_t mib)
{
    float *a = dram_buffer(mib);
    if (!a)
        return 0.0;
    double best = dram_read_gbs_buffer(a, mib, passes);
    dram_buffer_free(a, mib);
    return best;
}

static inline double dram_read_gbs(void) { return dram_read_gbs_passes(6, 1024); }

#endif
