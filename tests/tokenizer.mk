# Tokenizer tests (Hugging Face parity, chat template) and the speed bench.
noinst_PROGRAMS += bench/tokenizer_bench
bench_tokenizer_bench_SOURCES = bench/tokenizer_bench.c
bench_tokenizer_bench_LDADD = libnlleader.la

EXTRA_DIST += tests/golden/make_tokenizer_golden.py tests/golden/make_tokenizer_corpus.py \
	tests/golden/make_tokenizer_bench_text.py tests/golden/tokenizer_bench_hf.py \
	tests/fixtures/tokenizer/corpus.jsonl tests/fixtures/tokenizer/golden_ids.jsonl \
	tests/fixtures/tokenizer/decode_golden.jsonl tests/fixtures/tokenizer/chat_golden.jsonl \
	tests/golden/chat_template_reference.py tests/fixtures/chat_templates/README.md \
	tests/fixtures/chat_templates/llama3_2/chat_template.jinja \
	tests/fixtures/chat_templates/llama3_2/tokenizer_config.json \
	tests/fixtures/chat_templates/mistral_nemo/chat_template.jinja \
	tests/fixtures/chat_templates/mistral_nemo/tokenizer_config.json \
	tests/fixtures/chat_templates/deepseek_v3_1/chat_template.jinja \
	tests/fixtures/chat_templates/deepseek_v3_1/tokenizer_config.json \
	tests/fixtures/tokenizer/bulk.json tests/fixtures/tokenizer-llama3/golden_ids.jsonl \
	tests/fixtures/tokenizer-llama3/decode_golden.jsonl tests/fixtures/tokenizer-llama3/bulk.json

if HAVE_CHECK
check_PROGRAMS += tests/test_tokenizer tests/test_chat_template tests/test_chat_parity
TESTS += tests/test_tokenizer tests/test_chat_template tests/test_chat_parity
tests_test_tokenizer_SOURCES = tests/test_tokenizer.c
tests_test_tokenizer_CFLAGS = $(TEST_CFLAGS)
tests_test_tokenizer_LDADD = libnlcli.la libnlleader.la $(JANSSON_LIBS) $(TEST_LIBS)
tests_test_chat_template_SOURCES = tests/test_chat_template.c
tests_test_chat_template_CFLAGS = $(TEST_CFLAGS)
tests_test_chat_template_LDADD = libnlleader.la $(JANSSON_LIBS) $(TEST_LIBS)
tests_test_chat_parity_SOURCES = tests/test_chat_parity.c
tests_test_chat_parity_CFLAGS = $(TEST_CFLAGS)
tests_test_chat_parity_LDADD = libnlleader.la $(JANSSON_LIBS) $(TEST_LIBS)
endif
