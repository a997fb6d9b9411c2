#!/usr/bin/env python3
"""A tiny random-weight Qwen3MoeForCausalLM as a `qwen3moe` GGUF, with transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 64, 2 layers, 4 query heads of 32 sharing 2 KV
heads, per-head q/k RMSNorm (Qwen3), RoPE base 10^6 (NeoX pairing), RMSNorm eps 1e-6, separate
output head; every layer a sparse MoE block of 8 SwiGLU experts of FFN 32, top-2 routing with
the two weights renormalised (norm_topk_prob=True, as the released Qwen3 MoE checkpoints have
it). transformers runs its plain per-expert loop (experts implementation "eager").

GGUF as llama.cpp's convert_hf_to_gguf.py writes Qwen3MoeForCausalLM (its Qwen2MoeModel base):
architecture `qwen3moe`; qwen3moe.expert_count, expert_used_count, expert_feed_forward_length
and expert_weights_norm; the router as blk.N.ffn_gate_inp.weight [dim, E]; the experts stacked
as 3-D tensors blk.N.ffn_{gate,up}_exps.weight [dim, F, E] and ffn_down_exps.weight [F, dim, E]
(GGUF dims, innermost first). transformers keeps gate and up fused as gate_up_proj [E, 2F, dim]
(gate first); they are split here.

Storage types, so that lm's per-expert slicing is checked on a float type and a block type:
layer 0's experts F16, layer 1's experts Q8_0 (gguf.quants.quantize); every other matrix F16,
the router included, and vectors F32 (common.py). transformers
computes with exactly the stored values: all matrices rounded to f16 (common.py), then layer
1's experts replaced by their Q8_0 dequantization (gguf.quants.dequantize).

Besides common.py's record, the JSON holds `routing_gap_min`: over every token and layer of the
passage, the smallest difference between the k-th and (k+1)-th router probability — how far
the routing decisions are from a tie (a flipped expert would move logits by O(1)).

llama.cpp reads qwen3moe.gguf as written (check_llama_cpp.py qwen3moe, llama-cpp-python 0.3.36):
max |dlogit| 0.079 against transformers, mean 0.009, top-1 64/64. The spread is llama.cpp's: it
multiplies Q8_0 weights with activations quantized to 8 bits; the same model with layer 1's
experts F16 instead agrees to 0.0062 (as the llama family, 0.0065).

A second fixture, qwen3moe_dense0_unnorm, covers what llama.cpp's qwen3moe graph does not but
transformers' Qwen3MoeConfig allows: norm_topk_prob=False (the top-k softmax probabilities are
used as they are; the GGUF says so with expert_weights_norm=false) and a dense layer among the
MoE ones (mlp_only_layers=[0]: layer 0 is a plain SwiGLU FFN of intermediate_size, written as
ffn_gate/ffn_up/ffn_down; layer 1's experts F16). llama.cpp refuses that file (its qwen3moe
loader wants experts in every layer), so only transformers checks it.

Usage: /work/venv-hf/bin/python tools/reference/hf/make_qwen3moe.py
"""
from __future__ import annotations

import sys

from gguf import GGMLQuantizationType as T
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

import common
import moe_common

FAMILY = "qwen3moe"
SEED = 1903
CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
           max_position_embeddings=common.CONTEXT, tie_word_embeddings=False, attention_bias=False,
           num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
           decoder_sparse_step=1, mlp_only_layers=[], bos_token_id=1, eos_token_id=2)
EXPERT_TYPES = [T.F16, T.Q8_0]  # layer 0, layer 1
# family -> (config overrides, expert storage type per layer; None = dense layer)
VARIANTS = {
    FAMILY: ({}, EXPERT_TYPES),
    "qwen3moe_dense0_unnorm": ({"norm_topk_prob": False, "mlp_only_layers": [0]}, [None, T.F16]),
}


def write_gguf(model, tok: common.StoriesTokenizer, family: str, expert_types, experts: dict[str, np.ndarray]):
    c = model.config
    path = common.fixture_dir() / f"{family}.gguf"
    out = common.GgufOut(path, "qwen3moe", "veloxquant tiny qwen3moe (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c, head_dim=c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_expert_count(c.num_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_expert_weights_norm(bool(c.norm_topk_prob))

    m = model.model
    out.matrix("token_embd.weight", m.embed_tokens.weight)
    for i, layer in enumerate(m.layers):
        b = f"blk.{i}."
        a = layer.self_attn
        out.vector(b + "attn_norm.weight", layer.input_layernorm.weight)
        out.matrix(b + "attn_q.weight", a.q_proj.weight)  # NeoX RoPE: no row permutation
        out.matrix(b + "attn_k.weight", a.k_proj.weight)
        out.matrix(b + "attn_v.weight", a.v_proj.weight)
        out.matrix(b + "attn_output.weight", a.o_proj.weight)
        out.vector(b + "attn_q_norm.weight", a.q_norm.weight)
        out.vector(b + "attn_k_norm.weight", a.k_norm.weight)
        out.vector(b + "ffn_norm.weight", layer.post_attention_layernorm.weight)
        if expert_types[i] is None:  # a dense layer (mlp_only_layers)
            out.matrix(b + "ffn_gate.weight", layer.mlp.gate_proj.weight)
            out.matrix(b + "ffn_up.weight", layer.mlp.up_proj.weight)
            out.matrix(b + "ffn_down.weight", layer.mlp.down_proj.weight)
            continue
        out.matrix(b + "ffn_gate_inp.weight", layer.mlp.gate.weight)
        moe_common.write_expert_tensors(out, i, expert_types[i], experts)
    out.vector("output_norm.weight", m.norm.weight)
    out.matrix("output.weight", model.lm_head.weight)
    out.close()
    return path


def make(family: str, overrides: dict, expert_types) -> None:
    tok = common.StoriesTokenizer()
    cfg = {**CFG, **overrides}
    model = common.tiny_model(Qwen3MoeConfig, Qwen3MoeForCausalLM, SEED, **cfg)
    model.config._experts_implementation = "eager"  # the per-expert loop of modeling_qwen3_moe.py
    common.randomize_(model, SEED)
    common.round_matrices_to_f16_(model)
    experts = moe_common.quantize_experts_(model, expert_types)
    path = write_gguf(model, tok, family, expert_types, experts)
    _, ids = common.fixture_passage(tok)
    extra = {"config": cfg, "expert_types": [t.name if t is not None else "dense" for t in expert_types],
             "routing_gap_min": moe_common.routing_gap_min(model, ids[:common.N_TOKENS])}
    meta = common.record_fixture(family, model, path, tok, SEED, extra)
    print(f"{family}: routing gap min {meta['routing_gap_min']:.2e}", file=sys.stderr)


def main() -> None:
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    for family, (overrides, expert_types) in VARIANTS.items():
        make(family, overrides, expert_types)


if __name__ == "__main__":
    sys.exit(main())
