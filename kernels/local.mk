# kernels/: the op interface and its backends (cpu/, cuda/), comm interface.
noinst_LTLIBRARIES += libnlkernels.la
libnlkernels_la_SOURCES = \
	kernels/kernels.h kernels/comm.h kernels/comm_single.c \
	kernels/comm_shm.h kernels/comm_shm.c \
	kernels/backend.c \
	kernels/cpu/cpu_backend.h kernels/cpu/cpu_backend.c \
	kernels/cpu/cpu_ops.c kernels/cpu/cpu_sample.c
libnlkernels_la_LIBADD = $(OPENBLAS_LIBS) -lm -lpthread
libnlkernels_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPENBLAS_CFLAGS)

if HAVE_CUDA
# CUDA sources are compiled by nvcc into a plain static archive that only the
# worker links; the leader library never sees CUDA.
noinst_LIBRARIES += libnlcuda.a
libnlcuda_a_SOURCES = \
	kernels/cuda/cuda_common.cuh kernels/cuda/cuda_backend.h kernels/cuda/comm_nccl.h \
	kernels/cuda/backend.cu kernels/cuda/gemm.cu kernels/cuda/gemv.cu kernels/cuda/elementwise.cu \
	kernels/cuda/attention.cuh kernels/cuda/attention_decode.cuh \
	kernels/cuda/attention.cu kernels/cuda/attention_decode.cu kernels/cuda/attention_decode_mma.cu \
	kernels/cuda/attention_prefill.cu \
	kernels/cuda/sample_block.cuh kernels/cuda/sample_head.cuh kernels/cuda/sample_radix.cuh \
	kernels/cuda/sample.cu kernels/cuda/comm_nccl.cu \
	kernels/cuda/comm_ipc.h kernels/cuda/comm_ipc.cu kernels/cuda/op_timer.cu
NVCCFLAGS = -O3 -std=c++17 $(CUDA_ARCH_FLAGS) -Xcompiler -fPIC -I$(top_srcdir) -I$(top_srcdir)/include -DNL_HAVE_CUDA=1 -I$(top_builddir) $(CUDA_CPPFLAGS)
.cu.o:
	$(AM_V_CC)$(NVCC) $(NVCCFLAGS) -c $< -o $@
# nvcc writes no dependency files: rebuild every kernel when a shared header changes.
$(libnlcuda_a_OBJECTS): $(top_srcdir)/kernels/cuda/cuda_common.cuh \
	$(top_srcdir)/kernels/cuda/cuda_backend.h $(top_srcdir)/kernels/cuda/comm_nccl.h \
	$(top_srcdir)/kernels/kernels.h $(top_srcdir)/kernels/comm.h \
	$(top_srcdir)/common/sampling.h $(top_srcdir)/common/limits.h $(top_srcdir)/common/mix64.h \
	$(top_srcdir)/common/dtype.h $(top_srcdir)/common/status.h $(top_srcdir)/include/nanollm.h \
	$(top_srcdir)/kernels/cuda/comm_ipc.h $(top_srcdir)/common/comm_area.h
kernels/cuda/attention.o kernels/cuda/attention_decode.o kernels/cuda/attention_decode_mma.o \
	kernels/cuda/attention_prefill.o: $(top_srcdir)/kernels/cuda/attention.cuh
kernels/cuda/attention_decode.o kernels/cuda/attention_decode_mma.o: \
	$(top_srcdir)/kernels/cuda/attention_decode.cuh
kernels/cuda/sample.o: $(top_srcdir)/kernels/cuda/sample_block.cuh \
	$(top_srcdir)/kernels/cuda/sample_head.cuh $(top_srcdir)/kernels/cuda/sample_radix.cuh
endif
