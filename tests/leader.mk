# Leader core: block manager, scheduler, engine (through the fake runner).
if HAVE_CHECK
check_PROGRAMS += tests/test_block_manager tests/test_scheduler
TESTS += tests/test_block_manager tests/test_scheduler
tests_test_block_manager_SOURCES = tests/test_block_manager.c \
	leader/engine/block_manager.c leader/engine/seq.c leader/engine/u64map.c
tests_test_block_manager_CFLAGS = $(TEST_CFLAGS)
tests_test_block_manager_LDADD = libnlcommon.la $(XXHASH_LIBS) $(TEST_LIBS)
tests_test_scheduler_SOURCES = tests/test_scheduler.c tests/fake_runner.c tests/fake_runner.h \
	leader/engine/scheduler.c leader/engine/block_manager.c leader/engine/seq.c leader/engine/u64map.c \
	leader/engine/batch_wire.c
tests_test_scheduler_CFLAGS = $(TEST_CFLAGS)
tests_test_scheduler_LDADD = libnlcommon.la $(XXHASH_LIBS) $(TEST_LIBS)
check_PROGRAMS += tests/test_engine
TESTS += tests/test_engine
tests_test_engine_SOURCES = tests/test_engine.c tests/fake_runner.c
tests_test_engine_CFLAGS = $(TEST_CFLAGS)
tests_test_engine_LDADD = libnlleader.la $(XXHASH_LIBS) $(TEST_LIBS) -lm
check_PROGRAMS += tests/test_engine_threads
TESTS += tests/test_engine_threads
tests_test_engine_threads_SOURCES = tests/test_engine_threads.c tests/fake_runner.c
tests_test_engine_threads_CFLAGS = $(TEST_CFLAGS)
tests_test_engine_threads_LDADD = libnlleader.la $(XXHASH_LIBS) $(TEST_LIBS) -lpthread
check_PROGRAMS += tests/test_launch
TESTS += tests/test_launch
tests_test_launch_SOURCES = tests/test_launch.c
tests_test_launch_CFLAGS = $(TEST_CFLAGS) $(JANSSON_CFLAGS)
tests_test_launch_LDADD = $(JANSSON_LIBS) $(TEST_LIBS)
EXTRA_tests_test_launch_DEPENDENCIES = nanollm-launch nanollm-worker
endif

# The leader's own cost per step (bench/RESULTS.md), built with the tests.
check_PROGRAMS += bench/leader_overhead
bench_leader_overhead_SOURCES = bench/leader_overhead.c tests/fake_runner.c
bench_leader_overhead_LDADD = libnlleader.la $(XXHASH_LIBS)
