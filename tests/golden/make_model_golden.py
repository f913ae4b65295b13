#!/usr/bin/env python3
"""Golden outputs of a model directory, computed by Hugging Face transformers.

Loads the checkpoint in float32 (bf16 weights are exactly representable, so
this is the checkpoint's exact function), checks that every tensor the
model holds equals the file's, and for each prompt writes the greedy
continuation and the top-N log_softmax of the raw logits at every step:

    {"name", "prompts", "steps", "results": [{"tokens": [...],
      "top": [[[id, logprob], ...] per step]}], "versions": {...}}

Each step recomputes the whole sequence without a cache: slower, but the
reference then depends on nothing but the plain forward pass.  Runs on the
CPU so no TF32 or reduced-precision kernels are involved.

usage: make_model_golden.py MODEL_DIR --out FILE.json [--prompts FILE.json]
  (prompts default: MODEL_DIR/prompts.json with "prompts", "steps", "top")
"""
import argparse
import glob
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM


def load(model_dir):
    kwargs = {"attn_implementation": "eager"}
    try:
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kwargs)
    except TypeError:
        return AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kwargs)


def check_weights(model, model_dir):
    """Every tensor of the files must reach the model unchanged, and the
    model must hold nothing the files did not provide (no random init)."""
    state = model.state_dict()
    seen = set()
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                want = f.get_tensor(name).to(torch.float32)
                got = state[name]
                if not torch.equal(got, want):
                    sys.exit(f"{model_dir}: tensor {name} differs after loading")
                seen.add(name)
    missing = [n for n in state if n not in seen
               and not (n == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing:
        sys.exit(f"{model_dir}: model tensors not in the checkpoint: {missing}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts")
    a = ap.parse_args()
    spec = json.load(open(a.prompts or os.path.join(a.model_dir, "prompts.json")))
    steps, top_n = int(spec.get("steps", 16)), int(spec.get("top", 5))
    torch.manual_seed(0)
    model = load(a.model_dir).eval()
    check_weights(model, a.model_dir)
    results = []
    with torch.no_grad():
        for prompt in spec["prompts"]:
            ids, tokens, tops = list(prompt), [], []
            for _ in range(steps):
                logits = model(torch.tensor([ids], dtype=torch.long)).logits[0, -1]
                logprobs = torch.log_softmax(logits.to(torch.float64), dim=-1)
                # stable sort: equal values keep ascending ids, as the engine ranks them
                order = torch.sort(logits, descending=True, stable=True).indices[:top_n]
                tok = int(order[0])
                tokens.append(tok)
                tops.append([[int(i), float(logprobs[i])] for i in order])
                ids.append(tok)
            results.append({"tokens": tokens, "top": tops})
    out = {
        "name": spec.get("name", os.path.basename(os.path.normpath(a.model_dir))),
        "mkmodel_args": spec.get("mkmodel_args"),
        "prompts": spec["prompts"],
        "steps": steps,
        "results": results,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
