#!/usr/bin/env bash
# Two builds, the same tokens: runs the 32-prompt greedy batch (and a seeded
# sampling batch) through the nanollm programs in OLD_BIN and NEW_BIN on a
# GPU, with CUDA graphs and without, and requires the token ids of every line
# to be identical.  For changes that must not change behaviour:
#   tests/golden/gpu_same_tokens.sh OLD_BIN NEW_BIN OUT_DIR [PRESET]
# (each BIN as for gpu_e2e.sh: nanollm-launch, nanollm-worker, lib/).
set -uo pipefail
old=$(cd "$1" && pwd); new=$(cd "$2" && pwd); out=$3; preset=${4:-qwen3-0.6b}
export NCCL_NVLS_ENABLE=0
here=$(dirname "$0")
mkdir -p "$out"
model=/tmp/same-$preset
"$new/nanollm-launch" mkmodel --preset "$preset" --out "$model" >/dev/null || { echo "mkmodel failed"; exit 1; }
python3 "$here/gpu_parity.py" prompts /tmp/same_greedy.jsonl --n 32
# the same prompts, sampled with a seed per line
python3 - <<'PY'
import json
with open("/tmp/same_greedy.jsonl") as f, open("/tmp/same_sampled.jsonl", "w") as g:
    for i, line in enumerate(f):
        r = json.loads(line)
        r.update(temperature=0.8, top_p=0.9, top_k=50, seed=1000 + i)
        g.write(json.dumps(r) + "\n")
PY
status=0
for mode in graphs eager; do
    flags=()
    [ "$mode" = eager ] && flags=(--enforce-eager)
    for kind in greedy sampled; do
        for side in old new; do
            bin=$old; [ "$side" = new ] && bin=$new
            LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NANOLLM_WORKER="$bin/nanollm-worker" \
                "$bin/nanollm-launch" --model "$model" --device cuda "${flags[@]}" batch \
                --input /tmp/same_$kind.jsonl --output "$out/${side}_${mode}_$kind.jsonl" 2>"$out/${side}_${mode}_$kind.err" ||
                { echo "$side $mode $kind: exit $?"; tail -3 "$out/${side}_${mode}_$kind.err"; status=1; }
        done
        python3 - "$out/old_${mode}_$kind.jsonl" "$out/new_${mode}_$kind.jsonl" "$mode $kind" <<'PY' || status=1
import json, sys
a = [json.loads(l)["token_ids"] for l in open(sys.argv[1])]
b = [json.loads(l)["token_ids"] for l in open(sys.argv[2])]
same = sum(x == y for x, y in zip(a, b))
print(f"{sys.argv[3]}: {same}/{len(a)} lines with identical tokens ({sum(map(len, b))} tokens)")
sys.exit(0 if same == len(a) == len(b) and len(a) > 0 else 1)
PY
    done
done
exit $status
