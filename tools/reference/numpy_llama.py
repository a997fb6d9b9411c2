#!/usr/bin/env python3
"""A float64 numpy forward of a GGUF `llama` model: the exact maths, with no activation
quantization and no reduced-precision KV cache.

Used to measure how far each runtime (llama.cpp, lm) is from the model's exact function, so
the tolerances in tests/lm/reference_agreement_test.cpp rest on measured error, not guesses.
Weights are dequantized with gguf-py (gguf.quants.dequantize). Written from the llama
architecture as llama.cpp's GGUF conversion defines it: RMSNorm, RoPE on adjacent pairs
(rope type NORM: the converter permutes Q/K rows so that pairs are (2i, 2i+1)), GQA,
SwiGLU, output head = output.weight or the tied token_embd.

Usage: python3 tools/reference/numpy_llama.py MODEL.gguf  (prints the top-1 of a short prompt)
"""
from __future__ import annotations

import sys

import numpy as np
import gguf
from gguf import quants


def dequantized_tensors(reader: gguf.GGUFReader) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF file in float64, shaped as numpy reads it ([rows, cols]), with
    output.weight = token_embd.weight when the head is tied."""
    w: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        ne = [int(x) for x in t.shape]
        raw = np.array(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            a = raw.astype(np.float64)
        else:
            a = quants.dequantize(raw, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape(list(reversed(ne)))
    if "output.weight" not in w:
        w["output.weight"] = w["token_embd.weight"]
    return w


def gqa_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, kv_f16: bool) -> np.ndarray:
    """Softmax attention of q [S, Hq, D] over k, v [S, Hkv, D] (query head h reads kv head
    h // (Hq / Hkv)), scaled by 1/sqrt(D), `mask` [S, S] added to the scores; K and V rounded to
    f16 first when kv_f16 (as a f16 KV cache stores them). Returns [S, Hq, D]."""
    if kv_f16:
        k = k.astype(np.float16).astype(np.float64)
        v = v.astype(np.float16).astype(np.float64)
    s, n_heads, hd = q.shape
    group = n_heads // k.shape[1]
    att = np.empty((s, n_heads, hd))
    for head in range(n_heads):
        kv = head // group
        sc = q[:, head, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
        sc = np.exp(sc - sc.max(axis=1, keepdims=True))
        sc /= sc.sum(axis=1, keepdims=True)
        att[:, head, :] = sc @ v[:, kv, :]
    return att


class NumpyLlama:
    def __init__(self, path: str, kv_f16: bool = False):
        r = gguf.GGUFReader(path)
        def field(name):
            return r.fields[name].contents()
        arch = field("general.architecture")
        if arch != "llama":
            raise SystemExit(f"numpy_llama: architecture {arch!r} is not llama")
        self.n_layers = int(field("llama.block_count"))
        self.dim = int(field("llama.embedding_length"))
        self.n_heads = int(field("llama.attention.head_count"))
        self.n_kv = int(field("llama.attention.head_count_kv"))
        self.eps = float(field("llama.attention.layer_norm_rms_epsilon"))
        self.theta = float(field("llama.rope.freq_base")) if "llama.rope.freq_base" in r.fields else 10000.0
        self.head_dim = self.dim // self.n_heads
        self.kv_f16 = kv_f16  # round K and V to f16 as a f16 KV cache stores them
        self.w = dequantized_tensors(r)

    def rmsnorm(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        # x: [S, H, D]; rotates pairs (2i, 2i+1) by pos * theta^(-2i/D).
        d = x.shape[-1]
        inv = self.theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = positions[:, None].astype(np.float64) * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Logits [S, vocab] for a fresh sequence (causal, positions 0..S-1)."""
        w = self.w
        s = len(tokens)
        pos = np.arange(s)
        x = w["token_embd.weight"][np.asarray(tokens)]
        hd = self.head_dim
        mask = np.triu(np.full((s, s), -np.inf), k=1)
        for layer in range(self.n_layers):
            p = f"blk.{layer}."
            h = self.rmsnorm(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(s, self.n_heads, hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(s, self.n_kv, hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(s, self.n_kv, hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            att = gqa_attention(q, k, v, mask, self.kv_f16)
            x = x + att.reshape(s, self.dim) @ w[p + "attn_output.weight"].T
            h = self.rmsnorm(x, w[p + "ffn_norm.weight"])
            gate = h @ w[p + "ffn_gate.weight"].T
            up = h @ w[p + "ffn_up.weight"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
        x = self.rmsnorm(x, w["output_norm.weight"])
        return x @ w["output.weight"].T


if __name__ == "__main__":
    m = NumpyLlama(sys.argv[1])
    logits = m.forward([1, 2, 3])
    print(logits.argmax(axis=1))
