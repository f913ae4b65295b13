#!/usr/bin/env bash
# Packs a CUDA build for a GPU machine that has the driver and the CUDA
# toolkit but not this machine's other libraries (the BIN_DIR of
# bench/gpu_validate.sh and tests/golden/gpu_e2e.sh):
#   bench/gpu_pack.sh BUILD_DIR BIN_DIR
# BUILD_DIR is a tree configured with CUDA and built (`make` and `make
# tests/test_cuda_ops bench/gap_probe bench/barrier_probe bench/ring_probe`, whichever are
# wanted).  BIN_DIR gets the programs (stripped), lib/ with every shared
# library they load from outside the toolkit and the base system, tok/
# with the Qwen3 tokenizer files and nanovllm-bench.jsonl (WORKLOAD names
# it; default ../shared/bench/ beside the checkout).
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2/lib"
dest=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# (bench_cuda_ops and gemm_probe are left out: ~13 MB each of a device
# run's 64 MiB of luggage; copy the one a run needs beside the rest)
programs=(nanollm-launch nanollm-worker tests/test_cuda_ops tests/test_comm_ipc bench/gap_probe
          bench/barrier_probe bench/ring_probe)
copied=()
for p in "${programs[@]}"; do
    [ -x "$build/$p" ] || continue
    cp "$build/$p" "$dest/"
    strip "$dest/$(basename "$p")"
    copied+=("$dest/$(basename "$p")")
done
[ ${#copied[@]} -gt 0 ] || { echo "gpu_pack.sh: no program built in $build" >&2; exit 1; }
# The libraries a GPU image lacks: everything the programs load except the
# C and C++ run-times and the GPU's own (the driver's and NCCL's are the
# machine's; cuBLAS(Lt) and the CUDA run-time come with its toolkit, the
# run-time is packed anyway for a toolkit of another minor version).
base='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|libcuda|libnccl|libcublas|libcublasLt)\.so'
for prog in "${copied[@]}"; do
    ldd "$prog" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    [[ "$name" =~ $base ]] && continue
    case "$path" in
    /lib/x86_64-linux-gnu/* | /usr/lib/x86_64-linux-gnu/*)
        # the base system's own (present on any Ubuntu image) stay out
        dpkg -S "$name" 2>/dev/null | grep -qE '^(libc6|libgcc-s1|libstdc\+\+6|zlib1g|libgnutls30|libp11-kit0|libidn2-0|libunistring[0-9]*|libtasn1-6|libnettle8|libhogweed6|libgmp10|libffi8|libzstd1|liblzma5|libgfortran5|libquadmath0|libjansson4|libpcre2-8-0|libxxhash0|libopenblas0-pthread|libopenblas0)[:]' && continue
        ;;
    esac
    cp -L "$path" "$dest/lib/$name"
done
cuda_rt=$(ldd "$dest/nanollm-worker" 2>/dev/null | awk '$1 ~ /^libcudart/ {print $3}')
[ -n "$cuda_rt" ] && cp -L "$cuda_rt" "$dest/lib/"
tok=${NANOLLM_TOKENIZER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-qwen3}
if [ -f "$tok/tokenizer.json" ]; then
    rm -rf "$dest/tok"
    cp -rL "$tok" "$dest/tok"
fi
workload=${WORKLOAD:-$here/../../shared/bench/nanovllm-bench.jsonl}
[ -f "$workload" ] && cp "$workload" "$dest/"
du -sh "$dest"
