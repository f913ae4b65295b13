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

int main(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_error_records_message);
    tcase_add_test(tc, test_error_is_per_thread);
    suite_add_tcase(s, tc);
    return check_run(s);
}
