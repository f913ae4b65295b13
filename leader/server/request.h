/* request.h — the JSON bodies of the API routes, parsed and validated.
 *
 * Parsing happens on the HTTP thread, before anything reaches the engine:
 * bad JSON, a field of the wrong type or out of range, an unknown field or
 * an unsupported value gives a 400 error naming the field.  What only the
 * engine can judge (a prompt too long for the model, a token id outside the
 * vocabulary) is refused at submission, also with a 400.
 *
 * The parsed request points into the JSON document it keeps, so the strings
 * live as long as the request.
 */
#ifndef NL_SERVER_REQUEST_H
#define NL_SERVER_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leader/server/api_error.h"
#include "nanollm.h"

#define API_MAX_STOP 16
#define API_MAX_LOGPROBS_COMPLETIONS 20
#define API_MAX_TOP_LOGPROBS_CHAT 20

typedef enum api_kind {
    API_COMPLETIONS = 0, /* POST /v1/completions      */
    API_CHAT,            /* POST /v1/chat/completions */
    API_TOKENIZE,        /* POST /tokenize            */
    API_DETOKENIZE,      /* POST /detokenize          */
} api_kind;

typedef struct api_request {
    api_kind kind;
    json_t *doc;                  /* the body; owns the strings below       */
    nl_prompt prompt;             /* TEXT, TOKENS or CHAT                   */
    const char *prompt_field;     /* "prompt" or "messages", for errors     */
    int32_t *ids;                 /* token-id prompt, detokenize input      */
    int32_t *stop_ids;            /* stop_token_ids                         */
    size_t prompt_len;            /* tokenize: bytes of prompt.text (U+0000 kept) */
    uint32_t encode_flags;        /* tokenize: nl_encode_flags              */
    /* chat: the template's request in vLLM's shape ({"messages", "tools",
     * "add_generation_prompt", "chat_template_kwargs"}), built from the
     * body, and its text (prompt.chat_json) */
    json_t *chat;
    char *chat_text;
    nl_sampling_params params;
    const char *stop[API_MAX_STOP];
    bool stream;
    bool include_usage;           /* stream_options.include_usage           */
    /* Logprobs asked for: -1 none, else the alternatives per token
     * (completions: "logprobs"; chat: "top_logprobs" with logprobs true). */
    int32_t logprobs;
} api_request;

/* Parses body (len bytes) for route kind.  served_model is the only model
 * name accepted in "model" (a different one is a 404).  On failure fills
 * err and leaves nothing to free. */
bool api_request_parse(api_kind kind, const char *body, size_t len, const char *served_model,
                       api_request *req, api_error *err);
void api_request_free(api_request *req);

#endif
