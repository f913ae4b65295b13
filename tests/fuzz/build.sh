#!/bin/sh
# Builds the libFuzzer harnesses with clang (ASan + UBSan + libFuzzer) into
# BUILD (default tests/fuzz/build), compiling the code under test from the
# source tree directly so all of it is instrumented:
#   tests/fuzz/build.sh [BUILD]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$top/tests/fuzz/build}
mkdir -p "$out"
CC=${CC:-clang}
flags="-g -O1 -std=gnu11 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -I$top -I$top/include"
pkgs="jansson libpcre2-8 libutf8proc libxxhash"
cflags="$flags $(pkg-config --cflags $pkgs)"
libs="$(pkg-config --libs $pkgs) -lm -lpthread"
common=$(cd "$top" && ls common/*.c)
ipc="ipc/ring.c ipc/shm.c ipc/wire.c"
tok=$(cd "$top" && ls leader/tokenizer/*.c)
# What the front-ends share about OpenAI's request bodies (the server's
# parser and the batch line reader both use it).
openai=$(cd "$top" && ls leader/openai/*.c)
# The server's request parser goes only into the fuzz_server_* harnesses
# (it calls the engine's API, which the others do not link).
server="leader/server/request.c leader/server/api_error.c"
# The batch line reader and writer go only into fuzz_batch_line, with the
# CLI's sampling defaults and the engine library they stand on.
batch="leader/cli/cli_batch_line.c leader/cli/cli_batch_output.c leader/cli/cli_args.c
    $(cd "$top" && ls leader/engine/*.c leader/modelgen/*.c)"
compile() { # sources -> object paths
    for src in "$@"; do
        obj="$out/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')"
        if [ ! -f "$obj" ] || [ "$top/$src" -nt "$obj" ]; then
            $CC $cflags -c "$top/$src" -o "$obj"
        fi
        echo "$obj"
    done
}
objs=$(compile $common $ipc $tok $openai)
server_objs=$(compile $server)
batch_objs=$(compile $batch)
for h in "$top"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$h" .c)
    extra=""
    case $name in
    fuzz_server_*) extra=$server_objs ;;
    fuzz_batch_line) extra=$batch_objs ;;
    esac
    $CC $cflags -fsanitize=fuzzer "$h" $objs $extra $libs -o "$out/$name"
done
echo "fuzz harnesses built in $out"
