# worker/: worker main loop, model runner, model definitions, sampler.
# The model runner and model code form a library so tests can drive a
# runner in-process.
noinst_LTLIBRARIES += libnlworker.la
libnlworker_la_SOURCES = \
	worker/model_runner.h worker/model_runner.c \
	worker/runner_profile.h worker/runner_profile.c \
	worker/decode_graphs.h worker/decode_graphs.c \
	worker/qwen.h worker/qwen.c \
	worker/weights.h worker/weights.c

pkglibexec_PROGRAMS += nanollm-worker
nanollm_worker_SOURCES = worker/worker_main.c worker/worker_loop.c worker/worker_loop.h
nanollm_worker_LDADD = libnlworker.la libnlkernels.la libnlipc.la libnlcommon.la $(OPENBLAS_LIBS) $(JANSSON_LIBS)
if HAVE_CUDA
nanollm_worker_LDADD += libnlcuda.a $(CUDA_LIBS) -lstdc++
endif
