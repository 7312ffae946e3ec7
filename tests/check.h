/* The one assertion macro of hyla's C tests: print the failed check with file and line, count
 * it, and keep going; main() exits non-zero when `failures` is not zero. */
#ifndef HYLA_TESTS_CHECK_H
#define HYLA_TESTS_CHECK_H

#include <stdio.h>

static int failures = 0;
#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

#endif
