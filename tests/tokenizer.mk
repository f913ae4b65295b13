# Tokenizer tests (Hugging Face parity, chat template) and the speed bench.
noinst_PROGRAMS += bench/tokenizer_bench
bench_tokenizer_bench_SOURCES = bench/tokenizer_bench.c
bench_tokenizer_bench_LDADD = libnlleader.la

EXTRA_DIST += tests/golden/make_tokenizer_golden.py tests/golden/make_tokenizer_corpus.py \
	tests/golden/make_tokenizer_bench_text.py tests/golden/tokenizer_bench_hf.py \
	tests/fixtures/tokenizer/corpus.jsonl tests/fixtures/tokenizer/golden_ids.jsonl \
	tests/fixtures/tokenizer/decode_golden.jsonl tests/fixtures/tokenizer/chat_golden.jsonl \
	tests/fixtures/tokenizer/bulk.json tests/fixtures/tokenizer-llama3/golden_ids.jsonl \
	tests/fixtures/tokenizer-llama3/decode_golden.jsonl tests/fixtures/tokenizer-llama3/bulk.json

if HAVE_CHECK
check_PROGRAMS += tests/test_tokenizer tests/test_chat_template
TESTS += tests/test_tokenizer tests/test_chat_template
tests_test_tokenizer_SOURCES = tests/test_tokenizer.c
tests_test_tokenizer_CFLAGS = $(TEST_CFLAGS)
tests_test_tokenizer_LDADD = libnlcli.la libnlleader.la $(JANSSON_LIBS) $(TEST_LIBS)
tests_test_chat_template_SOURCES = tests/test_chat_template.c
tests_test_chat_template_CFLAGS = $(TEST_CFLAGS)
tests_test_chat_template_LDADD = libnlleader.la $(TEST_LIBS)
endif
