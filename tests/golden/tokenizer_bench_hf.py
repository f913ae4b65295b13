#!/usr/bin/env python3
"""Hugging Face side of the tokenizer speed comparison (see
bench/tokenizer_bench.c): the same text, the same two modes (whole text in
one encode call; line by line, each line keeping its "\\n"), single-threaded,
first run (cold cache) and best warm run, and the same id checksum.
Usage: tokenizer_bench_hf.py TEXT_FILE TOKENIZER_DIR"""
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

from tokenizers import Tokenizer  # noqa: E402

RUNS = 4


def checksum(all_ids):
    return sum((i + 1) * x for i, x in enumerate(all_ids)) % (1 << 64)


def main():
    path, tok_dir = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    mb = len(text.encode()) / 1e6
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    for mode, pieces in (("whole", [text]), ("lines", lines)):
        t0 = time.perf_counter()
        tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
        load_s = time.perf_counter() - t0
        first, best, ids0 = 0.0, 1e30, None
        for run in range(RUNS):
            t0 = time.perf_counter()
            ids = []
            for p in pieces:
                ids.extend(tok.encode(p, add_special_tokens=False).ids)
            s = time.perf_counter() - t0
            if run == 0:
                first, ids0 = s, ids
            else:
                best = min(best, s)
        print(f"hf      {mode:5s} load {load_s:.3f} s | cold {mb / first:.2f} MB/s | warm {mb / best:.2f} MB/s"
              f" | ids {len(ids0)} checksum {checksum(ids0)}")


if __name__ == "__main__":
    main()
