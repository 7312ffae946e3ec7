#include "core/rss.h"

#include <stdio.h>
#include <string.h>

static size_t status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kib = 0, n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && sscanf(line + n, " %zu", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

size_t hyla_rss_bytes(void) { return status_kib("VmRSS:") * 1024; }
size_t hyla_peak_rss_bytes(void) { return status_kib("VmHWM:") * 1024; }
