/* neutral_fields.h — fields of OpenAI's request bodies (and vLLM's) that
 * clients often send at a neutral value although nanollm does not do what
 * any other value would ask (penalties, logit biases, several candidates,
 * echo, tool choice, structured output).  Both front-ends that read such
 * bodies, the server and the batch command, accept a neutral value and
 * refuse any other by name, through this one table.
 */
#ifndef NL_LEADER_OPENAI_NEUTRAL_FIELDS_H
#define NL_LEADER_OPENAI_NEUTRAL_FIELDS_H

#include <jansson.h>
#include <stdbool.h>

/* Whether key is one of those fields of a completions (chat false) or chat
 * completions body.  If so, *neutral tells whether v holds the neutral
 * value and *why (a static string) says what the field must be, for the
 * error that names it otherwise. */
bool openai_neutral_field(const char *key, json_t *v, bool chat, bool *neutral, const char **why);

#endif
