/* request.c — parsing and validating the JSON bodies of the API routes.
 *
 * Every field is checked for type and range here, so a refusal names the
 * field ("param") the way OpenAI's API does; null counts as absent for the
 * optional fields, as the official clients may send it.  Unknown fields are
 * refused rather than ignored: a client that asks for something this server
 * does not do (n > 1, echo, penalties) should learn so.  A chat request
 * becomes the chat template's request (messages, tools,
 * add_generation_prompt, chat_template_kwargs), rendered by the engine
 * (which also decodes tool-call arguments given as JSON strings, as
 * vLLM's server does).
 */
#include "leader/server/request.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "leader/openai/neutral_fields.h"

#define DESCRIBE_MAX 48

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static bool get_int(json_t *v, const char *field, int64_t lo, int64_t hi, int64_t *out, api_error *err)
{
    if (!json_is_integer(v)) {
        api_error_invalid(err, field, "'%s' must be an integer in [%lld, %lld], got %s", field, (long long)lo,
                          (long long)hi, type_name(v));
        return false;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        api_error_invalid(err, field, "'%s' must be an integer in [%lld, %lld], got %lld", field,
                          (long long)lo, (long long)hi, (long long)x);
        return false;
    }
    *out = x;
    return true;
}

/* A number in [lo, hi]; lo_open excludes lo. */
static bool get_number(json_t *v, const char *field, double lo, bool lo_open, double hi, float *out,
                       api_error *err)
{
    if (!json_is_number(v)) {
        api_error_invalid(err, field, "'%s' must be a number, got %s", field, type_name(v));
        return false;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
        api_error_invalid(err, field, "'%s' must be a number in %s%g, %g], got %g", field, lo_open ? "(" : "[",
                          lo, hi, x);
        return false;
    }
    *out = (float)x;
    return true;
}

static bool get_bool(json_t *v, const char *field, bool *out, api_error *err)
{
    if (!json_is_boolean(v)) {
        api_error_invalid(err, field, "'%s' must be true or false, got %s", field, type_name(v));
        return false;
    }
    *out = json_is_true(v);
    return true;
}

static bool parse_stop(json_t *v, api_request *req, api_error *err)
{
    nl_sampling_params *p = &req->params;
    p->n_stop = 0;
    if (json_is_string(v)) {
        req->stop[p->n_stop++] = json_string_value(v);
    } else if (json_is_array(v)) {
        if (json_array_size(v) > API_MAX_STOP) {
            api_error_invalid(err, "stop", "'stop' holds %zu strings, at most %d are allowed", json_array_size(v),
                              API_MAX_STOP);
            return false;
        }
        size_t k;
        json_t *s;
        json_array_foreach(v, k, s) {
            if (!json_is_string(s)) {
                api_error_invalid(err, "stop", "'stop[%zu]' must be a string, got %s", k, type_name(s));
                return false;
            }
            req->stop[p->n_stop++] = json_string_value(s);
        }
    } else {
        api_error_invalid(err, "stop", "'stop' must be a string or a list of strings, got %s", type_name(v));
        return false;
    }
    for (int32_t k = 0; k < p->n_stop; k++) {
        if (!req->stop[k][0]) {
            api_error_invalid(err, "stop", "'stop' string %d is empty", k);
            return false;
        }
    }
    p->stop = req->stop;
    return true;
}

/* An array of token ids; field names it in errors. */
/* A list of token ids into *ids (malloc'd); the engine checks them
 * against the vocabulary. */
static bool get_ids(json_t *v, const char *field, int32_t **ids, api_error *err)
{
    if (!json_is_array(v)) {
        api_error_invalid(err, field, "'%s' must be a list of token ids, got %s", field, type_name(v));
        return false;
    }
    size_t n = json_array_size(v);
    *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!*ids) {
        api_error_set(err, 500, "internal_error", field, NULL, "out of memory for %zu token ids", n);
        return false;
    }
    size_t k;
    json_t *t;
    json_array_foreach(v, k, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            api_error_invalid(err, field, "'%s[%zu]' must be a token id (an integer >= 0)", field, k);
            return false;
        }
        (*ids)[k] = (int32_t)json_integer_value(t);
    }
    return true;
}

static bool parse_ids(json_t *v, const char *field, api_request *req, api_error *err)
{
    if (!get_ids(v, field, &req->ids, err)) return false;
    size_t n = json_array_size(v);
    req->prompt.kind = NL_PROMPT_TOKENS;
    req->prompt.token_ids = req->ids;
    req->prompt.n_tokens = (int32_t)n;
    return true;
}

static bool parse_prompt(json_t *v, api_request *req, api_error *err)
{
    req->prompt_field = "prompt";
    if (json_is_string(v)) {
        req->prompt.kind = NL_PROMPT_TEXT;
        req->prompt.text = json_string_value(v);
        return true;
    }
    if (json_is_array(v)) {
        json_t *first = json_array_get(v, 0);
        if (first && !json_is_integer(first)) {
            api_error_invalid(err, "prompt",
                              "'prompt' must be a string or a list of token ids; lists of prompts are not "
                              "supported, send one request per prompt");
            return false;
        }
        return parse_ids(v, "prompt", req, err);
    }
    api_error_invalid(err, "prompt", "'prompt' must be a string or a list of token ids, got %s", type_name(v));
    return false;
}

/* A message's content as the template gets it: a string, null, or a list
 * of {"type": "text", "text"} parts joined into one string (templates test
 * `content is string`, as vLLM's "string" content format assumes). */
static bool parse_content(json_t *c, size_t index, json_t *msg, api_error *err)
{
    char field[64];
    snprintf(field, sizeof(field), "messages[%zu].content", index);
    if (json_is_string(c) || json_is_null(c)) return true;
    if (!json_is_array(c)) {
        api_error_invalid(err, field, "'%s' must be a string, null or a list of text parts, got %s", field,
                          type_name(c));
        return false;
    }
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text) || json_object_size(part) != 2) {
            api_error_invalid(err, field, "'%s[%zu]' must be {\"type\": \"text\", \"text\": string}; "
                              "only text is supported", field, k);
            return false;
        }
        total += json_string_length(text);
    }
    char *joined = malloc(total + 1);
    if (!joined) {
        api_error_set(err, 500, "internal_error", field, NULL, "out of memory for %zu bytes of content", total);
        return false;
    }
    size_t at = 0;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(joined + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    json_t *str = json_stringn_nocheck(joined, at);
    free(joined);
    if (!str || json_object_set_new(msg, "content", str) != 0) {
        api_error_set(err, 500, "internal_error", field, NULL, "out of memory for %zu bytes of content", total);
        return false;
    }
    return true;
}

/* The fields a message may carry, each with the JSON type it must have
 * (tool_calls and tool_call_id carry a tool-using conversation to the
 * template; reasoning_content is vLLM's field for a reasoning model's
 * earlier thinking). */
static const struct message_field {
    const char *name;
    json_type type; /* JSON_NULL: checked by its own rule */
} message_fields[] = {
    {"role", JSON_STRING},         {"content", JSON_NULL},           {"name", JSON_STRING},
    {"tool_calls", JSON_ARRAY},    {"tool_call_id", JSON_STRING},    {"reasoning_content", JSON_STRING},
};

static bool check_message_field(const char *field, const char *key, json_t *f, api_error *err)
{
    char sub[160];
    snprintf(sub, sizeof(sub), "%s.%s", field, key);
    for (size_t i = 0; i < sizeof(message_fields) / sizeof(message_fields[0]); i++) {
        if (strcmp(key, message_fields[i].name) != 0) continue;
        json_type want = message_fields[i].type;
        if (want == JSON_NULL || json_is_null(f) || json_typeof(f) == want) return true;
        api_error_invalid(err, sub, "'%s' must be %s, got %s", sub,
                          want == JSON_STRING ? "a string" : "a list", type_name(f));
        return false;
    }
    api_error_invalid(err, sub, "unknown field '%s'", sub);
    return false;
}

/* messages: each checked, and copied into the template's request with
 * text parts joined and OpenAI's "developer" role as the "system" role of
 * the chat templates. */
static bool parse_messages(json_t *v, api_request *req, api_error *err)
{
    req->prompt_field = "messages";
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n == 0) {
        api_error_invalid(err, "messages", "'messages' must be a non-empty list of {role, content}, got %s",
                          json_is_array(v) ? "an empty list" : type_name(v));
        return false;
    }
    json_t *copy = json_array();
    if (!copy || json_object_set_new(req->chat, "messages", copy) != 0) {
        api_error_set(err, 500, "internal_error", "messages", NULL, "out of memory for %zu messages", n);
        return false;
    }
    size_t k;
    json_t *m;
    json_array_foreach(v, k, m) {
        char field[64];
        snprintf(field, sizeof(field), "messages[%zu]", k);
        if (!json_is_object(m)) {
            api_error_invalid(err, field, "'%s' must be an object {role, content}, got %s", field, type_name(m));
            return false;
        }
        const char *key;
        json_t *f;
        json_object_foreach(m, key, f)
            if (!check_message_field(field, key, f, err)) return false;
        const char *r = json_string_value(json_object_get(m, "role"));
        if (!r || (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 &&
                   strcmp(r, "developer") != 0 && strcmp(r, "tool") != 0)) {
            snprintf(field, sizeof(field), "messages[%zu].role", k);
            api_error_invalid(err, field,
                              "'%s' must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"",
                              field);
            return false;
        }
        json_t *content = json_object_get(m, "content");
        bool calls = json_array_size(json_object_get(m, "tool_calls")) > 0;
        if (!content && !(strcmp(r, "assistant") == 0 && calls)) {
            snprintf(field, sizeof(field), "messages[%zu].content", k);
            api_error_invalid(err, field, "'%s' is missing", field);
            return false;
        }
        json_t *msg = json_copy(m);
        if (!msg || json_array_append_new(copy, msg) != 0) {
            api_error_set(err, 500, "internal_error", "messages", NULL, "out of memory for %zu messages", n);
            return false;
        }
        if (strcmp(r, "developer") == 0) json_object_set_new(msg, "role", json_string("system"));
        if (content && !parse_content(content, k, msg, err)) return false;
    }
    return true;
}

/* tools: a list of tool definitions ({"type": "function", "function":
 * {...}}), handed to the template as they are. */
static bool parse_tools(json_t *v, api_request *req, api_error *err)
{
    size_t k;
    json_t *t;
    if (!json_is_array(v)) {
        api_error_invalid(err, "tools", "'tools' must be a list of tool definitions, got %s", type_name(v));
        return false;
    }
    json_array_foreach(v, k, t) {
        if (!json_is_object(t)) {
            char field[64];
            snprintf(field, sizeof(field), "tools[%zu]", k);
            api_error_invalid(err, field, "'%s' must be an object, got %s", field, type_name(t));
            return false;
        }
    }
    return json_object_set(req->chat, "tools", v) == 0;
}

/* The request's chat prompt: the template's request as text. */
static bool finish_chat(api_request *req, api_error *err)
{
    req->chat_text = json_dumps(req->chat, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!req->chat_text) {
        api_error_set(err, 500, "internal_error", "messages", NULL, "out of memory for the chat request");
        return false;
    }
    req->prompt.kind = NL_PROMPT_CHAT;
    req->prompt.chat_json = req->chat_text;
    return true;
}

static bool parse_stream_options(json_t *v, api_request *req, api_error *err)
{
    if (!json_is_object(v)) {
        api_error_invalid(err, "stream_options", "'stream_options' must be an object, got %s", type_name(v));
        return false;
    }
    const char *key;
    json_t *f;
    json_object_foreach(v, key, f) {
        if (strcmp(key, "include_usage") == 0) {
            if (!json_is_null(f) && !get_bool(f, "stream_options.include_usage", &req->include_usage, err))
                return false;
        } else {
            api_error_invalid(err, "stream_options", "unknown field 'stream_options.%s'", key);
            return false;
        }
    }
    return true;
}

/* chat_template_kwargs: variables for the template (enable_thinking, and
 * whatever else a model's template reads), passed through as vLLM does. */
static bool parse_chat_template_kwargs(json_t *v, api_request *req, api_error *err)
{
    if (!json_is_object(v)) {
        api_error_invalid(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s",
                          type_name(v));
        return false;
    }
    json_t *thinking = json_object_get(v, "enable_thinking");
    if (thinking && !json_is_null(thinking) && !json_is_boolean(thinking)) {
        api_error_invalid(err, "chat_template_kwargs.enable_thinking",
                          "'chat_template_kwargs.enable_thinking' must be a boolean, got %s", type_name(thinking));
        return false;
    }
    return json_object_set(req->chat, "chat_template_kwargs", v) == 0;
}

/* Fields clients often send at a neutral value (leader/openai): accepted
 * there, refused by name at any other.  *known: key is one of them. */
static bool parse_neutral(const char *key, json_t *v, bool chat, bool *known, api_error *err)
{
    bool neutral = false;
    const char *why = NULL;
    *known = openai_neutral_field(key, v, chat, &neutral, &why);
    if (*known && !neutral) {
        api_error_invalid(err, key, "'%s' %s", key, why);
        return false;
    }
    return true;
}

/* The fields of completions and chat completions; the chat-only and
 * completions-only ones are told apart by kind. */
static bool parse_generation(json_t *doc, const char *served_model, api_request *req, api_error *err)
{
    bool chat = req->kind == API_CHAT;
    nl_sampling_params *p = &req->params;
    nl_sampling_params_init(p);
    /* OpenAI's defaults: 16 tokens for completions; a chat runs until the
     * model's context is full. */
    p->max_tokens = chat ? 0 : 16;
    req->logprobs = -1;
    bool chat_logprobs = false, have_prompt = false, have_max_tokens = false;
    json_t *top_logprobs = NULL, *stream_options = NULL, *template_kwargs = NULL;
    if (chat && !(req->chat = json_object())) {
        api_error_set(err, 500, "internal_error", "messages", NULL, "out of memory for the chat request");
        return false;
    }
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) {
        int64_t iv;
        if (strcmp(key, "model") == 0) {
            if (json_is_null(v)) continue;
            if (!json_is_string(v)) {
                api_error_invalid(err, "model", "'model' must be a string, got %s", type_name(v));
                return false;
            }
            if (strcmp(json_string_value(v), served_model) != 0) {
                api_error_set(err, 404, "invalid_request_error", "model", "model_not_found",
                              "The model '%.*s' does not exist; this server serves '%s'", DESCRIBE_MAX * 4,
                              json_string_value(v), served_model);
                return false;
            }
            continue;
        }
        if (!chat && strcmp(key, "prompt") == 0) {
            if (!parse_prompt(v, req, err)) return false;
            have_prompt = true;
            continue;
        }
        if (chat && strcmp(key, "messages") == 0) {
            if (!parse_messages(v, req, err)) return false;
            have_prompt = true;
            continue;
        }
        if (json_is_null(v)) continue; /* every other field is optional */
        if (strcmp(key, "max_tokens") == 0 || (chat && strcmp(key, "max_completion_tokens") == 0)) {
            if (have_max_tokens) {
                api_error_invalid(err, key, "give only one of 'max_tokens' and 'max_completion_tokens'");
                return false;
            }
            if (!get_int(v, key, 1, INT32_MAX / 2, &iv, err)) return false;
            p->max_tokens = (int32_t)iv;
            have_max_tokens = true;
        } else if (strcmp(key, "temperature") == 0) {
            if (!get_number(v, key, 0.0, false, 1e6, &p->temperature, err)) return false;
        } else if (strcmp(key, "top_p") == 0) {
            if (!get_number(v, key, 0.0, true, 1.0, &p->top_p, err)) return false;
        } else if (strcmp(key, "min_p") == 0) {
            if (!get_number(v, key, 0.0, false, 1.0, &p->min_p, err)) return false;
        } else if (strcmp(key, "top_k") == 0) {
            if (!get_int(v, key, -1, INT32_MAX, &iv, err)) return false;
            p->top_k = (int32_t)iv;
        } else if (strcmp(key, "seed") == 0) {
            if (!get_int(v, key, 0, INT64_MAX, &iv, err)) return false;
            p->seed = (uint64_t)iv;
            p->has_seed = true;
        } else if (strcmp(key, "ignore_eos") == 0) {
            if (!get_bool(v, key, &p->ignore_eos, err)) return false;
        } else if (strcmp(key, "stop") == 0) {
            if (!parse_stop(v, req, err)) return false;
        } else if (strcmp(key, "stop_token_ids") == 0) { /* vLLM's */
            if (!get_ids(v, key, &req->stop_ids, err)) return false;
            p->stop_token_ids = req->stop_ids;
            p->n_stop_token_ids = (int32_t)(json_array_size(v) < INT32_MAX ? json_array_size(v) : INT32_MAX);
        } else if (strcmp(key, "n") == 0) {
            if (!get_int(v, key, 1, 1, &iv, err)) {
                api_error_invalid(err, "n", "'n' must be 1: one completion per request is supported");
                return false;
            }
        } else if (strcmp(key, "stream") == 0) {
            if (!get_bool(v, key, &req->stream, err)) return false;
        } else if (strcmp(key, "stream_options") == 0) {
            stream_options = v;
        } else if (!chat && strcmp(key, "logprobs") == 0) {
            if (!get_int(v, key, 0, API_MAX_LOGPROBS_COMPLETIONS, &iv, err)) return false;
            req->logprobs = (int32_t)iv;
        } else if (chat && strcmp(key, "logprobs") == 0) {
            if (!get_bool(v, key, &chat_logprobs, err)) return false;
        } else if (chat && strcmp(key, "top_logprobs") == 0) {
            top_logprobs = v;
        } else if (chat && strcmp(key, "chat_template_kwargs") == 0) {
            template_kwargs = v;
        } else if (chat && strcmp(key, "tools") == 0) {
            if (!parse_tools(v, req, err)) return false;
        } else if (chat && strcmp(key, "add_generation_prompt") == 0) {
            if (!json_is_boolean(v)) {
                api_error_invalid(err, key, "'add_generation_prompt' must be a boolean, got %s", type_name(v));
                return false;
            }
            json_object_set(req->chat, key, v);
        } else {
            bool known;
            if (!parse_neutral(key, v, chat, &known, err)) return false;
            if (!known) {
                api_error_invalid(err, key, "unknown field '%s'", key);
                return false;
            }
        }
    }
    if (!have_prompt) {
        api_error_invalid(err, chat ? "messages" : "prompt", "'%s' is required", chat ? "messages" : "prompt");
        return false;
    }
    if (stream_options) {
        if (!req->stream) {
            api_error_invalid(err, "stream_options", "'stream_options' is only allowed with 'stream': true");
            return false;
        }
        if (!parse_stream_options(stream_options, req, err)) return false;
    }
    if (template_kwargs && !parse_chat_template_kwargs(template_kwargs, req, err)) return false;
    if (chat && !finish_chat(req, err)) return false;
    if (chat) {
        int64_t top = 0;
        if (top_logprobs) {
            if (!get_int(top_logprobs, "top_logprobs", 0, API_MAX_TOP_LOGPROBS_CHAT, &top, err)) return false;
            if (!chat_logprobs) {
                api_error_invalid(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
                return false;
            }
        }
        if (chat_logprobs) req->logprobs = (int32_t)top;
    }
    /* The engine's logprobs count is the number of alternatives; it reports
     * the chosen token's logprob only when it is at least 1. */
    if (req->logprobs >= 0) p->logprobs = req->logprobs > 0 ? req->logprobs : 1;
    return true;
}

static bool parse_tokenize(json_t *doc, const char *served_model, api_request *req, api_error *err)
{
    bool detok = req->kind == API_DETOKENIZE;
    const char *want = detok ? "tokens" : "prompt";
    bool have = false;
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) {
        if (strcmp(key, "model") == 0 && (json_is_null(v) || json_is_string(v))) {
            if (json_is_string(v) && strcmp(json_string_value(v), served_model) != 0) {
                api_error_set(err, 404, "invalid_request_error", "model", "model_not_found",
                              "The model '%.*s' does not exist; this server serves '%s'", DESCRIBE_MAX * 4,
                              json_string_value(v), served_model);
                return false;
            }
        } else if (strcmp(key, want) == 0) {
            if (detok ? !json_is_array(v) : !json_is_string(v)) {
                api_error_invalid(err, want, "'%s' must be %s, got %s", want,
                                  detok ? "a list of token ids" : "a string", type_name(v));
                return false;
            }
            if (detok) {
                if (!parse_ids(v, "tokens", req, err)) return false;
            } else {
                req->prompt.kind = NL_PROMPT_TEXT;
                req->prompt.text = json_string_value(v);
                req->prompt_len = json_string_length(v);
            }
            have = true;
        } else if (!detok && strcmp(key, "add_special_tokens") == 0) {
            /* As Hugging Face's encode: false leaves out the post-processor's
             * tokens (Llama 3's <|begin_of_text|>). */
            if (!json_is_boolean(v)) {
                api_error_invalid(err, key, "'add_special_tokens' must be a boolean, got %s", type_name(v));
                return false;
            }
            if (json_is_false(v)) req->encode_flags |= NL_ENCODE_NO_ADD_SPECIAL;
        } else {
            api_error_invalid(err, key, "unknown field '%s'%s", key,
                              strcmp(key, "model") == 0 ? " value (must be a string)" : "");
            return false;
        }
    }
    if (!have) {
        api_error_invalid(err, want, "'%s' is required", want);
        return false;
    }
    req->prompt_field = want;
    return true;
}

bool api_request_parse(api_kind kind, const char *body, size_t len, const char *served_model,
                       api_request *req, api_error *err)
{
    memset(req, 0, sizeof(*req));
    req->kind = kind;
    req->logprobs = -1;
    json_error_t jerr;
    /* /tokenize passes the prompt's length on, so "\u0000" is text there;
     * the generation routes hand NUL-terminated strings to the engine, so
     * the parser refuses it (a 400 that says so) rather than cut a prompt. */
    size_t flags = JSON_REJECT_DUPLICATES | (kind == API_TOKENIZE ? JSON_ALLOW_NUL : 0);
    req->doc = json_loadb(body, len, flags, &jerr);
    if (!req->doc) {
        api_error_invalid(err, "", "the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                          jerr.column);
        return false;
    }
    if (!json_is_object(req->doc)) {
        api_error_invalid(err, "", "the body must be a JSON object, got %s", type_name(req->doc));
        api_request_free(req);
        return false;
    }
    bool ok = kind == API_TOKENIZE || kind == API_DETOKENIZE ? parse_tokenize(req->doc, served_model, req, err)
                                                              : parse_generation(req->doc, served_model, req, err);
    if (!ok) api_request_free(req);
    return ok;
}

void api_request_free(api_request *req)
{
    json_decref(req->doc);
    json_decref(req->chat);
    free(req->chat_text);
    free(req->ids);
    free(req->stop_ids);
    memset(req, 0, sizeof(*req));
}
