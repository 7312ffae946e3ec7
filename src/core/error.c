#include "core/error.h"

#include <stdarg.h>

static _Thread_local char error_message[1024];

int hyla_error_set(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return status;
}

const char *hyla_error_message(void)
{
    return error_message[0] ? error_message : "unknown error";
}
