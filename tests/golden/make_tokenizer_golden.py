#!/usr/bin/env python3
"""Writes the tokenizer golden files from Hugging Face's own libraries.

Usage: make_tokenizer_golden.py TOKENIZER_DIR FIXTURE_DIR
           [--corpus FILE] [--specials EOT,START,END] [--no-chat] [--bulk FILE]

Reads the corpus (default FIXTURE_DIR/corpus.jsonl) and writes into FIXTURE_DIR:
  golden_ids.jsonl     {"name", "ids", "ids_plain", "decoded", "decoded_skip"}:
                       tokenizers Tokenizer.encode (with the post-processor's
                       special tokens, and without: ids_plain) / decode (with
                       and without special tokens)
  decode_golden.jsonl  {"name", "ids", "skip_special", "text"}: decode of id
                       sequences that split or break UTF-8 characters; the
                       three special tokens named by --specials (default the
                       Qwen ones) are mixed in
  chat_golden.jsonl    {"name", "messages", "add_generation_prompt",
                       "enable_thinking", "text", "ids"}: transformers
                       AutoTokenizer.apply_chat_template, then encode
                       (Qwen's template; skipped with --no-chat)
  --bulk FILE          {"bytes", "n_ids", "checksum"} of encoding about 1 MB
                       of text built from the corpus (bulk_text below; the C
                       test builds the same text): whole, and line by line
Needs `tokenizers` (and `transformers` for the chats); runs offline on the
local directory.  The committed files came from:
  Qwen3:    make_tokenizer_golden.py TOK_QWEN3 tests/fixtures/tokenizer
                --bulk tests/fixtures/tokenizer/bulk.json
  Llama 3:  make_tokenizer_golden.py TOK_LLAMA3 tests/fixtures/tokenizer-llama3
                --corpus tests/fixtures/tokenizer/corpus.jsonl --no-chat
                --specials '<|end_of_text|>,<|start_header_id|>,<|eot_id|>'
                --bulk tests/fixtures/tokenizer-llama3/bulk.json
(the Qwen3 golden_ids.jsonl predates ids_plain, which equals ids there: its
post-processor adds nothing).
"""
import json
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer  # noqa: E402


def byte_level_alphabet():
    """GPT-2's byte -> character table, as the ByteLevel pre-tokenizer uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


CHATS = [
    ("single_user", [{"role": "user", "content": "What is 2 + 2?"}], True, True),
    ("single_user_no_thinking", [{"role": "user", "content": "What is 2 + 2?"}], True, False),
    ("system_user", [{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "Name three primes."}], True, True),
    ("multi_turn_history_no_thinking", [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}], True, False),
    ("multi_turn_plain_history", [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer"},
        {"role": "user", "content": "Second question"},
        {"role": "assistant", "content": "Second answer"},
        {"role": "user", "content": "Third question"}], True, True),
    ("ends_with_assistant_reasoning", [
        {"role": "user", "content": "Solve x + 1 = 3."},
        {"role": "assistant", "content": "<think>\n\nSubtract one.\n\n</think>\n\n\nx = 2"}], False, True),
    ("ends_with_assistant_plain", [
        {"role": "user", "content": "Say yes."},
        {"role": "assistant", "content": "Yes."}], False, True),
    ("assistant_after_query_mid", [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>r1</think>a1"},
        {"role": "assistant", "content": "a2 without reasoning"},
        {"role": "assistant", "content": "<think>r3</think>a3"}], False, True),
    ("system_in_middle", [
        {"role": "user", "content": "Hello"},
        {"role": "system", "content": "Switch to French."},
        {"role": "user", "content": "How are you?"}], True, False),
    ("tool_response_user", [
        {"role": "user", "content": "Check the weather."},
        {"role": "assistant", "content": "<think>Need the tool.</think>Checking."},
        {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}], True, True),
    ("unicode_and_specials", [
        {"role": "system", "content": "Réponds en 中文 😀"},
        {"role": "user", "content": "Text with <|im_end|> inside and\r\nCRLF\tand tabs"}], True, True),
    ("no_generation_prompt", [{"role": "user", "content": "Only the user turn."}], False, False),
    ("empty_contents", [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": ""}], True, False),
    ("think_without_open_tag", [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "only closing\n</think>\n\nvisible"},
        {"role": "user", "content": "b"}], True, True),
]


def decode_cases(vocab, alphabet, special_ids):
    def b(*bytes_):
        return [vocab[alphabet[x]] for x in bytes_]

    a, z = vocab["a"], vocab["z"]
    ni = "你".encode()  # e4 bd a0
    smile = "😀".encode()  # f0 9f 98 80
    eot, im_start, im_end = special_ids
    return [
        ("full_char_bytes", b(*ni), False),
        ("one_lead_byte", b(ni[0]), False),
        ("two_of_three", b(ni[0], ni[1]), False),
        ("lead_then_ascii", [a] + b(ni[0]) + [z], False),
        ("truncated_emoji_mid", b(*smile[:3]) + [a], False),
        ("truncated_emoji_end", b(*smile[:3]), False),
        ("stray_continuation", b(0x80, 0xBF) + [a], False),
        ("invalid_bytes", b(0xC0, 0xC1, 0xF5, 0xFF), False),
        ("overlong", b(0xE0, 0x80, 0x80), False),
        ("surrogate", b(0xED, 0xA0, 0x80), False),
        ("above_max", b(0xF4, 0x90, 0x80, 0x80), False),
        ("lead_before_special", b(ni[0]) + [im_end], False),
        ("lead_before_special_skipped", b(ni[0]) + [im_end] + b(ni[1], ni[2]), True),
        ("specials_kept", [im_start, a, im_end, eot], False),
        ("specials_skipped", [im_start, a, im_end, eot], True),
    ]


BULK_BYTES = 1_000_000
SEPARATORS = ["", " ", "\n", "\n\n"]


def bulk_text(corpus):
    """About 1 MB of the corpus texts in a pseudo-random order with random
    separators (a 64-bit LCG, so that C can build the same bytes):
    state = state * 6364136223846793005 + 1442695040888963407 mod 2^64;
    text (state >> 33) % n, then separator (state >> 20) & 3."""
    texts = [c["text"].encode("utf-8") for c in corpus]
    state, parts, n = 1, [], 0
    while n < BULK_BYTES:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        piece = texts[(state >> 33) % len(texts)] + SEPARATORS[(state >> 20) & 3].encode()
        parts.append(piece)
        n += len(piece)
    return b"".join(parts).decode("utf-8")


def checksum(ids):
    return sum((i + 1) * x for i, x in enumerate(ids)) % (1 << 64)


def write_bulk(tok, corpus, path):
    text = bulk_text(corpus)
    whole = tok.encode(text).ids
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    by_line = []
    for line in lines:
        by_line.extend(tok.encode(line, add_special_tokens=False).ids)
    with open(path, "w") as f:
        json.dump({"bytes": len(text.encode()), "whole": {"n_ids": len(whole), "checksum": checksum(whole)},
                   "lines": {"n_ids": len(by_line), "checksum": checksum(by_line)}}, f, indent=1)
        f.write("\n")


def main():
    args = sys.argv[1:]
    opt = {"--corpus": None, "--specials": "<|endoftext|>,<|im_start|>,<|im_end|>", "--bulk": None}
    chat = "--no-chat" not in args
    args = [a for a in args if a != "--no-chat"]
    pos = []
    while args:
        a = args.pop(0)
        if a in opt:
            opt[a] = args.pop(0)
        else:
            pos.append(a)
    tok_dir, fix_dir = pos
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    with open(opt["--corpus"] or os.path.join(fix_dir, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    with open(os.path.join(fix_dir, "golden_ids.jsonl"), "w", encoding="utf-8") as out:
        for case in corpus:
            ids = tok.encode(case["text"]).ids
            out.write(json.dumps({
                "name": case["name"], "ids": ids,
                "ids_plain": tok.encode(case["text"], add_special_tokens=False).ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids, skip_special_tokens=True),
            }, ensure_ascii=True) + "\n")
    if opt["--bulk"]:
        write_bulk(tok, corpus, opt["--bulk"])

    vocab = tok.get_vocab(with_added_tokens=True)
    specials = [vocab[name] for name in opt["--specials"].split(",")]
    with open(os.path.join(fix_dir, "decode_golden.jsonl"), "w", encoding="utf-8") as out:
        for name, ids, skip in decode_cases(vocab, byte_level_alphabet(), specials):
            out.write(json.dumps({"name": name, "ids": ids, "skip_special": skip,
                                  "text": tok.decode(ids, skip_special_tokens=skip)},
                                 ensure_ascii=True) + "\n")

    if not chat:
        print(f"golden: {len(corpus)} encode cases")
        return
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tok_dir)
    with open(os.path.join(fix_dir, "chat_golden.jsonl"), "w", encoding="utf-8") as out:
        for name, messages, gen, thinking in CHATS:
            text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen,
                                          enable_thinking=thinking)
            out.write(json.dumps({
                "name": name, "messages": messages, "add_generation_prompt": gen,
                "enable_thinking": thinking, "text": text, "ids": tok.encode(text).ids,
            }, ensure_ascii=True) + "\n")
    print(f"golden: {len(corpus)} encode cases, {len(CHATS)} chats")


if __name__ == "__main__":
    main()
