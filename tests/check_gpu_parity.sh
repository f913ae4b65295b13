#!/bin/sh
# The parity rule of tests/golden/gpu_parity.py, which the GPU runs apply to
# nanollm's outputs against transformers': vLLM's top-5 rule at the first
# difference, and the largest logprob error of the first 8 tokens.
exec python3 - "$(dirname "$0")/golden" <<'PY'
import io, sys, contextlib
sys.path.insert(0, sys.argv[1])
import gpu_parity as g

def out(pid, ids, tops):
    return {"id": pid, "token_ids": ids, "logprobs": [{"top": t} for t in tops]}

def check(ref, ours):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        failing = g.check_against(ref, ours, "t")
    return failing, buf.getvalue().splitlines()[-1]

ref = out("p", [1, 2, 3], [[[1, -0.1], [5, -2.0]], [[2, -0.5], [7, -1.0]], [[3, -0.2], [4, -0.9]]])
# identical tokens: the error is the largest over the ids both list
same = out("p", [1, 2, 3], [[[1, -0.12], [5, -2.3]], [[2, -0.45], [7, -1.05]], [[3, -0.25]]])
assert g.logprob_error(ref, same) == (abs(-2.0 + 2.3), 0), g.logprob_error(ref, same)
failing, line = check({"p": ref}, {"p": same})
assert failing == 0 and "1 identical, 0 failing" in line and "0.3000 (p, step 0)" in line, line
# a difference inside both top-5 lists passes; the steps after it are not compared
near = out("p", [1, 2, 4], [[[1, -0.1]], [[2, -0.5]], [[4, -0.8], [3, -0.85]]])
assert g.first_difference(ref["token_ids"], g.top_ids(ref), near["token_ids"], g.top_ids(near)) == (2, True)
far = out("p", [9, 2, 3], [[[9, -0.05], [1, -3.0]], [[2, -0.1]], [[3, -5.0]]])  # step 2 is past the difference
assert g.logprob_error(ref, far) == (abs(-0.1 + 3.0), 0)
failing, line = check({"p": ref}, {"p": near})
assert failing == 0 and "0 identical, 0 failing" in line, line
# a token outside the other side's top-5 fails, and so does a missing prompt
failing, line = check({"p": ref}, {"p": far})
assert failing == 1, line
failing, line = check({"p": ref, "q": ref}, {"p": same})
assert failing == 1, line
# a shorter output is a difference that fails
short = out("p", [1, 2], [[[1, -0.1]], [[2, -0.5]]])
assert g.first_difference(ref["token_ids"], g.top_ids(ref), short["token_ids"], g.top_ids(short)) == (2, False)
print("gpu_parity rule: 7 checks passed")
PY
