#!/usr/bin/env python3
"""A tiny random-weight Lfm2ForCausalLM as an `lfm2` GGUF, with transformers' logits and greedy tokens.

LFM2 is a hybrid: some layers are gated short convolutions (transformers' Lfm2ShortConv:
in_proj -> B, C, x; B*x; causal depthwise conv1d of kernel L over time; C*conv; out_proj),
the others GQA attention with per-head Q/K RMSNorm; every layer has a SwiGLU FFN.

Config: vocabulary 512 (stories260K), hidden 128, 4 layers [conv, attention, conv, attention],
4 query heads of 32 sharing 2 KV heads, conv kernel (conv_L_cache) 3, FFN 192 (no automatic
2/3 resizing), RoPE base 10^6, RMSNorm eps 1e-5, tied output head (as every LFM2 checkpoint).
The tied table is drawn with std 1/4 instead of common.randomize_'s 1: as the head, std 1 gives
logits of std ~11 and a greedy continuation that repeats one token; 1/4 gives std ~3 as the
other families have.

GGUF as llama.cpp's convert_hf_to_gguf.py writes Lfm2ForCausalLM: architecture `lfm2`;
lfm2.attention.head_count_kv as a per-layer array with 0 on conv layers (how llama.cpp tells
conv layers apart); lfm2.shortconv.l_cache; tensor names from gguf-py's own name map for
MODEL_ARCH.LFM2 (model.embedding_norm -> token_embd_norm, the final norm; conv.conv ->
shortconv.conv with the [C, 1, L] weight squeezed to [C, L]); Q/K rows not permuted (NeoX RoPE).
The conv weight is stored F32 (as llama.cpp's converter keeps it); matrices F16.

Usage: /work/venv-hf/bin/python tools/reference/hf/make_lfm2.py
"""
from __future__ import annotations

import sys

import gguf
import numpy as np
import torch
from transformers import Lfm2Config, Lfm2ForCausalLM

import common

FAMILY = "lfm2"
SEED = 1902
EMBEDDING_STD = 0.25  # the tied embedding/head table (see above)
LAYER_TYPES = ["conv", "full_attention", "conv", "full_attention"]
CFG = dict(hidden_size=128, intermediate_size=192, block_auto_adjust_ff_dim=False, num_hidden_layers=4,
           num_attention_heads=4, num_key_value_heads=2, layer_types=LAYER_TYPES, conv_L_cache=3, conv_bias=False,
           norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
           max_position_embeddings=common.CONTEXT, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
           pad_token_id=0)


def write_gguf(model, tok: common.StoriesTokenizer):
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    path = common.fixture_dir() / f"{FAMILY}.gguf"
    out = common.GgufOut(path, "lfm2", "veloxquant tiny lfm2 (random weights, transformers-verified)", tok)
    w = out.writer
    out.decoder_shape(c, [c.num_key_value_heads if t == "full_attention" else 0 for t in c.layer_types])
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.norm_eps)
    w.add_shortconv_l_cache(c.conv_L_cache)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LFM2, c.num_hidden_layers)
    written = set()
    for hf_name, p in model.state_dict().items():
        if hf_name == "lm_head.weight":
            continue  # tied: llama.cpp reads token_embd.weight when output.weight is absent
        base, suffix = hf_name.rsplit(".", 1)
        name = names.get_name(base)
        assert name is not None, f"gguf-py has no LFM2 name for {hf_name}"
        name = f"{name}.{suffix}"
        if base.endswith("conv.conv"):
            out.writer.add_tensor(name, p.detach().float().squeeze(1).numpy().astype(np.float32))
        elif p.ndim >= 2:
            out.matrix(name, p)
        else:
            out.vector(name, p)
        written.add(name)
    assert "token_embd_norm.weight" in written and "blk.0.shortconv.conv.weight" in written, sorted(written)
    out.close()
    return path


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(Lfm2Config, Lfm2ForCausalLM, SEED, **CFG)
    assert [l.is_attention_layer for l in model.model.layers] == [t != "conv" for t in LAYER_TYPES]
    common.randomize_(model, SEED)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(EMBEDDING_STD)
    common.round_matrices_to_f16_(model)
    path = write_gguf(model, tok)
    common.record_fixture(FAMILY, model, path, tok, SEED, {"config": CFG})


if __name__ == "__main__":
    sys.exit(main())
