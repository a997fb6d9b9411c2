#!/usr/bin/env python3
"""A tiny random-weight LLaVA (CLIP ViT tower + 2-layer GELU MLP projector + llama) from Hugging
Face transformers, written as llama.cpp users have it: a text GGUF (llama) and an `mmproj` GGUF
(llama.cpp's clip metadata and tensor names), plus a test PNG and transformers' answer.

There is no VLM checkpoint small enough to commit, so the model is built from small configs
with a fixed seed and transformers itself is the independent implementation lm is checked
against (tests/lm/vlm/llava_reference_test.cpp). Matrices are rounded to f16 before
transformers runs and stored as F16, vectors as F32, so both sides compute the same function
from the same numbers.

The stories260K tokenizer and the llama Q/K reordering come from common.py (the text families'
shared pieces). Writes tests/fixtures/reference/hf/:
  llava_tiny.gguf          text model (llama, stories260K's 512-piece tokenizer copied in)
  llava_tiny.mmproj.gguf   CLIP vision tower + projector (clip.projector_type = mlp)
  llava_tiny.png           a 32x32 RGB test image (written here with zlib: no image library)
  llava_tiny.jpg           the same image as a baseline JPEG (quality 90, 4:4:4), by cjpeg from
                           Debian's libjpeg-turbo-progs when installed (the decoder test's input)
  llava_tiny.logits.f32    transformers' float32 logits for every prompt position, [n, 512]
  llava_tiny.json          prompt ids (image placeholders included), greedy tokens, spreads

Choices that mirror real LLaVA-1.5: vision_feature_layer -2 (the tower's second-to-last
hidden state), 'default' feature selection (CLS dropped), quick_gelu in the tower, exact
(erf) GELU in the projector. As llama.cpp's converter does for that layer choice, the mmproj
keeps only the tower layers that are run (block_count = 2 of 3) and records
clip.vision.feature_layer = [2]; the post-layernorm is not written (never applied).

Usage: /work/venv-hf/bin/python tools/reference/hf/make_llava.py
"""
from __future__ import annotations

import json
import pathlib
import shutil
import struct
import subprocess
import zlib

import numpy as np
import torch
import gguf
import transformers
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from common import StoriesTokenizer, fixture_dir, permute_for_normal_rope

SEED = 1234
IMAGE_SIZE, PATCH = 32, 8
N_IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2
IMAGE_TOKEN_ID = 3  # '<0x00>': a byte piece that plain text never produces
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
PROMPT = "Once upon a time, there was a"
N_GREEDY = 12

OUT = fixture_dir()


def build_model() -> LlavaForConditionalGeneration:
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                              image_size=IMAGE_SIZE, patch_size=PATCH, num_channels=3, layer_norm_eps=1e-5,
                              hidden_act="quick_gelu", projection_dim=32)
    text = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       tie_word_embeddings=False)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN_ID,
                         projector_hidden_act="gelu", vision_feature_select_strategy="default",
                         vision_feature_layer=-2, image_seq_length=N_IMAGE_TOKENS)
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(config).eval()
    randomize_(model, SEED)
    return model


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Random weights of a useful scale: matrices ~ N(0, 1/fan_in), norms around 1, biases small,
    embeddings O(1); the LM head larger so logits spread over several units. Matrices are rounded
    to f16 in place: what the GGUF stores (F16) is what transformers computes with."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                fan_in = p[0].numel()
                scale = 1.0 if "embed" in name else (3.0 if "lm_head" in name else 1.0) / fan_in ** 0.5
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            if p.ndim >= 2:
                p.copy_(p.half().float())


def f16(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float16)


def f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float32)


def write_text_gguf(lm, head, c, tok: StoriesTokenizer, path: pathlib.Path, name: str) -> None:
    """The llama text model `lm` (transformers LlamaModel) with its head as a llama GGUF."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    tok.copy_into(w)
    w.add_tensor("token_embd.weight", f16(lm.embed_tokens.weight))
    w.add_tensor("output_norm.weight", f32(lm.norm.weight))
    w.add_tensor("output.weight", f16(head.weight))
    for i, layer in enumerate(lm.layers):
        b = f"blk.{i}."
        a = layer.self_attn
        w.add_tensor(b + "attn_norm.weight", f32(layer.input_layernorm.weight))
        w.add_tensor(b + "attn_q.weight", f16(permute_for_normal_rope(a.q_proj.weight, c.num_attention_heads)))
        w.add_tensor(b + "attn_k.weight", f16(permute_for_normal_rope(a.k_proj.weight, c.num_key_value_heads)))
        w.add_tensor(b + "attn_v.weight", f16(a.v_proj.weight))
        w.add_tensor(b + "attn_output.weight", f16(a.o_proj.weight))
        w.add_tensor(b + "ffn_norm.weight", f32(layer.post_attention_layernorm.weight))
        w.add_tensor(b + "ffn_gate.weight", f16(layer.mlp.gate_proj.weight))
        w.add_tensor(b + "ffn_up.weight", f16(layer.mlp.up_proj.weight))
        w.add_tensor(b + "ffn_down.weight", f16(layer.mlp.down_proj.weight))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mmproj_gguf(model, path: pathlib.Path) -> int:
    vc = model.config.vision_config
    tower = model.model.vision_tower
    tower = getattr(tower, "vision_model", tower)  # transformers 4 wraps the tower once more
    proj = model.model.multi_modal_projector
    # hidden_states[k] is the output of k layers; -2 of (n + 1) states = n - 1 layers run.
    feature_layer = vc.num_hidden_layers + model.config.vision_feature_layer + 1
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("llava-tiny mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_llava_projector", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", False)  # quick_gelu, as CLIP ViT-L/14 in LLaVA-1.5
    w.add_uint32("clip.vision.image_size", vc.image_size)
    w.add_uint32("clip.vision.patch_size", vc.patch_size)
    w.add_uint32("clip.vision.embedding_length", vc.hidden_size)
    w.add_uint32("clip.vision.feed_forward_length", vc.intermediate_size)
    w.add_uint32("clip.vision.projection_dim", model.config.text_config.hidden_size)
    w.add_uint32("clip.vision.attention.head_count", vc.num_attention_heads)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", vc.layer_norm_eps)
    w.add_uint32("clip.vision.block_count", feature_layer)
    w.add_array("clip.vision.feature_layer", [feature_layer])
    w.add_array("clip.vision.image_mean", CLIP_MEAN)
    w.add_array("clip.vision.image_std", CLIP_STD)
    e = tower.embeddings
    w.add_tensor("v.class_embd", f32(e.class_embedding))
    w.add_tensor("v.patch_embd.weight", f16(e.patch_embedding.weight))  # torch [D, 3, P, P]
    w.add_tensor("v.position_embd.weight", f16(e.position_embedding.weight))
    w.add_tensor("v.pre_ln.weight", f32(tower.pre_layrnorm.weight))
    w.add_tensor("v.pre_ln.bias", f32(tower.pre_layrnorm.bias))
    for i in range(feature_layer):
        layer = tower.encoder.layers[i]
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
    w.add_tensor("mm.0.weight", f16(proj.linear_1.weight))
    w.add_tensor("mm.0.bias", f32(proj.linear_1.bias))
    w.add_tensor("mm.2.weight", f16(proj.linear_2.weight))
    w.add_tensor("mm.2.bias", f32(proj.linear_2.bias))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return feature_layer


def test_image() -> np.ndarray:
    """32x32 RGB: smooth gradients, a bright disc and a dark bar, so patches differ."""
    y, x = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE]
    r = 255 * x / (IMAGE_SIZE - 1)
    g = 255 * y / (IMAGE_SIZE - 1)
    b = 128 + 100 * np.sin(x / 3.0) * np.cos(y / 5.0)
    img = np.stack([r, g, b], axis=-1)
    img[(x - 20) ** 2 + (y - 11) ** 2 < 36] = [250, 240, 30]
    img[24:28, 4:28] = [10, 20, 90]
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def write_png(path: pathlib.Path, rgb: np.ndarray) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(h))  # filter 0 on every row
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    path.write_bytes(png)


def write_jpeg(path: pathlib.Path, rgb: np.ndarray) -> None:
    cjpeg = shutil.which("cjpeg")
    if not cjpeg:
        print(f"cjpeg not found (apt-get install libjpeg-turbo-progs): {path.name} left as it is")
        return
    h, w, _ = rgb.shape
    ppm = f"P6 {w} {h} 255\n".encode() + rgb.tobytes()
    jpeg = subprocess.run([cjpeg, "-quality", "90", "-sample", "1x1", "-baseline"], input=ppm, capture_output=True,
                          check=True).stdout
    path.write_bytes(jpeg)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tok = StoriesTokenizer()
    model = build_model()
    write_text_gguf(model.model.language_model, model.lm_head, model.config.text_config, tok, OUT / "llava_tiny.gguf",
                    "llava-tiny")
    feature_layer = write_mmproj_gguf(model, OUT / "llava_tiny.mmproj.gguf")
    rgb = test_image()
    write_png(OUT / "llava_tiny.png", rgb)
    write_jpeg(OUT / "llava_tiny.jpg", rgb)

    # CLIPImageProcessor's steps for an image already at the tower's size (no resize, no crop):
    # rescale by 1/255, normalise with the mean/std, channels first. (Done here in numpy: the
    # processor itself needs PIL, which this environment lacks.)
    pixel = (rgb.astype(np.float64) / 255.0 - np.array(CLIP_MEAN)) / np.array(CLIP_STD)
    pixel_values = torch.from_numpy(pixel.astype(np.float32).transpose(2, 0, 1).copy())[None]

    text_ids = tok.encode(PROMPT, add_bos=False)
    ids = [tok.bos] + [IMAGE_TOKEN_ID] * N_IMAGE_TOKENS + text_ids
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=input_ids, pixel_values=pixel_values).logits[0].float()
        m64 = build_model().double()
        logits64 = m64(input_ids=input_ids, pixel_values=pixel_values.double()).logits[0]
        spread = (logits.double() - logits64).abs().max().item()
        out = model.generate(input_ids=input_ids, pixel_values=pixel_values, max_new_tokens=N_GREEDY,
                             do_sample=False, eos_token_id=None, pad_token_id=tok.eos, min_new_tokens=0)
    greedy = out[0, len(ids):].tolist()
    logits.numpy().astype("<f4").tofile(OUT / "llava_tiny.logits.f32")
    meta = {
        "generator": "tools/reference/hf/make_llava.py",
        "seed": SEED,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "text_gguf": "llava_tiny.gguf",
        "mmproj_gguf": "llava_tiny.mmproj.gguf",
        "image": "llava_tiny.png",
        "logits_file": "llava_tiny.logits.f32",
        "vocab_size": 512,
        "prompt": PROMPT,
        "prompt_ids": text_ids,
        "image_token_id": IMAGE_TOKEN_ID,
        "n_image_tokens": N_IMAGE_TOKENS,
        "feature_layer": feature_layer,
        "tokens": ids,
        "tokens_note": "BOS, n_image_tokens placeholders (replaced by the projected image features), "
                       "then prompt_ids (the prompt encoded without BOS)",
        "logits_note": "transformers float32 logits of every position of `tokens`, [n_tokens, vocab] f32 LE",
        "greedy": greedy,
        "greedy_note": f"{N_GREEDY} tokens of transformers generate(do_sample=False), EOS not stopping",
        "f32_vs_f64": {"max_abs": spread},
        "pixel_values_first": pixel_values[0, :, 0, 0].tolist(),
    }
    (OUT / "llava_tiny.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"tokens {len(ids)}, greedy {greedy}, f32 vs f64 {spread:.3g}")


if __name__ == "__main__":
    main()
