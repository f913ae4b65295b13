# tests/: one Check suite per module, integration tests, fixtures.
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = $(CHECK_LIBS)
AM_TESTS_ENVIRONMENT = \
	NANOLLM_WORKER='$(abs_top_builddir)/nanollm-worker'; export NANOLLM_WORKER; \
	NANOLLM_LAUNCH='$(abs_top_builddir)/nanollm-launch'; export NANOLLM_LAUNCH; \
	NL_FIXTURES='$(abs_top_srcdir)/tests/fixtures'; export NL_FIXTURES; \
	CK_DEFAULT_TIMEOUT=300; export CK_DEFAULT_TIMEOUT;

if HAVE_CHECK
check_PROGRAMS += tests/test_status
TESTS += tests/test_status
tests_test_status_SOURCES = tests/test_status.c
tests_test_status_CFLAGS = $(TEST_CFLAGS)
tests_test_status_LDADD = libnlcommon.la $(TEST_LIBS)
endif
# the parity rule the GPU runs apply (tests/golden/gpu_parity.py)
TESTS += tests/check_gpu_parity.sh
EXTRA_DIST += tests/check_gpu_parity.sh
include tests/cpumodel.mk
include tests/ipc.mk
include tests/leader.mk
include tests/models.mk
include tests/cuda.mk
include tests/tokenizer.mk
include tests/e2e.mk
include tests/api.mk
include tests/cli.mk
include tests/server.mk

# Scripts run on a GPU machine (golden files, parity, benchmarks) and the
# results they produced.
EXTRA_DIST += tests/check_run.h tests/byte_tokenizer.h tests/golden/gpu_same_tokens.sh tests/golden/gpu_e2e.sh tests/golden/gpu_tp_check.sh tests/golden/gpu_checks.sh \
	tests/golden/gpu_env.sh tests/golden/gpu_kill_test.sh tests/golden/gpu_profile.sh \
	tests/golden/gpu_parity.py tests/golden/hf_load_check.py bench/RESULTS.md bench/PERF_NOTES.md
