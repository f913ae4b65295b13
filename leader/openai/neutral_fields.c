/* neutral_fields.c — the table of neutral-valued OpenAI fields (see
 * neutral_fields.h). */
#include "leader/openai/neutral_fields.h"

#include <string.h>

enum route { BOTH, COMPLETIONS, CHAT };

static const struct neutral {
    const char *name;
    enum route where;
    json_type type;     /* JSON_TRUE: either boolean                   */
    double number;      /* the neutral number                           */
    const char *string; /* the neutral string (or object "type")        */
    const char *why;
} fields[] = {
    {"presence_penalty", BOTH, JSON_REAL, 0.0, NULL, "must be 0: penalties are not supported"},
    {"frequency_penalty", BOTH, JSON_REAL, 0.0, NULL, "must be 0: penalties are not supported"},
    {"repetition_penalty", BOTH, JSON_REAL, 1.0, NULL, "must be 1: penalties are not supported"},
    {"logit_bias", BOTH, JSON_OBJECT, 0.0, NULL, "must be empty: logit biases are not supported"},
    {"user", BOTH, JSON_STRING, 0.0, NULL, "must be a string (an end user's id, not used)"},
    {"best_of", COMPLETIONS, JSON_INTEGER, 1.0, NULL, "must be 1: one completion per request is supported"},
    {"echo", COMPLETIONS, JSON_FALSE, 0.0, NULL, "must be false: the prompt is not echoed"},
    {"tool_choice", CHAT, JSON_STRING, 0.0, "none",
     "must be \"none\": tool calls are not parsed out of the output (they come back as text)"},
    {"parallel_tool_calls", CHAT, JSON_TRUE, 0.0, NULL, "must be true or false"},
    {"response_format", BOTH, JSON_OBJECT, 0.0, "text",
     "must be {\"type\": \"text\"}: structured output is not supported"},
};

static bool holds_neutral(const struct neutral *f, json_t *v)
{
    switch (f->type) {
    case JSON_REAL: return json_is_number(v) && json_number_value(v) == f->number;
    case JSON_INTEGER: return json_is_integer(v) && json_integer_value(v) == (json_int_t)f->number;
    case JSON_FALSE: return json_is_false(v);
    case JSON_TRUE: return json_is_boolean(v); /* either: nothing to do in parallel */
    case JSON_STRING:
        return json_is_string(v) && (!f->string || strcmp(json_string_value(v), f->string) == 0);
    default: { /* an object: empty, or {"type": string} */
        if (!json_is_object(v)) return false;
        if (!f->string) return json_object_size(v) == 0;
        json_t *type = json_object_get(v, "type");
        return json_object_size(v) == 1 && json_is_string(type) &&
               strcmp(json_string_value(type), f->string) == 0;
    }
    }
}

bool openai_neutral_field(const char *key, json_t *v, bool chat, bool *neutral, const char **why)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const struct neutral *f = &fields[i];
        if (strcmp(key, f->name) != 0 || (f->where == COMPLETIONS && chat) || (f->where == CHAT && !chat))
            continue;
        *neutral = holds_neutral(f, v);
        *why = f->why;
        return true;
    }
    return false;
}
