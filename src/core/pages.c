#include "core/pages.h"

#include <stdint.h>
#include <sys/mman.h>

void *hyla_pages_map_small(size_t bytes)
{
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void hyla_pages_advise_huge(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, b = (uintptr_t)p + bytes;
    if (b > a && b - a >= ((size_t)2 << 20))
        madvise((void *)a, b - a, MADV_HUGEPAGE); /* advice: without THP the pages stay 4 KB */
#else
    (void)p, (void)bytes;
#endif
}

void *hyla_pages_map(size_t bytes)
{
    void *p = hyla_pages_map_small(bytes);
    if (p)
        hyla_pages_advise_huge(p, bytes);
    return p;
}

void hyla_pages_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes ? bytes : 1);
}
