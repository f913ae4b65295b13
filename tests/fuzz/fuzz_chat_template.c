/* fuzz_chat_template.c — a chat template and a chat request from arbitrary
 * bytes (split at the first NUL; without one, a fixed request): parsing
 * refuses what is not a template by name, and rendering ends in text or an
 * error within the interpreter's limits, for any template and any input. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "leader/tokenizer/chat_template.h"

static const char fixed_request[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"q\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>r</think>a\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
    " \"chat_template_kwargs\": {\"enable_thinking\": false}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t n = nul ? (size_t)(nul - data) : size;
    char *source = malloc(n + 1);
    if (!source) return 0;
    memcpy(source, data, n);
    source[n] = '\0';
    chat_template *t = NULL;
    if (chat_template_create(source, "<s>", "</s>", &t) == NL_OK) {
        json_error_t jerr;
        json_t *req = nul ? json_loadb((const char *)nul + 1, size - n - 1, 0, &jerr)
                          : json_loads(fixed_request, 0, &jerr);
        if (req) {
            char *out = NULL;
            size_t len = 0;
            bool raised = false;
            if (chat_template_render_request(t, req, &out, &len, &raised) == NL_OK) free(out);
            json_decref(req);
        }
        chat_template_destroy(t);
    }
    free(source);
    return 0;
}
