#!/bin/sh
# Installs nanollm twice from one build tree, reconfigured in between with
# another --prefix, and checks that each installed nanollm-launch runs the
# nanollm-worker of its own prefix (the first prefix is deleted before the
# second program runs), and that reconfiguring with an unchanged prefix
# recompiles nothing:
#
#   tests/install_prefix.sh
#
# Builds a copy of the tracked files (CPU only: the worker's path does not
# depend on CUDA) in a temporary folder.  Needs the build dependencies and
# the tokenizer (tools/fetch-tokenizer.sh): each program generates one token
# with the demo model, which is how it proves it found its worker.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset NANOLLM_WORKER NANOLLM_LAUNCH
export NANOLLM_CPU_KV_BYTES=$((16 << 20))
fail() {
    echo "install_prefix.sh: $*" >&2
    exit 1
}

mkdir "$work/src"
(cd "$top" && git ls-files -z | xargs -0 tar -cf -) | tar -xf - -C "$work/src"
cd "$work/src"
autoreconf -fi >/dev/null 2>&1 || fail "autoreconf failed"

# install_into PREFIX: configures with PREFIX and installs, the output in
# $work/install.log.
install_into() {
    { ./configure --without-cuda --prefix="$1" && make -j"$(nproc)" install; } \
        >"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; fail "installing into $1 failed"; }
}
# generates PREFIX: the installed program of PREFIX generates a token from
# outside any build tree.
generates() {
    if ! (cd / && "$1/bin/nanollm-launch" generate --max-tokens 1 --seed 1 Hi) \
        >"$work/run.out" 2>"$work/run.err"; then
        cat "$work/run.err" >&2
        fail "$1/bin/nanollm-launch did not run its worker $1/libexec/nanollm/nanollm-worker"
    fi
}

install_into "$work/a"
generates "$work/a"
echo "install_prefix.sh: installed into prefix a, it runs"
install_into "$work/b"
rm -rf "$work/a"
generates "$work/b"
echo "install_prefix.sh: reconfigured and installed into prefix b, a removed, b runs"
{ ./configure --without-cuda --prefix="$work/b" && make -j"$(nproc)"; } >"$work/same.log" 2>&1 ||
    { tail -n 30 "$work/same.log" >&2; fail "rebuilding with the same prefix failed"; }
if grep -q '^ *\(CC\|NVCC\) ' "$work/same.log"; then
    cat "$work/same.log" >&2
    fail "reconfiguring with the same prefix recompiled objects"
fi
echo "install_prefix.sh: reconfigured with the same prefix, nothing recompiled"
echo "3 passed, 0 failed"
