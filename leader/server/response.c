/* response.c — OpenAI response shapes (see response.h). */
#include "leader/server/response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *response_finish_name(nl_finish_reason reason)
{
    switch (reason) {
    case NL_FINISH_STOP: return "stop";
    case NL_FINISH_LENGTH: return "length";
    case NL_FINISH_ABORT: return "abort";
    case NL_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static json_t *finish_json(nl_finish_reason reason)
{
    const char *name = response_finish_name(reason);
    return name ? json_string(name) : json_null();
}

static json_t *usage_json(const job_update *u)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt_tokens, "completion_tokens",
                     u->completion_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", u->cached_tokens);
}

/* The UTF-8 bytes of a JSON string (U+0000 among them). */
static json_t *bytes_json(const json_t *str)
{
    json_t *arr = json_array();
    const unsigned char *p = (const unsigned char *)json_string_value(str);
    for (size_t i = 0; p && i < json_string_length(str); i++) json_array_append_new(arr, json_integer(p[i]));
    return arr;
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}. */
static json_t *chat_logprobs(json_t *entries, int32_t n_top)
{
    json_t *content = json_array();
    size_t k;
    json_t *e;
    json_array_foreach(entries, k, e) {
        json_t *tok = json_object_get(e, "token");
        json_t *tops = json_array();
        size_t t;
        json_t *alt;
        json_array_foreach(json_object_get(e, "top"), t, alt) {
            if ((int32_t)t >= n_top) break;
            json_t *s = json_array_get(alt, 0);
            json_array_append_new(tops, json_pack("{s:O, s:O, s:o}", "token", s, "logprob",
                                                  json_array_get(alt, 1), "bytes", bytes_json(s)));
        }
        json_array_append_new(content, json_pack("{s:O, s:O, s:o, s:o}", "token", tok, "logprob",
                                                 json_object_get(e, "logprob"), "bytes", bytes_json(tok),
                                                 "top_logprobs", tops));
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* Completions: parallel lists, top_logprobs as {token: logprob} maps. */
static json_t *completion_logprobs(json_t *entries, int32_t n_top, size_t *offset)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t k;
    json_t *e;
    json_array_foreach(entries, k, e) {
        json_t *tok = json_object_get(e, "token");
        json_array_append(tokens, tok);
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *map = json_object();
        size_t t;
        json_t *alt;
        json_array_foreach(json_object_get(e, "top"), t, alt) {
            if ((int32_t)t >= n_top) break;
            json_t *name = json_array_get(alt, 0);
            json_object_setn(map, json_string_value(name), json_string_length(name), json_array_get(alt, 1));
        }
        json_array_append_new(tops, map);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += json_string_length(tok);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static json_t *logprobs_json(const server_job *job, json_t *entries, size_t *offset)
{
    if (job->req.logprobs < 0) return json_null();
    json_t *empty = NULL;
    if (!entries) entries = empty = json_array();
    json_t *out = job->req.kind == API_CHAT ? chat_logprobs(entries, job->req.logprobs)
                                            : completion_logprobs(entries, job->req.logprobs, offset);
    json_decref(empty);
    return out ? out : json_null();
}

static char *dump(json_t *o, const char *prefix, const char *suffix)
{
    char *body = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!body || (!prefix && !suffix)) return body;
    size_t n = strlen(prefix) + strlen(body) + strlen(suffix) + 1;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s%s%s", prefix, body, suffix);
    free(body);
    return out;
}

static json_t *envelope(const server_job *job, const char *object, const char *model)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", job->id, "object", object, "created",
                     (json_int_t)job->created, "model", model);
}

char *response_body(const server_job *job, const char *model, const char *text, size_t len, json_t *entries,
                    const job_update *u)
{
    bool chat = job->req.kind == API_CHAT;
    json_t *o = envelope(job, chat ? "chat.completion" : "text_completion", model);
    size_t offset = 0;
    if (!text) text = "", len = 0;
    json_t *choice = chat ? json_pack("{s:i, s:{s:s, s:s%}}", "index", 0, "message", "role", "assistant",
                                      "content", text, len)
                          : json_pack("{s:i, s:s%}", "index", 0, "text", text, len);
    json_object_set_new(choice, "logprobs", logprobs_json(job, entries, &offset));
    json_object_set_new(choice, "finish_reason", finish_json(u->finish));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage_json(u));
    return dump(o, NULL, NULL);
}

char *response_chunk(const server_job *job, const char *model, const char *text, size_t len, json_t *entries,
                     nl_finish_reason finish, size_t *text_offset)
{
    bool chat = job->req.kind == API_CHAT;
    json_t *o = envelope(job, chat ? "chat.completion.chunk" : "text_completion", model);
    json_t *choice;
    if (!text) text = "", len = 0;
    if (chat)
        choice = json_pack("{s:i, s:o}", "index", 0, "delta",
                           len > 0 ? json_pack("{s:s%}", "content", text, len) : json_object());
    else
        choice = json_pack("{s:i, s:s%}", "index", 0, "text", text, len);
    json_object_set_new(choice, "logprobs", entries ? logprobs_json(job, entries, text_offset) : json_null());
    json_object_set_new(choice, "finish_reason", finish_json(finish));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (job->req.include_usage) json_object_set_new(o, "usage", json_null());
    return dump(o, "data: ", "\n\n");
}

char *response_role_chunk(const server_job *job, const char *model)
{
    json_t *o = envelope(job, "chat.completion.chunk", model);
    json_object_set_new(o, "choices",
                        json_pack("[{s:i, s:{s:s, s:s}, s:n, s:n}]", "index", 0, "delta", "role", "assistant",
                                  "content", "", "logprobs", "finish_reason"));
    if (job->req.include_usage) json_object_set_new(o, "usage", json_null());
    return dump(o, "data: ", "\n\n");
}

char *response_usage_chunk(const server_job *job, const char *model, const job_update *u)
{
    bool chat = job->req.kind == API_CHAT;
    json_t *o = envelope(job, chat ? "chat.completion.chunk" : "text_completion", model);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_json(u));
    return dump(o, "data: ", "\n\n");
}

char *response_error_event(const api_error *err)
{
    char *body = api_error_body(err);
    if (!body) return NULL;
    size_t n = strlen(body) + 16;
    char *out = malloc(n);
    if (out) snprintf(out, n, "data: %s\n\n", body);
    free(body);
    return out;
}
