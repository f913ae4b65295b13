#!/bin/sh
# Runs the server's acceptance test (test_server.mjs) under Node.js with the
# official OpenAI client, fetching the client into its cache on first use
# (tools/fetch-openai-client.sh, like the tokenizer).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null; then
    echo "test_server: Node.js is needed to run the OpenAI client (apt-get install npm)" >&2
    exit 1
fi
version=$(sed -n 's/^version=//p' "$here/../../tools/fetch-openai-client.sh")
: "${NANOLLM_OPENAI_DIR:=${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/openai-node-$version}"
export NANOLLM_OPENAI_DIR
"$here/../../tools/fetch-openai-client.sh" >&2
exec node "$here/test_server.mjs"
