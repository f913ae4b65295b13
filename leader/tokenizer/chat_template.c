/* chat_template.c — the chat templates of the Qwen families, in C.
 *
 * Supported (anything else returns NL_ERR_UNSUPPORTED naming the feature):
 *  - Qwen3 (ChatML + <think>): system/user/assistant messages, a system
 *    message first or anywhere later, add_generation_prompt, enable_thinking
 *    false (an empty <think></think> block after the assistant header), and
 *    assistant history with its reasoning handled as the template does: turns
 *    before the last user query lose their <think> part; turns after it keep
 *    it, re-rendered as "<think>\n...\n</think>\n\n".  User messages wrapped in
 *    <tool_response> tags do not count as queries, as in the template.
 *  - Qwen2.5 and Qwen2 (plain ChatML): the same roles, with the family's
 *    default system prompt when the conversation has none.
 * Not supported: tools / tool calls / the "tool" role, reasoning_content
 * passed as a separate field, other roles, and templates not recognised here.
 */
#include "leader/tokenizer/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* The markers are text of the templates themselves ("\n" is the two
 * characters of the Jinja escape). */
static const char qwen3_markers[][64] = {
    "<|im_start|>", "ns.last_query_index", "reasoning_content",
    "enable_thinking is defined and enable_thinking is false", "'<think>\\n\\n</think>\\n\\n'",
};
static const char qwen2_5_system[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
static const char qwen2_marker[] = "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n'";

chat_template_family chat_template_detect(const char *source)
{
    if (!source || !strstr(source, "<|im_start|>")) return CHAT_TEMPLATE_UNKNOWN;
    bool qwen3 = true;
    for (size_t i = 0; i < sizeof qwen3_markers / sizeof qwen3_markers[0]; i++)
        qwen3 = qwen3 && strstr(source, qwen3_markers[i]);
    if (qwen3) return CHAT_TEMPLATE_QWEN3;
    if (strstr(source, "enable_thinking") || strstr(source, "<think>")) return CHAT_TEMPLATE_UNKNOWN;
    if (strstr(source, qwen2_5_system)) return CHAT_TEMPLATE_QWEN2_5;
    if (strstr(source, qwen2_marker)) return CHAT_TEMPLATE_QWEN2;
    return CHAT_TEMPLATE_UNKNOWN;
}

/* ---- a growing output string ---- */

typedef struct strbuf {
    char *s;
    size_t n, cap;
    bool failed;
} strbuf;

static void put(strbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void puts_(strbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* ---- Python string operations on (pointer, length) views ---- */

typedef struct view {
    const char *s;
    size_t n;
} view;

static view view_of(const char *s)
{
    return (view){s, strlen(s)};
}

static const char *find_in(view v, const char *needle, bool last)
{
    size_t k = strlen(needle);
    const char *hit = NULL;
    for (size_t i = 0; i + k <= v.n; i++) {
        if (memcmp(v.s + i, needle, k) == 0) {
            hit = v.s + i;
            if (!last) break;
        }
    }
    return hit;
}

static view lstrip_newlines(view v)
{
    while (v.n > 0 && v.s[0] == '\n') v.s++, v.n--;
    return v;
}

static view rstrip_newlines(view v)
{
    while (v.n > 0 && v.s[v.n - 1] == '\n') v.n--;
    return v;
}

static bool starts_with(view v, const char *p)
{
    size_t k = strlen(p);
    return v.n >= k && memcmp(v.s, p, k) == 0;
}

static bool ends_with(view v, const char *p)
{
    size_t k = strlen(p);
    return v.n >= k && memcmp(v.s + v.n - k, p, k) == 0;
}

/* ---- rendering ---- */

static nl_status check_messages(const nl_chat_message *msgs, size_t n)
{
    if (n == 0) return nl_error(NL_ERR_INVALID_ARG, "chat: the conversation has no messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return nl_error(NL_ERR_INVALID_ARG, "chat: message %zu has no %s", i,
                            msgs[i].role ? "content" : "role");
        const char *r = msgs[i].role;
        if (strcmp(r, "tool") == 0)
            return nl_error(NL_ERR_UNSUPPORTED, "chat: message %zu: the \"tool\" role (tool calling) "
                            "is not supported", i);
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0)
            return nl_error(NL_ERR_UNSUPPORTED, "chat: message %zu has role \"%s\"; supported roles: "
                            "system, user, assistant", i, r);
    }
    return NL_OK;
}

static void render_turn(strbuf *b, const char *role, view content)
{
    puts_(b, "<|im_start|>");
    puts_(b, role);
    puts_(b, "\n");
    put(b, content.s, content.n);
    puts_(b, "<|im_end|>\n");
}

static void render_qwen3(strbuf *b, const nl_chat_message *msgs, size_t n, bool add_generation_prompt,
                         bool enable_thinking)
{
    if (strcmp(msgs[0].role, "system") == 0) render_turn(b, "system", view_of(msgs[0].content));

    /* The last user message that is a real query, not a wrapped tool result. */
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        view c = view_of(msgs[k].content);
        if (strcmp(msgs[k].role, "user") == 0 &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        view content = view_of(msgs[i].content);
        if (strcmp(role, "user") == 0 || (strcmp(role, "system") == 0 && i > 0)) {
            render_turn(b, role, content);
            continue;
        }
        if (strcmp(role, "assistant") != 0) continue; /* the first system message, done above */

        view reasoning = {"", 0};
        const char *close = find_in(content, "</think>", false);
        if (close) {
            const char *last_close = find_in(content, "</think>", true);
            view before = rstrip_newlines((view){content.s, (size_t)(close - content.s)});
            const char *open = find_in(before, "<think>", true);
            if (open) before = (view){open + 7, (size_t)(before.s + before.n - (open + 7))};
            reasoning = lstrip_newlines(before);
            const char *after = last_close + 8;
            content = lstrip_newlines((view){after, (size_t)(content.s + content.n - after)});
        }
        puts_(b, "<|im_start|>assistant\n");
        if (i > last_query && (i + 1 == n || reasoning.n > 0)) {
            puts_(b, "<think>\n");
            reasoning = rstrip_newlines(lstrip_newlines(reasoning));
            put(b, reasoning.s, reasoning.n);
            puts_(b, "\n</think>\n\n");
            content = lstrip_newlines(content);
        }
        put(b, content.s, content.n);
        puts_(b, "<|im_end|>\n");
    }
    if (add_generation_prompt) {
        puts_(b, "<|im_start|>assistant\n");
        if (!enable_thinking) puts_(b, "<think>\n\n</think>\n\n");
    }
}

static void render_chatml(strbuf *b, const nl_chat_message *msgs, size_t n, bool add_generation_prompt,
                          const char *default_system)
{
    if (strcmp(msgs[0].role, "system") != 0) render_turn(b, "system", view_of(default_system));
    for (size_t i = 0; i < n; i++) render_turn(b, msgs[i].role, view_of(msgs[i].content));
    if (add_generation_prompt) puts_(b, "<|im_start|>assistant\n");
}

nl_status chat_template_render(const char *source, const nl_chat_message *msgs, size_t n_msgs,
                               bool add_generation_prompt, bool enable_thinking, char **out)
{
    *out = NULL;
    chat_template_family family = chat_template_detect(source);
    if (family == CHAT_TEMPLATE_UNKNOWN)
        return nl_error(NL_ERR_UNSUPPORTED, "chat: the model's chat_template is not one of the "
                        "supported families (Qwen3, Qwen2.5, Qwen2 ChatML)");
    NL_TRY(check_messages(msgs, n_msgs));
    strbuf b = {0};
    puts_(&b, "");
    switch (family) {
    case CHAT_TEMPLATE_QWEN3:
        render_qwen3(&b, msgs, n_msgs, add_generation_prompt, enable_thinking);
        break;
    case CHAT_TEMPLATE_QWEN2_5:
        render_chatml(&b, msgs, n_msgs, add_generation_prompt, qwen2_5_system);
        break;
    case CHAT_TEMPLATE_QWEN2:
        render_chatml(&b, msgs, n_msgs, add_generation_prompt, "You are a helpful assistant.");
        break;
    case CHAT_TEMPLATE_UNKNOWN:
        break;
    }
    if (b.failed) {
        free(b.s);
        return nl_error(NL_ERR_NOMEM, "chat: no memory for the rendered conversation");
    }
    *out = b.s;
    return NL_OK;
}
