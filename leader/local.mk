# leader/: the CPU-only half of the engine, in four sub-folders by idea:
#   engine/    requests, KV blocks, scheduling, the step loop, the executor
#              that drives the worker processes
#   tokenizer/ byte-level BPE, pre-tokenizer, chat template, streaming decode
#   modelgen/  the model writer (random-weight checkpoints, the demo model)
#   cli/       nanollm-launch, a front-end that uses only nanollm.h
# The engine, tokenizer and model writer are built once, as the convenience
# library libnlleader.la that the programs and tests link; the installed
# libnanollm is that library exporting only what nanollm.h declares, so its
# internals never clash with a host program's symbols.
noinst_LTLIBRARIES += libnlleader.la
libnlleader_la_SOURCES =
libnlleader_la_LIBADD = libnlcommon.la libnlipc.la $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS) $(XXHASH_LIBS)

# The exported symbols are the functions nanollm.h declares, read from the
# header itself so the list has one definition.
lib_LTLIBRARIES += libnanollm.la
libnanollm_la_SOURCES =
libnanollm_la_LIBADD = libnlleader.la
libnanollm_la_LDFLAGS = -version-info 0:0:0 -export-symbols nanollm.sym
EXTRA_libnanollm_la_DEPENDENCIES = nanollm.sym
nanollm.sym: $(top_srcdir)/include/nanollm.h
	$(AM_V_GEN)sed -n '/^typedef/d; s/^[a-z][^(]*[^a-z0-9_(]\(nl_[a-z0-9_]*\)(.*$$/\1/p' $< | sort -u > $@
CLEANFILES += nanollm.sym

# The CLI's commands, a library of their own so tests can run them in-process.
noinst_LTLIBRARIES += libnlcli.la
libnlcli_la_SOURCES = leader/cli/cli.h \
	leader/cli/cli_args.c leader/cli/cli_common.c leader/cli/cli_generate.c \
	leader/cli/cli_batch.c leader/cli/cli_batch.h leader/cli/cli_batch_line.c leader/cli/cli_batch_output.c \
	leader/cli/cli_bench.c leader/cli/cli_tokenize.c leader/cli/cli_mkmodel.c \
	leader/cli/cli_serve.c leader/cli/cli_chat_template.c
libnlcli_la_LIBADD = libnlleader.la libnlopenai.la

# What the OpenAI-speaking front-ends (the CLI's batch lines, the server)
# share about the API's request bodies: front-end code on jansson alone,
# no engine internal, so both may use it (tests/check_public_api.sh).
noinst_LTLIBRARIES += libnlopenai.la
libnlopenai_la_SOURCES = leader/openai/neutral_fields.c leader/openai/neutral_fields.h
libnlopenai_la_LIBADD = $(JANSSON_LIBS)

bin_PROGRAMS += nanollm-launch
nanollm_launch_SOURCES = leader/cli/launch_main.c
# Linked statically so the build tree's program is a real binary that finds
# nanollm-worker beside itself.
nanollm_launch_LDADD = libnlcli.la libnlleader.la
nanollm_launch_LDFLAGS = -static

# Requests, KV blocks, scheduling, the step loop and the executor (worker
# processes behind the shared-memory rings).
libnlleader_la_SOURCES += \
	leader/engine/version.c \
	leader/engine/u64map.c leader/engine/u64map.h \
	leader/engine/seq.c leader/engine/seq.h \
	leader/engine/block_manager.c leader/engine/block_manager.h \
	leader/engine/scheduler.c leader/engine/scheduler.h \
	leader/engine/batch_wire.c leader/engine/batch_wire.h \
	leader/engine/request.c leader/engine/request.h \
	leader/engine/output.c leader/engine/output.h \
	leader/engine/engine.c leader/engine/engine_internal.h leader/engine/engine_state.h \
	leader/engine/engine_config.c leader/engine/engine_submit.c \
	leader/engine/engine_step.c leader/engine/engine_results.c leader/engine/engine_thread.c \
	leader/engine/engine_open.c \
	leader/engine/tokenizer_handle.c \
	leader/engine/runner.h leader/engine/executor.c leader/engine/executor.h

# Tokenizer: byte-level BPE, pre-tokenizer, chat template, streaming decode.
libnlleader_la_SOURCES += \
	leader/tokenizer/tokenizer.c leader/tokenizer/tokenizer.h leader/tokenizer/tokenizer_internal.h \
	leader/tokenizer/tokenizer_utf8.c leader/tokenizer/tokenizer_utf8.h \
	leader/tokenizer/bpe.c leader/tokenizer/bpe.h \
	leader/tokenizer/bpe_map.c leader/tokenizer/bpe_map.h \
	leader/tokenizer/pretokenize.c leader/tokenizer/pretokenize.h \
	leader/tokenizer/chat_template.c leader/tokenizer/chat_template.h \
	leader/tokenizer/jinja.h leader/tokenizer/jinja_internal.h leader/tokenizer/jinja_arena.c \
	leader/tokenizer/jinja_lex.c leader/tokenizer/jinja_parse.c leader/tokenizer/jinja_eval.c \
	leader/tokenizer/jinja_value.c leader/tokenizer/jinja_str.c leader/tokenizer/jinja_str.h \
	leader/tokenizer/jinja_args.h leader/tokenizer/jinja_filters.c leader/tokenizer/jinja_builtins.c \
	leader/tokenizer/detokenizer.c

# Model files: random-weight checkpoints and the built-in demo model (which
# the engine writes on first use).
libnlleader_la_SOURCES += \
	leader/modelgen/mkmodel.c leader/modelgen/mkmodel.h \
	leader/modelgen/demo_model.c leader/modelgen/demo_model.h

# The OpenAI-compatible HTTP server behind `nanollm-launch serve`.
include leader/server/local.mk

# The executor and version.c include the generated nl_paths.h and
# nl_build_commit.h: a build of named targets (which skips BUILT_SOURCES)
# must still make them first.
leader/engine/executor.lo: nl_paths.h
leader/engine/version.lo: nl_build_commit.h
