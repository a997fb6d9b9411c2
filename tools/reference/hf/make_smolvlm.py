#!/usr/bin/env python3
"""A tiny random-weight Idefics3 / SmolVLM (SigLIP tower + pixel-shuffle connector + llama) from
Hugging Face transformers, as llama.cpp users hold it: a text GGUF and an `mmproj` GGUF
(clip.projector_type = idefics3, llama.cpp's names), plus transformers' answer for an image.

Same recipe as make_llava.py (whose tokenizer, weight randomisation, GGUF text writer and test
image it reuses): matrices rounded to f16 before transformers runs and stored as F16 (the patch
and position embeddings F32, as llama.cpp's SmolVLM converter forces), vectors F32. The tower:
32 wide, 2 blocks, 32x32 images in 4x4 patches (64 patches), every block run then the
post-LayerNorm, GELU (tanh); the connector shuffles 2x2 blocks of patches into one row (16
image rows of 128) and maps them to the llama's 64 wide embeddings without bias.

The image is given to transformers at the tower's size (no resize, no tiling: the processor
needs PIL, absent here), normalised with SigLIP's mean/std (0.5); the prompt ids are BOS, the
16 image placeholders, the prompt — the Idefics3 processor's <fake_token_around_image> /
<global-img> wrapping needs tokens stories260K's vocabulary does not have.

Writes tests/fixtures/reference/hf/smolvlm_tiny.{gguf, mmproj.gguf, logits.f32, json}; the
image is llava_tiny.png (make_llava.py).

Usage: /work/venv-hf/bin/python tools/reference/hf/make_smolvlm.py
"""
from __future__ import annotations

import json

import numpy as np
import torch
import gguf
import transformers
from transformers import Idefics3Config, Idefics3ForConditionalGeneration, LlamaConfig
from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

from common import StoriesTokenizer
from make_llava import OUT, PROMPT, f16, f32, randomize_, test_image, write_text_gguf

SEED = 4321
IMAGE_SIZE, PATCH, SCALE = 32, 4, 2
N_IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2 // SCALE ** 2
IMAGE_TOKEN_ID = 3
SIGLIP_MEAN = [0.5, 0.5, 0.5]
SIGLIP_STD = [0.5, 0.5, 0.5]
N_GREEDY = 12


def build_model() -> Idefics3ForConditionalGeneration:
    vision = Idefics3VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=IMAGE_SIZE, patch_size=PATCH, hidden_act="gelu_pytorch_tanh",
                                  layer_norm_eps=1e-6)
    text = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       tie_word_embeddings=False)
    config = Idefics3Config(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN_ID, scale_factor=SCALE)
    torch.manual_seed(SEED)
    model = Idefics3ForConditionalGeneration(config).eval()
    randomize_(model, SEED)
    return model


def write_mmproj_gguf(model, path) -> None:
    vc = model.config.vision_config
    tower = model.model.vision_model
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("smolvlm-tiny mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "idefics3")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", vc.image_size)
    w.add_uint32("clip.vision.patch_size", vc.patch_size)
    w.add_uint32("clip.vision.embedding_length", vc.hidden_size)
    w.add_uint32("clip.vision.feed_forward_length", vc.intermediate_size)
    w.add_uint32("clip.vision.projection_dim", model.config.text_config.hidden_size)
    w.add_uint32("clip.vision.attention.head_count", vc.num_attention_heads)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", vc.layer_norm_eps)
    w.add_uint32("clip.vision.block_count", vc.num_hidden_layers)
    w.add_uint32("clip.vision.projector.scale_factor", model.config.scale_factor)
    w.add_array("clip.vision.image_mean", SIGLIP_MEAN)
    w.add_array("clip.vision.image_std", SIGLIP_STD)
    e = tower.embeddings
    w.add_tensor("v.patch_embd.weight", f32(e.patch_embedding.weight))
    w.add_tensor("v.patch_embd.bias", f32(e.patch_embedding.bias))
    w.add_tensor("v.position_embd.weight", f32(e.position_embedding.weight))
    for i, layer in enumerate(tower.encoder.layers):
        b = f"v.blk.{i}."
        a = layer.self_attn
        for name, lin in (("attn_q", a.q_proj), ("attn_k", a.k_proj), ("attn_v", a.v_proj), ("attn_out", a.out_proj),
                          ("ffn_up", layer.mlp.fc1), ("ffn_down", layer.mlp.fc2)):
            w.add_tensor(b + name + ".weight", f16(lin.weight))
            w.add_tensor(b + name + ".bias", f32(lin.bias))
        w.add_tensor(b + "ln1.weight", f32(layer.layer_norm1.weight))
        w.add_tensor(b + "ln1.bias", f32(layer.layer_norm1.bias))
        w.add_tensor(b + "ln2.weight", f32(layer.layer_norm2.weight))
        w.add_tensor(b + "ln2.bias", f32(layer.layer_norm2.bias))
    w.add_tensor("v.post_ln.weight", f32(tower.post_layernorm.weight))
    w.add_tensor("v.post_ln.bias", f32(tower.post_layernorm.bias))
    w.add_tensor("mm.model.fc.weight", f16(model.model.connector.modality_projection.proj.weight))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    tok = StoriesTokenizer()
    model = build_model()
    write_text_gguf(model.model.text_model, model.lm_head, model.config.text_config, tok, OUT / "smolvlm_tiny.gguf",
                    "smolvlm-tiny")
    write_mmproj_gguf(model, OUT / "smolvlm_tiny.mmproj.gguf")
    rgb = test_image()
    pixel = (rgb.astype(np.float64) / 255.0 - np.array(SIGLIP_MEAN)) / np.array(SIGLIP_STD)
    pixel_values = torch.from_numpy(pixel.astype(np.float32).transpose(2, 0, 1).copy())[None, None]  # [1, 1, 3, H, W]

    text_ids = tok.encode(PROMPT, add_bos=False)
    ids = [tok.bos] + [IMAGE_TOKEN_ID] * N_IMAGE_TOKENS + text_ids
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=input_ids, pixel_values=pixel_values).logits[0].float()
        logits64 = build_model().double()(input_ids=input_ids, pixel_values=pixel_values.double()).logits[0]
        spread = (logits.double() - logits64).abs().max().item()
        out = model.generate(input_ids=input_ids, pixel_values=pixel_values, max_new_tokens=N_GREEDY,
                             do_sample=False, eos_token_id=None, pad_token_id=tok.eos, min_new_tokens=0)
        inverted = model(input_ids=input_ids, pixel_values=-pixel_values).logits[0]
    greedy = out[0, len(ids):].tolist()
    logits.numpy().astype("<f4").tofile(OUT / "smolvlm_tiny.logits.f32")
    meta = {
        "generator": "tools/reference/hf/make_smolvlm.py",
        "seed": SEED,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "text_gguf": "smolvlm_tiny.gguf",
        "mmproj_gguf": "smolvlm_tiny.mmproj.gguf",
        "image": "llava_tiny.png",
        "logits_file": "smolvlm_tiny.logits.f32",
        "vocab_size": 512,
        "prompt": PROMPT,
        "prompt_ids": text_ids,
        "image_token_id": IMAGE_TOKEN_ID,
        "n_image_tokens": N_IMAGE_TOKENS,
        "tokens": ids,
        "tokens_note": "BOS, n_image_tokens placeholders (replaced by the connector's rows), then prompt_ids",
        "logits_note": "transformers float32 logits of every position of `tokens`, [n_tokens, vocab] f32 LE",
        "greedy": greedy,
        "greedy_note": f"{N_GREEDY} tokens of transformers generate(do_sample=False), EOS not stopping",
        "f32_vs_f64": {"max_abs": spread},
        "inverted_image_max_logit_change": (inverted - logits).abs().max().item(),
    }
    (OUT / "smolvlm_tiny.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"tokens {len(ids)}, greedy {greedy}, f32 vs f64 {spread:.3g}, "
          f"inverted image moves logits by {meta['inverted_image_max_logit_change']:.3g}")


if __name__ == "__main__":
    main()
