# leader/: tokenizer, chat template, seq, block manager, scheduler, engine, CLI.
# The leader's code is built once, as the convenience library libnlleader.la
# that the programs and tests link; the installed libnanollm is that library
# exporting only the public nl_* API, so its internals never clash with a
# host program's symbols.
noinst_LTLIBRARIES += libnlleader.la
libnlleader_la_SOURCES = \
	leader/version.c
libnlleader_la_LIBADD = libnlcommon.la libnlipc.la $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS) $(XXHASH_LIBS)

lib_LTLIBRARIES += libnanollm.la
libnanollm_la_SOURCES =
libnanollm_la_LIBADD = libnlleader.la
libnanollm_la_LDFLAGS = -version-info 0:0:0 -export-symbols-regex '^nl_'

bin_PROGRAMS += nanollm-launch
nanollm_launch_SOURCES = leader/launch_main.c leader/cli_common.c \
	leader/cli_generate.c leader/cli_batch.c leader/cli_bench.c
# Linked statically so the build tree's program is a real binary that finds
# nanollm-worker beside itself.
nanollm_launch_LDADD = libnlleader.la
nanollm_launch_LDFLAGS = -static

# Model files: random-weight checkpoints and the built-in demo model.
libnlleader_la_SOURCES += \
	leader/mkmodel.c leader/mkmodel.h \
	leader/cli_mkmodel.c \
	leader/demo_model.c leader/demo_model.h

# Requests, KV blocks, scheduling and the engine's step loop.
libnlleader_la_SOURCES += \
	leader/u64map.c leader/u64map.h \
	leader/seq.c leader/seq.h \
	leader/block_manager.c leader/block_manager.h \
	leader/scheduler.c leader/scheduler.h \
	leader/engine.c leader/engine_internal.h leader/engine_open.c

# Worker processes behind the shared-memory rings (the real runner).
libnlleader_la_SOURCES += leader/runner.h leader/worker_pool.c leader/worker_pool.h

# Tokenizer: byte-level BPE, pre-tokenizer, chat template, streaming decode, CLI.
libnlleader_la_SOURCES += \
	leader/tokenizer.c leader/tokenizer.h leader/tokenizer_internal.h \
	leader/tokenizer_utf8.c leader/tokenizer_utf8.h \
	leader/bpe.c leader/bpe.h \
	leader/bpe_map.c leader/bpe_map.h \
	leader/pretokenize.c leader/pretokenize.h \
	leader/chat_template.c leader/chat_template.h \
	leader/detokenizer.c \
	leader/cli_tokenize.c leader/cli.h
