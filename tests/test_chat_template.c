/* test_chat_template.c — template families are recognised by their markers
 * and rendered as their Jinja would; unknown templates and features are
 * refused.  Expected strings are written out by hand from the templates'
 * rules; the Hugging Face comparison of the real Qwen3 template is in
 * test_tokenizer.c (chat_golden.jsonl). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/tokenizer/chat_template.h"
#include "tests/check_run.h"

/* Fragments carrying each family's markers (not whole templates). */
static const char qwen3_src[] =
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- set ns.last_query_index = index %}<|im_start|>{%- if message.reasoning_content is defined %}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}";
static const char qwen2_5_src[] =
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}";
static const char qwen2_src[] =
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}";

static char *render(const char *src, const nl_chat_message *m, size_t n, bool gen, bool think)
{
    char *out = NULL;
    nl_status st = chat_template_render(src, m, n, gen, think, &out);
    ck_assert_msg(st == NL_OK, "%s", nl_last_error());
    return out;
}

#define ASSERT_RENDERS(src, msgs, gen, think, want)                                        \
    do {                                                                                   \
        char *got_ = render(src, msgs, sizeof msgs / sizeof msgs[0], gen, think);          \
        ck_assert_str_eq(got_, want);                                                      \
        free(got_);                                                                        \
    } while (0)

START_TEST(test_detect)
{
    ck_assert_int_eq(chat_template_detect(qwen3_src), CHAT_TEMPLATE_QWEN3);
    ck_assert_int_eq(chat_template_detect(qwen2_5_src), CHAT_TEMPLATE_QWEN2_5);
    ck_assert_int_eq(chat_template_detect(qwen2_src), CHAT_TEMPLATE_QWEN2);
    ck_assert_int_eq(chat_template_detect("{{ bos_token }}[INST] {{ message }} [/INST]"), CHAT_TEMPLATE_UNKNOWN);
    ck_assert_int_eq(chat_template_detect("<|im_start|>{{ enable_thinking }}"), CHAT_TEMPLATE_UNKNOWN);
    ck_assert_int_eq(chat_template_detect(NULL), CHAT_TEMPLATE_UNKNOWN);
    char *out;
    nl_chat_message m[] = {{"user", "hi"}};
    ck_assert_int_eq(chat_template_render("{{ messages }}", m, 1, true, true, &out), NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "chat_template"));
}
END_TEST

START_TEST(test_qwen3_reasoning_rules)
{
    nl_chat_message history[] = {
        {"user", "q1"},
        {"assistant", "<think>\nr1\n</think>\n\na1"},
        {"user", "q2"},
    };
    ASSERT_RENDERS(qwen3_src, history, true, false,
                   "<|im_start|>user\nq1<|im_end|>\n"
                   "<|im_start|>assistant\na1<|im_end|>\n" /* before the last query: reasoning dropped */
                   "<|im_start|>user\nq2<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    nl_chat_message tail[] = {
        {"system", "s"},
        {"user", "q"},
        {"assistant", "plain"},                        /* after the query, not last, no reasoning */
        {"assistant", "x<think>\n\nr\n</think>\n\n\nA"}, /* last: reasoning kept, re-wrapped */
    };
    ASSERT_RENDERS(qwen3_src, tail, false, true,
                   "<|im_start|>system\ns<|im_end|>\n"
                   "<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>assistant\nplain<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n");
    nl_chat_message tool_result[] = {
        {"user", "q"},
        {"assistant", "<think>t</think>calling"},
        {"user", "<tool_response>\nok\n</tool_response>"},
    };
    /* A wrapped tool result is no query, so the assistant turn keeps its reasoning. */
    ASSERT_RENDERS(qwen3_src, tool_result, true, true,
                   "<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\nt\n</think>\n\ncalling<|im_end|>\n"
                   "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n");
}
END_TEST

START_TEST(test_chatml_families)
{
    nl_chat_message no_system[] = {{"user", "hi"}, {"assistant", "hello"}, {"user", "bye"}};
    ASSERT_RENDERS(qwen2_5_src, no_system, true, false,
                   "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                   "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                   "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n");
    nl_chat_message with_system[] = {{"system", "S"}, {"user", "hi"}};
    ASSERT_RENDERS(qwen2_src, with_system, false, true,
                   "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
    ASSERT_RENDERS(qwen2_src, no_system, false, true,
                   "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                   "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                   "<|im_start|>user\nbye<|im_end|>\n");
}
END_TEST

START_TEST(test_refusals)
{
    char *out;
    nl_chat_message tool[] = {{"user", "q"}, {"tool", "42"}};
    ck_assert_int_eq(chat_template_render(qwen3_src, tool, 2, true, true, &out), NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "message 1"));
    nl_chat_message odd[] = {{"developer", "x"}};
    ck_assert_int_eq(chat_template_render(qwen2_5_src, odd, 1, true, true, &out), NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "developer"));
    nl_chat_message missing[] = {{"user", NULL}};
    ck_assert_int_eq(chat_template_render(qwen3_src, missing, 1, true, true, &out), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(chat_template_render(qwen3_src, missing, 0, true, true, &out), NL_ERR_INVALID_ARG);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_detect);
    tcase_add_test(tc, test_qwen3_reasoning_rules);
    tcase_add_test(tc, test_chatml_families);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return check_run(s);
}
