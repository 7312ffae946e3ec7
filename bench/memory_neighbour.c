/* A memory-bandwidth neighbour: the OpenMP team streams reads over a buffer far larger than the caches
 * (bench/dram_bandwidth.h's pass, 512-bit loads, alternately without and with a prefetch) until
 * SECONDS have passed or it is sent SIGTERM / SIGINT, then prints what it read as one JSON object:
 * {"neighbour_gbs": bytes read / time, "passes": n, "seconds": s}. bench/contended_decode.sh
 * pins it to one core while a decode runs on the other, the way another tenant's traffic meets a
 * decode on a shared machine (the memory loaded, the decode's own cores not shared).
 * usage: memory_neighbour [SECONDS=60] [MIB=1024] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "dram_bandwidth.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig, stop = 1; }

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 60.0;
    long mib = argc > 2 ? atol(argv[2]) : 1024;
    if (!(seconds > 0.0 && seconds <= 86400.0) || mib < 64 || mib > 65536) {
        fprintf(stderr, "memory_neighbour: SECONDS must be in (0, 86400] and MIB in [64, 65536], got '%s' '%s'\n",
                argc > 1 ? argv[1] : "", argc > 2 ? argv[2] : "");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    float *a = dram_buffer((size_t)mib);
    if (!a) {
        fprintf(stderr, "memory_neighbour: cannot map %ld MiB\n", mib);
        return 1;
    }
    double t0 = omp_get_wtime(), sink = 0.0;
    long passes = 0;
    while (!stop && omp_get_wtime() - t0 < seconds) {
        dram_read_pass(a, (size_t)mib << 18, (int)(passes & 1), &sink);
        passes++;
    }
    double elapsed = omp_get_wtime() - t0 + (sink == 1.0); /* (sink is 0: keeps the sums alive) */
    printf("{\"neighbour_gbs\": %.1f, \"passes\": %ld, \"seconds\": %.1f}\n",
           (double)passes * (double)((size_t)mib << 20) / elapsed * 1e-9, passes, elapsed);
    dram_buffer_free(a, (size_t)mib);
    return 0;
}
