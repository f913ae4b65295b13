#!/bin/sh
# Runs every harness for SECONDS (default 5) from its committed seed corpus
# (tests/fuzz/corpus/NAME, read only: new inputs go to a scratch folder) and
# fails on the first crash, leak or sanitizer report:
#   tests/fuzz/run.sh [SECONDS] [BUILD]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-5}
build=${2:-$top/tests/fuzz/build}
"$top/tests/fuzz/build.sh" "$build" >/dev/null
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for bin in "$build"/fuzz_*; do
    name=$(basename "$bin")
    mkdir -p "$scratch/$name"
    if "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$scratch/" "$scratch/$name" "$top/tests/fuzz/corpus/$name" \
        >"$scratch/$name.log" 2>&1; then
        echo "$name: $(grep -o 'Done [0-9]* runs' "$scratch/$name.log" | head -1)"
    else
        echo "$name: FAILED"; tail -40 "$scratch/$name.log"; status=1
    fi
done
exit $status
