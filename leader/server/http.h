/* http.h — the HTTP front of the server, on libmicrohttpd.
 *
 * A thread per connection: each request's thread reads the body (up to
 * max_body bytes; a larger one is read to its end and answered 413), checks
 * the API key, routes, parses, hands the job to the engine thread and then
 * blocks on the job's channel -- for a whole response, or inside the
 * content callback of a server-sent-events stream.  While it waits it
 * polls its socket every 100 ms, so a client that disconnects has its
 * request aborted at once.
 *
 * Routes: POST /v1/completions, /v1/chat/completions, /tokenize,
 * /detokenize; GET /v1/models, /health (no key needed), /metrics.
 */
#ifndef NL_SERVER_HTTP_H
#define NL_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leader/server/engine_loop.h"
#include "leader/server/metrics.h"

typedef struct http_options {
    const char *host;        /* address or name to bind                 */
    uint16_t port;           /* 0: any free port (see http_port)        */
    const char *api_key;     /* NULL: no authentication                  */
    const char *model_name;  /* the served model name                    */
    size_t max_body;         /* bytes                                    */
} http_options;

typedef struct http_server http_server;

/* Binds and starts serving; false with the reason in why. */
bool http_start(const http_options *opt, engine_loop *loop, metrics *m, http_server **out, char *why,
                size_t why_len);
uint16_t http_port(const http_server *srv);
/* Stops accepting connections (the listening socket is closed); open
 * connections are still served. */
void http_quiesce(http_server *srv);
/* Requests being handled now (body read, waiting, or streaming). */
int32_t http_busy(http_server *srv);
/* Ends every connection and joins their threads, then frees srv. */
void http_stop(http_server *srv);

#endif
