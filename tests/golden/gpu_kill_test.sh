#!/usr/bin/env bash
# A rank killed mid-batch on a GPU machine, run from the source tree:
#   tests/golden/gpu_kill_test.sh BIN_DIR OUT_DIR [TP] [RANK]
# BIN_DIR as for gpu_e2e.sh.  Runs nano-vllm's workload as a batch at tp TP
# (default 4, every rank on GPU 0), SIGKILLs rank RANK (default 2) five
# seconds after the engine opened, and reports the leader's exit status, how
# long it took to exit, its message, and what is left afterwards: worker
# processes, compute processes on the GPU and the GPU memory in use.
# MODEL_DIR picks another model; DEVICE=cpu runs it on the CPU backend (a
# check of this script).
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh" "$1"
out=$2; tp=${3:-4}; victim_rank=${4:-2}
model=${MODEL_DIR:-/tmp/model-qwen3-0.6b}
mkdir -p "$out"
[ -f "$model/config.json" ] || "$launch" mkmodel --preset qwen3-0.6b --out "$model" >/dev/null 2>&1
devs=0; for ((r = 1; r < tp; r++)); do devs+=",0"; done
placement=(--device cuda --devices "$devs")
[ "${DEVICE:-cuda}" = cpu ] && placement=(--device cpu)
NANOLLM_LOG_LEVEL=info "$launch" --model "$model" "${placement[@]}" --tp "$tp" --max-num-seqs 64 \
    batch --input "$bin/nanovllm-bench.jsonl" --output "$out/kill_out.jsonl" 2>"$out/kill_err.txt" &
leader=$!
for _ in $(seq 1 120); do grep -q "engine open" "$out/kill_err.txt" && break; sleep 0.5; done
sleep 5
victim=$(pgrep -f "nanollm-worker.*--rank $victim_rank( |$)" | head -1)
if [ -z "$victim" ] || ! kill -0 "$leader" 2>/dev/null; then
    echo "no rank $victim_rank to kill, or the leader is gone"; tail -5 "$out/kill_err.txt"; exit 1
fi
echo "leader alive with $(pgrep -fc nanollm-worker) workers, $(wc -l <"$out/kill_out.jsonl" 2>/dev/null || echo 0) lines written"
t1=$(date +%s.%N); kill -9 "$victim"; wait "$leader"; rc=$?; t2=$(date +%s.%N)
echo "killed rank $victim_rank (pid $victim): leader exit $rc after $(python3 -c "print(f'{$t2 - $t1:.3f}')") s"
grep -E "died|rank" "$out/kill_err.txt" | tail -2
sleep 1
echo "workers left: $(pgrep -fc nanollm-worker)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
nvidia-smi --query-gpu=memory.used --format=csv
[ "$rc" = 1 ] && [ "$(pgrep -fc nanollm-worker)" = 0 ]
