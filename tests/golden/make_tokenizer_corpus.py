#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/corpus.jsonl: the texts whose Hugging Face
token ids the tokenizer tests compare against (ids come from
make_tokenizer_golden.py).  One JSON object a line: {"name", "text"}.
Hand-picked cases cover the pre-tokenizer regex branch by branch, NFC,
special-token strings and whitespace; seeded random mixes cover the rest."""
import json
import random
import sys

CASES = [
    # --- plain text and contractions (the (?i:'s|'t|...) branch) ---
    ("english", "The quick brown fox jumps over the lazy dog."),
    ("contractions", "I'm sure you'll see they're fine; we've done it, she'd say, it's John's."),
    ("contractions_upper", "I'M SURE YOU'LL SEE THEY'RE FINE; WE'VE DONE IT, SHE'D SAY, IT'S JOHN'S."),
    ("contractions_mixed", "It'S you'Ll They'rE we'VE I'D don'T 'S 'LL 'Re 'rE"),
    ("apostrophe_alone", "' '' ''' 'x 'sx 'sss rock'n'roll"),
    ("quotes", "\"Hello,\" she said. 'Goodbye,' he replied. `code` «guillemets» „German“"),
    ("long_s", "'ſ it'ſ"),
    ("empty", ""),
    ("one_space", " "),
    ("one_char", "a"),
    ("single_newline", "\n"),
    # --- digits (\p{N} one at a time) ---
    ("digits", "0123456789 3.14159 1,000,000 2024-01-15 0x1F 1e-9 -42"),
    ("digits_unicode", "½ ¾ ² ³ ٠١٢٣٤ १२३ １２３ Ⅻ ⑤"),
    ("digits_words", "abc123def 4th 21st v2.0.1 R2D2 COVID-19"),
    # --- whitespace runs (\s+(?!\S), \s*[\r\n]+) ---
    ("spaces", "a  b   c    d     e"),
    ("indent", "    indented line\n        more indented"),
    ("trailing_spaces", "trailing   "),
    ("leading_spaces", "   leading"),
    ("tabs", "\tone\t\ttwo\t\t\tthree\t"),
    ("crlf", "line1\r\nline2\r\n\r\nline4\r\n"),
    ("cr_only", "a\rb\r\rc"),
    ("newlines", "\n\n\nthree newlines before\n\n"),
    ("space_newline_mix", " \n \n  \n\t\n x"),
    ("nbsp", "a\u00a0b \u00a0 c\u00a0\u00a0d"),
    ("unicode_spaces", "em\u2003space ideographic\u3000space thin\u2009space nel\u0085x"),
    ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom"),
    ("vt_ff", "vertical\x0btab\x0cform feed"),
    ("only_whitespace", " \t \r\n \t  "),
    ("nul", "a\u0000b\u0001c\u007f"),
    # --- punctuation (?[^\s\p{L}\p{N}]+[\r\n]*) ---
    ("punct", "Hello!!! What??? Yes... No!!! (parens) [brackets] {braces} <angles>"),
    ("punct_newline", "end.\nnext;\r\nlast!\n\n"),
    ("symbols", "@#$%^&*()_+-=[]{}|;':\",./<>?`~ ©®™ °±×÷ €£¥₹"),
    ("separators", "================\n----------------\n****************\n________________"),
    ("url", "Visit https://example.com/path?query=1&b=two#frag or mail me@example.org"),
    ("markdown", "# Title\n\n- item one\n- item **two**\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"),
    # --- code ---
    ("python", "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"),
    ("c_code", "#include <stdio.h>\n\nint main(void)\n{\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n"),
    ("json", "{\"name\": \"nanollm\", \"ids\": [1, 2, 3], \"ok\": true, \"nested\": {\"x\": null}}"),
    ("html", "<div class=\"x\"><p>Hello &amp; welcome</p><br/></div>"),
    ("shell", "for f in *.txt; do echo \"$f\" | wc -c; done 2>&1 | sort -n > out.log"),
    ("regex", "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\\w+\\.\\w{2,}$"),
    ("rust", "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }"),
    # --- scripts ---
    ("chinese", "你好，世界！今天天气很好，我们去公园散步吧。机器学习是人工智能的一个分支。"),
    ("japanese", "こんにちは世界。カタカナとひらがなと漢字を混ぜた文章です。東京は日本の首都です。"),
    ("korean", "안녕하세요, 세계! 한국어 텍스트를 토큰화합니다."),
    ("arabic", "مرحبا بالعالم. هذه جملة باللغة العربية مع أرقام ١٢٣."),
    ("hebrew", "שלום עולם! זהו משפט בעברית."),
    ("russian", "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю."),
    ("greek", "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία."),
    ("hindi", "नमस्ते दुनिया! हिन्दी में एक वाक्य है।"),
    ("thai", "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ"),
    ("vietnamese", "Xin chào thế giới! Tiếng Việt có nhiều dấu thanh."),
    ("turkish", "İstanbul ılık ıĞdır ŞEHİR şehir"),
    ("german", "Straße, Größe, Übermäßig, ÄÖÜ äöü ß ẞ"),
    ("french_spanish", "Ça va? Très bien! ¿Qué tal? ¡Olé! Ñandú, niño, crème brûlée."),
    ("mixed_scripts", "English中文日本語한국어Русскийالعربية123abc"),
    ("devanagari_marks", "क्षत्रिय द्विज श्री"),
    # --- emoji ---
    ("emoji", "I love it 😀😃😄 🎉🎉 👍"),
    ("emoji_zwj", "family 👨‍👩‍👧‍👦 couple 👩‍❤️‍👨 technologist 🧑🏽‍💻"),
    ("emoji_flags", "🇺🇸🇯🇵🇩🇪 🏳️‍🌈 🏴‍☠️"),
    ("emoji_skin", "👍🏻👍🏼👍🏽👍🏾👍🏿 wave👋🏽"),
    ("emoji_keycap", "1️⃣ 2️⃣ #️⃣ ❤️ ☺️ ✔︎"),
    ("emoji_words", "ok👌fine🙂done✅"),
    # --- NFC ---
    ("nfc_e_acute", "cafe\u0301 re\u0301sume\u0301 nai\u0308ve"),
    ("nfc_angstrom", "\u212b \u0041\u030a \u00c5"),
    ("nfc_hangul_jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab"),
    ("nfc_multiple_marks", "a\u0301\u0302 A\u0308\u0304 o\u0323\u0302"),
    ("nfc_vietnamese_decomposed", "Vie\u0323\u0302t Nam ti\u00ea\u0301ng"),
    ("nfc_ohm_kelvin", "\u2126 \u212a \u2000"),
    ("nfc_ligature_kept", "\ufb01le \ufb02ow \u2460 \u00bd"),
    ("combining_only", "\u0301\u0302 start with marks"),
    # --- special and added tokens in the text ---
    ("special_chat", "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"),
    ("special_eot", "end of doc<|endoftext|>next doc"),
    ("special_adjacent", "<|im_start|><|im_end|><|endoftext|>"),
    ("special_partial", "<|im_start <|im_end| |im_end|> <|im_start|>|> <<|endoftext|>>"),
    ("special_spaced", "< |im_start| > <|IM_START|> <|im_start|>  user"),
    ("think_tokens", "<think>\nreasoning here\n</think>\n\nanswer"),
    ("tool_tokens", "<tool_call>\n{\"name\": \"f\"}\n</tool_call><tool_response>ok</tool_response>"),
    ("fim_tokens", "<|fim_prefix|>def f(x):<|fim_suffix|>    return x<|fim_middle|>"),
    ("vision_tokens", "<|vision_start|><|image_pad|><|vision_end|> <|box_start|>(1,2)<|box_end|>"),
    ("special_in_word", "abc<|endoftext|>def 123<|im_end|>456"),
    # --- long and repetitive ---
    ("long_word", "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("repeated_a", "a" * 300),
    ("repeated_space", "x" + " " * 200 + "y"),
    ("repeated_newline", "x" + "\n" * 100 + "y"),
    ("repeated_emoji", "😀" * 50),
    ("repeated_cjk", "的" * 80),
    ("hex_blob", "3f2a9b7c1d0e5f4a8b6c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"),
    ("base64", "SGVsbG8gV29ybGQhIFRoaXMgaXMgYmFzZTY0IGVuY29kZWQgdGV4dC4=="),
    ("paragraph", "Large language models are trained on vast amounts of text. " * 12),
]

# Characters for the random mixes: one pool per pre-tokenizer class plus
# characters that stress NFC and byte-level merging.
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " \t\n\r\u00a0\u3000",
    ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "你好世界中文字符",
    "éüñßøåçÆŒ",
    "\u0301\u0308\u0323",
    "😀👍🏽👨‍👩‍👧🇯🇵",
    "Привет",
    "'s'S'll'LL're'Re",
    "<|im_start|><|im_end|><|endoftext|>",
]


def random_mix(rng, n_pieces):
    out = []
    for _ in range(n_pieces):
        pool = rng.choice(POOLS)
        if pool.startswith("<|") or pool.startswith("'s"):
            parts = pool.replace("><", ">\x00<").replace("'", "\x00'").split("\x00")
            out.append(rng.choice([p for p in parts if p]))
        else:
            out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
    return "".join(out)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizer/corpus.jsonl"
    rng = random.Random(20240611)
    cases = list(CASES)
    for i in range(60):
        cases.append((f"random_{i:02d}", random_mix(rng, rng.randint(3, 25))))
    with open(path, "w", encoding="utf-8") as f:
        for name, text in cases:
            f.write(json.dumps({"name": name, "text": text}, ensure_ascii=True) + "\n")
    print(f"{len(cases)} cases written to {path}")


if __name__ == "__main__":
    main()
