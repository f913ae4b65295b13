/* chat_template.c — finds a model's chat template and special tokens, checks
 * a chat request's shape, and renders it through the Jinja interpreter with
 * the variables transformers' apply_chat_template passes:
 *   messages, tools (None when absent), documents (None),
 *   add_generation_prompt, the special tokens, then chat_template_kwargs
 *   (which override any of the above, as render(**kwargs) would). */
#include "leader/tokenizer/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/status.h"
#include "leader/tokenizer/jinja.h"

struct chat_template {
    jinja_template *jinja;
    json_t *special; /* {"bos_token": "...", ...}: the tokens the config names */
};

static nl_status create_from(const char *source, size_t len, json_t *special, const char *origin,
                             chat_template **out)
{
    *out = NULL;
    chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(special);
        return nl_error(NL_ERR_NOMEM, "chat template: no memory");
    }
    t->special = special;
    nl_status st = jinja_template_create(source, len, &t->jinja);
    if (st != NL_OK) {
        chat_template_destroy(t);
        return nl_error_prefix(st, "%s: chat template ", origin);
    }
    *out = t;
    return NL_OK;
}

nl_status chat_template_create(const char *source, const char *bos_token, const char *eos_token,
                               chat_template **out)
{
    json_t *special = json_object();
    if (!special) return nl_error(NL_ERR_NOMEM, "chat template: no memory");
    if (bos_token) json_object_set_new(special, "bos_token", json_string(bos_token));
    if (eos_token) json_object_set_new(special, "eos_token", json_string(eos_token));
    return create_from(source, strlen(source), special, "chat template", out);
}

void chat_template_destroy(chat_template *t)
{
    if (!t) return;
    jinja_template_destroy(t->jinja);
    json_decref(t->special);
    free(t);
}

nl_status chat_template_load(const char *dir, chat_template **out)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *special = json_object();
    if (!special) return nl_error(NL_ERR_NOMEM, "chat template: no memory");
    json_t *cfg = NULL;
    char *text;
    size_t len = 0;
    nl_status st = nl_file_read(path, false, &text, &len);
    if (st != NL_OK) {
        json_decref(special);
        return st;
    }
    if (text) {
        json_error_t jerr;
        cfg = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &jerr); /* model_max_length may pass 64 bits */
        free(text);
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            json_decref(special);
            return nl_error(NL_ERR_FORMAT, "%s: %s", path, cfg ? "not a JSON object" : jerr.text);
        }
    }
    const json_t *tmpl = NULL;
    if (cfg) {
        static const char *const names[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const json_t *v = json_object_get(cfg, names[i]);
            if (json_is_object(v)) v = json_object_get(v, "content");
            if (json_is_string(v)) json_object_set_new(special, names[i], json_string(json_string_value(v)));
        }
        tmpl = json_object_get(cfg, "chat_template");
        if (json_is_array(tmpl)) { /* named templates: the "default" one */
            const json_t *chosen = NULL;
            for (size_t i = 0; i < json_array_size(tmpl); i++) {
                const json_t *e = json_array_get(tmpl, i);
                const char *name = json_string_value(json_object_get(e, "name"));
                if (name && strcmp(name, "default") == 0) chosen = json_object_get(e, "template");
            }
            tmpl = chosen;
        }
    }
    if (json_is_string(tmpl)) {
        char origin[4200];
        snprintf(origin, sizeof origin, "%s: \"chat_template\"", path);
        st = create_from(json_string_value(tmpl), json_string_length(tmpl), special, origin, out);
        json_decref(cfg);
        return st;
    }
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    st = nl_file_read(path, false, &text, &len);
    if (st != NL_OK || !text) {
        json_decref(special);
        return st;
    }
    st = create_from(text, len, special, path, out);
    free(text);
    return st;
}

/* CPython's clock for strftime_now, or a fixed instant for tests. */
static int64_t render_time(void)
{
    const char *env = getenv("NANOLLM_CHAT_TIME");
    if (!env || !env[0]) return -1;
    char *end;
    long long v = strtoll(env, &end, 10);
    return *end == '\0' && v >= 0 ? (int64_t)v : -1;
}

static nl_status check_request(const json_t *request)
{
    if (!json_is_object(request)) return nl_error(NL_ERR_INVALID_ARG, "chat: the request is not a JSON object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)request, key, v) {
        if (strcmp(key, "messages") && strcmp(key, "tools") && strcmp(key, "add_generation_prompt") &&
            strcmp(key, "chat_template_kwargs"))
            return nl_error(NL_ERR_INVALID_ARG, "chat: unknown field \"%s\" (known: messages, tools, "
                            "add_generation_prompt, chat_template_kwargs)", key);
    }
    const json_t *msgs = json_object_get(request, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return nl_error(NL_ERR_INVALID_ARG, "chat: \"messages\" must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) return nl_error(NL_ERR_INVALID_ARG, "chat: message %zu is not an object", i);
        if (!json_is_string(json_object_get(m, "role")))
            return nl_error(NL_ERR_INVALID_ARG, "chat: message %zu has no string \"role\"", i);
    }
    const json_t *tools = json_object_get(request, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return nl_error(NL_ERR_INVALID_ARG, "chat: \"tools\" must be an array");
    const json_t *gen = json_object_get(request, "add_generation_prompt");
    if (gen && !json_is_boolean(gen))
        return nl_error(NL_ERR_INVALID_ARG, "chat: \"add_generation_prompt\" must be true or false");
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (kw && !json_is_object(kw) && !json_is_null(kw))
        return nl_error(NL_ERR_INVALID_ARG, "chat: \"chat_template_kwargs\" must be an object");
    return NL_OK;
}

nl_status chat_request_decode_tool_arguments(json_t *request)
{
    size_t i, k;
    json_t *m, *call;
    json_array_foreach(json_object_get(request, "messages"), i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "assistant") != 0) continue;
        json_array_foreach(json_object_get(m, "tool_calls"), k, call) {
            json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
            if (!json_is_string(args)) continue;
            json_error_t jerr;
            json_t *value = json_loadb(json_string_value(args), json_string_length(args),
                                       JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
            if (!value)
                return nl_error(NL_ERR_INVALID_ARG,
                                "chat: messages[%zu].tool_calls[%zu].function.arguments is not valid JSON: %s", i, k,
                                jerr.text);
            json_object_set_new(fn, "arguments", value);
        }
    }
    return NL_OK;
}

nl_status chat_template_render_request(const chat_template *t, const json_t *request, char **out, size_t *len,
                                       bool *raised)
{
    *out = NULL;
    *len = 0;
    if (raised) *raised = false;
    NL_TRY(check_request(request));
    json_t *vars = json_object();
    if (!vars) return nl_error(NL_ERR_NOMEM, "chat: no memory");
    const json_t *tools = json_object_get(request, "tools");
    const json_t *gen = json_object_get(request, "add_generation_prompt");
    json_object_set(vars, "messages", json_object_get(request, "messages"));
    json_object_set_new(vars, "tools", tools ? json_incref((json_t *)tools) : json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(gen ? json_is_true(gen) : true));
    json_object_update(vars, t->special);
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (json_is_object(kw)) json_object_update(vars, (json_t *)kw);
    bool was_raised = false;
    nl_status st = jinja_render(t->jinja, vars, render_time(), out, len, &was_raised);
    json_decref(vars);
    if (raised) *raised = was_raised;
    if (st != NL_OK && !was_raised) return nl_error_prefix(st, "chat template: ");
    return st;
}

nl_status chat_template_render(const chat_template *t, const nl_chat_message *msgs, size_t n_msgs,
                               bool add_generation_prompt, bool enable_thinking, char **out)
{
    *out = NULL;
    if (n_msgs == 0 || !msgs) return nl_error(NL_ERR_INVALID_ARG, "chat: the conversation has no messages");
    json_t *request = json_object(), *list = json_array(), *kw = json_object();
    if (!request || !list || !kw) {
        json_decref(request);
        json_decref(list);
        json_decref(kw);
        return nl_error(NL_ERR_NOMEM, "chat: no memory");
    }
    json_object_set_new(request, "messages", list);
    json_object_set_new(request, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_set_new(kw, "enable_thinking", json_boolean(enable_thinking));
    json_object_set_new(request, "chat_template_kwargs", kw);
    nl_status st = NL_OK;
    for (size_t i = 0; i < n_msgs && st == NL_OK; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            st = nl_error(NL_ERR_INVALID_ARG, "chat: message %zu has no %s", i, msgs[i].role ? "content" : "role");
            break;
        }
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!m) st = nl_error(NL_ERR_INVALID_ARG, "chat: message %zu is not valid UTF-8", i);
        else json_array_append_new(list, m);
    }
    size_t len;
    if (st == NL_OK) st = chat_template_render_request(t, request, out, &len, NULL);
    json_decref(request);
    return st;
}
