#!/usr/bin/env bash
# GPU end-to-end check and benchmark, run on a GPU machine from the source tree:
#   tests/golden/gpu_e2e.sh BIN_DIR OUT_DIR [PRESET]
# BIN_DIR holds nanollm-launch, nanollm-worker (built with CUDA), lib/ with any
# shared library the machine lacks, and nanovllm-bench.jsonl.  It makes a
# random-weight model of PRESET's shape (default qwen3-0.6b), checks greedy
# parity against transformers in bf16 with CUDA graphs on and off and prefix
# caching off (MODES="graphs eager noprefix" picks a subset), then runs the
# throughput benchmark.
# TPS="1 2 4 8" runs every mode at each tensor-parallel size with all ranks
# on GPU 0 (--devices 0,0,...; the CUDA-IPC all-reduce), checks each against
# transformers and each tp > 1 against tp 1 of the same mode.  N_PROMPTS,
# MAX_TOKENS and MAX_SEQS (default 32, 64, 512) shrink the run; BENCH=0
# skips the benchmark.
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
# prompt ids inside the model's own vocabulary (Llama's is smaller than Qwen's)
vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$model/config.json")
python3 "$here/gpu_parity.py" prompts /tmp/prompts.jsonl --n "${N_PROMPTS:-32}" \
    --max-tokens "${MAX_TOKENS:-64}" --vocab "$vocab"
outs=()
pairs=()
for tp in ${TPS:-1}; do
    tpflags=()
    if [ "$tp" -gt 1 ]; then
        devs=0; for ((r = 1; r < tp; r++)); do devs+=",0"; done
        tpflags=(--tp "$tp" --devices "$devs")
    fi
    for mode in ${MODES:-graphs eager noprefix}; do
        name=${mode}_tp$tp
        outs+=("$out/out_$name.jsonl")
        [ "$tp" -gt 1 ] && pairs+=("$out/out_${mode}_tp1.jsonl" "$out/out_$name.jsonl")
        flags=()
        [ "$mode" = eager ] && flags=(--enforce-eager)
        [ "$mode" = noprefix ] && flags=(--no-prefix-caching)
        /usr/bin/time -f "batch $name %e s" "$launch" --model "$model" --device cuda "${tpflags[@]}" \
            --max-num-seqs "${MAX_SEQS:-512}" "${flags[@]}" \
            batch --input /tmp/prompts.jsonl --output "$out/out_$name.jsonl" 2>"$out/err_$name.txt"
        echo "batch $name exit $?"; tail -4 "$out/err_$name.txt"
    done
done
python3 "$here/gpu_parity.py" compare "$model" /tmp/prompts.jsonl "${outs[@]}" >"$out/parity.txt" 2>&1
echo "parity exit $?"; grep -E "^parity|FAIL" "$out/parity.txt" | head -40
if [ ${#pairs[@]} -gt 0 ]; then
    python3 "$here/gpu_parity.py" pair "${pairs[@]}" >"$out/parity_tp.txt" 2>&1
    echo "tp parity exit $?"; grep -E "^parity|FAIL" "$out/parity_tp.txt" | head -40
fi
if [ "${BENCH:-1}" = 1 ] && [ -f "$bin/nanovllm-bench.jsonl" ]; then
    "$launch" --model "$model" --device cuda bench --workload "$bin/nanovllm-bench.jsonl" 2>&1 | tee "$out/bench.txt" | tail -5
fi
