#!/bin/sh
# Fetches the official OpenAI client library for Node.js (npm package
# `openai`, at a pinned version) into the cache folder the server's
# acceptance test reads: $NANOLLM_OPENAI_DIR, or
# ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/openai-node-VERSION.
# The package has no dependencies, so the unpacked tarball is all it needs.
set -eu
version=6.30.1
dest=${NANOLLM_OPENAI_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/openai-node-$version}
if [ -s "$dest/package.json" ] && [ -s "$dest/index.js" ]; then
    echo "OpenAI client already in $dest"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "openai@$version" >/dev/null && tar xzf ./*.tgz)
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$tmp/package" "$dest"
echo "OpenAI client $version written to $dest"
