/* cli_common.c — what the nanollm-launch commands share besides option
 * parsing (cli_args.c): opening the engine, reporting its failures, the
 * demo-model note and the clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader/cli/cli.h"

void cli_report(const char *what)
{
    fprintf(stderr, "nanollm-launch: %s: %s\n", what, nl_last_error());
}

int cli_open_engine(const nl_engine_config *config, nl_engine **engine)
{
    nl_status status = nl_engine_open(config, engine);
    if (status == NL_OK) return 0;
    cli_report("opening the engine");
    /* an option or environment value out of range is bad usage, like a bad
     * model file; memory, CUDA and workers are runtime failures */
    return status == NL_ERR_INVALID_ARG || status == NL_ERR_IO || status == NL_ERR_FORMAT ||
                   status == NL_ERR_UNSUPPORTED
               ? 2
               : 1;
}

void cli_demo_note(const nl_engine *engine)
{
    nl_engine_info info;
    nl_engine_get_info(engine, &info);
    if (info.is_demo_model)
        fprintf(stderr, "nanollm-launch: note: no --model given, using the built-in demo model "
                        "(random weights): its text is noise\n");
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
