/* cli_batch_output.c — one batch output line (see cli_batch.h): the native
 * record, or an OpenAI batch record whose body is a text_completion or a
 * chat.completion object as the API returns it (usage, finish_reason and,
 * when asked for, logprobs in the endpoint's own shape).  Text fields never
 * disappear because of bad bytes: they go through batch_json_text().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader/cli/cli_batch.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    uint32_t cp = len == 2 ? (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F)
                : len == 3 ? (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F)
                           : (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
                                 (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

json_t *batch_json_text(const char *text)
{
    return batch_json_textn(text, text ? strlen(text) : 0);
}

json_t *batch_json_textn(const char *text, size_t n)
{
    if (!text) text = "", n = 0;
    json_t *j = json_stringn(text, n);
    if (j) return j;
    char *fixed = malloc(3 * n + 1);
    if (!fixed) return json_string("");
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq_len(s + i, n - i);
        if (len == 0) {
            memcpy(fixed + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3;
            i++;
        } else {
            memcpy(fixed + o, s + i, len);
            o += len;
            i += len;
        }
    }
    j = json_stringn(fixed, o);
    free(fixed);
    return j ? j : json_string("");
}

static const char *finish_name(nl_finish_reason r)
{
    switch (r) {
    case NL_FINISH_STOP: return "stop";
    case NL_FINISH_LENGTH: return "length";
    default: return "error";
    }
}

static json_t *native_line(const batch_meta *m, const nl_result *r, batch_failure failure, const char *message,
                           bool has_tokenizer)
{
    json_t *o = json_object();
    json_object_set(o, "id", m->id);
    json_t *toks = json_array();
    for (int32_t k = 0; r && k < r->n_tokens; k++) json_array_append_new(toks, json_integer(r->token_ids[k]));
    json_object_set_new(o, "token_ids", toks);
    if (has_tokenizer && r) json_object_set_new(o, "text", batch_json_textn(r->text, r->text_len));
    bool ok = r && (r->finish_reason == NL_FINISH_STOP || r->finish_reason == NL_FINISH_LENGTH);
    json_object_set_new(o, "finish_reason", json_string(r ? finish_name(r->finish_reason) : "error"));
    json_object_set_new(o, "prompt_tokens", json_integer(r ? r->prompt_tokens : 0));
    json_object_set_new(o, "cached_tokens", json_integer(r ? r->cached_tokens : 0));
    if (r && r->logprobs) {
        json_t *lps = json_array();
        for (int32_t k = 0; k < r->n_tokens; k++) {
            const nl_token_logprob *lp = &r->logprobs[k];
            json_t *top = json_array();
            for (int32_t t = 0; t < lp->n_top; t++)
                json_array_append_new(top, json_pack("[if]", lp->top_ids[t], (double)lp->top_logprobs[t]));
            json_array_append_new(lps, json_pack("{s:i, s:f, s:o}", "token_id", lp->token_id, "logprob",
                                                 (double)lp->logprob, "top", top));
        }
        json_object_set_new(o, "logprobs", lps);
    }
    if (!ok) {
        const char *why = message ? message : r && r->error ? r->error : "aborted";
        json_object_set_new(o, "error", batch_json_text(why));
        if (failure != BATCH_REFUSED) json_object_set_new(o, "incomplete", json_true());
    }
    return o;
}

/* One token's text (as much of a character as the token holds). */
static json_t *token_text(nl_engine *engine, bool has_tokenizer, int32_t id)
{
    char *text = NULL;
    size_t len = 0;
    if (has_tokenizer && nl_engine_decode(engine, &id, 1, &text, &len) == NL_OK) {
        json_t *j = batch_json_textn(text, len);
        free(text);
        return j;
    }
    char buf[32];
    snprintf(buf, sizeof buf, "token_id:%d", id);
    return json_string(buf);
}

static json_t *completion_logprobs(const nl_result *r, nl_engine *engine, bool has_tokenizer)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array();
    for (int32_t k = 0; k < r->n_tokens; k++) {
        const nl_token_logprob *lp = &r->logprobs[k];
        json_array_append_new(tokens, token_text(engine, has_tokenizer, lp->token_id));
        json_array_append_new(lps, json_real(lp->logprob));
        json_t *top = json_object();
        for (int32_t t = 0; t < lp->n_top; t++) {
            json_t *name = token_text(engine, has_tokenizer, lp->top_ids[t]);
            json_object_setn_new(top, json_string_value(name), json_string_length(name), json_real(lp->top_logprobs[t]));
            json_decref(name);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops);
}

static json_t *chat_logprobs(const nl_result *r, int32_t n_top, nl_engine *engine, bool has_tokenizer)
{
    json_t *content = json_array();
    for (int32_t k = 0; k < r->n_tokens; k++) {
        const nl_token_logprob *lp = &r->logprobs[k];
        json_t *top = json_array();
        for (int32_t t = 0; t < lp->n_top && t < n_top; t++)
            json_array_append_new(top, json_pack("{s:o, s:f}", "token",
                                                 token_text(engine, has_tokenizer, lp->top_ids[t]), "logprob",
                                                 (double)lp->top_logprobs[t]));
        json_array_append_new(content, json_pack("{s:o, s:f, s:o}", "token",
                                                 token_text(engine, has_tokenizer, lp->token_id), "logprob",
                                                 (double)lp->logprob, "top_logprobs", top));
    }
    return json_pack("{s:o}", "content", content);
}

static json_t *openai_line(const batch_meta *m, int64_t index, const nl_result *r, batch_failure failure,
                           const char *message, nl_engine *engine, bool has_tokenizer)
{
    bool chat = m->format == BATCH_OPENAI_CHAT;
    char id[64];
    snprintf(id, sizeof id, "batch_req_%lld", (long long)index);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set(o, "custom_id", m->id);
    bool ok = r && (r->finish_reason == NL_FINISH_STOP || r->finish_reason == NL_FINISH_LENGTH);
    if (!ok) {
        const char *code = failure == BATCH_INTERRUPTED     ? "interrupted"
                           : failure == BATCH_ENGINE_FAILED ? "engine_failure"
                                                            : "invalid_request";
        const char *why = message ? message : r && r->error ? r->error : "aborted";
        json_object_set_new(o, "response", json_null());
        json_object_set_new(o, "error", json_pack("{s:s, s:o}", "code", code, "message", batch_json_text(why)));
        return o;
    }
    char body_id[64];
    /* from the line number, so a resumed job writes what a whole run would */
    snprintf(body_id, sizeof body_id, "%s-%lld", chat ? "chatcmpl" : "cmpl", (long long)index);
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    json_t *text = batch_json_textn(r->text, r->text_len);
    if (chat)
        json_object_set_new(choice, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", text));
    else
        json_object_set_new(choice, "text", text);
    if (!has_tokenizer) { /* token ids are the only output of such a model */
        json_t *ids = json_array();
        for (int32_t k = 0; k < r->n_tokens; k++) json_array_append_new(ids, json_integer(r->token_ids[k]));
        json_object_set_new(choice, "token_ids", ids);
    }
    json_object_set_new(choice, "logprobs",
                        m->want_logprobs && r->logprobs
                            ? (chat ? chat_logprobs(r, m->top_logprobs, engine, has_tokenizer)
                                    : completion_logprobs(r, engine, has_tokenizer))
                            : json_null());
    json_object_set_new(choice, "finish_reason", json_string(finish_name(r->finish_reason)));
    json_t *body = json_object();
    json_object_set_new(body, "id", json_string(body_id));
    json_object_set_new(body, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(body, "created", json_integer((json_int_t)time(NULL)));
    json_object_set_new(body, "model", m->model && json_is_string(m->model) ? json_incref(m->model)
                                                                           : json_string("nanollm"));
    json_object_set_new(body, "choices", json_pack("[o]", choice));
    json_object_set_new(body, "usage", json_pack("{s:i, s:i, s:i}", "prompt_tokens", r->prompt_tokens,
                                                 "completion_tokens", r->n_tokens, "total_tokens",
                                                 r->prompt_tokens + r->n_tokens));
    json_object_set_new(o, "response", json_pack("{s:i, s:s, s:o}", "status_code", 200, "request_id", body_id,
                                                 "body", body));
    json_object_set_new(o, "error", json_null());
    return o;
}

char *batch_output_line(const batch_meta *m, int64_t index, const nl_result *r, batch_failure failure,
                        const char *message, nl_engine *engine, bool has_tokenizer, size_t *len)
{
    json_t *o = m->format == BATCH_NATIVE ? native_line(m, r, failure, message, has_tokenizer)
                                          : openai_line(m, index, r, failure, message, engine, has_tokenizer);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    json_decref(o);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    *len = n + 1;
    return line;
}

bool batch_output_is_final(json_t *line, json_t **id)
{
    *id = NULL;
    if (!json_is_object(line)) return false;
    json_t *custom = json_object_get(line, "custom_id");
    if (custom) {
        *id = custom;
        json_t *err = json_object_get(line, "error");
        const char *code = json_string_value(json_object_get(err, "code"));
        return !(code && (strcmp(code, "interrupted") == 0 || strcmp(code, "engine_failure") == 0));
    }
    *id = json_object_get(line, "id");
    return *id && !json_is_true(json_object_get(line, "incomplete"));
}
