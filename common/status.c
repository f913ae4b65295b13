/* status.c — thread-local error messages behind nl_last_error(). */
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* A message cut at the buffer's end may end inside a UTF-8 character:
 * drop the partial character so the message stays valid UTF-8 when what
 * it quotes was. */
static void trim_partial_utf8(char *buf, int written, size_t cap)
{
    if (written < 0 || (size_t)written < cap) return; /* not cut */
    size_t len = strlen(buf);
    size_t start = len;
    while (start > 0 && ((unsigned char)buf[start - 1] & 0xC0) == 0x80) start--;
    if (start == 0) return;
    unsigned char lead = (unsigned char)buf[start - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (len - (start - 1) < need) buf[start - 1] = '\0';
}

nl_status nl_error(nl_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    trim_partial_utf8(last_error, n, sizeof last_error);
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
    int n = snprintf(last_error, sizeof last_error, "%s%s", prefix, old);
    trim_partial_utf8(last_error, n, sizeof last_error);
    return status;
}

void nl_error_clear(void)
{
    last_error[0] = '\0';
}
