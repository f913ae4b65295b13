#!/usr/bin/env bash
# GPU end-to-end check and benchmark, run on a GPU machine from the source tree:
#   tests/golden/gpu_e2e.sh BIN_DIR OUT_DIR [PRESET]
# BIN_DIR holds nanollm-launch, nanollm-worker (built with CUDA), lib/ with any
# shared library the machine lacks, and nanovllm-bench.jsonl.  It makes a
# random-weight model of PRESET's shape (default qwen3-0.6b; MKMODEL_ARGS adds
# shape options), writes transformers' bf16 greedy outputs for random prompts
# (reference.jsonl), checks nanollm against them with CUDA graphs on and off
# and prefix caching off (MODES="graphs eager noprefix" picks a subset;
# "mixed" runs steps of 64 tokens, where prompt chunks join running
# decodes; "fp8" runs with the e4m3 KV cache), then runs the throughput
# benchmark.
# TPS="1 2 4 8" runs every mode at each tensor-parallel size with all ranks
# on GPU 0 (--devices 0,0,...; the CUDA-IPC all-reduce) and also checks each
# tp > 1 against tp 1 of the same mode.  N_PROMPTS, MAX_TOKENS and MAX_SEQS
# (default 32, 64, 512) shrink the run; BENCH=0 skips the benchmark;
# HF=0 skips transformers (then only tp against tp 1); REFERENCE=FILE takes
# transformers' outputs from an earlier run of the same preset instead of
# running it again; DEADLINE (seconds since
# the epoch) skips a run that would start within RUN_S (default 60) seconds of it;
# DEVICE=cpu runs the same on the CPU backend (a check of this script).
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh" "$1"
out=$2; preset=${3:-qwen3-0.6b}
model=${MODEL_DIR:-/tmp/model-$preset}
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt"
if [ ! -f "$model/config.json" ]; then
    /usr/bin/time -f "mkmodel %e s" "$launch" mkmodel --preset "$preset" ${MKMODEL_ARGS:-} \
        --out "$model" 2>&1 | tail -2
fi
# prompt ids inside the model's own vocabulary (Llama's is smaller than Qwen's)
vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$model/config.json")
prompts=$out/prompts.jsonl
python3 "$here/gpu_parity.py" prompts "$prompts" --n "${N_PROMPTS:-32}" \
    --max-tokens "${MAX_TOKENS:-64}" --vocab "$vocab"
if [ -n "${REFERENCE:-}" ]; then
    # transformers' outputs made earlier for the same preset, prompts (their
    # seed and vocabulary) and mkmodel weights (deterministic)
    cp "$REFERENCE" "$out/reference.jsonl"
elif [ "${HF:-1}" = 1 ]; then
    /usr/bin/time -f "transformers reference %e s" \
        python3 "$here/gpu_parity.py" reference "$model" "$prompts" "$out/reference.jsonl" 2>&1 | tail -1
fi
pairs=()
for tp in ${TPS:-1}; do
    tpflags=()
    if [ "$tp" -gt 1 ]; then
        devs=0; for ((r = 1; r < tp; r++)); do devs+=",0"; done
        tpflags=(--tp "$tp" --devices "$devs")
    fi
    for mode in ${MODES:-graphs eager noprefix}; do
        name=${mode}_tp$tp
        if [ -n "${DEADLINE:-}" ] && [ $(($(date +%s) + ${RUN_S:-60})) -gt "$DEADLINE" ]; then
            echo "batch $name skipped: too little time left"; continue
        fi
        flags=() seqs=${MAX_SEQS:-512}
        [ "$mode" = eager ] && flags=(--enforce-eager)
        [ "$mode" = noprefix ] && flags=(--no-prefix-caching)
        # steps of 64 tokens at most: prompts arrive in chunks beside
        # running decodes (mixed steps)
        [ "$mode" = mixed ] && flags=(--max-num-batched-tokens 64) seqs=16
        # the e4m3 KV cache, against the same bf16 reference
        [ "$mode" = fp8 ] && flags=(--kv-cache-dtype fp8)
        /usr/bin/time -f "batch $name %e s" timeout "${RUN_TIMEOUT:-900}" "$launch" --model "$model" --device "${DEVICE:-cuda}" "${tpflags[@]}" \
            --max-num-seqs "$seqs" "${flags[@]}" \
            batch --input "$prompts" --output "$out/out_$name.jsonl" 2>"$out/err_$name.txt"
        echo "batch $name exit $?"; tail -4 "$out/err_$name.txt"
        [ -f "$out/reference.jsonl" ] && pairs+=("$out/reference.jsonl" "$out/out_$name.jsonl")
        [ "$tp" -gt 1 ] && [ -f "$out/out_${mode}_tp1.jsonl" ] &&
            pairs+=("$out/out_${mode}_tp1.jsonl" "$out/out_$name.jsonl")
    done
done
if [ ${#pairs[@]} -gt 0 ]; then
    python3 "$here/gpu_parity.py" pair "${pairs[@]}" >"$out/parity.txt" 2>&1
    echo "parity exit $?"; grep -E "^parity|FAIL" "$out/parity.txt" | head -40
fi
if [ "${BENCH:-1}" = 1 ] && [ -f "$bin/nanovllm-bench.jsonl" ]; then
    "$launch" --model "$model" --device "${DEVICE:-cuda}" bench --workload "$bin/nanovllm-bench.jsonl" 2>&1 | tee "$out/bench.txt" | tail -5
fi
