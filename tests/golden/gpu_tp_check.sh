#!/usr/bin/env bash
# Tensor-parallel placements on a GPU machine, run from the source tree:
#   tests/golden/gpu_tp_check.sh BIN_DIR OUT_DIR [PRESET]
# BIN_DIR as for gpu_e2e.sh.  Greedy outputs of tp 2 and 4 (several ranks on
# GPU 0: the CUDA-IPC all-reduce) and, where a second GPU is visible, of tp 2
# on GPUs 0 and 1 with --all-reduce auto, ipc and nccl, each held to tp 1 with
# vLLM's top-5 rule (gpu_parity.py pair); then the placement errors: a GPU
# that does not exist, and NCCL asked to put two ranks on one GPU.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh" "$1"
out=$2; preset=${3:-qwen3-0.6b}
model=/tmp/model-$preset
here=$(dirname "$0")
mkdir -p "$out"
gpus=$(nvidia-smi -L | wc -l)
"$launch" mkmodel --preset "$preset" --out "$model" >/dev/null 2>&1
python3 "$here/gpu_parity.py" prompts /tmp/tp-prompts.jsonl --n "${N_PROMPTS:-8}" \
    --max-tokens "${MAX_TOKENS:-16}"
run() { # name, then options
    local name=$1; shift
    "$launch" --model "$model" --device cuda --max-num-seqs 8 "$@" \
        batch --input /tmp/tp-prompts.jsonl --output "$out/out_$name.jsonl" 2>"$out/err_$name.txt"
    echo "$name ($*): exit $?; $(grep -E 'ready|rank|error' "$out/err_$name.txt" | head -2 | tr '\n' ' ')"
}
run tp1
run tp2_gpu00 --tp 2 --devices 0,0
run tp4_gpu0000 --tp 4 --devices 0,0,0,0
pairs=("$out/out_tp1.jsonl" "$out/out_tp2_gpu00.jsonl" "$out/out_tp1.jsonl" "$out/out_tp4_gpu0000.jsonl")
if [ "$gpus" -ge 2 ]; then
    run tp2_gpu01_auto --tp 2
    run tp2_gpu01_ipc --tp 2 --devices 0,1 --all-reduce ipc
    run tp2_gpu01_nccl --tp 2 --devices 0,1 --all-reduce nccl
    for n in auto ipc nccl; do pairs+=("$out/out_tp1.jsonl" "$out/out_tp2_gpu01_$n.jsonl"); done
fi
python3 "$here/gpu_parity.py" pair "${pairs[@]}" | grep -E "^parity|FAIL"
echo "tp parity exit ${PIPESTATUS[0]}"
run bad_gpu --tp 2 --devices 0,$gpus
run nccl_shared --tp 2 --devices 0,0 --all-reduce nccl
run tp_too_big --tp 4
