#!/bin/sh
# check_public_api.sh — include/nanollm.h is the one door into the library:
#
# 1. the shared library exports exactly the functions nanollm.h declares
#    (`nm -D --defined-only`): no internal symbol leaks into a host
#    program's namespace, and no declared function is missing;
# 2. the CLI (leader/cli/) is a client like any other: it includes only
#    nanollm.h and its own headers (plus the model writer's mkmodel.h in
#    the mkmodel command, which is a tool, not a client), and every symbol
#    it takes from the internal libraries is a nanollm.h function (or
#    mkmodel_* in cli_mkmodel.o); the serve command includes the HTTP
#    server's server.h, and the server (leader/server/) includes only
#    nanollm.h and its own headers.  Both may include leader/openai/, what
#    the two front-ends share about OpenAI's request bodies (front-end code
#    on jansson alone, built as its own library, libnlopenai, outside the
#    internal ones).
#
# The declarations are read with the C preprocessor and a parse of its
# output (brace bodies dropped, declarations split at ';'), independently of
# the sed that makes the build's export list, so a mistake in either shows.
# Run from the build directory (make check does).
set -eu
srcdir=$(cd "$(dirname "$0")/.." && pwd)
lib=.libs/libnanollm.so
if [ ! -e "$lib" ]; then
    echo "check_public_api: $lib not built (configured with --disable-shared?), skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# The functions nanollm.h declares: only text that comes from the header
# itself (after the preprocessor's line markers), outside any braces, in
# declarations that are not typedefs and have a parameter list.
${CC:-cc} -E -I"$srcdir/include" "$srcdir/include/nanollm.h" |
    awk '/^# [0-9]+ "/ { mine = ($3 ~ /nanollm\.h"$/); next } mine' |
    tr '\n' ' ' |
    awk '{
        depth = 0; out = ""
        for (i = 1; i <= length($0); i++) {
            c = substr($0, i, 1)
            if (c == "{") { depth++; continue }
            if (c == "}") { depth--; continue }
            if (depth == 0) out = out c
        }
        n = split(out, decl, ";")
        for (k = 1; k <= n; k++) {
            d = decl[k]
            if (d ~ /^[ \t]*typedef/ || index(d, "(") == 0) continue
            d = substr(d, 1, index(d, "(") - 1)
            sub(/[ \t]+$/, "", d)
            if (match(d, /[A-Za-z_][A-Za-z0-9_]*$/)) print substr(d, RSTART, RLENGTH)
        }
    }' | sort -u > "$tmp/declared"
if [ ! -s "$tmp/declared" ]; then
    echo "check_public_api: found no function declarations in nanollm.h"
    exit 1
fi

# ---- 1. exports ----------------------------------------------------------
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u > "$tmp/exported"
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "check_public_api: $lib exports symbols nanollm.h does not declare:"
    echo "$extra" | sed 's/^/  /'
    status=1
fi
if [ -n "$missing" ]; then
    echo "check_public_api: nanollm.h declares functions $lib does not export:"
    echo "$missing" | sed 's/^/  /'
    status=1
fi

# ---- 2. the CLI uses only nanollm.h ---------------------------------------
for f in "$srcdir"/leader/cli/*.[ch]; do
    name=${f##*/}
    sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
        case "$inc" in
        nanollm.h | leader/cli/* | leader/openai/*) ;;
        leader/modelgen/mkmodel.h) [ "$name" = cli_mkmodel.c ] || echo "$name: $inc" ;;
        leader/server/server.h) [ "$name" = cli_serve.c ] || echo "$name: $inc" ;;
        *) echo "$name: $inc" ;;
        esac
    done
done > "$tmp/includes"
# The HTTP server (leader/server/) is another client: nanollm.h and its own
# headers only.
for f in "$srcdir"/leader/server/*.[ch]; do
    name=${f##*/}
    sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
        case "$inc" in
        nanollm.h | leader/server/* | leader/openai/*) ;;
        *) echo "server/$name: $inc" ;;
        esac
    done
done >> "$tmp/includes"
if [ -s "$tmp/includes" ]; then
    echo "check_public_api: the CLI includes internal headers:"
    sed 's/^/  /' "$tmp/includes"
    status=1
fi
cli_objs=".libs/libnlcli.a leader/cli/launch_main.o"
for o in $cli_objs .libs/libnlleader.a .libs/libnlcommon.a .libs/libnlipc.a; do
    if [ ! -e "$o" ]; then
        echo "check_public_api: $o not built"
        exit 1
    fi
done
nm --defined-only .libs/libnlleader.a .libs/libnlcommon.a .libs/libnlipc.a 2>/dev/null |
    awk 'NF >= 3 && $2 ~ /^[A-Z]$/ { print $3 }' | sort -u > "$tmp/internal"
# The CLI's own objects (libnlcli.a also holds the internal libraries it
# was linked with), one name a line.
for f in "$srcdir"/leader/cli/*.c; do
    name=${f##*/}
    echo "${name%.c}.o"
done > "$tmp/cli_objects"
# "file:object: U symbol" for each symbol the CLI's objects take from outside.
nm -A -u $cli_objs | awk '{ print $1, $NF }' | sort -u |
    while read -r where sym; do
        obj=${where%:}
        obj=${obj##*:}
        obj=${obj##*/}
        grep -qx "$obj" "$tmp/cli_objects" || continue
        grep -qx "$sym" "$tmp/internal" || continue
        grep -qx "$sym" "$tmp/declared" && continue
        case "$where:$sym" in *cli_mkmodel.o:*:mkmodel_*) continue ;; esac
        echo "${where%:} uses $sym"
    done > "$tmp/leaks"
if [ -s "$tmp/leaks" ]; then
    echo "check_public_api: the CLI calls internal functions:"
    sed 's/^/  /' "$tmp/leaks"
    status=1
fi

[ $status = 0 ] && echo "check_public_api: $(wc -l < "$tmp/declared") functions, exported exactly; the CLI uses only them"
exit $status
