#!/usr/bin/env python3
"""End-to-end greedy parity of nanollm against Hugging Face transformers.

Usage:
  gpu_parity.py prompts  OUT.jsonl [--n 32] [--seed 0] [--vocab N]
      writes a batch-input file of random token-id prompts (64 greedy tokens each,
      top-5 logprobs requested).
  gpu_parity.py pair  REF.jsonl OUT.jsonl [REF2.jsonl OUT2.jsonl ...]
      the same rule between two nanollm outputs (e.g. tp 1 against tp 4), both
      with top-5 logprobs.
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


def pair(args):
    status = 0
    if len(args.files) % 2:
        print("pair: give REF OUT pairs")
        return 2
    for ref_path, our_path in zip(args.files[::2], args.files[1::2]):
        ref, ours = load_out(ref_path), load_out(our_path)
        failures, exact = 0, 0
        for pid, a in ref.items():
            b = ours.get(pid)
            if b is None or "error" in b or "error" in a:
                print(f"{our_path}: {pid}: missing or error")
                failures += 1
                continue
            tops = lambda r: [[t for t, _ in lp["top"]] for lp in r["logprobs"]]
            d = first_difference(a["token_ids"], tops(a), b["token_ids"], tops(b))
            if d is None:
                exact += 1
                continue
            print(f"{our_path}: {pid}: first difference at step {d[0]} -> "
                  f"{'within top-5 both ways' if d[1] else 'FAIL'}")
            failures += 0 if d[1] else 1
        print(f"parity {our_path} against {ref_path}: {len(ref)} prompts, {exact} identical, "
              f"{failures} failing")
        status |= 1 if failures else 0
    return status


def compare(args):
    import torch
    from transformers import AutoModelForCausalLM
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).cuda().eval()
    prompts = [json.loads(l) for l in open(args.prompts)]
    reference = {p["id"]: hf_greedy(model, p["prompt_token_ids"], p["max_tokens"], torch)
                 for p in prompts}
    status = 0
    for path in args.ours:
        ours = {}
        for line in open(path):
            r = json.loads(line)
            ours[r["id"]] = r
        failures, exact = 0, 0
        for p in prompts:
            r = ours.get(p["id"])
            if r is None or "error" in r:
                print(f"{path}: {p['id']}: missing or error: {r and r.get('error')}")
                failures += 1
                continue
            hf_tokens, hf_tops = reference[p["id"]]
            our_tokens = r["token_ids"]
            first = next((k for k, (a, b) in enumerate(zip(hf_tokens, our_tokens)) if a != b), None)
            if first is None and len(hf_tokens) == len(our_tokens):
                exact += 1
                continue
            if first is None:
                print(f"{path}: {p['id']}: length differs: hf {len(hf_tokens)} ours {len(our_tokens)}")
                failures += 1
                continue
            hf_top = [t for t, _ in hf_tops[first]]
            our_top = [t for t, _ in r["logprobs"][first]["top"]]
            ok = our_tokens[first] in hf_top and hf_tokens[first] in our_top
            print(f"{path}: {p['id']}: first difference at step {first}: hf {hf_tokens[first]} "
                  f"ours {our_tokens[first]} -> {'within top-5 both ways' if ok else 'FAIL'}")
            failures += 0 if ok else 1
        print(f"parity {path}: {len(prompts)} prompts, {exact} identical, {failures} failing")
        status |= 1 if failures else 0
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
    args = ap.parse_args()
    if args.cmd == "prompts":
        make_prompts(args)
        return 0
    if args.cmd == "pair":
        return pair(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
