# common/: status codes, logging, config.json, safetensors, dtypes, and the
# facts that cross a process boundary (limits, sampling controls, engine
# settings).
noinst_LTLIBRARIES += libnlcommon.la
libnlcommon_la_SOURCES = \
	common/status.c common/status.h common/log.c common/log.h common/limits.h \
	common/file.c common/file.h \
	common/sampling.c common/sampling.h common/engine_settings.c common/engine_settings.h \
	common/dtype.c common/dtype.h common/mix64.c common/mix64.h common/futex.h common/comm_area.h \
	common/model_config.c common/model_config.h \
	common/safetensors.c common/safetensors.h \
	common/model_family.c common/model_family.h common/model_qwen.c common/model_llama.c \
	common/model_rope.c common/model_rope.h \
	common/model_tensors.c common/model_tensors.h
libnlcommon_la_LIBADD = $(JANSSON_LIBS)
