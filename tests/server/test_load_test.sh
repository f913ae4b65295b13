#!/bin/sh
# Smoke test of bench/load_test.py against `nanollm-launch serve` on the CPU
# with the demo model: 8 streamed requests, 4 in flight, 4 tokens each, once
# with mixed steps and once with --prefill-first (serve takes the engine
# option).  Every request must complete with its 4 tokens counted both from
# the usage chunk and chunk by chunk (logprobs), and the JSON summary must
# carry the figures the human one prints.  No timing is asserted.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
: "${NANOLLM_LAUNCH:?set NANOLLM_LAUNCH}"
tok="${NANOLLM_TOKENIZER_DIR:-$HOME/.cache/nanollm/tokenizer-qwen3}"
if [ ! -r "$tok/tokenizer.json" ]; then
    echo "test_load_test: no Qwen3 tokenizer, skipped" >&2
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/workload.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(8):
        ids = [(i * 97 + k * 31) % 5000 + 10 for k in range(12 + 3 * i)]
        f.write(json.dumps({'prompt_token_ids': ids, 'max_tokens': 50 + i, 'temperature': 0.6,
                            'ignore_eos': True}) + '\n')
PY
for policy in mixed prefill-first; do
    flag=""
    [ "$policy" = prefill-first ] && flag=--prefill-first
    python3 "$here/../../bench/load_test.py" --launch "$NANOLLM_LAUNCH" --workload "$tmp/workload.jsonl" \
        --concurrency 4 --max-tokens-cap 4 --logprobs --json-out "$tmp/$policy.json" \
        -- --device cpu --max-model-len 256 --num-kv-blocks 64 $flag
    python3 - "$tmp/$policy.json" "$policy" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d['summary']
def need(cond, what):
    if not cond:
        sys.exit(f'test_load_test ({sys.argv[2]}): {what}: {json.dumps(s)[:2000]}')
need(s['requests'] == 8 and s['completed'] == 8 and s['failed'] == 0, 'all 8 requests complete')
need(s['completion_tokens'] == 32, '4 tokens each (usage)')
need(s['chunk_token_mismatches'] == 0, 'chunk tokens add up to usage')
need(s['prompt_tokens'] == sum(12 + 3 * i for i in range(8)), 'prompt tokens (usage)')
need(s['ttft_s']['n'] == 8 and s['tpot_s']['n'] == 8, 'TTFT and TPOT for every request')
need(s['itl_s']['n'] == s['content_chunks'] - 8, 'one ITL per chunk after the first')
for k in ('ttft_s', 'itl_s', 'tpot_s', 'e2e_s'):
    need(0 <= s[k]['p50'] <= s[k]['p90'] <= s[k]['p99'] <= s[k]['max'], k + ' percentiles ordered')
need(s['output_tokens_per_s'] > 0 and s['requests_per_s'] > 0, 'throughputs')
need(d['options']['engine_args'][-1] == ('--prefill-first' if sys.argv[2] == 'prefill-first' else '64'),
     'engine options recorded')
PY
done
echo "test_load_test: ok"
