#!/usr/bin/env python3
"""Writes a deterministic mixed-language text of about SIZE bytes (default
1.5 MB) for the tokenizer speed comparison: English-like prose from random
syllables (so most words are new to a word cache), Chinese, Russian, code,
numbers, markdown and whitespace runs.  Usage: make_tokenizer_bench_text.py OUT [SIZE]"""
import random
import sys

SYL = ["ka", "lo", "mi", "ter", "ran", "sol", "vi", "qu", "ex", "pre", "tion", "ing", "al", "ou",
       "st", "ch", "th", "ne", "ble", "ment", "ous", "ly", "er", "in", "co", "de", "fi", "gr"]
RU = "абвгдежзийклмнопрстуфхцчшщыэюя"
CODE = ["def {w}(x, y):\n    return x * {n} + y\n", "for (int i = 0; i < {n}; i++) {{ {w}[i] = i; }}\n",
        "const {w} = await fetch(`/api/{w}?id={n}`);\n", "\tif ({w} != NULL && {w}->len > {n}) return -1;\n"]


def word(rng):
    w = "".join(rng.choice(SYL) for _ in range(rng.randint(1, 4)))
    return w.capitalize() if rng.random() < 0.15 else w


def paragraph(rng):
    kind = rng.random()
    if kind < 0.45:
        words = [word(rng) for _ in range(rng.randint(20, 80))]
        s = " ".join(words)
        s = s.replace(" ", ", ", 2).replace(" ", "'s ", 1)
        return s + ". " + str(rng.randint(0, 10 ** rng.randint(1, 7))) + "\n\n"
    if kind < 0.6:
        return "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(30, 150))) + "。\n"
    if kind < 0.7:
        return " ".join("".join(rng.choice(RU) for _ in range(rng.randint(2, 9)))
                        for _ in range(rng.randint(10, 40))) + ".\n"
    if kind < 0.9:
        return "".join(rng.choice(CODE).format(w=word(rng), n=rng.randint(0, 9999))
                       for _ in range(rng.randint(2, 8))) + "\n"
    return "| {} | {} |\n|---|---|\n| {:.3f} | {} |\n\n    - {}\r\n".format(
        word(rng), word(rng), rng.random() * 100, rng.randint(0, 99), word(rng))


def main():
    out = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1_500_000
    rng = random.Random(7)
    parts, n = [], 0
    while n < size:
        p = paragraph(rng)
        parts.append(p)
        n += len(p.encode())
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))


if __name__ == "__main__":
    main()
