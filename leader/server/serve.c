/* serve.c — the server's life: start-up, the wait for a signal, graceful
 * shutdown.
 *
 * SIGINT and SIGTERM are blocked in every thread before any thread starts
 * and taken with sigwait here, so a signal never interrupts an HTTP or the
 * engine thread.  Shutdown: stop accepting, refuse new requests, let the
 * running ones finish until the deadline, then abort what is left; close
 * every connection, close the engine (its workers exit) and return 0.
 */
#include "leader/server/server.h"

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader/server/engine_loop.h"
#include "leader/server/http.h"
#include "leader/server/metrics.h"

#define SERVE_GRACE_S 2.0 /* after the deadline, for aborted responses to be written */

void server_options_init(server_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->host = "127.0.0.1";
    opt->port = 8000;
    opt->max_queue = 1024;
    opt->shutdown_timeout = 30.0;
    opt->max_body = (size_t)4 << 20;
}

/* The model's name: the last component of its directory. */
static void default_model_name(const char *dir, bool demo, char *out, size_t n)
{
    if (!dir || demo) {
        snprintf(out, n, "nanollm-demo");
        return;
    }
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", dir);
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/') copy[--len] = '\0';
    snprintf(out, n, "%s", basename(copy));
}

int server_run(const nl_engine_config *config, const server_options *opt)
{
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    metrics *m = metrics_create();
    if (!m) {
        fprintf(stderr, "nanollm-launch: serve: out of memory\n");
        return 1;
    }
    char why[1024];
    engine_loop *loop = NULL;
    nl_status st = engine_loop_start(config, opt->max_queue, m, &loop, why, sizeof(why));
    if (st != NL_OK) {
        fprintf(stderr, "nanollm-launch: opening the engine: %s\n", why);
        metrics_destroy(m);
        return st == NL_ERR_IO || st == NL_ERR_FORMAT || st == NL_ERR_UNSUPPORTED ? 2 : 1;
    }
    const nl_engine_info *info = engine_loop_info(loop);
    if (info->is_demo_model)
        fprintf(stderr, "nanollm-launch: note: no --model given, using the built-in demo model "
                        "(random weights): its text is noise\n");
    char name[512];
    if (opt->served_model_name) snprintf(name, sizeof(name), "%s", opt->served_model_name);
    else default_model_name(config->model_dir, info->is_demo_model, name, sizeof(name));

    http_options hopt = {.host = opt->host, .port = opt->port, .api_key = opt->api_key, .model_name = name,
                         .max_body = opt->max_body};
    http_server *http = NULL;
    if (!http_start(&hopt, loop, m, &http, why, sizeof(why))) {
        fprintf(stderr, "nanollm-launch: serve: %s\n", why);
        engine_loop_stop(loop);
        metrics_destroy(m);
        return 1;
    }
    fprintf(stderr,
            "nanollm-launch: serve: model '%s' on %s, max_model_len %d, %s steps of up to %d tokens, "
            "listening on http://%s:%u%s\n",
            name, info->device_name, info->max_model_len, config->prefill_first ? "prefill-first" : "mixed",
            config->max_num_batched_tokens, opt->host, (unsigned)http_port(http),
            opt->api_key ? " (API key required)" : "");
    if (!opt->api_key && strcmp(opt->host, "127.0.0.1") != 0 && strcmp(opt->host, "::1") != 0 &&
        strcmp(opt->host, "localhost") != 0)
        fprintf(stderr, "nanollm-launch: serve: warning: listening beyond loopback without --api-key: "
                        "anyone who reaches %s can use the model\n", opt->host);
    fflush(stderr);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "nanollm-launch: serve: %s: no new connections; in-flight requests have %g s to finish\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", opt->shutdown_timeout);
    http_quiesce(http);
    double deadline = server_now() + opt->shutdown_timeout;
    engine_loop_drain(loop, deadline);
    struct timespec slice = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    while ((engine_loop_in_flight(loop) > 0 || http_busy(http) > 0) && server_now() < deadline + SERVE_GRACE_S) {
        /* A second signal cuts the wait short. */
        if (sigtimedwait(&stop_signals, NULL, &slice) > 0 && server_now() < deadline) {
            fprintf(stderr, "nanollm-launch: serve: second signal: aborting the in-flight requests\n");
            deadline = server_now();
            engine_loop_drain(loop, deadline);
        }
    }
    http_stop(http);
    engine_loop_stop(loop);
    metrics_destroy(m);
    fprintf(stderr, "nanollm-launch: serve: stopped\n");
    return 0;
}
