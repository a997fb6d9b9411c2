#!/usr/bin/env python3
"""Loads each family fixture GGUF in llama.cpp (llama-cpp-python) and compares its logits with
transformers' (the fixture's <family>.logits.f32): a check that make_<family>.py writes the
tensor names and metadata llama.cpp reads. Nothing is written; the numbers go to stdout (and,
as measured, into tools/reference/hf/README.md).

Expected: llama, gemma2, gemma3, lfm2 agree (qwen3moe and mixtral within 0.08: llama.cpp rounds activations to 8 bits for their quantized experts) to llama.cpp's own rounding (f16 KV cache, its matmul
paths); mistral and phi3 agree on the first `window` positions only, since llama.cpp ignores
Mistral's window (`llama` architecture) and disables Phi-3's, while transformers (and lm)
apply them. llama.cpp's vocabulary loader refuses a `phi3` file without Phi's "<|endoftext|>"
piece, which the stories260K vocabulary lacks: phi3 is checked on a temporary copy whose one
unused piece is renamed so (gguf-py's gguf_new_metadata copy; weights untouched).

Usage: python tools/reference/hf/check_llama_cpp.py [family ...]   (needs llama-cpp-python 0.3.36)
"""
from __future__ import annotations

import json
import pathlib
import sys

import tempfile

import gguf
import numpy as np
import llama_cpp
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

HF = pathlib.Path(__file__).resolve().parents[3] / "tests/fixtures/reference/hf"


def llama_cpp_logits(path: pathlib.Path, tokens: list[int]) -> np.ndarray:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2,
                          logits_all=True, verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[:len(tokens)], dtype=np.float32)
    llm.close()
    return out


def with_phi_special_token(src: pathlib.Path, dst: pathlib.Path, unused: set[int]) -> None:
    reader = gguf.GGUFReader(str(src))
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = list(reader.fields["tokenizer.ggml.token_type"].contents())
    victim = max(i for i in range(len(tokens)) if i not in unused)
    tokens[victim], types[victim] = "<|endoftext|>", int(gguf.TokenType.CONTROL)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, {
        "tokenizer.ggml.tokens": MetadataDetails(gguf.GGUFValueType.ARRAY, tokens, sub_type=gguf.GGUFValueType.STRING),
        "tokenizer.ggml.token_type": MetadataDetails(gguf.GGUFValueType.ARRAY, types, sub_type=gguf.GGUFValueType.INT32),
    }, [])


def main() -> None:
    families = sys.argv[1:] or ["llama", "mistral", "phi3", "gemma2", "gemma3", "lfm2", "qwen3moe", "mixtral"]
    for family in families:
        meta = json.loads((HF / f"{family}.json").read_text())
        tokens = meta["tokens"]
        ref = np.fromfile(HF / meta["logits_file"], dtype="<f4").reshape(len(tokens), meta["vocab_size"])
        if family == "phi3":
            with tempfile.TemporaryDirectory() as tmp:
                copy = pathlib.Path(tmp) / "phi3.gguf"
                with_phi_special_token(HF / meta["gguf_file"], copy, set(tokens) | set(meta["greedy"]))
                got = llama_cpp_logits(copy, tokens)
        else:
            got = llama_cpp_logits(HF / meta["gguf_file"], tokens)
        d = np.abs(got.astype(np.float64) - ref)
        window = meta.get("config", {}).get("sliding_window")
        top1 = int((got.argmax(-1) == ref.argmax(-1)).sum())
        line = (f"{family}: llama.cpp vs transformers max |d| {d.max():.4f}, mean {d.mean():.5f}, "
                f"top-1 {top1}/{len(tokens)}")
        if window:
            w = int(window)
            line += (f"; first {w} positions max |d| {d[:w].max():.4f}, "
                     f"top-1 {int((got[:w].argmax(-1) == ref[:w].argmax(-1)).sum())}/{w}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
