#!/bin/sh
# Runs the two commands of README.md's quick start, as the README writes
# them, each on its own clean clone of this repository (its committed HEAD):
#
#   tests/readme_commands.sh
#
# The commands are read from the fenced sh blocks of the "## Quick start"
# section, so a change to them is tested as it is written.  Each must begin
# with ./tools/install-deps.sh, which is dropped here: installing packages is
# the machine's business, not the test's (CI runs it first).
#   - the build-and-generate command must exit 0 and print text on stdout;
#   - the test command is run with TESTS="tests/test_status tests/test_e2e_cli":
#     it still configures and builds the library, the programs and every test
#     program, and runs one Check unit suite and the end-to-end test of the
#     built programs, without repeating the whole suite that CI has just run
#     on its own tree.
# Needs git, the build dependencies and the tokenizer (or npm to fetch it).
# NL_README_TEST is set for the commands, so a copy of this test reached from
# inside them skips (exit 77) instead of cloning again.
set -eu
if [ -n "${NL_README_TEST:-}" ]; then
    echo "readme_commands.sh: already inside a README command; skipped"
    exit 77
fi
NL_README_TEST=1
export NL_README_TEST
# The commands must find the programs and workers of their own clone.
unset NANOLLM_WORKER NANOLLM_LAUNCH

top=$(cd "$(dirname "$0")/.." && pwd)
readme=$top/README.md
subset="tests/test_status tests/test_e2e_cli"
deps_step="./tools/install-deps.sh && "

# Every line inside a fenced sh block of the quick-start section.
commands=$(awk '
    /^## / { quick = ($0 == "## Quick start") }
    quick && /^```sh$/ { inside = 1; next }
    inside && /^```/ { inside = 0 }
    quick && inside' "$readme")
generate=$(printf '%s\n' "$commands" | grep 'nanollm-launch generate' || true)
# shellcheck disable=SC2016 # $(nproc) is the text to find
check=$(printf '%s\n' "$commands" | grep 'make -j"$(nproc)" check$' || true)
fail() {
    echo "readme_commands.sh: $*" >&2
    exit 1
}
[ "$(printf '%s\n' "$generate" | grep -c .)" = 1 ] ||
    fail "$readme: want one quick-start command that runs nanollm-launch generate, found: $generate"
[ "$(printf '%s\n' "$check" | grep -c .)" = 1 ] ||
    fail "$readme: want one quick-start command ending in make -j\"\$(nproc)\" check, found: $check"
for c in "$generate" "$check"; do
    case $c in
    "$deps_step"*) ;;
    *) fail "$readme: the command does not begin with $deps_step: $c" ;;
    esac
done
generate=${generate#"$deps_step"}
check="${check#"$deps_step"} TESTS=\"$subset\""

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "readme_commands.sh: commit $(git -C "$top" rev-parse --short HEAD), clones in $work"

# run NAME COMMAND: clones into $work/NAME and runs COMMAND there, its output
# in $work/NAME.out and .err; fails with the end of both when it fails.
run() {
    git clone -q "$top" "$work/$1"
    echo "readme_commands.sh: [$1] $2"
    if ! (cd "$work/$1" && sh -c "$2") >"$work/$1.out" 2>"$work/$1.err"; then
        tail -n 30 "$work/$1.out" "$work/$1.err" >&2
        fail "[$1] the README command failed"
    fi
}

run generate "$generate"
# The program's stdout is what follows make's last "Leaving directory" line;
# its stderr says how many tokens it generated.
text=$(awk '/^make(\[[0-9]+\])?: Leaving directory/ { t = ""; next } { t = t $0 "\n" }
    END { printf "%s", t }' "$work/generate.out")
count=$(sed -n 's/^\[1\] .*, \([0-9]*\) generated, finish: .*/\1/p' "$work/generate.err")
if ! printf '%s' "$text" | grep -q '[^[:space:]]' || [ "${count:-0}" -lt 1 ]; then
    tail -n 30 "$work/generate.out" "$work/generate.err" >&2
    fail "[generate] printed no text (stderr reports ${count:-no} generated tokens)"
fi
echo "readme_commands.sh: [generate] $count tokens generated, printed: $(printf '%s' "$text" | tr '\n' ' ')"

run check "$check"
grep -q '^# PASS: *2$' "$work/check.out" || { cat "$work/check.out" >&2; fail "[check] the two tests did not pass"; }
echo "readme_commands.sh: [check] built everything and passed $subset"
echo "2 passed, 0 failed"
