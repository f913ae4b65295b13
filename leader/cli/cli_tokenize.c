/* cli_tokenize.c — the `tokenize` and `detokenize` commands: text on stdin
 * to a JSON array of ids on stdout, and back.  Exit codes as in cli.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/cli/cli.h"
#include "leader/tokenizer/tokenizer.h"
#include "leader/tokenizer/tokenizer_internal.h"
#include "leader/tokenizer/tokenizer_utf8.h"

/* The tokenizer of a model directory, or the Qwen3 tokenizer's own cache
 * folder (the one tools/fetch-tokenizer.sh fills) when there is none. */
static void tokenizer_dir(const char *model_dir, char *out, size_t cap)
{
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (model_dir) snprintf(out, cap, "%s", model_dir);
    else if (env && env[0]) snprintf(out, cap, "%s", env);
    else if (xdg && xdg[0]) snprintf(out, cap, "%s/nanollm/tokenizer-qwen3", xdg);
    else snprintf(out, cap, "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME") ? getenv("HOME") : ".");
}

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

static nl_status read_stdin(char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return nl_error(NL_ERR_NOMEM, "stdin: no memory");
    for (;;) {
        if (n == cap) {
            char *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                return nl_error(NL_ERR_NOMEM, "stdin: no memory for %zu bytes", cap * 2);
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
        return nl_error(NL_ERR_IO, "stdin: read error");
    }
    *out = buf;
    *len = n;
    return NL_OK;
}

static nl_status load(const char *model_dir, tokenizer **t)
{
    char dir[4096];
    tokenizer_dir(model_dir, dir, sizeof dir);
    return tokenizer_load(dir, t);
}

int cli_tokenize(const char *model_dir, int argc, char **argv)
{
    bool replace_invalid = false, match_special = true;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--replace-invalid") == 0) replace_invalid = true;
        else if (strcmp(argv[i], "--no-special") == 0) match_special = false;
        else {
            fprintf(stderr, "nanollm-launch tokenize: unknown option \"%s\" "
                    "(options: --replace-invalid, --no-special)\n", argv[i]);
            return 2;
        }
    }
    char *text;
    size_t len;
    nl_status st = read_stdin(&text, &len);
    if (st != NL_OK) return fail("tokenize", st);
    if (replace_invalid) {
        char *fixed = malloc(3 * len + 1);
        if (!fixed) {
            free(text);
            return fail("tokenize", nl_error(NL_ERR_NOMEM, "no memory for %zu bytes", 3 * len));
        }
        len = utf8_render_lossy((const uint8_t *)text, len, fixed);
        free(text);
        text = fixed;
    }
    tokenizer *t;
    st = load(model_dir, &t);
    if (st != NL_OK) {
        free(text);
        return fail("tokenize", st);
    }
    int32_t *ids;
    size_t n;
    st = tokenizer_encode_ex(t, text, len, match_special, &ids, &n);
    free(text);
    tokenizer_destroy(t);
    if (st != NL_OK) {
        if (st == NL_ERR_INVALID_ARG) nl_error_prefix(st, "stdin: ");
        return fail("tokenize", st);
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(ids);
    return fflush(stdout) == 0 ? 0 : fail("tokenize", nl_error(NL_ERR_IO, "stdout: write error"));
}

int cli_detokenize(const char *model_dir, int argc, char **argv)
{
    bool skip_special = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--skip-special-tokens") == 0) skip_special = true;
        else {
            fprintf(stderr, "nanollm-launch detokenize: unknown option \"%s\" "
                    "(options: --skip-special-tokens)\n", argv[i]);
            return 2;
        }
    }
    char *input;
    size_t len;
    nl_status st = read_stdin(&input, &len);
    if (st != NL_OK) return fail("detokenize", st);
    json_error_t err;
    json_t *arr = json_loadb(input, len, 0, &err);
    free(input);
    if (!json_is_array(arr)) {
        json_decref(arr);
        if (arr) return fail("detokenize", nl_error(NL_ERR_INVALID_ARG, "stdin: not a JSON array of token ids"));
        return fail("detokenize", nl_error(NL_ERR_INVALID_ARG, "stdin: line %d column %d: %s",
                                           err.line, err.column, err.text));
    }
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) {
        json_decref(arr);
        return fail("detokenize", nl_error(NL_ERR_NOMEM, "no memory for %zu ids", n));
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            json_decref(arr);
            free(ids);
            return fail("detokenize", nl_error(NL_ERR_INVALID_ARG, "stdin: element %zu is not a "
                                               "token id (a non-negative integer)", i));
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(arr);
    tokenizer *t;
    st = load(model_dir, &t);
    char *text = NULL;
    if (st == NL_OK) st = tokenizer_decode(t, ids, n, skip_special, &text);
    free(ids);
    tokenizer_destroy(t);
    if (st != NL_OK) return fail("detokenize", st);
    fputs(text, stdout);
    free(text);
    return fflush(stdout) == 0 ? 0 : fail("detokenize", nl_error(NL_ERR_IO, "stdout: write error"));
}
