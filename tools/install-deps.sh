#!/bin/sh
# Installs everything nanollm's build and tests need on Debian/Ubuntu, with
# apt-get (through sudo when not run as root):
#
#   tools/install-deps.sh
#
# npm (which tools/fetch-tokenizer.sh uses) comes from the distribution only
# when no npm is present and Node.js is absent or the distribution's own: a
# Node.js from elsewhere ships its own npm, and the distribution's npm
# conflicts with it (or would install a second Node.js beside it).
# The CUDA toolkit (nvcc, cuBLASLt, NCCL) is optional and not installed here.
set -eu
packages="build-essential autoconf automake libtool pkg-config git ca-certificates
    check libsubunit-dev libjansson-dev libpcre2-dev libutf8proc-dev libxxhash-dev
    libopenblas-dev libmicrohttpd-dev python3-jinja2 clang"

sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps.sh: not root and no sudo: run it as root" >&2; exit 1; }
    sudo=sudo
fi
# sudo drops the environment, so the variable goes through env.
apt_install() {
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# shellcheck disable=SC2086 # the list is split into words on purpose
apt_install $packages
node=$(command -v node || command -v nodejs || true)
if command -v npm >/dev/null; then
    :
elif [ -z "$node" ]; then
    apt_install npm
elif dpkg -S "$(readlink -f "$node")" 2>/dev/null | grep -q '^nodejs:' &&
    apt-get install -s -qq npm >/dev/null 2>&1; then
    apt_install npm
else
    echo "install-deps.sh: $node has no npm beside it and does not come from the distribution;" \
        "install the npm made for that Node.js (tools/fetch-tokenizer.sh needs npm)" >&2
    exit 1
fi
echo "build and test dependencies installed"
