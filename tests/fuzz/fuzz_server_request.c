/* fuzz_server_request.c — the HTTP server's request bodies from arbitrary
 * bytes (leader/server/request.c): each body is accepted with every field
 * in range, or refused with a 400/404 (or 500 for memory) whose error body
 * is valid JSON.  The first byte picks the route. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "leader/server/request.h"

/* The parser starts from the engine's sampling defaults; their values do
 * not matter to what is checked here, and the engine is not linked. */
void nl_sampling_params_init(nl_sampling_params *p)
{
    memset(p, 0, sizeof(*p));
    p->max_tokens = 16;
    p->temperature = 1.0f;
    p->top_p = 1.0f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const api_kind kinds[] = {API_COMPLETIONS, API_CHAT, API_TOKENIZE, API_DETOKENIZE};
    api_kind kind = kinds[data[0] % 4];
    api_request req;
    api_error err;
    memset(&err, 0, sizeof(err));
    if (api_request_parse(kind, (const char *)data + 1, size - 1, "m", &req, &err)) {
        const nl_sampling_params *p = &req.params;
        if (req.prompt.kind == NL_PROMPT_TOKENS && req.prompt.n_tokens > 0 && !req.prompt.token_ids)
            __builtin_trap();
        if (req.prompt.kind == NL_PROMPT_TOKENS)
            for (int32_t k = 0; k < req.prompt.n_tokens; k++)
                if (req.prompt.token_ids[k] < 0) __builtin_trap();
        if (req.prompt.kind == NL_PROMPT_CHAT)
            for (int32_t k = 0; k < req.prompt.n_messages; k++)
                if (!req.prompt.messages[k].role || !req.prompt.messages[k].content) __builtin_trap();
        if (req.prompt.kind == NL_PROMPT_TEXT && !req.prompt.text) __builtin_trap();
        if (p->n_stop < 0 || p->n_stop > API_MAX_STOP || (p->n_stop > 0 && p->stop != req.stop)) __builtin_trap();
        for (int32_t k = 0; k < p->n_stop; k++)
            if (!p->stop[k] || !p->stop[k][0]) __builtin_trap();
        bool generation = kind == API_COMPLETIONS || kind == API_CHAT;
        if (generation && (!(p->temperature >= 0.0f) || !isfinite(p->temperature) || !(p->top_p > 0.0f && p->top_p <= 1.0f) ||
            !(p->min_p >= 0.0f && p->min_p <= 1.0f) || p->top_k < -1 || p->max_tokens < 0 ||
            p->logprobs < 0 || p->logprobs > 20 || req.logprobs > 20))
            __builtin_trap();
        api_request_free(&req);
    } else {
        if (err.status != 400 && err.status != 404 && err.status != 500) __builtin_trap();
        if (!err.message[0]) __builtin_trap();
        char *body = api_error_body(&err);
        if (!body) __builtin_trap();
        json_t *o = json_loads(body, 0, NULL);
        if (!json_is_string(json_object_get(json_object_get(o, "error"), "message"))) __builtin_trap();
        json_decref(o);
        free(body);
    }
    return 0;
}
