#!/usr/bin/env bash
# The acceptance run behind bench/RESULTS.md's tables, on one GPU machine,
# from the source tree:
#   bench/gpu_validate.sh BIN_DIR OUT_DIR
# BIN_DIR as for tests/golden/gpu_e2e.sh (nanollm-launch, nanollm-worker,
# lib/, nanovllm-bench.jsonl), optionally with test_cuda_ops and tok/ (the
# tokenizer files, for a machine without them in the cache).  In order:
# test_cuda_ops; both checkpoints written before anything is timed (a
# checkpoint being written beside a timed run slows it); the throughput
# bench twice with the bf16 and twice with the e4m3 KV cache; batch 1
# (512 tokens after a 128-id prompt) three times at the 0.6B and 8B shapes
# and once more under the stream profile (NANOLLM_PROFILE=stream), and
# twice at 0.6B with top_p 0.9 and top_k 50 (part "cuts"); launch -> first token five
# times; a 980-id prompt generating 160 greedy tokens with graphs and
# eagerly (its context crosses the short graphs' 1,024-key bound), which
# must agree; greedy parity against transformers in four modes at tp 1 and
# 2.  SKIP="parity 8b ..." leaves parts out (parts: ops bench fp8 batch1 cuts 8b
# profile first long parity).  OUT_DIR ends with summary.txt (the figures)
# and raw.tgz (every output behind them).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
golden=$here/../tests/golden
# gpu_env.sh sets bin and launch
# shellcheck source=SCRIPTDIR/../tests/golden/gpu_env.sh
. "$golden/gpu_env.sh" "$1"
out=$(mkdir -p "$2" && cd "$2" && pwd)
[ -d "$bin/tok" ] && export NANOLLM_TOKENIZER_DIR="$bin/tok"
workload=$bin/nanovllm-bench.jsonl
m06=/tmp/model-qwen3-0.6b m8=/tmp/model-qwen3-8b
summary=$out/summary.txt
want() { case " ${SKIP:-} " in *" $1 "*) return 1 ;; esac; }
note() { echo "$*" | tee -a "$summary"; }
tok_s() { grep -oE "Output token throughput[^0-9]*[0-9.,]+" "$1" | grep -oE "[0-9.,]+$" | head -1; }

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$summary"

if want ops && [ -x "$bin/test_cuda_ops" ]; then
    "$bin/test_cuda_ops" >"$out/test_cuda_ops.txt" 2>&1
    note "test_cuda_ops exit $?: $(grep -E '^[0-9]+%' "$out/test_cuda_ops.txt" | tail -1)"
fi

mkmodel() { # PRESET DIR: mkmodel's weights are deterministic, so an existing one is kept
    [ -f "$2/config.json" ] || "$launch" mkmodel --preset "$1" --out "$2" >/dev/null
}
mkmodel qwen3-0.6b "$m06" || exit 1
want 8b && { mkmodel qwen3-8b "$m8" || exit 1; }
python3 - "$workload" "$out" <<'PY'
import json, sys
first = json.loads(open(sys.argv[1]).readline())["prompt_token_ids"]
ids = first * (1000 // len(first) + 1)
with open(sys.argv[2] + "/batch1.jsonl", "w") as f:
    f.write(json.dumps({"id": "b1", "prompt_token_ids": first[:128], "max_tokens": 512,
                        "temperature": 0.6, "ignore_eos": True}) + "\n")
with open(sys.argv[2] + "/batch1_cuts.jsonl", "w") as f:
    f.write(json.dumps({"id": "b1", "prompt_token_ids": first[:128], "max_tokens": 512,
                        "temperature": 0.6, "top_p": 0.9, "top_k": 50, "ignore_eos": True}) + "\n")
with open(sys.argv[2] + "/long.jsonl", "w") as f:
    f.write(json.dumps({"id": "long", "prompt_token_ids": ids[:980], "max_tokens": 160,
                        "temperature": 0, "ignore_eos": True}) + "\n")
PY

bench() { # NAME MODEL [engine options...]
    local name=$1 model=$2; shift 2
    "$launch" --model "$model" --device cuda "$@" >"$out/$name.txt" 2>&1
    note "$name: $(tok_s "$out/$name.txt") tok/s"
}
if want bench; then
    for i in 1 2; do bench "bench_bf16_$i" "$m06" bench --workload "$workload" --json "$out/bench_bf16_$i.json"; done
fi
if want fp8; then
    for i in 1 2; do
        bench "bench_fp8_$i" "$m06" --kv-cache-dtype fp8 bench --workload "$workload" --json "$out/bench_fp8_$i.json"
    done
fi
if want batch1; then
    for i in 1 2 3; do bench "batch1_06b_$i" "$m06" --max-num-seqs 8 bench --workload "$out/batch1.jsonl"; done
fi
if want cuts; then
    for i in 1 2; do bench "batch1_06b_cuts_$i" "$m06" --max-num-seqs 8 bench --workload "$out/batch1_cuts.jsonl"; done
fi
if want 8b; then
    for i in 1 2 3; do bench "batch1_8b_$i" "$m8" --max-num-seqs 8 bench --workload "$out/batch1.jsonl"; done
fi
if want profile; then
    for m in "$m06" "$m8"; do
        [ -f "$m/config.json" ] || continue
        name=profile_$(basename "$m")
        NANOLLM_PROFILE=stream "$launch" --model "$m" --device cuda --max-num-seqs 8 bench \
            --workload "$out/batch1.jsonl" >"$out/$name.txt" 2>&1
        note "$name: $(tok_s "$out/$name.txt") tok/s"
        grep -E "profile" "$out/$name.txt" | tee -a "$summary"
    done
fi
if want first; then
    python3 - "$launch" "$m06" <<'PY' | tee -a "$summary"
import statistics, subprocess, sys, time
runs = []
for _ in range(5):
    t0 = time.monotonic()
    p = subprocess.Popen([sys.argv[1], "--model", sys.argv[2], "--device", "cuda", "generate",
                          "--max-tokens", "1", "--temperature", "0", "Hello"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdout.read(1)
    runs.append(time.monotonic() - t0)
    p.communicate()
print("first token: median %.3f s (%s)" % (statistics.median(runs), " ".join("%.3f" % r for r in runs)))
PY
fi
if want long; then
    for mode in graphs eager; do
        flags=(); [ "$mode" = eager ] && flags=(--enforce-eager)
        "$launch" --model "$m06" --device cuda "${flags[@]}" batch --input "$out/long.jsonl" \
            --output "$out/long_$mode.jsonl" 2>"$out/long_$mode.err" || tail -2 "$out/long_$mode.err"
    done
    python3 - "$out" <<'PY' | tee -a "$summary"
import json, sys
a, b = ([json.loads(l)["token_ids"] for l in open(f"{sys.argv[1]}/long_{m}.jsonl")] for m in ("graphs", "eager"))
print("980-id prompt, 160 tokens: graphs and eager", "agree" if a == b and len(a[0]) == 160 else "DIFFER")
PY
fi
if want parity; then
    MODEL_DIR=$m06 TPS="1 2" MODES="graphs eager mixed fp8" BENCH=0 \
        "$golden/gpu_e2e.sh" "$bin" "$out/parity" >"$out/parity.txt" 2>&1
    grep -E "^parity|FAIL|exit [1-9]" "$out/parity.txt" | tee -a "$summary"
fi
# Everything but the summary in one archive: a device run returns only so
# many files.
tar -czf "$out/raw.tgz" -C "$out" --exclude=raw.tgz --exclude=summary.txt . && \
    find "$out" -mindepth 1 ! -name raw.tgz ! -name summary.txt -delete
