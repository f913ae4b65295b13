# nanollm-launch's user surface: help, usage errors, option placement and
# aliases, generate's logprobs, timing and prompt sources, mkmodel's --out
# and tokenizer.
if HAVE_CHECK
check_PROGRAMS += tests/test_cli
TESTS += tests/test_cli
tests_test_cli_SOURCES = tests/test_cli.c
tests_test_cli_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_cli_LDADD = $(JANSSON_LIBS) $(TEST_LIBS) -lm
EXTRA_tests_test_cli_DEPENDENCIES = nanollm-launch nanollm-worker
endif
