/* check_run.h — runs a test program's Check suite and turns the outcome into
 * the program's exit status, the same way in every suite. */
#ifndef NL_TESTS_CHECK_RUN_H
#define NL_TESTS_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int check_run(Suite *suite)
{
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
