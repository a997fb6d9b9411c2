#!/usr/bin/env python3
"""A float64 numpy forward of a GGUF `gemma3` model: the exact maths, independent of lm and of
llama.cpp, to measure how far each runtime is from the model's function.

Written from the Gemma 3 architecture (technical report arXiv 2503.19786, and the GGUF names
llama.cpp's converter gives it): token embeddings times sqrt(dim); per layer RMSNorm ->
Q/K/V -> per-head RMSNorm of Q and K -> RoPE on the halves of each head (NeoX pairing,
(i, i + D/2)) with base 10^4 on the sliding-window layers and gemma3.rope.freq_base on the
global ones (every sixth layer, l % 6 == 5) -> GQA attention scaled by 1/sqrt(head_dim),
masked to the last `sliding_window` positions on local layers -> RMSNorm of the attention
output (post_attention_norm) -> residual; RMSNorm -> GeGLU FFN (tanh GELU) -> RMSNorm
(post_ffw_norm) -> residual; final RMSNorm and the tied head. The converter stores Gemma's
(1 + w) norm weights already shifted, so every RMSNorm multiplies by the stored weight.
Weights are dequantized with gguf-py (gguf.quants.dequantize).

Usage: python3 tools/reference/numpy_gemma3.py MODEL.gguf  (prints the top-1 of a short prompt)
"""
from __future__ import annotations

import sys

import numpy as np
import gguf

from numpy_llama import dequantized_tensors, gqa_attention

SLIDING_PATTERN = 6
LOCAL_ROPE_BASE = 10000.0


class NumpyGemma3:
    def __init__(self, path: str, kv_f16: bool = False):
        r = gguf.GGUFReader(path)
        def field(name, default=None):
            return r.fields[name].contents() if name in r.fields else default
        arch = field("general.architecture")
        if arch != "gemma3":
            raise SystemExit(f"numpy_gemma3: architecture {arch!r} is not gemma3")
        p = "gemma3."
        self.n_layers = int(field(p + "block_count"))
        self.dim = int(field(p + "embedding_length"))
        self.n_heads = int(field(p + "attention.head_count"))
        self.n_kv = int(field(p + "attention.head_count_kv"))
        self.head_dim = int(field(p + "attention.key_length"))
        self.eps = float(field(p + "attention.layer_norm_rms_epsilon"))
        self.global_base = float(field(p + "rope.freq_base", 1e6))
        self.local_base = float(field(p + "rope.freq_base_swa", LOCAL_ROPE_BASE))
        self.window = int(field(p + "attention.sliding_window"))
        self.kv_f16 = kv_f16  # round K and V to f16 as a f16 KV cache stores them
        self.w = dequantized_tensors(r)

    def rmsnorm(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    @staticmethod
    def rope_neox(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
        # x: [S, H, D]; rotates (i, i + D/2) by pos * base^(-2i/D).
        d = x.shape[-1]
        half = d // 2
        inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = positions[:, None].astype(np.float64) * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)

    @staticmethod
    def gelu_tanh(x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Logits [S, vocab] for a fresh sequence (causal, positions 0..S-1)."""
        w = self.w
        s = len(tokens)
        pos = np.arange(s)
        x = w["token_embd.weight"][np.asarray(tokens)] * np.sqrt(self.dim)
        hd = self.head_dim
        causal = np.triu(np.full((s, s), -np.inf), k=1)
        too_far = np.where(pos[:, None] - pos[None, :] >= self.window, -np.inf, 0.0)
        for layer in range(self.n_layers):
            p = f"blk.{layer}."
            local = layer % SLIDING_PATTERN != SLIDING_PATTERN - 1
            mask = causal + too_far if local else causal
            base = self.local_base if local else self.global_base
            h = self.rmsnorm(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(s, self.n_heads, hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(s, self.n_kv, hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(s, self.n_kv, hd)
            q = self.rmsnorm(q, w[p + "attn_q_norm.weight"])
            k = self.rmsnorm(k, w[p + "attn_k_norm.weight"])
            q, k = self.rope_neox(q, pos, base), self.rope_neox(k, pos, base)
            att = gqa_attention(q, k, v, mask, self.kv_f16)
            o = att.reshape(s, self.n_heads * hd) @ w[p + "attn_output.weight"].T
            x = x + self.rmsnorm(o, w[p + "post_attention_norm.weight"])
            h = self.rmsnorm(x, w[p + "ffn_norm.weight"])
            gate = h @ w[p + "ffn_gate.weight"].T
            up = h @ w[p + "ffn_up.weight"].T
            f = (self.gelu_tanh(gate) * up) @ w[p + "ffn_down.weight"].T
            x = x + self.rmsnorm(f, w[p + "post_ffw_norm.weight"])
        x = self.rmsnorm(x, w["output_norm.weight"])
        return x @ w["output.weight"].T


if __name__ == "__main__":
    m = NumpyGemma3(sys.argv[1])
    logits = m.forward([2, 651, 6037, 529])
    print(logits.argmax(axis=1))
