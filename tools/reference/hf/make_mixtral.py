#!/usr/bin/env python3
"""A tiny random-weight MixtralForCausalLM as a `llama` GGUF with experts, with transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 64, 2 layers, 4 query heads of 32 sharing 2 KV
heads, RoPE base 10^6, RMSNorm eps 1e-5, separate output head, no sliding window; every layer a
sparse MoE block of 8 SwiGLU experts of FFN 32 with top-2 routing, the two softmax weights
always renormalised (MixtralTopKRouter). transformers runs its per-expert loop ("eager").

GGUF as llama.cpp's convert_hf_to_gguf.py writes MixtralForCausalLM: architecture `llama`
(Mixtral has no architecture of its own in GGUF), llama.expert_count and
llama.expert_used_count, the expert FFN size as llama.feed_forward_length (llama.cpp sizes a
`llama` file's experts by it), Q and K rows permuted to the adjacent-pair RoPE layout as for
LlamaForCausalLM, router blk.N.ffn_gate_inp.weight, experts as 3-D tensors
blk.N.ffn_{gate,up,down}_exps.weight (the layout llama.cpp has written since 2024; the older
per-expert blk.N.ffn_gate.E.weight tensors are refused by lm with a message saying so).

Storage: layer 0's experts F16, layer 1's Q4_0 (gguf.quants.quantize: a second block type
through a whole forward, after qwen3moe's Q8_0); other matrices F16, vectors F32. transformers
computes with exactly the stored values (moe_common.quantize_experts_).

llama.cpp reads mixtral.gguf as written (check_llama_cpp.py mixtral, llama-cpp-python 0.3.36):
max |dlogit| 0.060 against transformers, mean 0.008, top-1 64/64 (llama.cpp multiplies the Q4_0
experts with 8-bit activations).

Usage: /work/venv-hf/bin/python tools/reference/hf/make_mixtral.py
"""
from __future__ import annotations

import sys

from gguf import GGMLQuantizationType as T
from transformers import MixtralConfig, MixtralForCausalLM

import common
import moe_common

FAMILY = "mixtral"
SEED = 1905  # 1904: greedy chose EOS as its 4th token, too short a continuation to check
CFG = dict(hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5,
           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
           max_position_embeddings=common.CONTEXT, tie_word_embeddings=False, sliding_window=None,
           num_local_experts=8, num_experts_per_tok=2, bos_token_id=1, eos_token_id=2)
EXPERT_TYPES = [T.F16, T.Q4_0]  # layer 0, layer 1


def write_gguf(model, tok: common.StoriesTokenizer, experts):
    c = model.config
    path = common.fixture_dir() / f"{FAMILY}.gguf"
    out = common.GgufOut(path, "llama", "veloxquant tiny mixtral (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c, head_dim=c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_expert_count(c.num_local_experts)
    w.add_expert_used_count(c.num_experts_per_tok)

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
        out.matrix(b + "ffn_gate_inp.weight", layer.mlp.gate.weight)
        moe_common.write_expert_tensors(out, i, EXPERT_TYPES[i], experts)
    out.vector("output_norm.weight", m.norm.weight)
    out.matrix("output.weight", model.lm_head.weight)
    out.close()
    return path


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(MixtralConfig, MixtralForCausalLM, SEED, **CFG)
    model.config._experts_implementation = "eager"  # the per-expert loop of modeling_mixtral.py
    common.randomize_(model, SEED)
    common.round_matrices_to_f16_(model)
    experts = moe_common.quantize_experts_(model, EXPERT_TYPES)
    path = write_gguf(model, tok, experts)
    _, ids = common.fixture_passage(tok)
    extra = {"config": CFG, "expert_types": [t.name for t in EXPERT_TYPES],
             "routing_gap_min": moe_common.routing_gap_min(model, ids[:common.N_TOKENS])}
    meta = common.record_fixture(FAMILY, model, path, tok, SEED, extra)
    print(f"{FAMILY}: routing gap min {meta['routing_gap_min']:.2e}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
