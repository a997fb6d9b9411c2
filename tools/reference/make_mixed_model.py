#!/usr/bin/env python3
"""A tiny random-weight `llama` GGUF whose tensors use every GGML type of lm's first set.

(The formats added later, Q5_0 ... IQ4_XS, are in make_new_formats_model.py's model.)

Real small models cannot carry the K-quants (SmolLM2's 576 columns and stories260K's 64/172
are not multiples of 256), so this model exists to run each type through a whole forward in
llama.cpp and in lm. Dimensions: dim 256, 4 heads of 64 sharing 1 KV head, FFN 256, 2 layers,
separate output head; vocabulary and tokenizer metadata copied from stories260K.gguf (512
SentencePiece pieces), so llama.cpp loads it as an ordinary model.

Tensor types (each type appears at least once as a matmul weight; token_embd is read by
row lookup):

  token_embd Q4_K | output Q6_K | norms F32
  blk.0: attn_q Q4_0, attn_k F16,  attn_v BF16, attn_output Q8_0, ffn_gate Q4_1, ffn_up Q6_K, ffn_down Q4_K
  blk.1: attn_q Q6_K, attn_k BF16, attn_v F16,  attn_output Q4_1, ffn_gate Q8_0, ffn_up Q4_0, ffn_down Q4_K
(F16/BF16 sit on the small K/V projections to keep the file under 0.8 MB.)

Weights are Gaussian with std 1/sqrt(fan_in) (activations stay O(1) through the layers),
the output head 3/sqrt(dim) so logits spread over several units. Quantized with
gguf.quants.quantize where gguf-py can (BF16, Q8_0, Q4_0, Q4_1), else with llama.cpp's
ggml_quantize_chunk (Q4_K, Q6_K), as make_weight_fixtures.py does.

Usage: python3 tools/reference/make_mixed_model.py [--out PATH]
"""
from __future__ import annotations

import argparse
import pathlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

from make_weight_fixtures import ggml_lib, quantize, repo_root

SEED = 7
DIM, N_HEADS, N_KV, FFN, N_LAYERS = 256, 4, 1, 256, 2
LAYER_TYPES = [
    {"attn_q": T.Q4_0, "attn_k": T.F16, "attn_v": T.BF16, "attn_output": T.Q8_0,
     "ffn_gate": T.Q4_1, "ffn_up": T.Q6_K, "ffn_down": T.Q4_K},
    {"attn_q": T.Q6_K, "attn_k": T.BF16, "attn_v": T.F16, "attn_output": T.Q4_1,
     "ffn_gate": T.Q8_0, "ffn_up": T.Q4_0, "ffn_down": T.Q4_K},
]


def shared_dir() -> pathlib.Path:
    return repo_root().parent / "shared"


def add(writer: gguf.GGUFWriter, lib, name: str, values: np.ndarray, qtype: T) -> None:
    values = values.astype(np.float32)
    if qtype == T.F32:
        writer.add_tensor(name, values)
    elif qtype == T.F16:
        writer.add_tensor(name, values.astype(np.float16))
    else:
        writer.add_tensor(name, quantize(lib, values, qtype), raw_dtype=qtype)


def copy_tokenizer(writer: gguf.GGUFWriter, source: pathlib.Path) -> int:
    r = gguf.GGUFReader(str(source))
    f = r.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    writer.add_tokenizer_model(f["tokenizer.ggml.model"].contents())
    writer.add_token_list(tokens)
    writer.add_token_scores(f["tokenizer.ggml.scores"].contents())
    writer.add_token_types(f["tokenizer.ggml.token_type"].contents())
    writer.add_bos_token_id(int(f["tokenizer.ggml.bos_token_id"].contents()))
    writer.add_eos_token_id(int(f["tokenizer.ggml.eos_token_id"].contents()))
    writer.add_unk_token_id(int(f["tokenizer.ggml.unknown_token_id"].contents()))
    return len(tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(repo_root() / "tests/fixtures/reference/models/mixed_types.gguf"))
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    lib = ggml_lib()
    head_dim = DIM // N_HEADS

    writer = gguf.GGUFWriter(args.out, arch="llama")
    writer.add_name("veloxquant mixed-type reference model (random weights)")
    vocab = copy_tokenizer(writer, shared_dir() / "models/stories260K/stories260K.gguf")
    writer.add_context_length(512)
    writer.add_embedding_length(DIM)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(N_LAYERS)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)

    def gauss(rows: int, cols: int, scale: float) -> np.ndarray:
        return rng.normal(0.0, scale / np.sqrt(cols), size=(rows, cols))

    def norm() -> np.ndarray:
        return 1.0 + rng.normal(0.0, 0.1, size=DIM)

    add(writer, lib, "token_embd.weight", rng.normal(0.0, 1.0, size=(vocab, DIM)), T.Q4_K)
    for layer, types in enumerate(LAYER_TYPES):
        p = f"blk.{layer}."
        add(writer, lib, p + "attn_norm.weight", norm(), T.F32)
        add(writer, lib, p + "attn_q.weight", gauss(DIM, DIM, 1.0), types["attn_q"])
        add(writer, lib, p + "attn_k.weight", gauss(N_KV * head_dim, DIM, 1.0), types["attn_k"])
        add(writer, lib, p + "attn_v.weight", gauss(N_KV * head_dim, DIM, 1.0), types["attn_v"])
        add(writer, lib, p + "attn_output.weight", gauss(DIM, DIM, 1.0), types["attn_output"])
        add(writer, lib, p + "ffn_norm.weight", norm(), T.F32)
        add(writer, lib, p + "ffn_gate.weight", gauss(FFN, DIM, 1.0), types["ffn_gate"])
        add(writer, lib, p + "ffn_up.weight", gauss(FFN, DIM, 1.0), types["ffn_up"])
        add(writer, lib, p + "ffn_down.weight", gauss(DIM, FFN, 1.0), types["ffn_down"])
    add(writer, lib, "output_norm.weight", norm(), T.F32)
    add(writer, lib, "output.weight", gauss(vocab, DIM, 3.0), T.Q6_K)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out} ({pathlib.Path(args.out).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
