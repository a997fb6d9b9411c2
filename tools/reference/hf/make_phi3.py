#!/usr/bin/env python3
"""A tiny random-weight Phi3ForCausalLM as a `phi3` GGUF, with transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 128, 2 layers, 4 query heads of 32 sharing 2 KV
heads, SwiGLU FFN 256, RoPE base 10^4 on the first half of each head only
(partial_rotary_factor 0.5, as Phi-4-mini's 0.75), and a 24-token sliding window (Phi-3-mini-4k
has 2047).

GGUF as llama.cpp's converter writes Phi3ForCausalLM: architecture `phi3`; the fused projections
stay fused: `blk.N.attn_qkv.weight` (rows: Q, then K, then V; transformers' qkv_proj) and
`blk.N.ffn_up.weight` (rows: gate, then up; transformers' gate_up_proj), no ffn_gate;
`phi3.rope.dimension_count` = rotated dimensions per head; NeoX (rotate-half) RoPE, so no Q/K
permutation. `phi3.attention.sliding_window` carries the window: current llama.cpp reads it but
disables it ("Phi SWA is currently disabled"); transformers applies it, and so does lm.

Usage: /work/venv-hf/bin/python tools/reference/hf/make_phi3.py
"""
from __future__ import annotations

import sys

from transformers import Phi3Config, Phi3ForCausalLM

import common

FAMILY = "phi3"
SEED = 1903
WINDOW = 24
CFG = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, rms_norm_eps=1e-5,
           rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
           sliding_window=WINDOW, max_position_embeddings=common.CONTEXT,
           original_max_position_embeddings=common.CONTEXT, tie_word_embeddings=False,
           bos_token_id=1, eos_token_id=2, pad_token_id=0)


def write_gguf(model, tok: common.StoriesTokenizer):
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    rot = int(head_dim * c.rope_parameters["partial_rotary_factor"])
    path = common.fixture_dir() / f"{FAMILY}.gguf"
    out = common.GgufOut(path, "phi3", "veloxquant tiny phi3 (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c)
    w.add_rope_dimension_count(rot)
    w.add_rope_freq_base(common.rope_theta(c))
    w.add_rope_scaling_orig_ctx_len(c.original_max_position_embeddings)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_sliding_window(c.sliding_window)

    m = model.model
    out.matrix("token_embd.weight", m.embed_tokens.weight)
    for i, layer in enumerate(m.layers):
        b = f"blk.{i}."
        out.vector(b + "attn_norm.weight", layer.input_layernorm.weight)
        out.matrix(b + "attn_qkv.weight", layer.self_attn.qkv_proj.weight)
        out.matrix(b + "attn_output.weight", layer.self_attn.o_proj.weight)
        out.vector(b + "ffn_norm.weight", layer.post_attention_layernorm.weight)
        out.matrix(b + "ffn_up.weight", layer.mlp.gate_up_proj.weight)
        out.matrix(b + "ffn_down.weight", layer.mlp.down_proj.weight)
    out.vector("output_norm.weight", m.norm.weight)
    out.matrix("output.weight", model.lm_head.weight)
    out.close()
    return path


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(Phi3Config, Phi3ForCausalLM, SEED, **CFG)
    assert model.model.layers[0].self_attn.qkv_proj.weight.shape == (128 + 2 * 64, 128)
    common.randomize_(model, SEED)
    common.round_matrices_to_f16_(model)
    path = write_gguf(model, tok)

    # The window must matter: the same weights without it give other logits.
    _, ids = common.fixture_passage(tok)
    ids = ids[:common.N_TOKENS]
    windowed = common._logits(model, ids, common.torch.float32)
    model.config.sliding_window = None
    full = common._logits(model, ids, common.torch.float32)
    model.config.sliding_window = WINDOW
    diff = (windowed - full).abs()
    assert float(diff[:WINDOW].max()) == 0.0 and float(diff[WINDOW:].max()) > 0.5
    extra = {"config": CFG, "window_effect": {
        "note": "transformers' logits with the window against the same model without it",
        "max_abs_after": float(diff[WINDOW:].max()),
        "top1_changed_after": int((windowed[WINDOW:].argmax(-1) != full[WINDOW:].argmax(-1)).sum())}}
    common.record_fixture(FAMILY, model, path, tok, SEED, extra)


if __name__ == "__main__":
    sys.exit(main())
