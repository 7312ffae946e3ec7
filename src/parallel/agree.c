/* Ranks agree on the job (see agree.h). */
#include "parallel/agree.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

uint64_t hyla_content_hash(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed ^ 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* a multiply-xorshift mix per word */
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return h * 0xc4ceb9fe1a85ec53ull;
}

int hyla_ranks_agree(hyla_comm *c, const char *const *what, const uint64_t *hash, int n)
{
    if (n < 1 || n > HYLA_AGREE_MAX)
        return hyla_error_set(HYLA_ERR_ARG, "rank agreement: %d items (1..%d)", n, HYLA_AGREE_MAX);
    if (c->size == 1)
        return HYLA_OK;
    uint64_t *all = calloc((size_t)c->size * HYLA_AGREE_MAX, sizeof *all), mine[HYLA_AGREE_MAX] = {0};
    if (!all)
        return hyla_error_set(HYLA_ERR_NOMEM, "rank agreement: out of memory");
    memcpy(mine, hash, (size_t)n * sizeof *hash);
    int rc = c->allgather(c, mine, all, sizeof mine);
    for (int r = 1; rc == HYLA_OK && r < c->size; r++)
        for (int i = 0; i < n; i++)
            if (all[r * HYLA_AGREE_MAX + i] != all[i]) {
                rc = hyla_error_set(HYLA_ERR_ARG, "the ranks do not run the same job: rank %d's %s differ%s from rank "
                                    "0's (every rank must get the same model, data and flags)", r, what[i],
                                    what[i][strlen(what[i]) - 1] == 's' ? "" : "s");
                break;
            }
    free(all);
    return rc;
}
