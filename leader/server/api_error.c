/* api_error.c — building and serialising OpenAI-style errors. */
#include "leader/server/api_error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>

static void set_va(api_error *err, int status, const char *type, const char *param, const char *code,
                   const char *fmt, va_list ap)
{
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
}

void api_error_set(api_error *err, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_va(err, status, type, param, code, fmt, ap);
    va_end(ap);
}

void api_error_invalid(api_error *err, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_va(err, 400, "invalid_request_error", param, NULL, fmt, ap);
    va_end(ap);
}

char *api_error_body(const api_error *err)
{
    /* The message may quote request bytes that are not UTF-8: jansson then
     * refuses the string, so fall back to one without the quote. */
    json_t *msg = json_string(err->message);
    if (!msg) msg = json_string("the request was refused (its details were not valid UTF-8)");
    json_t *e = json_object();
    json_object_set_new(e, "message", msg);
    json_object_set_new(e, "type", json_string(err->type ? err->type : "invalid_request_error"));
    json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
    json_object_set_new(e, "code", err->code ? json_string(err->code) : json_null());
    json_t *o = json_pack("{s:o}", "error", e);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return text;
}
