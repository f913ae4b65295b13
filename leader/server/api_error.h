/* api_error.h — an OpenAI-style error: the HTTP status and the body
 * {"error": {"message", "type", "param", "code"}} that every refused
 * request gets.  param names the request field at fault (JSON null when
 * none); code is a short machine-readable reason (null when none). */
#ifndef NL_SERVER_API_ERROR_H
#define NL_SERVER_API_ERROR_H

typedef struct api_error {
    int status;          /* HTTP status: 400, 401, 404, 413, 500, 503 */
    const char *type;    /* "invalid_request_error", ...              */
    const char *code;    /* NULL: null                                */
    char param[96];      /* "": null                                  */
    char message[640];
} api_error;

void api_error_set(api_error *err, int status, const char *type, const char *param,
                   const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Shorthand for a 400 invalid_request_error about field param. */
void api_error_invalid(api_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The JSON body (malloc'd; NULL when out of memory). */
char *api_error_body(const api_error *err);

#endif
