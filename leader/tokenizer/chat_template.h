/* chat_template.h — renders a conversation the way a model's Jinja
 * chat_template would, for the template families listed in chat_template.c.
 * There is no Jinja engine: a template is recognised by exact markers and
 * rendered by C code that mirrors it; anything else is refused. */
#ifndef NL_LEADER_CHAT_TEMPLATE_H
#define NL_LEADER_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "nanollm.h"

typedef enum chat_template_family {
    CHAT_TEMPLATE_UNKNOWN = 0,
    CHAT_TEMPLATE_QWEN3,    /* ChatML with <think> reasoning, enable_thinking */
    CHAT_TEMPLATE_QWEN2_5,  /* ChatML, default system "You are Qwen, created by Alibaba Cloud..." */
    CHAT_TEMPLATE_QWEN2,    /* ChatML, default system "You are a helpful assistant." */
} chat_template_family;

chat_template_family chat_template_detect(const char *source);

/* *out is malloc'd and NUL-terminated. */
nl_status chat_template_render(const char *source, const nl_chat_message *msgs, size_t n_msgs,
                               bool add_generation_prompt, bool enable_thinking, char **out);

#endif /* NL_LEADER_CHAT_TEMPLATE_H */
