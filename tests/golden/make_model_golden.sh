#!/bin/sh
# Writes the golden files of tests/test_model_golden.c on a machine with
# python3, torch and transformers (the GPU machine), from the repository
# root.  The models come from the test program itself (--make-models), so
# their mkmodel arguments and seeds are the test's by construction.
#
# Prepare here:   build tests/test_model_golden (out-of-tree), then
#   mkdir -p .carry/bin .carry/lib   (or another folder named by GOLDEN_CARRY)
#   cp BUILD/tests/test_model_golden .carry/bin/
#   cp the shared libraries it needs that the other machine lacks .carry/lib/
# Run there:      sh tests/golden/make_model_golden.sh   (results in $OUT)
# Then commit $OUT/*.json as tests/fixtures/golden/.
set -eu
out=${OUT:-$PWD/golden-out}
carry=${GOLDEN_CARRY:-.carry}
bin=$carry/bin/test_model_golden
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$bin" --make-models "$work"
for dir in "$work"/*/; do
    name=$(basename "$dir")
    python3 tests/golden/make_model_golden.py "$dir" --out "$out/$name.json"
    echo "wrote $out/$name.json"
done
