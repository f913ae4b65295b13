# tests/server.mk: `nanollm-launch serve` driven by the official OpenAI client
# library for Node.js (tests/server/test_server.mjs) on the CPU backend with
# the demo model; bench/load_test.py's smoke test (tests/server/test_load_test.sh).
if HAVE_SERVER
TESTS += tests/server/test_server.sh tests/server/test_load_test.sh
endif
EXTRA_DIST += tests/server/test_server.sh tests/server/test_server.mjs tools/fetch-openai-client.sh \
	bench/stream_stall.mjs tests/server/test_load_test.sh bench/load_test.py
