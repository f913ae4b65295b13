# tests/cuda.mk: the CUDA backend held to the CPU backend op by op (skips
# with 77 on a machine without a GPU).
if HAVE_CHECK
if HAVE_CUDA
check_PROGRAMS += tests/test_cuda_ops
TESTS += tests/test_cuda_ops
tests_test_cuda_ops_SOURCES = tests/test_cuda_ops.c
tests_test_cuda_ops_CFLAGS = $(TEST_CFLAGS)
tests_test_cuda_ops_LDADD = libnlkernels.la libnlcuda.a libnlcommon.la $(OPENBLAS_LIBS) \
	$(CUDA_LIBS) -lstdc++ $(TEST_LIBS) -lm -lpthread
endif
endif

# The CUDA-IPC communicator against a host reference, at tp 2 and small
# sizes under make check (skips with 77 without a GPU); --full (the sweep),
# --bench and --fault run by hand on a GPU machine.  A plain program: it
# forks its ranks and also runs where Check is not installed.
if HAVE_CUDA
check_PROGRAMS += tests/test_comm_ipc
TESTS += tests/test_comm_ipc
tests_test_comm_ipc_SOURCES = tests/test_comm_ipc.c
tests_test_comm_ipc_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_comm_ipc_LDADD = libnlkernels.la libnlcuda.a libnlcommon.la $(OPENBLAS_LIBS) \
	$(CUDA_LIBS) -lstdc++ -lm -lpthread
endif

# The device probes (bench/README.md; built with the tests, never run by
# them): what wrapping a decode graph in a step costs on the device's
# queue, what a persistent kernel's grid barriers cost with the weights
# streaming under them, whether a stream through shared memory that
# runs ahead of the barriers hides them, how fast cuBLASLt's own
# configurations run a decode batch's projections, and whether its kernels
# wait behind a programmatic graph edge.
if HAVE_CUDA
check_PROGRAMS += bench/gap_probe bench/barrier_probe bench/ring_probe bench/gemm_probe \
	bench/pdl_probe
bench_gap_probe_SOURCES = bench/gap_probe.cu bench/probe_check.h
bench_gap_probe_LDADD = $(CUDA_LIBS) -lstdc++ -lm
bench_barrier_probe_SOURCES = bench/barrier_probe.cu bench/probe_barrier.cuh bench/probe_check.h
bench_barrier_probe_LDADD = $(CUDA_LIBS) -lstdc++ -lm
bench_ring_probe_SOURCES = bench/ring_probe.cu bench/probe_barrier.cuh bench/probe_check.h
bench_ring_probe_LDADD = $(CUDA_LIBS) -lstdc++ -lm
bench_gemm_probe_SOURCES = bench/gemm_probe.cu bench/probe_check.h bench/probe_gemm.cuh
bench_gemm_probe_LDADD = libnlkernels.la libnlcuda.a libnlcommon.la $(OPENBLAS_LIBS) $(CUDA_LIBS) \
	-lstdc++ -lm -lpthread
bench_pdl_probe_SOURCES = bench/pdl_probe.cu bench/probe_check.h bench/probe_gemm.cuh
bench_pdl_probe_LDADD = libnlkernels.la libnlcuda.a libnlcommon.la $(OPENBLAS_LIBS) $(CUDA_LIBS) \
	-lstdc++ -lm -lpthread
endif

# Timing of the hot ops on a GPU (built with the tests, never run by them).
if HAVE_CUDA
check_PROGRAMS += bench/bench_cuda_ops
bench_bench_cuda_ops_SOURCES = bench/bench_cuda_ops.c
bench_bench_cuda_ops_LDADD = libnlkernels.la libnlcuda.a libnlcommon.la $(OPENBLAS_LIBS) \
	$(CUDA_LIBS) -lstdc++ -lm -lpthread
endif
