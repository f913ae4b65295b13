# worker/: worker main loop, model runner, model definitions, sampler.
pkglibexec_PROGRAMS += nanollm-worker
nanollm_worker_SOURCES = worker/worker_main.c
nanollm_worker_LDADD = libnlkernels.la libnlipc.la libnlcommon.la $(OPENBLAS_LIBS) $(JANSSON_LIBS)
if HAVE_CUDA
nanollm_worker_LDADD += libnlcuda.a $(CUDA_LIBS) -lstdc++
endif
