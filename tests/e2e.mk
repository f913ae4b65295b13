# tests/e2e.mk: end-to-end tests of the whole product on the CPU backend:
# the engine with real worker processes against the golden files, and
# nanollm-launch as a user runs it (batch, generate, tokenize, kills).
if HAVE_CHECK
check_PROGRAMS += tests/test_e2e tests/test_e2e_cli
TESTS += tests/test_e2e tests/test_e2e_cli
tests_test_e2e_SOURCES = tests/test_e2e.c
tests_test_e2e_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_e2e_LDADD = libnlcli.la libnlleader.la $(JANSSON_LIBS) $(TEST_LIBS) -lm
EXTRA_tests_test_e2e_DEPENDENCIES = nanollm-worker
tests_test_e2e_cli_SOURCES = tests/test_e2e_cli.c
tests_test_e2e_cli_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_e2e_cli_LDADD = $(JANSSON_LIBS) $(TEST_LIBS) -lm
EXTRA_tests_test_e2e_cli_DEPENDENCIES = nanollm-launch nanollm-worker
endif
