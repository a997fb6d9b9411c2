#!/usr/bin/env python3
"""A tiny random-weight MistralForCausalLM (sliding-window attention) as a `llama` GGUF, with
transformers' logits and greedy tokens.

Config: vocabulary 512 (stories260K), hidden 128, 2 layers, 4 query heads of 32 sharing one KV
head, SwiGLU FFN 256, RoPE base 10^4, and a sliding window of 16 tokens on every layer, much
shorter than the 64-token passage, so the window decides what most positions see.

GGUF: llama.cpp's converter writes MistralForCausalLM as architecture `llama` (same tensors and
Q/K permutation as LlamaForCausalLM, make_llama.write_gguf). The window goes into
`llama.attention.sliding_window` (gguf's add_sliding_window). llama.cpp's `llama` loader does not
read that key (it attends over the whole context, which for Mistral 7B v0.1 is only the same
function up to 4096 tokens); lm applies it on every layer, as transformers does.

Usage: /work/venv-hf/bin/python tools/reference/hf/make_mistral.py
"""
from __future__ import annotations

import sys

from transformers import MistralConfig, MistralForCausalLM

import common
import make_llama

FAMILY = "mistral"
SEED = 1902
WINDOW = 16
CFG = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-5, rope_theta=10000.0,
           sliding_window=WINDOW, max_position_embeddings=common.CONTEXT, tie_word_embeddings=False,
           bos_token_id=1, eos_token_id=2)


def main() -> None:
    tok = common.StoriesTokenizer()
    common.fixture_dir().mkdir(parents=True, exist_ok=True)
    model = common.tiny_model(MistralConfig, MistralForCausalLM, SEED, **CFG)
    common.randomize_(model, SEED)
    common.round_matrices_to_f16_(model)
    path = make_llama.write_gguf(model, tok, FAMILY, lambda w: w.add_sliding_window(WINDOW))

    # The window must matter: the same weights without it give other logits.
    _, ids = common.fixture_passage(tok)
    ids = ids[:common.N_TOKENS]
    windowed = common._logits(model, ids, common.torch.float32)
    model.config.sliding_window = None
    full = common._logits(model, ids, common.torch.float32)
    model.config.sliding_window = WINDOW
    again = common._logits(model, ids, common.torch.float32)
    assert common.torch.equal(windowed, again)
    diff = (windowed - full).abs()
    assert float(diff[:WINDOW].max()) == 0.0, "positions inside the window must not change"
    assert float(diff[WINDOW:].max()) > 0.5, "the window changed nothing"
    extra = {"config": CFG, "window_effect": {
        "note": "transformers' logits with the window against the same model without it",
        "max_abs_first_window_positions": float(diff[:WINDOW].max()),
        "max_abs_after": float(diff[WINDOW:].max()),
        "top1_changed_after": int((windowed[WINDOW:].argmax(-1) != full[WINDOW:].argmax(-1)).sum())}}
    common.record_fixture(FAMILY, model, path, tok, SEED, extra)


if __name__ == "__main__":
    sys.exit(main())
