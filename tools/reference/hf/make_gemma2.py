#!/usr/bin/env python3
"""A tiny random-weight Gemma2ForCausalLM as a `gemma2` GGUF, with transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 128, 2 layers (layer 0 local with a 16-token
sliding window, layer 1 global: Gemma 2's alternation), 4 query heads of 64 sharing 2 KV heads
(head_dim x heads = 256 != hidden, as Gemma 2 2B's 8 x 256 != 2304), GeGLU FFN 256, RoPE base
10^4, query_pre_attn_scalar = head_dim (what llama.cpp assumes for every size but 27B),
embeddings x sqrt(hidden), sandwich norms, tied output head.

The soft-caps are set low enough to matter on a random model: attention logits capped at 5
(Gemma 2: 50) and final logits at 8 (Gemma 2: 30); the JSON records how much transformers'
logits move without them (`softcap_effect`) and without the window.

GGUF as llama.cpp's converter writes Gemma2ForCausalLM: architecture `gemma2`; norms stored as
1 + weight (transformers' Gemma RMSNorm multiplies by 1 + w); input_layernorm -> attn_norm,
post_attention_layernorm -> post_attention_norm, pre_feedforward_layernorm -> ffn_norm,
post_feedforward_layernorm -> post_ffw_norm; no output.weight (tied);
gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping, gemma2.attention.sliding_window,
gemma2.attention.key_length / value_length = head_dim. NeoX RoPE: no Q/K permutation.

Usage: /work/venv-hf/bin/python tools/reference/hf/make_gemma2.py
"""
from __future__ import annotations

import sys

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

import common

FAMILY = "gemma2"
SEED = 1904
WINDOW = 16
OUT_NORM = 5.0
Q_GAIN = 2.0
POST_NORM = 2.0
HEAD_DIM = 64
ATTN_CAP, FINAL_CAP = 3.0, 10.0
CFG = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM, rms_norm_eps=1e-6,
           rope_theta=10000.0, sliding_window=WINDOW, attn_logit_softcapping=ATTN_CAP, final_logit_softcapping=FINAL_CAP,
           hidden_activation="gelu_pytorch_tanh", max_position_embeddings=common.CONTEXT,
           tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def write_gguf(model, tok: common.StoriesTokenizer):
    c = model.config
    path = common.fixture_dir() / f"{FAMILY}.gguf"
    out = common.GgufOut(path, "gemma2", "veloxquant tiny gemma2 (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c, head_dim=c.head_dim)
    w.add_rope_freq_base(common.rope_theta(c))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_attn_logit_softcapping(c.attn_logit_softcapping)
    w.add_final_logit_softcapping(c.final_logit_softcapping)
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


def effect(model, ids, **changes) -> dict:
    """How far transformers' logits move when config fields take other values."""
    base = common._logits(model, ids, torch.float32)
    saved = {k: getattr(model.config, k) for k in changes}
    for k, v in changes.items():
        setattr(model.config, k, v)
        for layer in model.model.layers:  # attention modules copy these at construction
            if k == "attn_logit_softcapping":
                layer.self_attn.attn_logit_softcapping = v
    other = common._logits(model, ids, torch.float32)
    for k, v in saved.items():
        setattr(model.config, k, v)
        for layer in model.model.layers:
            if k == "attn_logit_softcapping":
                layer.self_attn.attn_logit_softcapping = v
    assert torch.equal(base, common._logits(model, ids, torch.float32))
    d = (base - other).abs()
    return {"changed": {k: str(v) for k, v in changes.items()}, "max_abs": float(d.max()),
            "top1_changed": int((base.argmax(-1) != other.argmax(-1)).sum())}


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(Gemma2Config, Gemma2ForCausalLM, SEED, **CFG)
    assert model.config.layer_types == ["sliding_attention", "full_attention"], model.config.layer_types
    # Gemma norms are 1 + w: draw w around 0. Embeddings of std 1/sqrt(hidden) enter the
    # residual at rms 1 (x sqrt(hidden)), as large as each post-normed block output. The tied
    # head then gives logits of std ~1, so the final norm is drawn around 1 + OUT_NORM to
    # spread them past the final cap; Q is scaled by Q_GAIN so scores reach the attention cap.
    # The post norms around 1 + POST_NORM let the blocks outweigh the current token's own
    # embedding in the residual (with a tied head it otherwise predicts itself, forever).
    common.randomize_(model, SEED, norm_base=0.0)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.0 / CFG["hidden_size"] ** 0.5)
        model.model.norm.weight.add_(OUT_NORM)
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(Q_GAIN)
            layer.post_attention_layernorm.weight.add_(POST_NORM)
            layer.post_feedforward_layernorm.weight.add_(POST_NORM)
    common.round_matrices_to_f16_(model)
    path = write_gguf(model, tok)
    _, ids = common.fixture_passage(tok)
    ids = ids[:common.N_TOKENS]
    extra = {"config": CFG,
             "softcap_effect": [effect(model, ids, attn_logit_softcapping=None),
                                effect(model, ids, final_logit_softcapping=None)],
             "window_effect": effect(model, ids, sliding_window=1 << 20)}
    common.record_fixture(FAMILY, model, path, tok, SEED, extra)


if __name__ == "__main__":
    sys.exit(main())
