#!/usr/bin/env python3
"""A tiny random-weight `llama` GGUF whose matmul weights use the formats added after the first
set (Q5_0, Q5_1, Q5_K, Q3_K, Q2_K, IQ4_NL, IQ4_XS), with its exact logits.

Needs only gguf-py and numpy (tests/python/requirements.txt), so the test that reads it
(tests/lm/new_formats_model_test.cpp) builds it into the build directory at run time instead
of committing a binary: nothing here needs llama.cpp. Deterministic (fixed seed).

Dimensions as make_mixed_model.py: dim 256, 4 heads of 64 sharing 1 KV head, FFN 256,
2 layers, vocabulary and tokenizer copied from stories260K.gguf (512 pieces). Tensor types:

  token_embd Q5_K (row lookup) | output Q5_0 | norms F32
  blk.0: attn_q Q5_0, attn_k Q5_1, attn_v IQ4_NL, attn_output Q5_K, ffn_gate Q3_K, ffn_up Q2_K, ffn_down IQ4_XS
  blk.1: attn_q Q5_K, attn_k Q5_0, attn_v Q5_1,  attn_output IQ4_XS, ffn_gate IQ4_NL, ffn_up Q3_K, ffn_down Q2_K

Q5_0 / Q5_1 are Gaussian weights (std 1/sqrt(fan_in)) quantized by gguf.quants.quantize.
gguf-py has no quantizer for the others, so they are random valid blocks (random codes and
packed scales, positive f16 super-block scales) whose f16 scale fields are then multiplied by
one factor per tensor so that the dequantized tensor has the same std: dequantization is
linear in those fields, so this only sets the magnitude. The model is a valid function either
way; what the test checks is that lm computes that function.

Outputs in --out: new_formats.gguf, new_formats.json (tokens, vocab size, generator, the
types per tensor), new_formats.exact.f32 (float64 forward of tools/reference/numpy_llama.py,
K/V rounded to f16 as lm's default cache stores them; [n_tokens, vocab] little-endian f32).

Usage: python3 tools/reference/make_new_formats_model.py --out DIR
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_mixed_model import copy_tokenizer, shared_dir  # noqa: E402
from make_weight_fixtures import F16_FIELDS  # noqa: E402
from numpy_llama import NumpyLlama  # noqa: E402

SEED = 19
DIM, N_HEADS, N_KV, FFN, N_LAYERS, N_TOKENS = 256, 4, 1, 256, 2, 48
LAYER_TYPES = [
    {"attn_q": T.Q5_0, "attn_k": T.Q5_1, "attn_v": T.IQ4_NL, "attn_output": T.Q5_K,
     "ffn_gate": T.Q3_K, "ffn_up": T.Q2_K, "ffn_down": T.IQ4_XS},
    {"attn_q": T.Q5_K, "attn_k": T.Q5_0, "attn_v": T.Q5_1, "attn_output": T.IQ4_XS,
     "ffn_gate": T.IQ4_NL, "ffn_up": T.Q3_K, "ffn_down": T.Q2_K},
]


def scaled_random_blocks(rng: np.random.Generator, qtype: T, rows: int, cols: int, std: float) -> np.ndarray:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block
    raw = rng.integers(0, 256, size=(nblocks, type_size), dtype=np.uint32).astype(np.uint8)
    fields = F16_FIELDS[qtype.name]
    for off in fields:
        scales = np.exp(rng.uniform(np.log(0.5), np.log(1.0), size=nblocks)).astype(np.float16)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(nblocks, 2)
    actual = quants.dequantize(raw.reshape(rows, -1), qtype).std()
    factor = std / actual
    for off in fields:
        scaled = (raw[:, off:off + 2].copy().view(np.float16).astype(np.float32) * factor).astype(np.float16)
        raw[:, off:off + 2] = scaled.view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "new_formats.gguf"
    rng = np.random.default_rng(SEED)
    head_dim = DIM // N_HEADS

    writer = gguf.GGUFWriter(str(model_path), arch="llama")
    writer.add_name("veloxquant new-formats reference model (random weights)")
    vocab = copy_tokenizer(writer, shared_dir() / "models/stories260K/stories260K.gguf")
    writer.add_context_length(512)
    writer.add_embedding_length(DIM)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(N_LAYERS)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    types: dict[str, str] = {}

    def add(name: str, rows: int, cols: int, std: float, qtype: T) -> None:
        types[name] = qtype.name
        if qtype in (T.Q5_0, T.Q5_1):
            values = rng.normal(0.0, std, size=(rows, cols)).astype(np.float32)
            writer.add_tensor(name, quants.quantize(values, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, scaled_random_blocks(rng, qtype, rows, cols, std), raw_dtype=qtype)

    def add_norm(name: str) -> None:
        types[name] = "F32"
        writer.add_tensor(name, (1.0 + rng.normal(0.0, 0.1, size=DIM)).astype(np.float32))

    add("token_embd.weight", vocab, DIM, 1.0, T.Q5_K)
    for layer, lt in enumerate(LAYER_TYPES):
        p = f"blk.{layer}."
        add_norm(p + "attn_norm.weight")
        add(p + "attn_q.weight", DIM, DIM, DIM ** -0.5, lt["attn_q"])
        add(p + "attn_k.weight", N_KV * head_dim, DIM, DIM ** -0.5, lt["attn_k"])
        add(p + "attn_v.weight", N_KV * head_dim, DIM, DIM ** -0.5, lt["attn_v"])
        add(p + "attn_output.weight", DIM, DIM, DIM ** -0.5, lt["attn_output"])
        add_norm(p + "ffn_norm.weight")
        add(p + "ffn_gate.weight", FFN, DIM, DIM ** -0.5, lt["ffn_gate"])
        add(p + "ffn_up.weight", FFN, DIM, DIM ** -0.5, lt["ffn_up"])
        add(p + "ffn_down.weight", DIM, FFN, FFN ** -0.5, lt["ffn_down"])
    add_norm("output_norm.weight")
    add("output.weight", vocab, DIM, 3.0 * DIM ** -0.5, T.Q5_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    tokens = [1] + [int(t) for t in rng.integers(3, vocab, size=N_TOKENS - 1)]
    exact = NumpyLlama(str(model_path), kv_f16=True).forward(tokens)
    (out_dir / "new_formats.exact.f32").write_bytes(np.ascontiguousarray(exact, dtype="<f4").tobytes())
    fixture = {"generator": "tools/reference/make_new_formats_model.py", "seed": SEED, "tokens": tokens,
               "vocab_size": vocab, "types": types,
               "exact_logits_file": "new_formats.exact.f32", "exact_logit_std": float(exact.std())}
    (out_dir / "new_formats.json").write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {model_path} ({model_path.stat().st_size} bytes), exact logits std {exact.std():.3f}")


if __name__ == "__main__":
    main()
