#!/usr/bin/env python3
"""Whole-model reference fixtures from llama.cpp (through llama-cpp-python).

For each model below this writes, under tests/fixtures/reference/models/:

  <name>.json        metadata (package versions, model sha256, llama.cpp settings), the
                     teacher-forced token ids (tokenized by llama.cpp), and per position:
                     the top-1 id, the top-5 ids and logits, and the logits of PROBE_IDS
                     (a fixed handful of token ids spread over the vocabulary). For
                     stories260K also the 200 greedy token ids llama.cpp generates from BOS.
  <name>.logits.f32  the full logit rows (little-endian f32, vocab_size per row) of the
                     positions listed in "full_logits_positions", in that order.

Logits at position p are the scores for the token after tokens[0..p] (llama.cpp's
logits_all=True layout), computed in ONE batch over the whole passage (n_batch = n_ubatch =
n_ctx), with a f16 KV cache (llama.cpp's default; lm's FullKVCache default too).

Usage: python3 tools/reference/make_model_fixtures.py [--out DIR] [--only NAME]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import pathlib
import platform
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

from numpy_gemma3 import NumpyGemma3
from numpy_llama import NumpyLlama

PASSAGE_TOKENS = 256
GREEDY_TOKENS = 200


def repo_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[2]


def shared_dir() -> pathlib.Path:
    return repo_root().parent / "shared"


def probe_ids(vocab: int) -> list[int]:
    # Fixed ids spread across the vocabulary (special tokens, bytes, common and rare pieces),
    # so closeness is checked on logits that are neither the winners nor chosen by the model.
    ids = {0, 1, 2, 13, 100, vocab // 7, vocab // 3, vocab // 2, (2 * vocab) // 3, vocab - 1}
    return sorted(i for i in ids if 0 <= i < vocab)


def text_passage(path: pathlib.Path, start_marker: str | None, n_chars: int) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(start_marker) if start_marker else 0
    return text[start:start + n_chars]


MODELS = {
    "stories260K": {
        "model": lambda: shared_dir() / "models/stories260K/stories260K.gguf",
        "text": lambda: text_passage(shared_dir() / "data/tinystories_valid_head794k.txt",
                                     "Once upon a time, in a big forest", 4000),
        "text_source": "../shared/data/tinystories_valid_head794k.txt from 'Once upon a time, in a big forest'",
        "add_bos": True,      # SPM vocab: llama.cpp adds BOS and the dummy-prefix space
        "n_ctx": 512,
        "all_positions_full": False,
        "full_positions": list(range(0, 256, 4)),  # 64 x 512 f32 = 128 KB
        "exact_full_positions": list(range(0, 256, 4)),
        "greedy": True,
    },
    "smollm2": {
        "model": lambda: repo_root() / "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "text": lambda: text_passage(shared_dir() / "data/tinyshakespeare.txt", None, 4000),
        "text_source": "../shared/data/tinyshakespeare.txt from the start",
        "add_bos": False,     # tokenizer.ggml.add_bos_token = false in the file
        "n_ctx": 512,
        "all_positions_full": False,
        "full_positions": [0, 255],  # 2 x 49152 f32 = 384 KB
        "exact_full_positions": [0, 255],
        "greedy": False,
        # One ChatML user turn and the generation prompt (special tokens parsed; without the
        # default system turn the file's template would add).
        "greedy_chat_prompt": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    },
    # Gemma 3 270M (gemma3: head_dim 256, 4 query heads on 1 KV head, sliding window 512 on
    # five layers of six): a passage longer than the window, so the local layers' mask bites.
    "gemma3_270m": {
        "model": lambda: repo_root() / "models/gemma-3-270m-q4_k_m.gguf",
        "text": lambda: text_passage(shared_dir() / "data/tinyshakespeare.txt", None, 6000),
        "text_source": "../shared/data/tinyshakespeare.txt from the start",
        "add_bos": True,      # tokenizer.ggml.add_bos_token = true in the file
        "n_ctx": 1024,
        "n_tokens": 640,
        "all_positions_full": False,
        "full_positions": [600],  # 1 x 262144 f32 = 1 MB
        "exact_full_positions": [600],
        "greedy": False,
    },
    # Random weights, every tensor type lm supports (tools/reference/make_mixed_model.py).
    "mixed_types": {
        "model": lambda: repo_root() / "tests/fixtures/reference/models/mixed_types.gguf",
        "text": lambda: text_passage(shared_dir() / "data/tinystories_valid_head794k.txt",
                                     "Once upon a time, in a big forest", 4000),
        "text_source": "../shared/data/tinystories_valid_head794k.txt from 'Once upon a time, in a big forest'",
        "add_bos": True,
        "n_ctx": 512,
        "n_tokens": 128,
        "all_positions_full": False,
        "full_positions": list(range(0, 128, 4)),
        "exact_full_positions": list(range(0, 128, 4)),
        "greedy": False,
    },
}


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(model_path: pathlib.Path, n_ctx: int) -> Llama:
    return Llama(model_path=str(model_path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                 n_threads=2, n_threads_batch=2, logits_all=True, seed=0, verbose=False)


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    """Max / mean absolute logit difference and top-1 agreement of two [n, vocab] arrays."""
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "top1_agreement": float(np.mean(a.argmax(axis=1) == b.argmax(axis=1)))}


def make(name: str, spec: dict, out_dir: pathlib.Path) -> None:
    model_path = spec["model"]()
    if not model_path.exists():
        sys.exit(f"{name}: model file {model_path} is missing (scripts/fetch_models.sh fetches it)")
    llm = load(model_path, spec["n_ctx"])
    vocab = llm.n_vocab()

    n_tokens = spec.get("n_tokens", PASSAGE_TOKENS)
    text = spec["text"]()
    tokens = llm.tokenize(text.encode("utf-8"), add_bos=spec["add_bos"], special=False)
    if len(tokens) < n_tokens:
        sys.exit(f"{name}: passage has only {len(tokens)} tokens")
    tokens = tokens[:n_tokens]
    llm.reset()
    llm.eval(tokens)
    scores = np.array(llm.scores[:n_tokens], dtype=np.float32)  # [n, vocab]
    assert scores.shape == (n_tokens, vocab)
    assert np.all(np.isfinite(scores))

    order = np.argsort(-scores, axis=1, kind="stable")
    top5 = order[:, :5]
    probes = probe_ids(vocab)
    full_positions = list(range(n_tokens)) if spec["all_positions_full"] else spec["full_positions"]

    fixture = {
        "generator": "tools/reference/make_model_fixtures.py",
        "runtime": "llama.cpp via llama-cpp-python",
        "versions": {p: importlib.metadata.version(p) for p in ("llama_cpp_python", "gguf", "numpy")},
        "llama_system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "python": platform.python_version(),
        "model_file": ("../shared/" + str(model_path.relative_to(shared_dir())) if name == "stories260K"
                       else str(model_path.relative_to(repo_root()))),
        "model_generator": "tools/reference/make_mixed_model.py" if name == "mixed_types" else None,
        "model_sha256": sha256(model_path),
        "settings": {"n_ctx": spec["n_ctx"], "n_batch": spec["n_ctx"], "n_ubatch": spec["n_ctx"],
                     "n_threads": 2, "kv_cache_type": "f16", "logits_all": True,
                     "evaluation": "one llama_decode batch over the whole passage"},
        "text_source": spec["text_source"],
        "text": llm.detokenize(tokens).decode("utf-8", errors="replace"),
        "vocab_size": vocab,
        "tokens": [int(t) for t in tokens],
        "top1": [int(i) for i in top5[:, 0]],
        "top5_ids": top5.astype(int).tolist(),
        "top5_logits": [[float(scores[p, i]) for i in top5[p]] for p in range(n_tokens)],
        "probe_ids": probes,
        "probe_logits": [[float(scores[p, i]) for i in probes] for p in range(n_tokens)],
        "full_logits_file": f"{name}.logits.f32",
        "full_logits_positions": full_positions,
        # llama.cpp's tokenization of a text (the passage's first lines, newlines and
        # punctuation included), for comparing tokenizers on the exact same input.
        "tokenizer_check": {"text": text[:text.index("\n", 900) + 1], "add_bos": spec["add_bos"]},
    }
    fixture["tokenizer_check"]["ids"] = [int(t) for t in llm.tokenize(
        fixture["tokenizer_check"]["text"].encode("utf-8"), add_bos=spec["add_bos"], special=False)]
    full = np.ascontiguousarray(scores[full_positions], dtype="<f4")
    (out_dir / fixture["full_logits_file"]).write_bytes(full.tobytes())
    fixture["full_logits_sha256"] = sha256(out_dir / fixture["full_logits_file"])

    # llama.cpp against itself: the same passage, one token per llama_decode (the decode path:
    # other kernels, other accumulation order). The spread between its own two paths is the
    # floor for how closely any second runtime can be asked to match it.
    llm.reset()
    for t in tokens:
        llm.eval([t])
    sequential = np.array(llm.scores[:n_tokens], dtype=np.float32)
    fixture["llama_cpp_sequential_vs_batch"] = compare(sequential, scores)

    # The exact function of the model (float64, weights dequantized by gguf-py, K/V rounded to
    # f16 as lm's and llama.cpp's default caches store them): independent of both runtimes.
    forward = NumpyGemma3 if name.startswith("gemma3") else NumpyLlama
    exact = forward(str(model_path), kv_f16=True).forward(tokens)
    fixture["llama_cpp_batch_vs_exact"] = compare(scores, exact)
    ex_order = np.argsort(-exact, axis=1, kind="stable")[:, :5]
    fixture["exact_f64"] = {
        "method": f"tools/reference/{'numpy_gemma3' if name.startswith('gemma3') else 'numpy_llama'}.py, float64, K/V rounded to f16",
        "top1": [int(i) for i in ex_order[:, 0]],
        "top5_ids": ex_order.astype(int).tolist(),
        "top5_logits": [[float(exact[p, i]) for i in ex_order[p]] for p in range(n_tokens)],
        "probe_logits": [[float(exact[p, i]) for i in probes] for p in range(n_tokens)],
        "full_logits_file": f"{name}.exact.f32",
        "full_logits_positions": spec["exact_full_positions"],
    }
    (out_dir / f"{name}.exact.f32").write_bytes(
        np.ascontiguousarray(exact[spec["exact_full_positions"]], dtype="<f4").tobytes())
    fixture["exact_f64"]["full_logits_sha256"] = sha256(out_dir / f"{name}.exact.f32")

    if spec["greedy"]:
        # Greedy decoding from BOS, one token per llama_decode, as a generation loop does.
        llm.reset()
        seq = [llm.token_bos()]
        generated = []
        for _ in range(GREEDY_TOKENS):
            llm.eval(seq[-1:] if generated else seq)
            nxt = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)))
            generated.append(nxt)
            seq.append(nxt)
        fixture["greedy_from_bos"] = {
            "tokens": generated,
            "text": llm.detokenize(generated).decode("utf-8", errors="replace"),
            "note": "argmax of llama.cpp's logits, one token per decode call, starting from [BOS]",
        }

    if "greedy_chat_prompt" in spec:
        # Greedy decoding of a chat prompt until EOS (at most 32 tokens), with llama.cpp's
        # top-1/top-2 gap at every step: a second runtime can only be held to the steps the
        # gap decides.
        prompt = spec["greedy_chat_prompt"]
        prompt_ids = llm.tokenize(prompt.encode("utf-8"), add_bos=spec["add_bos"], special=True)
        llm.reset()
        llm.eval(prompt_ids)
        generated, gaps = [], []
        for _ in range(32):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top2 = np.sort(row)[-2:]
            nxt = int(np.argmax(row))
            generated.append(nxt)
            gaps.append(float(top2[1] - top2[0]))
            if nxt == llm.token_eos():
                break
            llm.eval([nxt])
        fixture["greedy_chat"] = {"prompt": prompt, "prompt_ids": [int(t) for t in prompt_ids],
                                  "tokens": generated, "top1_gaps": gaps, "eos_id": int(llm.token_eos()),
                                  "text": llm.detokenize(generated).decode("utf-8", errors="replace")}

    with open(out_dir / f"{name}.json", "w") as f:
        json.dump(fixture, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: llama.cpp sequential vs batch {fixture['llama_cpp_sequential_vs_batch']}, "
          f"batch vs exact {fixture['llama_cpp_batch_vs_exact']}", file=sys.stderr)
    margin = np.sort(scores, axis=1)[:, -1] - np.sort(scores, axis=1)[:, -2]
    print(f"{name}: {n_tokens} tokens, vocab {vocab}, smallest top1-top2 margin {margin.min():.4g} "
          f"(positions with margin < 0.05: {int((margin < 0.05).sum())})", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(repo_root() / "tests/fixtures/reference/models"))
    ap.add_argument("--only", choices=sorted(MODELS))
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, spec in MODELS.items():
        if args.only and name != args.only:
            continue
        make(name, spec, out_dir)


if __name__ == "__main__":
    main()
