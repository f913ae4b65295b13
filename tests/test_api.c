/* test_api.c — nanollm.h as a host program sees it: linked against the
 * shared libnanollm and including nothing else of the project.  Covers the
 * engine-less tokenizer (ids checked against Hugging Face's, U+0000
 * surviving a round trip, the flags, errors, the chat template) and nl_random_next (against
 * SplitMix64's published sequence). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nanollm.h"
#include "nl_build_commit.h"

static char qwen_dir[4096];

static nl_tokenizer *open_qwen(void)
{
    nl_tokenizer *t = NULL;
    ck_assert_msg(nl_tokenizer_open(qwen_dir, &t) == NL_OK, "%s", nl_last_error());
    return t;
}

static void assert_ids(const int32_t *ids, size_t n, const int32_t *want, size_t n_want)
{
    ck_assert_int_eq((int)n, (int)n_want);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(ids[i], want[i]);
}

/* The library names its version and the commit it was built from (the
 * header make wrote for this tree; none outside a checkout). */
START_TEST(test_version_and_commit)
{
    ck_assert_ptr_nonnull(nl_version());
    if (NL_BUILD_COMMIT[0])
        ck_assert_str_eq(nl_build_commit(), NL_BUILD_COMMIT);
    else
        ck_assert_ptr_null(nl_build_commit());
}
END_TEST

START_TEST(test_encode_decode)
{
    nl_tokenizer *t = open_qwen();
    static const char text[] = "Hello world<|im_end|>";
    int32_t *ids;
    size_t n;
    /* Hugging Face: [9707, 1879, 151645], and the special token as text
     * without it. */
    ck_assert_int_eq(nl_tokenizer_encode(t, text, sizeof text - 1, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    assert_ids(ids, n, (const int32_t[]){9707, 1879, 151645}, 3);
    char *out;
    size_t len;
    ck_assert_int_eq(nl_tokenizer_decode(t, ids, n, false, &out, &len), NL_OK);
    ck_assert_int_eq((int)len, (int)(sizeof text - 1));
    ck_assert_str_eq(out, text);
    free(out);
    ck_assert_int_eq(nl_tokenizer_decode(t, ids, n, true, &out, &len), NL_OK);
    ck_assert_str_eq(out, "Hello world");
    ck_assert_int_eq((int)len, 11);
    free(out);
    free(ids);
    ck_assert_int_eq(nl_tokenizer_encode(t, text, sizeof text - 1, NL_ENCODE_NO_SPECIAL, &ids, &n), NL_OK);
    ck_assert_int_gt((int)n, 3);
    for (size_t i = 0; i < n; i++) ck_assert_int_ne(ids[i], 151645);
    free(ids);

    /* An empty text is a valid, empty, malloc'd array. */
    ck_assert_int_eq(nl_tokenizer_encode(t, "", 0, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq((int)n, 0);
    free(ids);
    nl_tokenizer_close(t);
}
END_TEST

/* U+0000 is a character like any other: byte-level BPE maps byte 0 to a
 * token, and decode gives it back, counted in the length. */
START_TEST(test_nul_survives)
{
    nl_tokenizer *t = open_qwen();
    static const char text[] = "a\0b";
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(nl_tokenizer_encode(t, text, 3, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    ck_assert_int_ge((int)n, 2);
    char *out;
    size_t len;
    ck_assert_int_eq(nl_tokenizer_decode(t, ids, n, false, &out, &len), NL_OK);
    ck_assert_int_eq((int)len, 3);
    ck_assert_int_eq(memcmp(out, text, 3), 0);
    ck_assert_int_eq(out[3], '\0');
    free(out);
    free(ids);
    nl_tokenizer_close(t);
}
END_TEST

/* The model's chat template, rendered from a vLLM-shaped request (the
 * expected text is jinja2's, as test_chat_parity checks at large). */
START_TEST(test_chat_template)
{
    nl_tokenizer *t = open_qwen();
    char *text;
    size_t len;
    ck_assert_int_eq(nl_tokenizer_apply_chat_template(
                         t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}, "
                            "{\"role\": \"tool\", \"content\": \"42\"}], \"chat_template_kwargs\": {\"enable_thinking\": false}}",
                         &text, &len),
                     NL_OK);
    static const char want[] = "<|im_start|>user\na\0b<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n"
                               "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    ck_assert_int_eq((int)len, (int)sizeof want - 1);
    ck_assert_int_eq(memcmp(text, want, len), 0);
    free(text);
    ck_assert_int_eq(nl_tokenizer_apply_chat_template(t, "{\"messages\": 1}", &text, &len), NL_ERR_INVALID_ARG);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "messages"));
    ck_assert_int_eq(nl_tokenizer_apply_chat_template(t, "not json", &text, &len), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(nl_tokenizer_apply_chat_template(t, NULL, &text, &len), NL_ERR_INVALID_ARG);
    nl_tokenizer_close(t);
}
END_TEST

START_TEST(test_invalid_utf8)
{
    nl_tokenizer *t = open_qwen();
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    ck_assert_int_eq(nl_tokenizer_encode(t, "ok\xFF", 3, NL_ENCODE_DEFAULT, &ids, &n), NL_ERR_INVALID_ARG);
    ck_assert_ptr_null(ids);
    ck_assert_int_eq((int)n, 0);
    ck_assert_msg(strstr(nl_last_error(), "byte offset 2"), "%s", nl_last_error());
    /* Replaced, the byte reads as U+FFFD: the same ids as the text with it. */
    int32_t *want;
    size_t n_want;
    ck_assert_int_eq(nl_tokenizer_encode(t, "ok\xFF", 3, NL_ENCODE_REPLACE_INVALID, &ids, &n), NL_OK);
    ck_assert_int_eq(nl_tokenizer_encode(t, "ok\xEF\xBF\xBD", 5, NL_ENCODE_DEFAULT, &want, &n_want), NL_OK);
    assert_ids(ids, n, want, n_want);
    free(ids);
    free(want);
    ck_assert_int_eq(nl_tokenizer_encode(t, "x", 1, 1u << 7, &ids, &n), NL_ERR_INVALID_ARG);
    ck_assert_msg(strstr(nl_last_error(), "flags"), "%s", nl_last_error());
    nl_tokenizer_close(t);
}
END_TEST

START_TEST(test_decode_errors)
{
    nl_tokenizer *t = open_qwen();
    char *out = (char *)1;
    size_t len = 7;
    /* 151669 is past the last added token of Qwen3's tokenizer. */
    ck_assert_int_eq(nl_tokenizer_decode(t, (const int32_t[]){9707, 151669}, 2, false, &out, &len),
                     NL_ERR_INVALID_ARG);
    ck_assert_ptr_null(out);
    ck_assert_int_eq((int)len, 0);
    ck_assert_msg(strstr(nl_last_error(), "position 1") && strstr(nl_last_error(), "151669"), "%s",
                  nl_last_error());
    nl_tokenizer_close(t);
}
END_TEST

START_TEST(test_open_errors)
{
    nl_tokenizer *t = (nl_tokenizer *)1;
    ck_assert_int_ne(nl_tokenizer_open("/nonexistent/tokenizer", &t), NL_OK);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(nl_last_error(), "/nonexistent/tokenizer"), "%s", nl_last_error());
    nl_tokenizer_close(NULL);
}
END_TEST

/* NULL opens the demo model's tokenizer, found through
 * $NANOLLM_TOKENIZER_DIR; the handle says where it came from. */
START_TEST(test_open_default)
{
    setenv("NANOLLM_TOKENIZER_DIR", qwen_dir, 1);
    nl_tokenizer *t = NULL;
    ck_assert_msg(nl_tokenizer_open(NULL, &t) == NL_OK, "%s", nl_last_error());
    /* Qwen3: 151643 BPE tokens and 26 added ones (Hugging Face's
     * len(tokenizer) is 151669). */
    nl_tokenizer_info info;
    nl_tokenizer_get_info(t, &info);
    ck_assert_int_eq(info.vocab_size, 151669);
    ck_assert_str_eq(info.dir, qwen_dir);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(nl_tokenizer_encode(t, "Hello, world", 12, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    assert_ids(ids, n, (const int32_t[]){9707, 11, 1879}, 3);
    free(ids);
    nl_tokenizer_close(t);
    setenv("NANOLLM_TOKENIZER_DIR", "/nonexistent/tokenizer", 1);
    ck_assert_int_ne(nl_tokenizer_open(NULL, &t), NL_OK);
    ck_assert_msg(strstr(nl_last_error(), "/nonexistent/tokenizer"), "%s", nl_last_error());
}
END_TEST

/* SplitMix64 from state 0: the first outputs of the reference
 * implementation (Vigna, splitmix64.c). */
START_TEST(test_random_next)
{
    uint64_t s = 0;
    ck_assert_uint_eq(nl_random_next(&s), 0xe220a8397b1dcdafull);
    ck_assert_uint_eq(nl_random_next(&s), 0x6e789e6aa1b965f4ull);
    ck_assert_uint_eq(nl_random_next(&s), 0x06c45d188009454full);
}
END_TEST

int main(void)
{
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env && env[0]) snprintf(qwen_dir, sizeof qwen_dir, "%s", env);
    else snprintf(qwen_dir, sizeof qwen_dir, "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME"));

    Suite *s = suite_create("api");
    TCase *tok = tcase_create("tokenizer");
    tcase_set_timeout(tok, 120); /* each open reads the 11 MB tokenizer.json */
    tcase_add_test(tok, test_version_and_commit);
    tcase_add_test(tok, test_encode_decode);
    tcase_add_test(tok, test_nul_survives);
    tcase_add_test(tok, test_invalid_utf8);
    tcase_add_test(tok, test_chat_template);
    tcase_add_test(tok, test_decode_errors);
    tcase_add_test(tok, test_open_errors);
    tcase_add_test(tok, test_open_default);
    suite_add_tcase(s, tok);
    TCase *util = tcase_create("util");
    tcase_add_test(util, test_random_next);
    suite_add_tcase(s, util);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
