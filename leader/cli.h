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

#endif /* NL_LEADER_CLI_H */
