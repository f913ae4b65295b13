/* response.h — the response bodies of the generation routes in OpenAI's
 * shapes: a whole completion / chat completion, and the chunks of a stream
 * as server-sent events ("data: {json}\n\n", ending with "data: [DONE]").
 *
 * Logprobs come from the engine thread as neutral per-token entries
 * {"token", "id", "logprob", "top": [[token, logprob], …]}; this file turns
 * them into the completions shape (tokens / token_logprobs / top_logprobs /
 * text_offset) or the chat shape (content: [{token, logprob, bytes,
 * top_logprobs}]).
 */
#ifndef NL_SERVER_RESPONSE_H
#define NL_SERVER_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "leader/server/job.h"

const char *response_finish_name(nl_finish_reason reason);

/* The whole response of a finished job: text (len bytes, which may hold
 * U+0000) and entries are everything it generated, u its final update.
 * malloc'd JSON, NULL when out of memory. */
char *response_body(const server_job *job, const char *model, const char *text, size_t len, json_t *entries,
                    const job_update *u);

/* A stream chunk as one SSE event (malloc'd).  text (len bytes) and
 * entries are what is new; finish is NL_FINISH_NONE until the last content
 * chunk.  *text_offset counts the bytes sent so far (completions'
 * text_offset). */
char *response_chunk(const server_job *job, const char *model, const char *text, size_t len, json_t *entries,
                     nl_finish_reason finish, size_t *text_offset);
/* The chat stream's first chunk: the assistant role, empty content. */
char *response_role_chunk(const server_job *job, const char *model);
/* The usage chunk (choices empty) that stream_options.include_usage asks
 * for, sent before [DONE]. */
char *response_usage_chunk(const server_job *job, const char *model, const job_update *u);
/* An error inside a stream (the status line is already sent). */
char *response_error_event(const api_error *err);

#define RESPONSE_DONE_EVENT "data: [DONE]\n\n"

#endif
