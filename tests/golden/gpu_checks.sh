#!/usr/bin/env bash
# Further GPU checks, run on a GPU machine from the source tree:
#   tests/golden/gpu_checks.sh BIN_DIR OUT_DIR
# (BIN_DIR as for gpu_e2e.sh.)  1. the throughput benchmark with the per-step
# profile (NANOLLM_PROFILE=1); 2. the NCCL path on one GPU (NANOLLM_NCCL=1)
# must give the tokens of the plain run; 3. compute-sanitizer memcheck over a
# short batch on the tiny model, workers included; 4. greedy parity against
# transformers of the tiny preset and of the golden fixtures' models.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh" "$1"
out=$2
here=$(dirname "$0")
mkdir -p "$out"
"$launch" mkmodel --preset qwen3-0.6b --out /tmp/m06 >/dev/null
"$launch" mkmodel --preset tiny --out /tmp/tiny >/dev/null
python3 "$here/gpu_parity.py" prompts /tmp/prompts.jsonl --n 32

echo "== 1. bench with profile"
NANOLLM_PROFILE=1 "$launch" --model /tmp/m06 --device cuda bench \
    --workload "$bin/nanovllm-bench.jsonl" 2>&1 | grep -E "profile|Throughput|bench:" | tee "$out/profile.txt"

echo "== 2. NCCL on one GPU"
"$launch" --model /tmp/m06 --device cuda batch --input /tmp/prompts.jsonl --output /tmp/plain.jsonl 2>/dev/null
NANOLLM_NCCL=1 "$launch" --model /tmp/m06 --device cuda batch --input /tmp/prompts.jsonl \
    --output /tmp/nccl.jsonl 2>&1 | grep -E "NCCL|batch:"
python3 - <<'PY'
import json
a = [json.loads(l)["token_ids"] for l in open("/tmp/plain.jsonl")]
b = [json.loads(l)["token_ids"] for l in open("/tmp/nccl.jsonl")]
print("NCCL tp1 tokens equal to the plain run:", a == b, f"({len(a)} prompts)")
PY

echo "== 3. compute-sanitizer memcheck"
head -4 /tmp/prompts.jsonl | sed 's/"max_tokens": 64/"max_tokens": 8/' >/tmp/short.jsonl
compute-sanitizer --tool memcheck --target-processes all --print-limit 20 \
    "$launch" --model /tmp/tiny --device cuda --num-kv-blocks 256 --max-num-seqs 8 \
    --max-num-batched-tokens 512 --max-model-len 1024 batch --input /tmp/short.jsonl \
    --output /tmp/short_out.jsonl >"$out/memcheck.txt" 2>&1
echo "memcheck exit $?"; grep -E "ERROR SUMMARY|Invalid|batch:" "$out/memcheck.txt" | head

echo "== 4. parity of the tiny preset and the golden fixtures' models"
"$launch" --model /tmp/tiny --device cuda batch --input /tmp/prompts.jsonl --output /tmp/tiny_out.jsonl 2>/dev/null
python3 "$here/gpu_parity.py" compare /tmp/tiny /tmp/prompts.jsonl /tmp/tiny_out.jsonl 2>&1 | grep -E "^parity|FAIL"
for golden in "$here"/../fixtures/golden/*.json; do
    name=$(basename "$golden" .json)
    read -r vocab args < <(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["mkmodel_args"]; print(a[a.index("--vocab")+1], " ".join(a))' "$golden")
    "$launch" mkmodel --out "/tmp/$name" $args >/dev/null
    python3 "$here/gpu_parity.py" prompts "/tmp/$name.prompts" --n 16 --vocab "$vocab" --max-tokens 32
    "$launch" --model "/tmp/$name" --device cuda batch --input "/tmp/$name.prompts" \
        --output "/tmp/$name.out" 2>"/tmp/$name.err" || tail -2 "/tmp/$name.err"
    python3 "$here/gpu_parity.py" compare "/tmp/$name" "/tmp/$name.prompts" "/tmp/$name.out" 2>&1 | grep -E "^parity|FAIL"
done
