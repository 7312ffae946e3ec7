/* hyla error reporting.
 *
 * Library functions return HYLA_OK (0) or a negative status and record a one-line message
 * naming the file, field or tensor at fault with hyla_error_set(). Only main() decides to exit.
 * The message buffer is thread-local; hyla_error_message() returns a view valid until the next
 * hyla_error_set() on the same thread. */
#ifndef HYLA_CORE_ERROR_H
#define HYLA_CORE_ERROR_H

#include <stdio.h>
#include <stdlib.h>

enum {
    HYLA_OK = 0,
    HYLA_ERR_IO = -1,      /* file missing, unreadable, short read, write failure */
    HYLA_ERR_FORMAT = -2,  /* malformed file contents (safetensors, JSON) */
    HYLA_ERR_CONFIG = -3,  /* missing, mistyped or contradictory config field */
    HYLA_ERR_ARG = -4,     /* bad flag or argument value */
    HYLA_ERR_NOMEM = -5,   /* allocation failed */
    HYLA_ERR_MODEL = -6,   /* tensor missing, unexpected or mis-shaped */
    HYLA_ERR_NUMERIC = -7, /* a loss, gradient or weight became NaN or infinite */
};

/* printf-style; returns `status` so callers can write `return hyla_error_set(ERR, "...")`. */
int hyla_error_set(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *hyla_error_message(void);

/* Invariant check: on failure prints file:line and the expression, then aborts. For programmer
 * errors only, never for bad input. */
#define HYLA_ASSERT(cond)                                                                    \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "hyla: internal error at %s:%d: assertion '%s' failed\n", __FILE__, \
                    __LINE__, #cond);                                                         \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* Propagate a non-zero status. */
#define HYLA_TRY(expr)                     \
    do {                                   \
        int hyla_try_status_ = (expr);     \
        if (hyla_try_status_ != HYLA_OK)   \
            return hyla_try_status_;       \
    } while (0)

#endif
