/* cli_batch.h — the pieces of `nanollm-launch batch` (cli_batch.c runs
 * the job): reading one input line into a request (cli_batch_line.c) and
 * writing one output line for it (cli_batch_output.c), in either format:
 *
 * native   {"prompt" | "prompt_token_ids" | "messages", "id", sampling...}
 *          -> {"id", "token_ids", "text", "finish_reason", "prompt_tokens",
 *              "cached_tokens", "logprobs", "error"}
 * OpenAI   {"custom_id", "method": "POST", "url": "/v1/completions" or
 *           "/v1/chat/completions", "body": {...}}
 *          -> {"id", "custom_id", "response": {"status_code", "request_id",
 *              "body"}, "error"}
 * The format is decided per line: a line with "custom_id", "url" or "body"
 * is an OpenAI one.
 *
 * A line that could not run to its end because the job stopped (Ctrl-C, a
 * dead worker) is written as an error too, marked so that --resume runs it
 * again: native lines carry "incomplete": true, OpenAI lines an error code
 * "interrupted" or "engine_failure".
 */
#ifndef NL_LEADER_CLI_BATCH_H
#define NL_LEADER_CLI_BATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leader/cli/cli.h"

typedef enum batch_format {
    BATCH_NATIVE = 0,
    BATCH_OPENAI_COMPLETIONS,
    BATCH_OPENAI_CHAT,
} batch_format;

/* What an output line needs to know about its input line. */
typedef struct batch_meta {
    batch_format format;
    json_t *id;            /* native "id" (or the 0-based line number); OpenAI custom_id */
    json_t *model;         /* OpenAI body "model", or NULL                   */
    int32_t top_logprobs;  /* OpenAI: logprobs asked for (0: none)           */
    bool want_logprobs;
    int32_t max_tokens;
} batch_meta;

/* One parsed input line, ready to submit. */
typedef struct batch_request {
    batch_meta meta;
    nl_prompt prompt;
    nl_sampling_params params;
    const char *stops[CLI_MAX_STOP];
    int32_t *ids;          /* owned prompt ids                               */
    int32_t *stop_ids;     /* owned stop_token_ids                           */
    json_t *chat;          /* the chat request: messages and the template's
                            * inputs (tools, add_generation_prompt,
                            * chat_template_kwargs)                          */
    char *chat_text;       /* chat as nl_prompt.chat_json                    */
    json_t *obj;           /* the parsed line                                */
    char *error;           /* refused: why (malloc'd)                        */
} batch_request;

/* Parses line index (0-based) of text[0..len).  On refusal rq->error says
 * why; rq->meta.id is set either way.  Free with batch_request_free. */
void batch_request_parse(batch_request *rq, const cli_sampling *defaults, const char *text, size_t len,
                         int64_t index);
void batch_request_free(batch_request *rq);
/* Takes the meta out of rq (rq keeps nothing of it). */
batch_meta batch_request_take_meta(batch_request *rq);
void batch_meta_free(batch_meta *m);

/* Why an output line has no result. */
typedef enum batch_failure {
    BATCH_REFUSED = 0,     /* the line itself is bad: final                  */
    BATCH_INTERRUPTED,     /* Ctrl-C: run again by --resume                  */
    BATCH_ENGINE_FAILED,   /* a worker died: run again by --resume           */
} batch_failure;

/* The output line (with its '\n', malloc'd) for a finished request, or, with
 * r NULL, for one that did not run (failure and message say why).  index is
 * the 0-based line number.  NULL when out of memory. */
char *batch_output_line(const batch_meta *m, int64_t index, const nl_result *r, batch_failure failure,
                        const char *message, nl_engine *engine, bool has_tokenizer, size_t *len);

/* Whether an output line holds a final result (one --resume keeps), and its
 * id (borrowed from line). */
bool batch_output_is_final(json_t *line, json_t **id);

/* A JSON string of text that may not be valid UTF-8 (a message quoting the
 * input): invalid bytes become U+FFFD, so the field is never dropped.
 * batch_json_text reads up to a NUL; batch_json_textn reads len bytes,
 * which may hold U+0000 (written "\u0000").  NULL text is "". */
json_t *batch_json_text(const char *text);
json_t *batch_json_textn(const char *text, size_t len);

#endif
