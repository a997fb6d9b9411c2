#!/usr/bin/env python3
"""A tiny random-weight Gemma3ForCausalLM (text) as a `gemma3` GGUF, with transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 64, 6 layers (five local with a 16-token sliding
window, then one global: Gemma 3's pattern, so layer 5 is global), 4 query heads of 32 sharing
one KV head (as Gemma 3 270M: 4 heads, 1 KV head), per-head Q/K RMSNorm, GeGLU FFN 128, RoPE
base 10^4 on the local layers and 10^6 on the global one, query_pre_attn_scalar = head_dim,
embeddings x sqrt(hidden), sandwich norms, tied output head, no soft-capping.

GGUF as llama.cpp's converter writes Gemma3ForCausalLM: architecture `gemma3`; every norm
(q_norm and k_norm included) stored as 1 + weight; attn_q_norm / attn_k_norm,
post_attention_norm, ffn_norm (pre_feedforward_layernorm), post_ffw_norm; no output.weight;
gemma3.rope.freq_base = the global base, gemma3.attention.sliding_window; the pattern and the
local base are not in the file (llama.cpp and lm assume 6 and 10^4).

Usage: /work/venv-hf/bin/python tools/reference/hf/make_gemma3.py
"""
from __future__ import annotations

import sys

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import common
from make_gemma2 import effect

FAMILY = "gemma3"
SEED = 1905
WINDOW = 16
HEAD_DIM = 32
OUT_NORM = 5.0    # see make_gemma2.py: spreads the tied head's logits
POST_NORM = 2.0   # see make_gemma2.py: keeps the tied head from predicting the current token
CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
           num_key_value_heads=1, head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM, rms_norm_eps=1e-6,
           rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
           sliding_window=WINDOW, hidden_activation="gelu_pytorch_tanh",
           max_position_embeddings=common.CONTEXT, tie_word_embeddings=True,
           bos_token_id=1, eos_token_id=2, pad_token_id=0)


def write_gguf(model, tok: common.StoriesTokenizer):
    c = model.config
    path = common.fixture_dir() / f"{FAMILY}.gguf"
    out = common.GgufOut(path, "gemma3", "veloxquant tiny gemma3 (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c, head_dim=c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["full_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_sliding_window(c.sliding_window)

    def norm(name, weight):  # Gemma's RMSNorm scales by (1 + w): stored as 1 + w, in float32
        out.vector(name, (1.0 + weight.detach().float()))

    m = model.model
    out.matrix("token_embd.weight", m.embed_tokens.weight)
    for i, layer in enumerate(m.layers):
        b = f"blk.{i}."
        a = layer.self_attn
        norm(b + "attn_norm.weight", layer.input_layernorm.weight)
        out.matrix(b + "attn_q.weight", a.q_proj.weight)
        out.matrix(b + "attn_k.weight", a.k_proj.weight)
        out.matrix(b + "attn_v.weight", a.v_proj.weight)
        norm(b + "attn_q_norm.weight", a.q_norm.weight)
        norm(b + "attn_k_norm.weight", a.k_norm.weight)
        out.matrix(b + "attn_output.weight", a.o_proj.weight)
        norm(b + "post_attention_norm.weight", layer.post_attention_layernorm.weight)
        norm(b + "ffn_norm.weight", layer.pre_feedforward_layernorm.weight)
        out.matrix(b + "ffn_gate.weight", layer.mlp.gate_proj.weight)
        out.matrix(b + "ffn_up.weight", layer.mlp.up_proj.weight)
        out.matrix(b + "ffn_down.weight", layer.mlp.down_proj.weight)
        norm(b + "post_ffw_norm.weight", layer.post_feedforward_layernorm.weight)
    norm("output_norm.weight", m.norm.weight)
    out.close()
    return path


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(Gemma3TextConfig, Gemma3ForCausalLM, SEED, **CFG)
    assert model.config.layer_types == ["sliding_attention"] * 5 + ["full_attention"], model.config.layer_types
    common.randomize_(model, SEED, norm_base=0.0)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.0 / CFG["hidden_size"] ** 0.5)
        model.model.norm.weight.add_(OUT_NORM)
        for layer in model.model.layers:
            layer.post_attention_layernorm.weight.add_(POST_NORM)
            layer.post_feedforward_layernorm.weight.add_(POST_NORM)
    common.round_matrices_to_f16_(model)
    path = write_gguf(model, tok)
    _, ids = common.fixture_passage(tok)
    ids = ids[:common.N_TOKENS]
    extra = {"config": CFG, "window_effect": effect(model, ids, sliding_window=1 << 20)}
    common.record_fixture(FAMILY, model, path, tok, SEED, extra)


if __name__ == "__main__":
    sys.exit(main())
