/* server.h — `nanollm-launch serve`: an OpenAI-compatible HTTP server.
 *
 * The pieces, one file each: http.c (routes, authentication, bodies,
 * waits, SSE), request.c (JSON bodies parsed and validated), response.c
 * (OpenAI response and chunk shapes), job.c (a request's result channel),
 * engine_loop.c (the one thread that owns the engine, and its queue),
 * metrics.c (Prometheus text), serve.c (start-up and graceful shutdown).
 * The server uses only the public API, nanollm.h.
 */
#ifndef NL_SERVER_SERVER_H
#define NL_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "nanollm.h"

typedef struct server_options {
    const char *host;               /* default "127.0.0.1" (loopback only)   */
    uint16_t port;                  /* default 8000; 0: any free port         */
    const char *api_key;            /* NULL: no key needed                    */
    const char *served_model_name;  /* NULL: the model directory's name       */
    int32_t max_queue;              /* requests waiting to run, default 1024  */
    double shutdown_timeout;        /* seconds in-flight requests may finish  */
    size_t max_body;                /* request body limit in bytes            */
} server_options;

void server_options_init(server_options *opt);

/* Opens the engine, serves until SIGINT or SIGTERM, then stops accepting,
 * lets in-flight requests finish for shutdown_timeout seconds, aborts the
 * rest and closes the engine.  Returns the exit code: 0 after a signal, 1
 * when the engine or the listening socket could not be set up (2 when the
 * model files are bad). */
int server_run(const nl_engine_config *config, const server_options *opt);

#endif
