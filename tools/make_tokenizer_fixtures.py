#!/usr/bin/env python3
"""Reference fixtures for the tokenizer tests (tests/lm/tokenizer/tokenizer_*_test.cpp), computed by
independent implementations:

* token ids from llama.cpp's tokenizers through llama-cpp-python
  (`Llama(path, vocab_only=True).tokenize(...)`): SentencePiece on stories260K.gguf, byte-level
  BPE on SmolLM2-135M-Instruct.Q4_1.gguf — with the file's own pre-tokenizer ("smollm") and,
  through vocabulary-only copies of the file whose tokenizer.ggml.pre is rewritten, with the
  other pre-tokenizers we implement (gpt2, default, llama-bpe, qwen2).

The chat-template fixtures are made by tools/reference/make_chat_template_fixtures.py.

Usage: python3 tools/make_tokenizer_fixtures.py [--out tests/fixtures/tokenizer]
Needs: pip install llama-cpp-python==0.3.36 gguf ; scripts/fetch_models.sh for SmolLM2.
"""
import argparse
import json
import os
import pathlib
import re
import struct
import tempfile

import gguf
from llama_cpp import Llama

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
STORIES_GGUF = SHARED / "models/stories260K/stories260K.gguf"
STORIES_TOK = SHARED / "models/stories260K/tok512.bin"
SMOLLM2_GGUF = ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
SHAKESPEARE = SHARED / "data/tinyshakespeare.txt"

STORIES_REFERENCE = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
    "She said, \"I want to play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\n"
    "Lily didn't want to help her mom, so she")

# Plain text for the SentencePiece model (no special tokens parsed, as llama2.c encodes).
STORIES_TEXTS = [
    "",
    "Once upon a time",
    "Hello world",
    "Lily's mom said, \"Lily, let's go to the park.\"",
    "  two leading spaces and trailing  ",
    "tabs\tand\nnew\n\nlines",
    "naïve café — 日本語 😀",
    "1234567890 + 3.14 = ?",
    STORIES_REFERENCE,
]
# Text with special tokens, parsed as specials (llama.cpp parse_special).
STORIES_SPECIAL_TEXTS = [
    "<s>Once upon a time</s>",
    "The end.</s><s> Once",
]

SMOLLM2_TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "",
    " ",
    "   ",
    "a  12345 b",
    "Numbers: 3.14159, 1,000,000 and 2024-12-02; ½ ² ٣٤ Ⅻ",
    "Punctuation!!! (nested [brackets] {braces}) <angle> a+b=c ^~| $5 @home #tag %50 & *",
    "Whitespace runs:  two   three    four\t\ttabs\n\n\nnewlines  \r\n crlf \u00a0nbsp\u3000ideo",
    "trailing spaces   ",
    "\n\nleading newlines",
    "I'm sure they'll say we've done it; SHE'S RIGHT, isn't it? 'quoted' rock'n'roll",
    "naïve café, Grüße, Ελληνικά, русский текст, 日本語のテキスト, 한국어, עברית, العربية",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and ✨ sparkles",
    "<|im_start|>user\nHello! How are you?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|><|endoftext|>x<|im_start",
    "code:\n\ndef f(x):\n    return x**2  # square\n\tif (a && b) { c->d(); }",
    "URL https://example.com/path?q=1&r=two#frag and e-mail someone@example.org",
    "MixedCASE camelCaseWords snake_case_words kebab-case-words ALLCAPS",
    # Edge code points: C0 separators, NEL, zero-width space/joiner, line separator, BOM,
    # Mongolian vowel separator, combining marks, unassigned (U+0378), private use.
    "edge\x1c \x1fchars\x85 next\u200b zw\u2028 ls\ufeff bom\u180e mvs e\u0301\u0302 \u0378 \ue000x",
]
SHAKESPEARE_SLICE = (20000, 24000)  # characters of tinyshakespeare.txt

# Byte strings that are not valid UTF-8 (stray continuation bytes, bytes never valid, a
# sequence cut short), stored as hex: llama.cpp turns each bad byte into U+FFFD for byte-level
# BPE, and falls back to byte tokens for SentencePiece.
INVALID_UTF8 = [b"ab\xff\xfecd\xe6\x97", b"\xe6\x97A then more", b"ok \xc3( \x80\x80 end\xf0\x9f"]

PRE_VARIANTS = ["gpt-2", "default", "llama-bpe", "qwen2"]

def read_llama2c_vocab(path: pathlib.Path):
    """tok512.bin: int32 max_token_length, then per token f32 score, int32 length, bytes."""
    data = path.read_bytes()
    pos = 4
    pieces, scores = [], []
    while pos < len(data):
        score, length = struct.unpack_from("<fi", data, pos)
        pos += 8
        pieces.append(data[pos:pos + length])
        scores.append(score)
        pos += length
    return pieces, scores


def llama2c_encode(text: bytes, pieces, scores, bos: bool) -> list:
    """llama2.c run.c's encode(), transcribed to Python as a second, independent reference:
    BOS (1), the dummy-prefix " " piece, one piece per UTF-8 character (byte + 3 when the
    character is no piece), then repeatedly merge the adjacent pair whose concatenation is the
    best-scoring piece (first such pair on ties) until no pair merges."""
    index = {p: i for i, p in reversed(list(enumerate(pieces)))}
    tokens = [1] if bos else []
    if text:
        tokens.append(index[b" "])
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and j - i < 4 and (text[j] & 0xC0) == 0x80:
            j += 1
        char = text[i:j]
        if char in index:
            tokens.append(index[char])
        else:
            tokens.extend(b + 3 for b in char)
        i = j
    start = 1 if bos else 0
    while True:
        best, best_at, best_id = -1e10, -1, -1
        for k in range(start, len(tokens) - 1):
            merged = pieces[tokens[k]] + pieces[tokens[k + 1]]
            if merged in index and scores[index[merged]] > best:
                best, best_at, best_id = scores[index[merged]], k, index[merged]
        if best_at < 0:
            return tokens
        tokens[best_at:best_at + 2] = [best_id]


def dump(data) -> str:
    """Indented JSON with each list of ids kept on one line."""
    text = json.dumps(data, ensure_ascii=False, indent=1)
    return re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def load(path: pathlib.Path) -> Llama:
    return Llama(model_path=str(path), vocab_only=True, verbose=False)


def vocab_only_copy(src: pathlib.Path, dst: pathlib.Path, pre: str) -> None:
    """Writes the metadata of `src` (no tensors) with tokenizer.ggml.pre replaced."""
    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), arch=reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = pre if key == "tokenizer.ggml.pre" else field.contents()
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def ids(model: Llama, text, add_bos: bool, special: bool) -> list:
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    return list(model.tokenize(data, add_bos=add_bos, special=special))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "tests/fixtures/tokenizer"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    stories = load(STORIES_GGUF)
    cases = [{"text": t, "add_bos": True, "special": False, "ids": ids(stories, t, True, False)}
             for t in STORIES_TEXTS]
    cases += [{"text": t, "add_bos": False, "special": False, "ids": ids(stories, t, False, False)}
              for t in STORIES_TEXTS[1:4]]
    cases += [{"text": t, "add_bos": True, "special": True, "ids": ids(stories, t, True, True)}
              for t in STORIES_SPECIAL_TEXTS]
    # llama.cpp's SPM and llama2.c's encode must agree on plain text; stop here if they do not.
    pieces, scores = read_llama2c_vocab(STORIES_TOK)
    for case in cases:
        if not case["special"]:
            reference = llama2c_encode(case["text"].encode("utf-8"), pieces, scores, case["add_bos"])
            if reference != case["ids"]:
                raise SystemExit(f"llama.cpp and llama2.c encode disagree on {case['text']!r}: "
                                 f"{case['ids']} vs {reference}")
            case["agrees_with_llama2c_encode"] = True
    invalid = [{"hex": b.hex(), "ids": ids(stories, b, True, False)} for b in INVALID_UTF8]
    (out / "stories260K_encode.json").write_text(dump({
        "source": "llama-cpp-python Llama(stories260K.gguf, vocab_only=True).tokenize(text, add_bos, special)",
        "cases": cases, "invalid_utf8": invalid}))

    shakespeare = SHAKESPEARE.read_text(encoding="utf-8")[SHAKESPEARE_SLICE[0]:SHAKESPEARE_SLICE[1]]
    texts = SMOLLM2_TEXTS + [shakespeare]
    variants = {"smollm": load(SMOLLM2_GGUF)}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRE_VARIANTS:
            path = pathlib.Path(tmp) / f"smollm2-vocab-{pre}.gguf"
            vocab_only_copy(SMOLLM2_GGUF, path, pre)
            variants[pre] = load(path)
        result = {"source": "llama-cpp-python Llama(SmolLM2-135M-Instruct.Q4_1.gguf with tokenizer.ggml.pre = "
                            "<pre>, vocab_only=True).tokenize(text, add_bos=False, special=True)",
                  "shakespeare_slice": list(SHAKESPEARE_SLICE),
                  "pre_tokenizers": {}}
        for pre, model in variants.items():
            result["pre_tokenizers"][pre] = [{"text": t, "ids": ids(model, t, False, True)} for t in texts]
        result["invalid_utf8"] = [{"hex": b.hex(), "ids": ids(variants["smollm"], b, False, True)}
                                  for b in INVALID_UTF8]
    (out / "smollm2_encode.json").write_text(dump(result))


if __name__ == "__main__":
    os.environ.setdefault("LLAMA_LOG_LEVEL", "error")
    main()
