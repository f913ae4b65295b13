#!/usr/bin/env bash
# GPU end-to-end check and benchmark, run on a GPU machine from the source tree:
#   tests/golden/gpu_e2e.sh BIN_DIR OUT_DIR [PRESET]
# BIN_DIR holds nanollm-launch, nanollm-worker (built with CUDA), lib/ with any
# shared library the machine lacks, and nanovllm-bench.jsonl.  It makes a
# random-weight model of PRESET's shape (default qwen3-0.6b), checks greedy
# parity against transformers in bf16 with CUDA graphs on and off and prefix
# caching off (MODES="graphs eager noprefix" picks a subset), then runs the
# throughput benchmark.
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2; preset=${3:-qwen3-0.6b}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NANOLLM_WORKER="$bin/nanollm-worker"
launch="$bin/nanollm-launch"
model=/tmp/model-$preset
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt"
/usr/bin/time -f "mkmodel %e s" "$launch" mkmodel --preset "$preset" --out "$model" 2>&1 | tail -2
python3 "$here/gpu_parity.py" prompts /tmp/prompts.jsonl --n 32
outs=()
for mode in ${MODES:-graphs eager noprefix}; do
    outs+=("$out/out_$mode.jsonl")
    flags=()
    [ "$mode" = eager ] && flags=(--enforce-eager)
    [ "$mode" = noprefix ] && flags=(--no-prefix-caching)
    /usr/bin/time -f "batch $mode %e s" "$launch" --model "$model" --device cuda "${flags[@]}" \
        batch --input /tmp/prompts.jsonl --output "$out/out_$mode.jsonl" 2>"$out/err_$mode.txt"
    echo "batch $mode exit $?"; tail -3 "$out/err_$mode.txt"
done
python3 "$here/gpu_parity.py" compare "$model" /tmp/prompts.jsonl "${outs[@]}" >"$out/parity.txt" 2>&1
echo "parity exit $?"; grep -E "^parity|FAIL" "$out/parity.txt" | head -20
if [ -f "$bin/nanovllm-bench.jsonl" ]; then
    "$launch" --model "$model" --device cuda bench --workload "$bin/nanovllm-bench.jsonl" 2>&1 | tee "$out/bench.txt" | tail -5
fi
