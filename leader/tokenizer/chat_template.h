/* chat_template.h — a model's chat template, rendered as transformers and
 * vLLM render it: the template's own Jinja text run by the interpreter in
 * jinja.h, with the variables transformers passes (messages, tools,
 * add_generation_prompt, the tokenizer's special tokens, and the request's
 * chat_template_kwargs such as enable_thinking). */
#ifndef NL_LEADER_CHAT_TEMPLATE_H
#define NL_LEADER_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "nanollm.h"

typedef struct chat_template chat_template;

/* Loads the template of a model directory: tokenizer_config.json's
 * "chat_template" (a string, or a list of named templates of which
 * "default" is used), else chat_template.jinja; and the special tokens the
 * template sees (bos_token, eos_token, pad_token, unk_token; a string or an
 * {"content": ...} object).  *out is NULL with NL_OK when the directory has
 * no template.  A template jinja2 would not parse is NL_ERR_FORMAT naming
 * the file and the line. */
nl_status chat_template_load(const char *dir, chat_template **out);

/* A template from its text; bos_token/eos_token may be NULL (then the
 * template sees them undefined). */
nl_status chat_template_create(const char *source, const char *bos_token, const char *eos_token,
                               chat_template **out);
void chat_template_destroy(chat_template *t);

/* vLLM's serving layer, before it renders: an assistant message's tool
 * call whose function.arguments is a JSON string (OpenAI's API sends it
 * so) gets the value it encodes, since templates such as Llama 3.1's print
 * the arguments with tojson.  request is changed in place; arguments that
 * are not JSON fail with NL_ERR_INVALID_ARG naming the message and call. */
nl_status chat_request_decode_tool_arguments(json_t *request);

/* Renders a request in vLLM's chat shape, a JSON object with
 *   "messages"              array of message objects, each with a string
 *                           "role"; every other field (content as a string,
 *                           a list of parts or null, tool_calls,
 *                           tool_call_id, name, reasoning_content ...) is
 *                           passed to the template as given;
 *   "tools"                 optional array (the template sees none if absent);
 *   "add_generation_prompt" optional bool, default true;
 *   "chat_template_kwargs"  optional object, each member a template variable.
 * strftime_now() formats the current local time, or, when the environment
 * variable NANOLLM_CHAT_TIME holds Unix seconds, that instant in UTC (for
 * reproducible renders).  *out is malloc'd and NUL-terminated, *len its
 * length.  A template's raise_exception() is NL_ERR_INVALID_ARG whose message
 * is exactly the template's, with *raised set (raised may be NULL); other
 * render failures are NL_ERR_INVALID_ARG naming the template line. */
nl_status chat_template_render_request(const chat_template *t, const json_t *request, char **out, size_t *len,
                                       bool *raised);

/* The same for role/content messages (nl_prompt's form): enable_thinking is
 * passed as the template variable of that name. */
nl_status chat_template_render(const chat_template *t, const nl_chat_message *msgs, size_t n_msgs,
                               bool add_generation_prompt, bool enable_thinking, char **out);

#endif /* NL_LEADER_CHAT_TEMPLATE_H */
