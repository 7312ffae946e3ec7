#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pages.h"

int hyla_arena_init(hyla_arena *a, const char *name, size_t capacity)
{
    memset(a, 0, sizeof *a);
    a->name = name;
    capacity = hyla_align_up(capacity ? capacity : HYLA_ALIGN);
    /* its own mapping, given back whole by hyla_arena_free: through malloc, glibc's dynamic mmap
     * threshold moves a freed arena's size onto the heap, where the next executor's arena (a
     * prefill piece, a request) lands beside the retained one and the process's peak grows
     * past the plan (11 MiB seen on a 4,096-token prefill) */
    void *p = hyla_pages_map(capacity);
    if (!p)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s arena: cannot allocate %zu bytes", name, capacity);
    a->base = p;
    /* fault every page in now, at setup: otherwise the first step pays for it (3.5x a normal
     * step on bench-100m) and its timing misleads */
    memset(a->base, 0, capacity);
    a->capacity = capacity;
    return HYLA_OK;
}

void hyla_arena_init_dry(hyla_arena *a, const char *name)
{
    memset(a, 0, sizeof *a);
    a->name = name;
    a->capacity = (size_t)1 << 60;
}

void hyla_arena_free(hyla_arena *a)
{
    if (a->base)
        hyla_pages_unmap(a->base, a->capacity);
    memset(a, 0, sizeof *a);
}

void *hyla_arena_alloc(hyla_arena *a, size_t bytes)
{
    size_t need = bytes > a->capacity ? a->capacity + 1 : hyla_align_up(bytes);
    if (need > a->capacity - a->used && !a->base) {
        a->overflowed = 1;
        return (void *)(uintptr_t)HYLA_ALIGN;
    }
    if (need > a->capacity - a->used) {
        fprintf(stderr, "hyla: internal error: %s arena exhausted (used %zu + %zu > %zu)\n",
                a->name, a->used, need, a->capacity);
        abort();
    }
    void *p = a->base ? (void *)(a->base + a->used) : (void *)(uintptr_t)(HYLA_ALIGN + a->used);
    a->used += need;
    if (a->used > a->high_water)
        a->high_water = a->used;
    return p;
}

float *hyla_arena_floats(hyla_arena *a, size_t count) { return hyla_arena_alloc(a, count * sizeof(float)); }
size_t hyla_arena_mark(const hyla_arena *a) { return a->used; }
void hyla_arena_reset_to(hyla_arena *a, size_t mark)
{
    HYLA_ASSERT(mark <= a->used);
    a->used = mark;
}
