# tests/cpumodel.mk: the CPU backend's op test and the model golden test.
if HAVE_CHECK
check_PROGRAMS += tests/test_cpu_ops
TESTS += tests/test_cpu_ops
tests_test_cpu_ops_SOURCES = tests/test_cpu_ops.c
tests_test_cpu_ops_CFLAGS = $(TEST_CFLAGS)
tests_test_cpu_ops_LDADD = libnlkernels.la libnlcommon.la $(OPENBLAS_LIBS) $(TEST_LIBS) -lm
endif
