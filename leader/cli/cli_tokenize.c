/* cli_tokenize.c — the `tokenize` and `detokenize` commands: text on stdin
 * to a JSON array of ids on stdout, and back.  Exit codes as in cli.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"

/* Bad or missing files are the user's to fix (2); the rest is a failure (1). */
static int exit_code(nl_status st)
{
    switch (st) {
    case NL_OK: return 0;
    case NL_ERR_INVALID_ARG:
    case NL_ERR_IO:
    case NL_ERR_FORMAT:
    case NL_ERR_UNSUPPORTED:
    case NL_ERR_NOT_FOUND: return 2;
    default: return 1;
    }
}

static int fail(const char *command, nl_status st)
{
    fprintf(stderr, "nanollm-launch %s: %s\n", command, nl_last_error());
    return exit_code(st);
}

/* A failure of the command itself (not the library's): its own message. */
static int fail_with(const char *command, nl_status st, const char *message)
{
    fprintf(stderr, "nanollm-launch %s: %s\n", command, message);
    return exit_code(st);
}

/* All of stdin into *out (malloc'd, *len bytes); NULL with a message in
 * *why when it cannot be read. */
static nl_status read_stdin(char **out, size_t *len, char *why, size_t why_cap)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        snprintf(why, why_cap, "stdin: no memory");
        return NL_ERR_NOMEM;
    }
    for (;;) {
        if (n == cap) {
            char *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                snprintf(why, why_cap, "stdin: no memory for %zu bytes", cap * 2);
                return NL_ERR_NOMEM;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        snprintf(why, why_cap, "stdin: read error");
        return NL_ERR_IO;
    }
    *out = buf;
    *len = n;
    return NL_OK;
}

enum { OPT_REPLACE_INVALID = CLI_OWN, OPT_NO_SPECIAL, OPT_NO_ADD_SPECIAL, OPT_SKIP_SPECIAL };

static const struct option tokenize_options[] = {
    {"replace-invalid", no_argument, NULL, OPT_REPLACE_INVALID},
    {"no-special", no_argument, NULL, OPT_NO_SPECIAL},
    {"no-add-special-tokens", no_argument, NULL, OPT_NO_ADD_SPECIAL},
    {NULL, 0, NULL, 0},
};

const cli_command cli_tokenize_command = {
    .name = "tokenize",
    .options = tokenize_options,
    .help =
    "usage: nanollm-launch tokenize [--replace-invalid] [--no-special] [--no-add-special-tokens]\n"
    "\n"
    "Reads UTF-8 text on stdin and prints its token ids as a JSON array (the tokenizer of\n"
    "--model, else the demo model's Qwen3 tokenizer).  The tokenizer's own special tokens\n"
    "(Llama 3's <|begin_of_text|>) are added as Hugging Face's encode adds them: by the\n"
    "tokenizer.json post-processor, or by tokenizer_config.json's add_bos_token and\n"
    "add_eos_token where it sets them.\n"
    "\n"
    "options:\n"
    "  --replace-invalid        invalid UTF-8 becomes U+FFFD instead of an error\n"
    "  --no-special             special-token strings in the text are plain text\n"
    "  --no-add-special-tokens  add none of them (Hugging Face's add_special_tokens=False)\n",
};

static const struct option detokenize_options[] = {
    {"skip-special-tokens", no_argument, NULL, OPT_SKIP_SPECIAL},
    {NULL, 0, NULL, 0},
};

const cli_command cli_detokenize_command = {
    .name = "detokenize",
    .options = detokenize_options,
    .help =
    "usage: nanollm-launch detokenize [--skip-special-tokens]\n"
    "\n"
    "Reads a JSON array of token ids on stdin and prints their text.\n"
    "\n"
    "options:\n"
    "  --skip-special-tokens  leave special tokens out\n",
};

/* Parses argv for cmd; the flags seen go into *flags (as 1 << (id - CLI_OWN)).
 * -1 when parsed, else the exit code. */
static int parse(const cli_command *cmd, const char **model_dir, int argc, char **argv, uint32_t *flags)
{
    nl_engine_config config;
    nl_engine_config_init(&config);
    config.model_dir = *model_dir;
    cli_parser p;
    if (!cli_parser_init(&p, cmd, &config, argc, argv)) return 1;
    const char *v;
    int c;
    *flags = 0;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT) {
        if (c == CLI_POSITIONAL) {
            cli_usage_error(&p, "unexpected argument '%s' (the input comes on stdin)", v);
            break;
        }
        *flags |= 1u << (c - CLI_OWN);
    }
    *model_dir = p.config.model_dir;
    cli_parser_free(&p);
    return c == CLI_DONE ? -1 : p.exit;
}

int cli_tokenize(const char *model_dir, int argc, char **argv)
{
    uint32_t seen, flags = NL_ENCODE_DEFAULT;
    int rc = parse(&cli_tokenize_command, &model_dir, argc, argv, &seen);
    if (rc >= 0) return rc;
    if (seen & (1u << (OPT_REPLACE_INVALID - CLI_OWN))) flags |= NL_ENCODE_REPLACE_INVALID;
    if (seen & (1u << (OPT_NO_SPECIAL - CLI_OWN))) flags |= NL_ENCODE_NO_SPECIAL;
    if (seen & (1u << (OPT_NO_ADD_SPECIAL - CLI_OWN))) flags |= NL_ENCODE_NO_ADD_SPECIAL;
    char *text, why[128];
    size_t len;
    nl_status st = read_stdin(&text, &len, why, sizeof why);
    if (st != NL_OK) return fail_with("tokenize", st, why);
    nl_tokenizer *t;
    st = nl_tokenizer_open(model_dir, &t);
    if (st != NL_OK) {
        free(text);
        return fail("tokenize", st);
    }
    int32_t *ids;
    size_t n;
    st = nl_tokenizer_encode(t, text, len, flags, &ids, &n);
    free(text);
    nl_tokenizer_close(t);
    if (st == NL_ERR_INVALID_ARG) {
        /* The text was bad: say where it came from. */
        fprintf(stderr, "nanollm-launch tokenize: stdin: %s\n", nl_last_error());
        return exit_code(st);
    }
    if (st != NL_OK) return fail("tokenize", st);
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(ids);
    return fflush(stdout) == 0 ? 0 : fail_with("tokenize", NL_ERR_IO, "stdout: write error");
}

int cli_detokenize(const char *model_dir, int argc, char **argv)
{
    uint32_t seen;
    int rc = parse(&cli_detokenize_command, &model_dir, argc, argv, &seen);
    if (rc >= 0) return rc;
    bool skip_special = seen & (1u << (OPT_SKIP_SPECIAL - CLI_OWN));
    char *input, why[256];
    size_t len;
    nl_status st = read_stdin(&input, &len, why, sizeof why);
    if (st != NL_OK) return fail_with("detokenize", st, why);
    json_error_t err;
    json_t *arr = json_loadb(input, len, 0, &err);
    free(input);
    if (!json_is_array(arr)) {
        json_decref(arr);
        if (arr) return fail_with("detokenize", NL_ERR_INVALID_ARG, "stdin: not a JSON array of token ids");
        snprintf(why, sizeof why, "stdin: line %d column %d: %s", err.line, err.column, err.text);
        return fail_with("detokenize", NL_ERR_INVALID_ARG, why);
    }
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) {
        json_decref(arr);
        snprintf(why, sizeof why, "no memory for %zu ids", n);
        return fail_with("detokenize", NL_ERR_NOMEM, why);
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            json_decref(arr);
            free(ids);
            snprintf(why, sizeof why, "stdin: element %zu is not a token id (a non-negative integer)", i);
            return fail_with("detokenize", NL_ERR_INVALID_ARG, why);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(arr);
    nl_tokenizer *t;
    st = nl_tokenizer_open(model_dir, &t);
    char *text = NULL;
    size_t text_len = 0;
    if (st == NL_OK) {
        st = nl_tokenizer_decode(t, ids, n, skip_special, &text, &text_len);
        nl_tokenizer_close(t);
    }
    free(ids);
    if (st != NL_OK) return fail("detokenize", st);
    /* fwrite, not fputs: the text may hold U+0000. */
    size_t wrote = fwrite(text, 1, text_len, stdout);
    free(text);
    return wrote == text_len && fflush(stdout) == 0
               ? 0
               : fail_with("detokenize", NL_ERR_IO, "stdout: write error");
}
