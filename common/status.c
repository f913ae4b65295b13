/* status.c — thread-local error messages behind nl_last_error(). */
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NL_ERROR_MAX 1024

static _Thread_local char last_error[NL_ERROR_MAX];

const char *nl_status_name(nl_status status)
{
    switch (status) {
    case NL_OK: return "ok";
    case NL_ERR_INVALID_ARG: return "invalid argument";
    case NL_ERR_IO: return "i/o error";
    case NL_ERR_FORMAT: return "bad format";
    case NL_ERR_NOMEM: return "out of memory";
    case NL_ERR_UNSUPPORTED: return "unsupported";
    case NL_ERR_RUNTIME: return "runtime error";
    case NL_ERR_WORKER: return "worker failure";
    case NL_ERR_NOT_FOUND: return "not found";
    }
    return "unknown status";
}

const char *nl_last_error(void)
{
    return last_error[0] ? last_error : "no error recorded";
}

nl_status nl_error(nl_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

nl_status nl_error_prefix(nl_status status, const char *fmt, ...)
{
    char prefix[NL_ERROR_MAX], old[NL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s%s", prefix, old);
    return status;
}

void nl_error_clear(void)
{
    last_error[0] = '\0';
}
