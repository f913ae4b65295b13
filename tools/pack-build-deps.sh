#!/bin/sh
# Packs the headers, libraries and pkg-config files nanollm builds against
# into one folder, for building on a machine that has the run-time libraries
# (jansson, PCRE2, xxHash, OpenBLAS) but not their -dev packages:
#
#   tools/pack-build-deps.sh DIR          # here, where the -dev packages are
#   PKG_CONFIG_PATH=DIR/pkgconfig ./configure && make    # there
#
# The shared libraries are not packed: the link names their sonames
# (-l:libjansson.so.4), which the other machine's run-time packages provide.
# utf8proc, Check and subunit are packed as static archives, since such a
# machine may lack them altogether (their folder holds no .so, so -l picks
# the archives).  The pkg-config files locate the folder
# through ${pcfiledir}, so it can move.
set -eu
dest=$1
multi=/usr/lib/x86_64-linux-gnu
mkdir -p "$dest/include" "$dest/lib" "$dest/pkgconfig"
dest=$(cd "$dest" && pwd)
for h in jansson.h jansson_config.h pcre2.h xxhash.h xxh3.h utf8proc.h check.h check_stdint.h; do
    cp /usr/include/$h "$dest/include/"
done
cp /usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$dest/include/"
cp "$multi/libutf8proc.a" "$multi/libcheck_pic.a" "$multi/libsubunit.a" "$dest/lib/"
pc() { # name version libs
    printf 'root=${pcfiledir}/..\nName: %s\nDescription: packed by pack-build-deps.sh\nVersion: %s\nLibs: %s\nCflags: -I${root}/include\n' \
        "$1" "$2" "$3" >"$dest/pkgconfig/$1.pc"
}
pc jansson 2.14 -l:libjansson.so.4
pc libpcre2-8 10.42 -l:libpcre2-8.so.0
pc libxxhash 0.8.1 -l:libxxhash.so.0
pc libutf8proc 2.6.0 '-L${root}/lib -lutf8proc'
pc openblas 0.3.21 -l:libopenblas.so.0
pc check 0.15.2 '-L${root}/lib -lcheck_pic -lsubunit -lrt -lm -pthread'
echo "build dependencies packed in $dest"
