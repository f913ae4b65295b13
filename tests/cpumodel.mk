# tests/cpumodel.mk: the CPU backend's op test, the decode graph shapes and the model golden test.
if HAVE_CHECK
check_PROGRAMS += tests/test_cpu_ops
TESTS += tests/test_cpu_ops
tests_test_cpu_ops_SOURCES = tests/test_cpu_ops.c
tests_test_cpu_ops_CFLAGS = $(TEST_CFLAGS)
tests_test_cpu_ops_LDADD = libnlkernels.la libnlcommon.la $(OPENBLAS_LIBS) $(TEST_LIBS) -lm
if HAVE_CUDA
# nl_cuda_device_count() lives in the CUDA backend when it is built.
tests_test_cpu_ops_LDADD += libnlcuda.a $(CUDA_LIBS) -lstdc++
endif
endif

if HAVE_CHECK
check_PROGRAMS += tests/test_decode_graphs
TESTS += tests/test_decode_graphs
tests_test_decode_graphs_SOURCES = tests/test_decode_graphs.c
tests_test_decode_graphs_CFLAGS = $(TEST_CFLAGS)
tests_test_decode_graphs_LDADD = libnlworker.la $(TEST_LIBS)
endif

if HAVE_CHECK
check_PROGRAMS += tests/test_model_golden
TESTS += tests/test_model_golden
tests_test_model_golden_SOURCES = tests/test_model_golden.c
tests_test_model_golden_CFLAGS = $(TEST_CFLAGS)
# Static against the in-tree libraries, so the program can also be carried
# to another machine to write the golden models (--make-models).
tests_test_model_golden_LDFLAGS = -static
tests_test_model_golden_LDADD = libnlworker.la libnlcli.la libnlleader.la libnlkernels.la libnlipc.la \
	libnlcommon.la $(OPENBLAS_LIBS) $(JANSSON_LIBS) $(TEST_LIBS) -lm
endif

EXTRA_DIST += \
	tests/golden/make_model_golden.py tests/golden/make_model_golden.sh \
	tests/fixtures/golden/qwen3_tied_gqa.json tests/fixtures/golden/qwen3_untied_mqa.json \
	tests/fixtures/golden/qwen2_bias.json tests/fixtures/golden/qwen3_sharded_mha.json \
	tests/fixtures/golden/llama_tied_gqa.json tests/fixtures/golden/llama_untied_rope3.json \
	tests/fixtures/golden/llama_bias_mqa.json

# The CPU shared-memory all-reduce on its own.
if HAVE_CHECK
check_PROGRAMS += tests/test_comm_shm
TESTS += tests/test_comm_shm
tests_test_comm_shm_SOURCES = tests/test_comm_shm.c
tests_test_comm_shm_CFLAGS = $(TEST_CFLAGS)
tests_test_comm_shm_LDADD = libnlkernels.la libnlcommon.la $(OPENBLAS_LIBS) $(TEST_LIBS) -lm
if HAVE_CUDA
tests_test_comm_shm_LDADD += libnlcuda.a $(CUDA_LIBS) -lstdc++
endif
endif
