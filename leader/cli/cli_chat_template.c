/* cli_chat_template.c — the `chat-template` command: one chat request on
 * stdin, {"messages", "tools", "add_generation_prompt",
 * "chat_template_kwargs"} (vLLM's names), rendered with the model's own chat
 * template; the text goes to stdout exactly, with no newline added.  A
 * template's raise_exception() ends it with exit 2 and the template's
 * message; bad input is exit 2, other failures 1 (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"

const cli_command cli_chat_template_command = {
    .name = "chat-template",
    .options = (const struct option[]){{NULL, 0, NULL, 0}},
    .help =
    "usage: nanollm-launch chat-template\n"
    "\n"
    "Reads a chat request on stdin, {\"messages\": [...], \"tools\": [...],\n"
    "\"add_generation_prompt\": true, \"chat_template_kwargs\": {...}}, and prints the\n"
    "prompt the chat template of --model (else the demo model's Qwen3 template) makes\n"
    "of it, exactly, with no newline added.  A template's raise_exception() exits 2\n"
    "with the template's message.\n",
};

static int fail(nl_status st, const char *message)
{
    fprintf(stderr, "nanollm-launch chat-template: %s\n", message);
    return st == NL_ERR_NOMEM || st == NL_ERR_RUNTIME ? 1 : 2;
}

/* All of stdin as a NUL-terminated string (NULL when out of memory or unreadable). */
static char *read_stdin(void)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *grown = realloc(buf, cap * 2);
            if (!grown) break;
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) {
            if (ferror(stdin)) break;
            buf[n] = '\0';
            return buf;
        }
    }
    free(buf);
    return NULL;
}

int cli_chat_template(const char *model_dir, int argc, char **argv)
{
    nl_engine_config config;
    nl_engine_config_init(&config);
    config.model_dir = model_dir;
    cli_parser p;
    if (!cli_parser_init(&p, &cli_chat_template_command, &config, argc, argv)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT)
        if (c == CLI_POSITIONAL) cli_usage_error(&p, "unexpected argument '%s' (the request comes on stdin)", v);
    model_dir = p.config.model_dir;
    cli_parser_free(&p);
    if (c == CLI_EXIT) return p.exit;
    char *request = read_stdin();
    if (!request) return fail(NL_ERR_IO, "stdin: cannot be read (or no memory)");
    nl_tokenizer *t;
    nl_status st = nl_tokenizer_open(model_dir, &t);
    if (st != NL_OK) {
        free(request);
        return fail(st, nl_last_error());
    }
    char *text;
    size_t len;
    st = nl_tokenizer_apply_chat_template(t, request, &text, &len);
    nl_tokenizer_close(t);
    free(request);
    if (st != NL_OK) return fail(st, nl_last_error());
    bool written = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0;
    free(text);
    return written ? 0 : fail(NL_ERR_IO, "stdout: write error");
}
