/* serve_absent.c — server.h in a build without libmicrohttpd (configure
 * --without-server): the options still parse, and serving says why it
 * cannot. */
#include <stdio.h>
#include <string.h>

#include "leader/server/server.h"

void server_options_init(server_options *opt)
{
    memset(opt, 0, sizeof(*opt));
}

int server_run(const nl_engine_config *config, const server_options *opt)
{
    (void)config, (void)opt;
    fprintf(stderr, "nanollm-launch: serve: this build has no HTTP server (configured --without-server; "
                    "install libmicrohttpd-dev and configure again)\n");
    return 1;
}
