# common/: status codes, logging, config.json, safetensors, dtypes.
noinst_LTLIBRARIES += libnlcommon.la
libnlcommon_la_SOURCES = \
	common/status.c common/status.h \
	common/dtype.c common/dtype.h
libnlcommon_la_LIBADD = $(JANSSON_LIBS)
