#!/usr/bin/env python3
"""End-to-end greedy parity of nanollm against Hugging Face transformers.

Usage:
  gpu_parity.py prompts  OUT.jsonl [--n 32] [--seed 0] [--vocab N]
      writes a batch-input file of random token-id prompts (64 greedy tokens each,
      top-5 logprobs requested).
  gpu_parity.py pair  REF.jsonl OUT.jsonl [REF2.jsonl OUT2.jsonl ...]
      the same rule between two nanollm outputs (e.g. tp 1 against tp 4), both
      with top-5 logprobs.
  gpu_parity.py reference  MODEL_DIR PROMPTS.jsonl OUT.jsonl [--dtype bf16|fp32]
      writes transformers' greedy outputs in the batch output format, for pair.
  gpu_parity.py explain  MODEL_DIR PROMPTS.jsonl REF.jsonl OUT.jsonl
      transformers' log-probabilities where OUT first differs from REF (near-tie or not).
  gpu_parity.py compare  MODEL_DIR PROMPTS.jsonl NANOLLM_OUT.jsonl... [--dtype bf16|fp32]
      runs the prompts once through transformers (greedy) and applies vLLM's rule
      to every prompt of every nanollm output file: the token sequences are equal, or at the first
      difference each side's token is among the other side's top-5 logprobs.
Exit status 0 when every prompt passes.
"""
import argparse
import json
import random
import sys


def make_prompts(args):
    rng = random.Random(args.seed)
    with open(args.out, "w") as f:
        for i in range(args.n):
            n = rng.randint(4, 200)
            ids = [rng.randrange(args.vocab) for _ in range(n)]
            f.write(json.dumps({"id": f"p{i}", "prompt_token_ids": ids,
                                "max_tokens": args.max_tokens, "temperature": 0,
                                "ignore_eos": True, "logprobs": 5}) + "\n")


def hf_greedy(model, ids, steps, torch):
    """Greedy continuation with per-step top-5 log-probabilities."""
    input_ids = torch.tensor([ids], device="cuda")
    out = model.generate(input_ids, max_new_tokens=steps, do_sample=False,
                         output_logits=True, return_dict_in_generate=True,
                         pad_token_id=0, eos_token_id=None)
    tokens = out.sequences[0, len(ids):].tolist()
    tops = []
    for logits in out.logits:
        lp = torch.log_softmax(logits[0].float(), dim=-1)
        v, i = torch.topk(lp, 5)
        tops.append(list(zip(i.tolist(), v.tolist())))
    return tokens, tops


def first_difference(ref_tokens, ref_tops, our_tokens, our_tops):
    """None when equal; else (step, ok) under vLLM's top-5 rule."""
    first = next((k for k, (a, b) in enumerate(zip(ref_tokens, our_tokens)) if a != b), None)
    if first is None:
        return None if len(ref_tokens) == len(our_tokens) else (min(len(ref_tokens), len(our_tokens)), False)
    ok = our_tokens[first] in ref_tops[first] and ref_tokens[first] in our_tops[first]
    return first, ok


def load_out(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        out[r["id"]] = r
    return out


def top_ids(r):
    return [[t for t, _ in lp["top"]] for lp in r["logprobs"]]


LOGPROB_STEPS = 8  # the steps whose log-probabilities the summary compares


def logprob_error(a, b, steps=LOGPROB_STEPS):
    """The largest |difference| between the two sides' log-probabilities of
    the same token, over the top-5 ids both list, in the first `steps`
    steps while the tokens so far agree; (error, step), or (0.0, None)."""
    worst, at = 0.0, None
    for k in range(min(steps, len(a["token_ids"]), len(b["token_ids"]))):
        if a["token_ids"][:k] != b["token_ids"][:k]:
            break
        theirs = dict((t, v) for t, v in b["logprobs"][k]["top"])
        for t, v in a["logprobs"][k]["top"]:
            if t in theirs and abs(v - theirs[t]) > worst:
                worst, at = abs(v - theirs[t]), k
    return worst, at


def check_against(ref, ours, label):
    """Applies the rule to every prompt of ref (id -> batch output line);
    prints the differences and a summary (with the largest logprob error of
    the first LOGPROB_STEPS tokens), returns the number failing."""
    failures, exact = 0, 0
    worst = (0.0, None, None)  # error, prompt, step
    for pid, a in ref.items():
        b = ours.get(pid)
        if b is None or "error" in b or "error" in a:
            print(f"{label}: {pid}: missing or error: {b and b.get('error')}")
            failures += 1
            continue
        err, step = logprob_error(a, b)
        if err > worst[0]:
            worst = (err, pid, step)
        d = first_difference(a["token_ids"], top_ids(a), b["token_ids"], top_ids(b))
        if d is None:
            exact += 1
            continue
        step, ok = d
        at = lambda r: r["token_ids"][step] if step < len(r["token_ids"]) else None
        print(f"{label}: {pid}: first difference at step {step}: ref {at(a)} ours {at(b)} -> "
              f"{'within top-5 both ways' if ok else 'FAIL'}")
        failures += 0 if ok else 1
    where = f" ({worst[1]}, step {worst[2]})" if worst[1] is not None else ""
    print(f"parity {label}: {len(ref)} prompts, {exact} identical, {failures} failing, "
          f"largest logprob error in the first {LOGPROB_STEPS} tokens {worst[0]:.4f}{where}")
    return failures


def pair(args):
    if len(args.files) % 2:
        print("pair: give REF OUT pairs")
        return 2
    status = 0
    for ref_path, our_path in zip(args.files[::2], args.files[1::2]):
        if check_against(load_out(ref_path), load_out(our_path), f"{our_path} against {ref_path}"):
            status = 1
    return status


def hf_reference(model_dir, prompts_path, dtype_name):
    """Greedy transformers outputs of every prompt, as batch output lines
    (id -> {"id", "token_ids", "logprobs": [{"top": [[id, logprob], ...]}]})."""
    import torch
    from transformers import AutoModelForCausalLM
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
    ref = {}
    for line in open(prompts_path):
        p = json.loads(line)
        tokens, tops = hf_greedy(model, p["prompt_token_ids"], p["max_tokens"], torch)
        ref[p["id"]] = {"id": p["id"], "token_ids": tokens,
                        "logprobs": [{"top": [[t, v] for t, v in top]} for top in tops]}
    return ref


def reference(args):
    with open(args.out, "w") as f:
        for r in hf_reference(args.model, args.prompts, args.dtype).values():
            f.write(json.dumps(r) + "\n")
    return 0


def explain(args):
    """For each prompt where OUT differs from REF: transformers' own
    log-probabilities at the first difference (teacher-forced on REF's
    tokens), so a failure can be told from a near-tie."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    prompts = {p["id"]: p for p in map(json.loads, open(args.prompts))}
    ref, ours = load_out(args.ref), load_out(args.ours)
    for pid, a in ref.items():
        b = ours.get(pid)
        if b is None or pid not in prompts:
            continue
        d = first_difference(a["token_ids"], top_ids(a), b["token_ids"], top_ids(b))
        if d is None:
            continue
        k = d[0]
        ids = prompts[pid]["prompt_token_ids"] + a["token_ids"][:k]
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids], device="cuda")).logits[0, -1].float(), -1)
        top = torch.topk(lp, 8)
        mine = b["token_ids"][k]
        rank = int((lp > lp[mine]).sum()) + 1
        print(f"{pid} step {k}: ref {a['token_ids'][k]} ours {mine}; transformers: top-8 "
              f"{[(int(i), round(float(v), 4)) for v, i in zip(top.values, top.indices)]}, ours at rank {rank} "
              f"({float(lp[mine]):.4f}); ours' top-5 {b['logprobs'][k]['top']}")
    return 0


def compare(args):
    ref = hf_reference(args.model, args.prompts, args.dtype)
    status = 0
    for path in args.ours:
        if check_against(ref, load_out(path), path):
            status = 1
    return status


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompts")
    p.add_argument("out")
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--max-tokens", type=int, default=64)
    q = sub.add_parser("pair")
    q.add_argument("files", nargs="+")
    c = sub.add_parser("compare")
    c.add_argument("model")
    c.add_argument("prompts")
    c.add_argument("ours", nargs="+")
    c.add_argument("--dtype", default="bf16")
    e = sub.add_parser("explain")
    e.add_argument("model")
    e.add_argument("prompts")
    e.add_argument("ref")
    e.add_argument("ours")
    r = sub.add_parser("reference")
    r.add_argument("model")
    r.add_argument("prompts")
    r.add_argument("out")
    r.add_argument("--dtype", default="bf16")
    args = ap.parse_args()
    if args.cmd == "prompts":
        make_prompts(args)
        return 0
    if args.cmd == "pair":
        return pair(args)
    if args.cmd == "reference":
        return reference(args)
    if args.cmd == "explain":
        return explain(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
