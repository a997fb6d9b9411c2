#!/usr/bin/env python3
"""A tiny random-weight LlamaForCausalLM as a `llama` GGUF, with transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 128, 2 layers, 4 query heads of 32 sharing 2 KV
heads (GQA), SwiGLU FFN 256, RoPE base 10^4, RMSNorm eps 1e-5, separate output head.

GGUF as llama.cpp's convert_hf_to_gguf.py writes LlamaForCausalLM: architecture `llama`,
llama.* metadata, Q and K rows permuted from transformers' rotate-half layout to the
adjacent-pair layout llama.cpp's (and lm's) `llama` RoPE rotates.

Usage: /work/venv-hf/bin/python tools/reference/hf/make_llama.py
"""
from __future__ import annotations

import sys

from transformers import LlamaConfig, LlamaForCausalLM

import common

FAMILY = "llama"
SEED = 1901
CFG = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5, rope_theta=10000.0,
           max_position_embeddings=common.CONTEXT, tie_word_embeddings=False, attention_bias=False,
           mlp_bias=False, bos_token_id=1, eos_token_id=2)


def write_gguf(model, tok: common.StoriesTokenizer, family: str = FAMILY, extra_metadata=None):
    """The `llama` GGUF of a LlamaForCausalLM-shaped model (also MistralForCausalLM, which
    llama.cpp's converter writes as `llama` too); extra_metadata(writer) adds keys."""
    c = model.config
    path = common.fixture_dir() / f"{family}.gguf"
    out = common.GgufOut(path, "llama", f"veloxquant tiny {family} (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c, head_dim=c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(common.rope_theta(c))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    if extra_metadata:
        extra_metadata(w)

    m = model.model
    out.matrix("token_embd.weight", m.embed_tokens.weight)
    for i, layer in enumerate(m.layers):
        b = f"blk.{i}."
        a = layer.self_attn
        out.vector(b + "attn_norm.weight", layer.input_layernorm.weight)
        out.matrix(b + "attn_q.weight", common.permute_for_normal_rope(a.q_proj.weight, c.num_attention_heads))
        out.matrix(b + "attn_k.weight", common.permute_for_normal_rope(a.k_proj.weight, c.num_key_value_heads))
        out.matrix(b + "attn_v.weight", a.v_proj.weight)
        out.matrix(b + "attn_output.weight", a.o_proj.weight)
        out.vector(b + "ffn_norm.weight", layer.post_attention_layernorm.weight)
        out.matrix(b + "ffn_gate.weight", layer.mlp.gate_proj.weight)
        out.matrix(b + "ffn_up.weight", layer.mlp.up_proj.weight)
        out.matrix(b + "ffn_down.weight", layer.mlp.down_proj.weight)
    out.vector("output_norm.weight", m.norm.weight)
    out.matrix("output.weight", model.lm_head.weight)
    out.close()
    return path


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(LlamaConfig, LlamaForCausalLM, SEED, **CFG)
    common.randomize_(model, SEED)
    common.round_matrices_to_f16_(model)
    path = write_gguf(model, tok)
    common.record_fixture(FAMILY, model, path, tok, SEED, {"config": CFG})


if __name__ == "__main__":
    sys.exit(main())
