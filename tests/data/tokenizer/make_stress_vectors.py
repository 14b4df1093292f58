#!/usr/bin/env python3
"""Writes stress_vectors.json: random strings built from pieces that reach the tokenizer's corners
(whitespace kinds Oniguruma and PCRE2 disagree on, code points newer than PCRE2's Unicode tables,
added tokens glued to text, CR/LF runs, combining marks, emoji, NUL and control characters), each
with HF's encode(text, add_special_tokens=False).ids; and random id runs with both decodes.
    VENV/bin/python make_stress_vectors.py      (used: tokenizers 0.23.3; seed fixed)
"""
import json, random
import tokenizers
from tokenizers import Tokenizer

t = Tokenizer.from_file("tokenizer.json")
rng = random.Random(7)
pieces = [" ", "  ", "\n", "\r\n", "\r", "\t", "a", "Z", "é", "e\u0301", "1", "12345", "你好", "こんにちは", "カタカナ", "한국", "!", "?!",
          "'s", "'ll", "\u00a0", "\u3000", "\u2028", "\u180e", "\u0085", "\u200b", "😀", "👍🏽", "🇯🇵", "<｜User｜>", "<｜System｜>",
          "<think>", "＜", "\x00", "\x1f", "\U00010D40", "\u1C89", "\u2427", "ـ", "ab-cd", ".\n\n", "  \n ", "$%", "\\", "\"", "ᅟ",
          "\ufeff", "ⓐ", "𝔘", "٣", "Hello", " world", "\u0897", "\U00011F50", "\U0001CC00"]
encode = []
for _ in range(400):
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
    encode.append({"text": text, "ids": t.encode(text, add_special_tokens=False).ids})
n = t.get_vocab_size(with_added_tokens=True)
decode = []
for _ in range(200):
    ids = [rng.randrange(n) if rng.random() < 0.8 else rng.randrange(127000, n) for _ in range(rng.randint(1, 16))]
    decode.append({"ids": ids, "decoded": t.decode(ids, skip_special_tokens=False),
                   "decoded_skip_special": t.decode(ids, skip_special_tokens=True)})
with open("stress_vectors.json", "w") as f:
    json.dump({"tokenizers": tokenizers.__version__, "encode": encode, "decode": decode}, f, ensure_ascii=True, indent=0)
