# tests/ipc.mk: rings, wire format, worker pool (with a fake worker program).
if HAVE_CHECK
check_PROGRAMS += tests/test_ring tests/test_wire
TESTS += tests/test_ring tests/test_wire
tests_test_ring_SOURCES = tests/test_ring.c
tests_test_ring_CFLAGS = $(TEST_CFLAGS)
tests_test_ring_LDADD = libnlipc.la libnlcommon.la $(TEST_LIBS)
tests_test_wire_SOURCES = tests/test_wire.c
tests_test_wire_CFLAGS = $(TEST_CFLAGS)
tests_test_wire_LDADD = libnlipc.la libnlcommon.la $(TEST_LIBS)
endif

# The pool test starts tests/fake_worker (the real worker loop around a fake
# model); it is built with the checks but is not a test itself.
if HAVE_CHECK
check_PROGRAMS += tests/test_executor tests/fake_worker
TESTS += tests/test_executor
tests_test_executor_SOURCES = tests/test_executor.c leader/engine/executor.c
tests_test_executor_CFLAGS = $(TEST_CFLAGS)
tests_test_executor_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_WORKER_PATH='"$(abs_top_builddir)/tests/fake_worker$(EXEEXT)"'
tests_test_executor_LDADD = libnlkernels.la libnlipc.la libnlcommon.la $(TEST_LIBS) -lpthread
EXTRA_tests_test_executor_DEPENDENCIES = tests/fake_worker$(EXEEXT)
tests_fake_worker_SOURCES = tests/fake_worker.c worker/worker_loop.c worker/worker_loop.h
tests_fake_worker_LDADD = libnlkernels.la libnlipc.la libnlcommon.la $(OPENBLAS_LIBS) -lm -lpthread
endif

# The real nanollm-worker (model runner, CPU backend, shm all-reduce) behind
# the pool, on a random-weight tiny checkpoint.
if HAVE_CHECK
check_PROGRAMS += tests/test_worker_real
TESTS += tests/test_worker_real
tests_test_worker_real_SOURCES = tests/test_worker_real.c leader/engine/executor.c leader/modelgen/mkmodel.c
tests_test_worker_real_CFLAGS = $(TEST_CFLAGS)
tests_test_worker_real_LDADD = libnlipc.la libnlcommon.la $(JANSSON_LIBS) $(XXHASH_LIBS) $(TEST_LIBS) -lpthread -lm
EXTRA_tests_test_worker_real_DEPENDENCIES = nanollm-worker$(EXEEXT)
endif
