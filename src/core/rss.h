/* This process's resident memory, from /proc/self/status (0 where it cannot be read). */
#ifndef HYLA_CORE_RSS_H
#define HYLA_CORE_RSS_H

#include <stddef.h>

size_t hyla_rss_bytes(void);      /* VmRSS: resident now */
size_t hyla_peak_rss_bytes(void); /* VmHWM: the most resident at any time so far */

#endif
