/* cli.h — the nanollm-launch commands and the option parser they share.
 *
 * Each command gets the arguments after its name and returns the process
 * exit code: 0 success, 1 runtime failure, 2 bad usage or bad input.  The
 * global options (--model, --tp, --device, --threads) and the engine options
 * are accepted by every command, before or after its name: launch_main.c
 * passes every argument but the command's name on, and the command's parser
 * (cli_args.c) takes the global ones along with its own.
 */
#ifndef NL_LEADER_CLI_H
#define NL_LEADER_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "nanollm.h"

/* ---- the commands -------------------------------------------------------- */

/* Each gets the engine configuration to start from (its model_dir NULL
 * selects the demo model; options in argv change a copy of it). */
int cli_generate(const nl_engine_config *config, int argc, char **argv);
int cli_batch(const nl_engine_config *config, int argc, char **argv);
int cli_bench(const nl_engine_config *config, int argc, char **argv);
/* The OpenAI-compatible HTTP server (cli_serve.c, leader/server/). */
int cli_serve(const nl_engine_config *config, int argc, char **argv);

/* stdin UTF-8 text -> JSON array of ids on stdout.
 * Flags: --replace-invalid (invalid UTF-8 becomes U+FFFD), --no-special
 * (special-token strings in the text are encoded as plain text).  model_dir
 * NULL: the demo model's tokenizer, unless argv holds --model. */
int cli_tokenize(const char *model_dir, int argc, char **argv);

/* stdin JSON array of ids -> text on stdout.  Flag: --skip-special-tokens. */
int cli_detokenize(const char *model_dir, int argc, char **argv);

/* stdin chat request (JSON) -> the model's chat template rendered on stdout. */
int cli_chat_template(const char *model_dir, int argc, char **argv);

/* Writes a random-weight model directory (see mkmodel.h): --out DIR
 * [--preset NAME] [--seed N] [--tokenizer DIR | --no-tokenizer]
 * [--shard-size MB] and shape overrides; --help lists them. */
int cli_mkmodel(int argc, char **argv);

/* Each command's options and help (in its own file), for the parser and for
 * launch_main.c, which must tell an option's value from the command's name. */
typedef struct cli_command cli_command;
extern const cli_command cli_generate_command, cli_batch_command, cli_bench_command,
    cli_serve_command, cli_tokenize_command, cli_detokenize_command, cli_chat_template_command,
    cli_mkmodel_command;

/* ---- the parser (cli_args.c) ---------------------------------------------
 *
 * Built on getopt_long: "--name VALUE", "--name=VALUE", unambiguous
 * prefixes, "--" ends the options.  Every usage error is printed the same
 * way, "nanollm-launch CMD: WHAT (see --help)", and exits 2. */

/* A command: its name, the options it adds to the global and engine ones
 * (val >= CLI_OWN, {0}-terminated) and its --help text (synopsis and its own
 * options; the global and engine options are appended). */
struct cli_command {
    const char *name;
    const struct option *options;
    const char *help;
    void (*help_more)(void); /* prints what the help cannot know statically; may be NULL */
    /* The command's own default for --max-num-batched-tokens (raised to
     * --max-num-seqs when that is larger); 0: the library's. */
    int32_t default_step_tokens;
};

enum {
    CLI_DONE = -1,       /* no more arguments                              */
    CLI_EXIT = -2,       /* --help printed or a usage error: return p->exit */
    CLI_POSITIONAL = 1,  /* a positional argument, in *value               */
    CLI_OWN = 1000,      /* first val of a command's own options           */
};

typedef struct cli_parser {
    const cli_command *cmd;
    nl_engine_config config; /* the global and engine options applied      */
    int exit;                /* the exit code after CLI_EXIT               */
    /* private */
    int argc;
    char **argv;
    struct option *table;
    char *optstring;
    bool after_dashes;
} cli_parser;

/* Starts parsing argv (the arguments after the command's name) for cmd,
 * from config (NULL: the library's defaults).  false (message printed) when
 * out of memory. */
bool cli_parser_init(cli_parser *p, const cli_command *cmd, const nl_engine_config *config, int argc,
                     char **argv);
void cli_parser_free(cli_parser *p);

/* The next of the command's own options (its val, the value in *value),
 * CLI_POSITIONAL, CLI_DONE (after checking the engine options together) or
 * CLI_EXIT.  Global and engine options are applied to p->config here. */
int cli_next(cli_parser *p, const char **value);

/* Prints "nanollm-launch CMD: WHAT (see --help)", sets p->exit = 2 and
 * returns CLI_EXIT. */
int cli_usage_error(cli_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses an integer/float value of option name in [lo, hi]; false (after
 * cli_usage_error) when it is not one. */
bool cli_parse_int(cli_parser *p, const char *name, const char *text, int64_t lo, int64_t hi,
                   int64_t *out);
bool cli_parse_float(cli_parser *p, const char *name, const char *text, double lo, double hi,
                     double *out);

/* The global usage (nanollm-launch --help). */
void cli_print_usage(void);
/* Whether --name (as written, without "=VALUE") is an option of cmd's
 * table, global ones included, that takes a value; unambiguous prefixes
 * count, as getopt_long accepts them. */
bool cli_option_takes_value(const cli_command *cmd, const char *name);

/* ---- sampling options (generate, batch) ---------------------------------- */

#define CLI_MAX_STOP 16

typedef struct cli_sampling {
    nl_sampling_params params;
    const char *stop[CLI_MAX_STOP];
} cli_sampling;

/* The sampling options' entries, to put in a command's option table. */
enum {
    CLI_OPT_MAX_TOKENS = 900, CLI_OPT_TEMPERATURE, CLI_OPT_TOP_K, CLI_OPT_TOP_P, CLI_OPT_MIN_P,
    CLI_OPT_SEED, CLI_OPT_IGNORE_EOS, CLI_OPT_STOP, CLI_OPT_LOGPROBS,
};
#define CLI_SAMPLING_OPTIONS                                                                    \
    {"max-tokens", required_argument, NULL, CLI_OPT_MAX_TOKENS},                                \
    {"temperature", required_argument, NULL, CLI_OPT_TEMPERATURE},                              \
    {"top-k", required_argument, NULL, CLI_OPT_TOP_K},                                          \
    {"top-p", required_argument, NULL, CLI_OPT_TOP_P},                                          \
    {"min-p", required_argument, NULL, CLI_OPT_MIN_P},                                          \
    {"seed", required_argument, NULL, CLI_OPT_SEED},                                            \
    {"ignore-eos", no_argument, NULL, CLI_OPT_IGNORE_EOS},                                      \
    {"stop", required_argument, NULL, CLI_OPT_STOP},                                            \
    {"logprobs", required_argument, NULL, CLI_OPT_LOGPROBS}
#define CLI_SAMPLING_HELP                                                                       \
    "sampling options:\n"                                                                       \
    "  --max-tokens N (16)  --temperature F (1.0; 0 = greedy)  --top-k N (0 = off)\n"           \
    "  --top-p F (1.0)  --min-p F (0)  --seed N  --ignore-eos  --stop STRING (repeatable)\n"    \
    "  --logprobs N (0-20: the top N log-probabilities of each generated token)\n"

void cli_sampling_init(cli_sampling *s);
/* Applies sampling option id (a CLI_OPT_* above) with its value: 1 when
 * applied, 0 when id is not a sampling option, CLI_EXIT after a usage
 * error. */
int cli_sampling_option(cli_parser *p, int id, const char *value, cli_sampling *s);

/* ---- shared helpers (cli_common.c) ---------------------------------------- */

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
