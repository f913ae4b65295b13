/* cli_chat_template.c — `nanollm-launch --model DIR chat-template`: one JSON
 * object on stdin, {"messages", "tools", "add_generation_prompt",
 * "chat_template_kwargs"} (vLLM's names; see chat_template.h), rendered with
 * the model's own chat template; the text goes to stdout exactly, with no
 * newline added.  A template's raise_exception() ends it with exit 2 and the
 * template's message on stderr; bad input is exit 2, other failures 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/cli/cli.h"
#include "leader/tokenizer/chat_template.h"

static int fail(nl_status st)
{
    fprintf(stderr, "nanollm-launch chat-template: %s\n", nl_last_error());
    return st == NL_ERR_NOMEM || st == NL_ERR_RUNTIME ? 1 : 2;
}

int cli_chat_template(const char *model_dir, int argc, char **argv)
{
    if (argc > 0) {
        fprintf(stderr, "nanollm-launch chat-template: unexpected argument '%s' (the request comes on stdin)\n",
                argv[0]);
        return 2;
    }
    if (!model_dir) {
        fprintf(stderr, "nanollm-launch chat-template: --model DIR is required\n");
        return 2;
    }
    chat_template *t = NULL;
    nl_status st = chat_template_load(model_dir, &t);
    if (st != NL_OK) return fail(st);
    if (!t) {
        fprintf(stderr, "nanollm-launch chat-template: %s has no chat template (tokenizer_config.json "
                "\"chat_template\" or chat_template.jinja)\n", model_dir);
        return 2;
    }
    json_error_t jerr;
    json_t *request = json_loadf(stdin, 0, &jerr);
    if (!request) {
        chat_template_destroy(t);
        fprintf(stderr, "nanollm-launch chat-template: stdin: bad JSON at line %d column %d: %s\n", jerr.line,
                jerr.column, jerr.text);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    bool raised = false;
    st = chat_template_render_request(t, request, &text, &len, &raised);
    json_decref(request);
    chat_template_destroy(t);
    if (st != NL_OK) return fail(st);
    int rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
    if (rc) perror("nanollm-launch chat-template: stdout");
    free(text);
    return rc;
}
