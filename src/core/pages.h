/* Large buffers as their own anonymous mappings, backed by transparent huge pages where the
 * kernel has them (THP in "madvise" mode, as on this machine, backs only regions that ask).
 * Streaming a buffer through 4 KB pages costs a TLB miss every 4 KB: a bf16 GEMV over
 * Qwen3.5-0.8B's 508 MB lm_head reads at 24.7 GB/s on 4 KB pages and 35 GB/s on 2 MB pages
 * here (2 threads). Pages are faulted in by the first write, as for any mapping; the resident
 * size is what is touched, rounded to the page that holds it. */
#ifndef HYLA_CORE_PAGES_H
#define HYLA_CORE_PAGES_H

#include <stddef.h>

/* NULL when the mapping fails. bytes 0 maps one page. */
void *hyla_pages_map(size_t bytes);
/* The same mapping in 4 KB pages (a buffer that is only ever partly touched: a 2 MB page would
 * make a few KB of use 2 MB resident). */
void *hyla_pages_map_small(size_t bytes);
/* Huge pages for [p, p + bytes) of a hyla_pages_map_small mapping (from the first 4 KB boundary). */
void hyla_pages_advise_huge(void *p, size_t bytes);
void hyla_pages_unmap(void *p, size_t bytes);

#endif
