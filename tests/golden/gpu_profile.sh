#!/usr/bin/env bash
# Where a step's GPU time goes, run on a GPU machine from the source tree:
#   tests/golden/gpu_profile.sh BIN_DIR OUT_DIR [PRESET]
# BIN_DIR as for gpu_e2e.sh (with batch1.jsonl beside nanovllm-bench.jsonl:
# one prompt, many tokens).  For nano-vllm's workload and for batch 1: the
# per-op table of the eager steps (NANOLLM_PROFILE=ops --enforce-eager), then
# the same workload with graphs and NANOLLM_PROFILE=1, whose decode ms/step
# is what the graphs save against the eager sum.  MODEL_DIR and DEVICE=cpu
# as for gpu_kill_test.sh.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh" "$1"
out=$2; preset=${3:-qwen3-0.6b}
model=${MODEL_DIR:-/tmp/model-$preset}
mkdir -p "$out"
[ -f "$model/config.json" ] || "$launch" mkmodel --preset "$preset" --out "$model" >/dev/null 2>&1
for workload in nanovllm-bench batch1; do
    [ -f "$bin/$workload.jsonl" ] || continue
    echo "== $workload, eager, per op"
    NANOLLM_PROFILE=ops "$launch" --model "$model" --device "${DEVICE:-cuda}" --enforce-eager bench \
        --workload "$bin/$workload.jsonl" >"$out/ops_$workload.txt" 2>&1
    grep -E "Output token|profile (rank|ops)" "$out/ops_$workload.txt"
    echo "== $workload, graphs"
    NANOLLM_PROFILE=1 "$launch" --model "$model" --device "${DEVICE:-cuda}" bench \
        --workload "$bin/$workload.jsonl" >"$out/graphs_$workload.txt" 2>&1
    grep -E "Output token|profile rank" "$out/graphs_$workload.txt"
done
