#!/usr/bin/env python3
"""hf_load_check.py — does Hugging Face transformers load a mkmodel checkpoint?

Usage: hf_load_check.py MODEL_DIR

Loads MODEL_DIR (written by `nanollm-launch mkmodel`) with
AutoModelForCausalLM.from_pretrained(torch_dtype=bfloat16), requires that no
key is missing, unexpected or mis-shaped, then compares a sample of tensors
bit for bit with what safetensors.safe_open reads from the files, and runs
one forward pass.  Prints one OK / MISMATCH line per check; exits 1 on any
mismatch.  Needs torch, transformers and safetensors (run it on the GPU
machine; a CPU is enough).
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM


def shard_of(model_dir):
    """Maps each tensor name to the file holding it."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return {k: os.path.join(model_dir, v) for k, v in weight_map.items()}
    path = os.path.join(model_dir, "model.safetensors")
    with safe_open(path, framework="pt") as f:
        return {k: path for k in f.keys()}


def read_tensor(files, name):
    with safe_open(files[name], framework="pt") as f:
        return f.get_tensor(name)


def same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype in (torch.bfloat16, torch.float16):
        return torch.equal(a.view(torch.int16), b.view(torch.int16))
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    model_dir = sys.argv[1]
    failures = 0

    def report(ok, what):
        nonlocal failures
        failures += not ok
        print(("OK        " if ok else "MISMATCH  ") + what)

    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    config = AutoConfig.from_pretrained(model_dir)
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
        report(getattr(config, key) == raw[key], f"config {key} = {raw[key]}")
    if "head_dim" in raw:
        report(getattr(config, "head_dim", None) == raw["head_dim"],
               f"config head_dim = {raw['head_dim']}")

    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.bfloat16, output_loading_info=True)
    model.eval()
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = list(info.get(kind, []))
        report(not keys, f"load {kind}: {keys[:8]}")

    files = shard_of(model_dir)
    state = model.state_dict()
    last = raw["num_hidden_layers"] - 1
    names = [
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        f"model.layers.{last}.mlp.down_proj.weight",
        f"model.layers.{last}.post_attention_layernorm.weight",
        "model.norm.weight",
    ]
    for optional in ("model.layers.0.self_attn.q_norm.weight",
                     "model.layers.0.self_attn.k_norm.weight",
                     "model.layers.0.self_attn.q_proj.bias",
                     "model.layers.0.self_attn.v_proj.bias",
                     "lm_head.weight"):
        if optional in files:
            names.append(optional)
    for name in names:
        if name not in state:
            report(False, f"{name}: not in the loaded model")
            continue
        ok = same_bits(state[name].cpu(), read_tensor(files, name))
        report(ok, f"{name} {tuple(state[name].shape)} bit-identical")

    if raw.get("tie_word_embeddings"):
        report(same_bits(model.lm_head.weight.cpu(), model.model.embed_tokens.weight.cpu()),
               "lm_head tied to embed_tokens")

    with torch.no_grad():
        ids = torch.tensor([[1, 2, 3, 4]])
        logits = model(ids).logits
    report(tuple(logits.shape) == (1, 4, raw["vocab_size"]) and bool(torch.isfinite(logits).all()),
           f"forward pass logits {tuple(logits.shape)} finite")

    print("ALL OK" if not failures else f"{failures} MISMATCH(ES)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
