/* Bump arena: one allocation carved into buffers, with a high-water mark.
 *
 * A step's activations and workspace come from arenas sized before the step; nothing inside a
 * step calls malloc. Buffers are 64-byte aligned. hyla_arena_alloc() on an exhausted arena is a
 * programmer error (the size table was wrong) and aborts with the sizes involved. */
#ifndef HYLA_CORE_ARENA_H
#define HYLA_CORE_ARENA_H

#include <stddef.h>

typedef struct {
    unsigned char *base; /* owned; [capacity] bytes; NULL for a dry (counting-only) arena */
    size_t capacity;
    size_t used;
    size_t high_water;
    const char *name;    /* for diagnostics */
    int overflowed;      /* dry arena only: a step asked for more than its 2^60-byte capacity */
} hyla_arena;

#define HYLA_ALIGN 64
static inline size_t hyla_align_up(size_t n) { return (n + HYLA_ALIGN - 1) & ~(size_t)(HYLA_ALIGN - 1); }

int hyla_arena_init(hyla_arena *a, const char *name, size_t capacity);
/* A dry arena allocates nothing: it hands out distinct non-NULL placeholder addresses that
 * must never be dereferenced, and records the high-water mark a real arena would reach. The
 * executor's planning pass runs the exact allocation sequence of a step on dry arenas. A dry
 * arena asked for more than 2^60 bytes (absurd sizes given to `hyla plan`) sets `overflowed`
 * instead of aborting; the planner turns that into an error. */
void hyla_arena_init_dry(hyla_arena *a, const char *name);
void hyla_arena_free(hyla_arena *a);
void *hyla_arena_alloc(hyla_arena *a, size_t bytes);       /* uninitialised */
float *hyla_arena_floats(hyla_arena *a, size_t count);     /* uninitialised */
size_t hyla_arena_mark(const hyla_arena *a);
void hyla_arena_reset_to(hyla_arena *a, size_t mark);

#endif
