/* cli.h — the nanollm-launch commands.
 *
 * Each command gets the model directory (NULL when --model was not given)
 * and the arguments after the command name, and returns the process exit
 * code: 0 success, 1 runtime failure, 2 bad usage or bad input.
 */
#ifndef NL_LEADER_CLI_H
#define NL_LEADER_CLI_H

/* stdin UTF-8 text -> JSON array of ids on stdout.
 * Flags: --replace-invalid (invalid UTF-8 becomes U+FFFD), --no-special
 * (special-token strings in the text are encoded as plain text). */
int cli_tokenize(const char *model_dir, int argc, char **argv);

/* stdin JSON array of ids -> text on stdout.  Flag: --skip-special-tokens. */
int cli_detokenize(const char *model_dir, int argc, char **argv);

/* Writes a random-weight model directory (see mkmodel.h).  Takes no model
 * directory: argv holds the arguments after "mkmodel"
 * (--out DIR [--preset NAME] [--seed N] [--tokenizer DIR] [--shard-size MB]
 * and shape overrides; --help lists them). */
int cli_mkmodel(int argc, char **argv);

/* ---- engine commands (nanollm-launch generate | batch | bench) ----------- */

#include <stdbool.h>
#include <stdint.h>

#include "nanollm.h"

/* Each gets the engine configuration built from the global options (its
 * model_dir NULL selects the demo model) and the arguments after its name. */
int cli_generate(const nl_engine_config *config, int argc, char **argv);
int cli_batch(const nl_engine_config *config, int argc, char **argv);
int cli_bench(const nl_engine_config *config, int argc, char **argv);

/* Shared option parsing (cli_common.c).  Options take "--name VALUE" or
 * "--name=VALUE"; a bad value prints a message naming the option and
 * makes the command exit 2. */
#define CLI_MAX_STOP 16

typedef struct cli_sampling {
    nl_sampling_params params;
    const char *stop[CLI_MAX_STOP];
} cli_sampling;

void cli_sampling_init(cli_sampling *s);
/* argv[*i] is a sampling option: consumes it (and its value).  Returns 1
 * when consumed, 0 when argv[*i] is not a sampling option, -1 after
 * printing an error. */
int cli_sampling_option(int argc, char **argv, int *i, cli_sampling *s);

/* argv[*i] is --name or --name=VALUE: returns 1 and sets *value (advancing
 * *i past a separate value), 0 when it is another argument, -1 (message
 * printed) when the value is missing. */
int cli_option(int argc, char **argv, int *i, const char *name, const char **value);
/* Parses an integer/float value of option name in [lo, hi]; false (with a
 * message) when it is not one. */
bool cli_parse_int(const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_float(const char *name, const char *text, double lo, double hi, double *out);

/* Prints the engine's failure ("nanollm-launch: <what>: <message>"). */
void cli_report(const char *what);
/* Opens the engine for a command; on failure reports it and returns the
 * exit code: 2 when the model files are missing, malformed or describe a
 * model this build cannot run (bad input files) -- whether the leader or a
 * worker loading the weights found it -- and 1 for any other failure.  0 on
 * success. */
int cli_open_engine(const nl_engine_config *config, nl_engine **engine);
/* A note on stderr when the engine runs the built-in demo model. */
void cli_demo_note(const nl_engine *engine);
double cli_now(void);

#endif /* NL_LEADER_CLI_H */
