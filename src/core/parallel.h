/* When a loop is worth a parallel region.
 *
 * Every OpenMP region in hyla carries HYLA_PAR_IF(work), work ~ the loop's elementary
 * operations: below HYLA_PAR_MIN_WORK it runs on the calling thread alone. A fork/join costs a
 * few microseconds on a quiet machine, but a scheduler time slice when another process holds a
 * core (the threads of a region wait for each other), so small regions (a tiny model's decode:
 * every op) are serial. Results never depend on it: every reduction in hyla has a fixed order,
 * whatever the thread count. */
#ifndef HYLA_CORE_PARALLEL_H
#define HYLA_CORE_PARALLEL_H

#include <stdint.h>

#ifndef HYLA_PAR_MIN_WORK
#define HYLA_PAR_MIN_WORK 65536
#endif
/* The `parallel:` modifier matters: on a combined `parallel for simd`, a plain if clause applies
 * to the simd construct too (OpenMP 5.0), so a loop too small to split would also lose its
 * vectorisation (seen: SwiGLU of one decoded token 4x slower). */
#define HYLA_PAR_IF(work) if (parallel : (int64_t)(work) >= (int64_t)HYLA_PAR_MIN_WORK)

#endif
