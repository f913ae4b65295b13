/* test_status.c — error messages are recorded, prefixed and per thread. */
#include <check.h>
#include <pthread.h>
#include <string.h>

#include "common/status.h"
#include "tests/check_run.h"

START_TEST(test_error_records_message)
{
    nl_status s = nl_error(NL_ERR_FORMAT, "%s: field %s = %d", "config.json", "hidden_size", -1);
    ck_assert_int_eq(s, NL_ERR_FORMAT);
    ck_assert_str_eq(nl_last_error(), "config.json: field hidden_size = -1");
    nl_error_prefix(s, "loading %s: ", "model");
    ck_assert_str_eq(nl_last_error(), "loading model: config.json: field hidden_size = -1");
    nl_error_clear();
    ck_assert_str_eq(nl_last_error(), "no error recorded");
}
END_TEST

static void *other_thread(void *arg)
{
    (void)arg;
    nl_error(NL_ERR_IO, "other thread");
    return NULL;
}

START_TEST(test_error_is_per_thread)
{
    nl_error(NL_ERR_IO, "main thread");
    pthread_t t;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    ck_assert_str_eq(nl_last_error(), "main thread");
    ck_assert_str_eq(nl_status_name(NL_ERR_WORKER), "worker failure");
}
END_TEST

/* A message cut at the buffer's end never ends inside a UTF-8 character,
 * directly or after a prefix: callers put it in JSON, which needs valid
 * UTF-8. */
START_TEST(test_cut_message_keeps_utf8)
{
    static char text[4000];
    for (int shift = 0; shift < 4; shift++) {
        text[0] = '\0';
        for (int k = 0; k < shift; k++) strcat(text, "a");
        for (int k = 0; k < 900; k++) strcat(text, k % 2 ? "\xC3\xA9" : "\xE2\x82\xAC"); /* é € */
        for (int prefixed = 0; prefixed < 2; prefixed++) {
            nl_error(NL_ERR_INVALID_ARG, "%s", text);
            if (prefixed) nl_error_prefix(NL_ERR_INVALID_ARG, "ctx%.*s: ", shift, "xyz");
            const unsigned char *m = (const unsigned char *)nl_last_error();
            size_t n = strlen((const char *)m);
            ck_assert_uint_gt(n, 1000);
            /* the last character is complete */
            size_t start = n;
            while (start > 0 && (m[start - 1] & 0xC0) == 0x80) start--;
            ck_assert_uint_gt(start, 0);
            unsigned char lead = m[start - 1];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            ck_assert_uint_eq(n - (start - 1), need);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_error_records_message);
    tcase_add_test(tc, test_error_is_per_thread);
    tcase_add_test(tc, test_cut_message_keeps_utf8);
    suite_add_tcase(s, tc);
    return check_run(s);
}
