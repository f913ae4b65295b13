# The public API's boundary: libnanollm exports exactly what nanollm.h
# declares, and the CLI reaches the library only through it.
TESTS += tests/check_public_api.sh
EXTRA_DIST += tests/check_public_api.sh

# nanollm.h as a host program sees it, linked against the shared library.
if HAVE_CHECK
check_PROGRAMS += tests/test_api
TESTS += tests/test_api
tests_test_api_SOURCES = tests/test_api.c
tests_test_api_CFLAGS = $(TEST_CFLAGS)
tests_test_api_LDADD = libnanollm.la $(TEST_LIBS)
endif
