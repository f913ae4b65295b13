# leader/server/: the OpenAI-compatible HTTP server (`nanollm-launch serve`),
# a front-end on libmicrohttpd that uses only nanollm.h.  Without it
# (configure --without-server) serve_absent.c stands in: the serve command
# says so and exits 1.
noinst_LTLIBRARIES += libnlserver.la
if HAVE_SERVER
libnlserver_la_SOURCES = leader/server/server.h leader/server/serve.c \
	leader/server/http.c leader/server/http.h \
	leader/server/request.c leader/server/request.h \
	leader/server/api_error.c leader/server/api_error.h \
	leader/server/response.c leader/server/response.h \
	leader/server/job.c leader/server/job.h \
	leader/server/engine_loop.c leader/server/engine_loop.h \
	leader/server/metrics.c leader/server/metrics.h
libnlserver_la_LIBADD = $(MHD_LIBS) $(JANSSON_LIBS) -lpthread
else
libnlserver_la_SOURCES = leader/server/server.h leader/server/serve_absent.c
endif
libnlserver_la_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS)
libnlcli_la_LIBADD += libnlserver.la
