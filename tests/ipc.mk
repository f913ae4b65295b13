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
