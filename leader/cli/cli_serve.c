/* cli_serve.c — `nanollm-launch serve`: the options of the HTTP server
 * (leader/server/server.h), which does the rest.  The key may also come
 * from NANOLLM_API_KEY (the option wins). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"
#include "leader/server/server.h"

enum { OPT_HOST = CLI_OWN, OPT_PORT, OPT_API_KEY, OPT_SERVED_MODEL_NAME, OPT_MAX_QUEUE, OPT_SHUTDOWN_TIMEOUT };

static const struct option serve_options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"api-key", required_argument, NULL, OPT_API_KEY},
    {"served-model-name", required_argument, NULL, OPT_SERVED_MODEL_NAME},
    {"max-queue", required_argument, NULL, OPT_MAX_QUEUE},
    {"shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN_TIMEOUT},
    {NULL, 0, NULL, 0},
};

const cli_command cli_serve_command = {
    .name = "serve",
    .options = serve_options,
    .help =
    "usage: nanollm-launch serve [--host H] [--port N] [--api-key KEY] [--served-model-name NAME]\n"
    "                            [--max-queue N] [--shutdown-timeout S]\n"
    "\n"
    "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions (SSE\n"
    "with \"stream\": true), /tokenize, /detokenize; GET /v1/models, /health, /metrics.\n"
    "  --host H                 address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N                 (default 8000; 0: any free port, named on stderr)\n"
    "  --api-key KEY            every route but /health needs 'Authorization: Bearer KEY'\n"
    "                           (default: $NANOLLM_API_KEY; none when unset)\n"
    "  --served-model-name NAME the model's name in the API (default: the model directory's)\n"
    "  --max-queue N            requests that may wait to run; beyond, 503 (default 1024)\n"
    "  --shutdown-timeout S     on SIGTERM/SIGINT, seconds in-flight requests may finish\n"
    "                           before they are aborted (default 30)\n"
    "The server's steps carry at most 2048 tokens unless --max-num-batched-tokens says\n"
    "otherwise (at least --max-num-seqs): a prompt chunk then delays the running streams\n"
    "by a few milliseconds, not tens.\n",
    /* Online latency against offline throughput, measured on the H200
     * (bench/RESULTS.md): at 256 streams, steps of 2,048 tokens keep the
     * p99 inter-token latency under twice the median step at the same
     * throughput, where 16,384-token steps exceed it. */
    .default_step_tokens = 2048,
};

int cli_serve(const nl_engine_config *config, int argc, char **argv)
{
    server_options opt;
    server_options_init(&opt);
    const char *env_key = getenv("NANOLLM_API_KEY");
    if (env_key && env_key[0]) opt.api_key = env_key;
    cli_parser p;
    if (!cli_parser_init(&p, &cli_serve_command, config, argc, argv)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT) {
        int64_t iv;
        double fv;
        bool ok = true;
        if ((c == OPT_HOST || c == OPT_API_KEY || c == OPT_SERVED_MODEL_NAME) && !v[0]) {
            ok = cli_usage_error(&p, "--%s: empty value", serve_options[c - CLI_OWN].name) != CLI_EXIT;
        } else if (c == OPT_HOST) {
            opt.host = v;
        } else if (c == OPT_PORT) {
            ok = cli_parse_int(&p, "--port", v, 0, 65535, &iv);
            opt.port = (uint16_t)iv;
        } else if (c == OPT_API_KEY) {
            opt.api_key = v;
        } else if (c == OPT_SERVED_MODEL_NAME) {
            opt.served_model_name = v;
        } else if (c == OPT_MAX_QUEUE) {
            ok = cli_parse_int(&p, "--max-queue", v, 1, 1 << 20, &iv);
            opt.max_queue = (int32_t)iv;
        } else if (c == OPT_SHUTDOWN_TIMEOUT) {
            ok = cli_parse_float(&p, "--shutdown-timeout", v, 0.0, 86400.0, &fv);
            opt.shutdown_timeout = fv;
        } else if (c == CLI_POSITIONAL) {
            ok = cli_usage_error(&p, "unexpected argument '%s'", v) != CLI_EXIT;
        } else {
            ok = cli_usage_error(&p, "option %d has no handler", c) != CLI_EXIT;
        }
        if (!ok) break;
    }
    nl_engine_config engine_config = p.config;
    cli_parser_free(&p);
    if (c != CLI_DONE) return p.exit;
    return server_run(&engine_config, &opt);
}
