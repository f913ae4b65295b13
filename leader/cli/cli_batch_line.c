/* cli_batch_line.c — one batch input line into a request (see cli_batch.h).
 *
 * Native lines: `prompt` (text), `prompt_token_ids` or `messages` (chat,
 * with optional `tools`, `add_generation_prompt` and `chat_template_kwargs`
 * as vLLM names them, rendered by the model's chat template), and
 * optionally `id`, `max_tokens`, `temperature`, `top_k`, `top_p`, `min_p`,
 * `seed`, `ignore_eos`, `stop` (a string or a list), `stop_token_ids` and
 * `logprobs`; any
 * other field is refused by name.
 *
 * OpenAI lines: `custom_id`, `method` ("POST"), `url` and `body`.  The body
 * of /v1/completions takes `prompt` (a string or an array of token ids),
 * that of /v1/chat/completions `messages` (and `tools`,
 * `add_generation_prompt`, `chat_template_kwargs`); both take `model`, `max_tokens`
 * (chat also `max_completion_tokens`), `temperature`, `top_p`, `top_k`,
 * `min_p`, `seed`, `stop`, `stop_token_ids`, `ignore_eos`, `n` (1 only), `stream` (false
 * only), and logprobs as the API has them (completions: `logprobs` N; chat:
 * `logprobs` true with `top_logprobs` N); fields clients often send at a
 * neutral value (`presence_penalty` 0, `user` and the others of
 * leader/openai/neutral_fields.c) are accepted at that value, as the server
 * accepts them.  Other body fields, and other values of those, are refused
 * by name rather than silently ignored.
 *
 * Sampling options on the command line are the defaults for fields a line
 * leaves out.  Messages quote at most a bounded part of the input and are
 * cut on UTF-8 character boundaries.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli_batch.h"
#include "leader/openai/neutral_fields.h"

#define LINE_ERROR_MAX 1024

/* A message of at most LINE_ERROR_MAX bytes, cut at a character boundary. */
static char *line_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *line_error(const char *fmt, ...)
{
    char buf[LINE_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(buf)) {
        /* cut: drop a partial character at the end */
        size_t len = strlen(buf), start = len;
        while (start > 0 && ((unsigned char)buf[start - 1] & 0xC0) == 0x80) start--;
        if (start > 0) {
            unsigned char lead = (unsigned char)buf[start - 1];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if (len - (start - 1) < need) buf[start - 1] = '\0';
        }
    }
    return strdup(buf);
}

static bool get_int(json_t *v, const char *key, int64_t lo, int64_t hi, int64_t *out, char **err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        *err = line_error("field \"%s\": must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

static bool get_number(json_t *v, const char *key, double *out, char **err)
{
    if (!json_is_number(v)) {
        *err = line_error("field \"%s\": must be a number", key);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

/* An array of token ids into *ids (malloc'd); the engine checks them
 * against the vocabulary. */
static bool get_ids(json_t *v, const char *key, int32_t **ids, char **err)
{
    if (!json_is_array(v)) {
        *err = line_error("field \"%s\": must be an array of token ids", key);
        return false;
    }
    size_t n = json_array_size(v);
    *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!*ids) {
        *err = line_error("out of memory for %zu token ids", n);
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        json_t *t = json_array_get(v, k);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            *err = line_error("field \"%s\": element %zu is not a token id", key, k);
            return false;
        }
        (*ids)[k] = (int32_t)json_integer_value(t);
    }
    return true;
}

static bool get_token_ids(batch_request *rq, json_t *v, const char *key, char **err)
{
    if (!get_ids(v, key, &rq->ids, err)) return false;
    rq->prompt.kind = NL_PROMPT_TOKENS;
    rq->prompt.token_ids = rq->ids;
    rq->prompt.n_tokens = (int32_t)json_array_size(v);
    return true;
}

/* The message fields are the chat template's business: their shape is
 * checked where it renders, and a refusal names the template's reason. */
static bool get_messages(batch_request *rq, json_t *v, const char *key, char **err)
{
    if (!json_is_array(v) || json_array_size(v) == 0) {
        *err = line_error("field \"%s\": must be a non-empty array of messages", key);
        return false;
    }
    json_object_set(rq->chat, "messages", v);
    rq->prompt.kind = NL_PROMPT_CHAT;
    return true;
}

static bool is_template_input(const char *key)
{
    return strcmp(key, "tools") == 0 || strcmp(key, "add_generation_prompt") == 0 ||
           strcmp(key, "chat_template_kwargs") == 0;
}

/* After the fields: the chat request as text for nl_prompt.chat_json. */
static char *finish_chat(batch_request *rq, const char *where)
{
    if (rq->prompt.kind != NL_PROMPT_CHAT) {
        if (json_object_size(rq->chat) > 0)
            return line_error("fields %s\"tools\", %s\"add_generation_prompt\" and %s\"chat_template_kwargs\" "
                              "need %s\"messages\"", where, where, where, where);
        return NULL;
    }
    rq->chat_text = json_dumps(rq->chat, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!rq->chat_text) return line_error("out of memory for the chat request");
    rq->prompt.chat_json = rq->chat_text;
    return NULL;
}

static bool get_stop(batch_request *rq, json_t *v, const char *key, char **err)
{
    nl_sampling_params *sp = &rq->params;
    sp->n_stop = 0;
    if (json_is_null(v)) return true;
    if (json_is_string(v)) {
        rq->stops[sp->n_stop++] = json_string_value(v);
        return true;
    }
    if (json_is_array(v) && json_array_size(v) <= CLI_MAX_STOP) {
        for (size_t k = 0; k < json_array_size(v); k++) {
            json_t *s = json_array_get(v, k);
            if (!json_is_string(s)) {
                *err = line_error("field \"%s\": must hold strings", key);
                return false;
            }
            rq->stops[sp->n_stop++] = json_string_value(s);
        }
        return true;
    }
    *err = line_error("field \"%s\": must be a string or a list of at most %d strings", key, CLI_MAX_STOP);
    return false;
}

/* A sampling field both formats share; *known false when key is not one. */
static bool sampling_field(batch_request *rq, const char *key, json_t *v, bool *known, char **err)
{
    nl_sampling_params *sp = &rq->params;
    int64_t iv;
    double fv;
    *known = true;
    if (strcmp(key, "max_tokens") == 0 || strcmp(key, "max_completion_tokens") == 0) {
        if (!get_int(v, key, 1, INT32_MAX / 2, &iv, err)) return false;
        sp->max_tokens = (int32_t)iv;
    } else if (strcmp(key, "temperature") == 0) {
        if (!get_number(v, key, &fv, err)) return false;
        sp->temperature = (float)fv;
    } else if (strcmp(key, "top_k") == 0) {
        if (!get_int(v, key, -1, INT32_MAX, &iv, err)) return false;
        sp->top_k = (int32_t)iv;
    } else if (strcmp(key, "top_p") == 0) {
        if (!get_number(v, key, &fv, err)) return false;
        sp->top_p = (float)fv;
    } else if (strcmp(key, "min_p") == 0) {
        if (!get_number(v, key, &fv, err)) return false;
        sp->min_p = (float)fv;
    } else if (strcmp(key, "seed") == 0) {
        if (!get_int(v, key, 0, INT64_MAX, &iv, err)) return false;
        sp->seed = (uint64_t)iv;
        sp->has_seed = true;
    } else if (strcmp(key, "ignore_eos") == 0) {
        if (!json_is_boolean(v)) {
            *err = line_error("field \"%s\": must be true or false", key);
            return false;
        }
        sp->ignore_eos = json_is_true(v);
    } else if (strcmp(key, "stop") == 0) {
        return get_stop(rq, v, key, err);
    } else if (strcmp(key, "stop_token_ids") == 0) {
        if (json_is_null(v)) return true;
        free(rq->stop_ids);
        rq->stop_ids = NULL;
        if (!get_ids(v, key, &rq->stop_ids, err)) return false;
        sp->stop_token_ids = rq->stop_ids;
        sp->n_stop_token_ids = json_array_size(v) > INT32_MAX ? INT32_MAX : (int32_t)json_array_size(v);
    } else {
        *known = false;
    }
    return true;
}

static void parse_native(batch_request *rq, json_t *obj)
{
    int n_prompt_fields = 0;
    char *err = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        bool known;
        int64_t iv;
        if (strcmp(key, "id") == 0) continue;
        if (strcmp(key, "prompt") == 0) {
            if (!json_is_string(v)) { err = line_error("field \"%s\": must be a string", key); break; }
            rq->prompt.kind = NL_PROMPT_TEXT;
            rq->prompt.text = json_string_value(v);
            n_prompt_fields++;
        } else if (strcmp(key, "prompt_token_ids") == 0) {
            if (!json_is_array(v)) { err = line_error("field \"%s\": must be an array of token ids", key); break; }
            if (!get_token_ids(rq, v, key, &err)) break;
            n_prompt_fields++;
        } else if (strcmp(key, "messages") == 0) {
            if (!get_messages(rq, v, key, &err)) break;
            n_prompt_fields++;
        } else if (is_template_input(key)) {
            json_object_set(rq->chat, key, v);
        } else if (strcmp(key, "logprobs") == 0) {
            if (!get_int(v, key, 0, 20, &iv, &err)) break;
            rq->params.logprobs = (int32_t)iv;
        } else if (strcmp(key, "max_completion_tokens") == 0) {
            err = line_error("unknown field \"%s\"", key);
            break;
        } else {
            if (!sampling_field(rq, key, v, &known, &err)) break;
            if (!known) { err = line_error("unknown field \"%s\"", key); break; }
        }
    }
    if (!err && n_prompt_fields != 1) err = line_error("needs exactly one of \"prompt\", \"prompt_token_ids\", \"messages\"");
    if (!err) err = finish_chat(rq, "");
    rq->error = err;
}

static void parse_openai_body(batch_request *rq, json_t *body, bool chat)
{
    char *err = NULL;
    bool have_prompt = false, chat_logprobs = false;
    int64_t top = 0;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool known;
        int64_t iv;
        bool neutral;
        const char *why;
        if (strcmp(key, "model") == 0) {
            rq->meta.model = json_incref(v);
        } else if (openai_neutral_field(key, v, chat, &neutral, &why)) {
            if (!neutral) {
                err = line_error("field \"body.%s\": %s", key, why);
                break;
            }
        } else if (!chat && strcmp(key, "prompt") == 0) {
            if (json_is_string(v)) {
                rq->prompt.kind = NL_PROMPT_TEXT;
                rq->prompt.text = json_string_value(v);
            } else if (json_is_array(v) && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0))) {
                if (!get_token_ids(rq, v, "body.prompt", &err)) break;
            } else {
                err = line_error("field \"body.prompt\": must be a string or an array of token ids "
                                 "(one prompt per line)");
                break;
            }
            have_prompt = true;
        } else if (chat && strcmp(key, "messages") == 0) {
            if (!get_messages(rq, v, "body.messages", &err)) break;
            have_prompt = true;
        } else if (chat && is_template_input(key)) {
            json_object_set(rq->chat, key, v);
        } else if (strcmp(key, "logprobs") == 0) {
            if (chat) {
                if (!json_is_boolean(v)) { err = line_error("field \"body.logprobs\": must be true or false"); break; }
                chat_logprobs = json_is_true(v);
            } else if (!json_is_null(v)) {
                if (!get_int(v, "body.logprobs", 0, 20, &iv, &err)) break;
                top = iv;
                rq->meta.want_logprobs = true;
            }
        } else if (chat && strcmp(key, "top_logprobs") == 0) {
            if (!get_int(v, "body.top_logprobs", 0, 20, &top, &err)) break;
        } else if (strcmp(key, "n") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) != 1) {
                err = line_error("field \"body.n\": only 1 is supported");
                break;
            }
        } else if (strcmp(key, "stream") == 0) {
            if (!json_is_false(v) && !json_is_null(v)) {
                err = line_error("field \"body.stream\": a batch does not stream");
                break;
            }
        } else {
            if (!sampling_field(rq, key, v, &known, &err)) break;
            if (!known) {
                err = line_error("field \"body.%s\": not supported by %s", key,
                                 chat ? "/v1/chat/completions" : "/v1/completions");
                break;
            }
        }
    }
    if (!err && !have_prompt) err = line_error("field \"body.%s\": missing", chat ? "messages" : "prompt");
    if (!err) err = finish_chat(rq, "body.");
    if (chat) rq->meta.want_logprobs = chat_logprobs;
    if (rq->meta.want_logprobs) {
        rq->meta.top_logprobs = (int32_t)top;
        /* the sampled token's logprob comes with any top-N >= 1 */
        rq->params.logprobs = top > 0 ? (int32_t)top : 1;
    }
    rq->error = err;
}

static void parse_openai(batch_request *rq, json_t *obj)
{
    json_t *custom_id = json_object_get(obj, "custom_id");
    if (custom_id) {
        json_decref(rq->meta.id);
        rq->meta.id = json_incref(custom_id);
    }
    json_t *method = json_object_get(obj, "method"), *url = json_object_get(obj, "url");
    json_t *body = json_object_get(obj, "body");
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (strcmp(key, "custom_id") && strcmp(key, "method") && strcmp(key, "url") && strcmp(key, "body")) {
            rq->error = line_error("unknown field \"%s\" (an OpenAI batch line has custom_id, method, url, body)",
                                   key);
            return;
        }
    }
    if (!json_is_string(custom_id)) {
        rq->error = line_error("field \"custom_id\": must be a string");
        return;
    }
    if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0)) {
        rq->error = line_error("field \"method\": must be \"POST\"");
        return;
    }
    const char *u = json_string_value(url);
    if (u && strcmp(u, "/v1/completions") == 0) {
        rq->meta.format = BATCH_OPENAI_COMPLETIONS;
    } else if (u && strcmp(u, "/v1/chat/completions") == 0) {
        rq->meta.format = BATCH_OPENAI_CHAT;
    } else {
        rq->error = line_error("field \"url\": must be \"/v1/completions\" or \"/v1/chat/completions\"");
        return;
    }
    if (!json_is_object(body)) {
        rq->error = line_error("field \"body\": must be an object");
        return;
    }
    parse_openai_body(rq, body, rq->meta.format == BATCH_OPENAI_CHAT);
}

void batch_request_parse(batch_request *rq, const cli_sampling *defaults, const char *text, size_t len,
                         int64_t index)
{
    memset(rq, 0, sizeof(*rq));
    rq->meta.id = json_integer(index);
    rq->chat = json_object();
    rq->params = defaults->params;
    rq->params.stop = rq->stops;
    rq->params.n_stop = 0;
    for (int32_t k = 0; k < defaults->params.n_stop; k++) rq->stops[rq->params.n_stop++] = defaults->stop[k];
    json_error_t jerr;
    rq->obj = json_loadb(text, len, 0, &jerr);
    if (!rq->obj) {
        rq->error = line_error("bad JSON at column %d: %s", jerr.column, jerr.text);
        return;
    }
    if (!json_is_object(rq->obj)) {
        rq->error = line_error("the line is not a JSON object");
        return;
    }
    bool openai = json_object_get(rq->obj, "custom_id") || json_object_get(rq->obj, "url") ||
                  json_object_get(rq->obj, "body");
    if (openai) {
        rq->meta.format = BATCH_OPENAI_COMPLETIONS; /* until the url says otherwise */
        parse_openai(rq, rq->obj);
    } else {
        json_t *id = json_object_get(rq->obj, "id");
        if (id) {
            json_decref(rq->meta.id);
            rq->meta.id = json_incref(id);
        }
        parse_native(rq, rq->obj);
    }
    rq->meta.max_tokens = rq->params.max_tokens;
}

batch_meta batch_request_take_meta(batch_request *rq)
{
    batch_meta m = rq->meta;
    memset(&rq->meta, 0, sizeof(rq->meta));
    return m;
}

void batch_meta_free(batch_meta *m)
{
    json_decref(m->id);
    json_decref(m->model);
    m->id = m->model = NULL;
}

void batch_request_free(batch_request *rq)
{
    batch_meta_free(&rq->meta);
    free(rq->ids);
    free(rq->stop_ids);
    json_decref(rq->chat);
    free(rq->chat_text);
    free(rq->error);
    json_decref(rq->obj);
    memset(rq, 0, sizeof(*rq));
}
