"""What the mixture-of-experts family scripts share (make_qwen3moe.py, make_mixtral.py): the
transformers 5 expert stacks (`mlp.experts.gate_up_proj` [E, 2F, dim] with gate first,
`mlp.experts.down_proj` [E, dim, F]) stored as llama.cpp's 3-D GGUF tensors ffn_{gate,up,down}_exps
in a chosen type, with the model made to compute with exactly the stored values, and the
routing margin of a passage. (A separate module beside common.py, which wt-hf-dense owns.)
"""
from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants

import common

EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def quantize_experts_(model, expert_types) -> dict[str, np.ndarray]:
    """Layer by layer, the expert tensors as the GGUF stores them (numpy, GGUF-ready: F16 values
    or block bytes from gguf.quants.quantize), after putting their dequantized values back into the model."""
    stored: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            if expert_types[i] is None:
                continue
            ex = layer.mlp.experts
            F = ex.down_proj.shape[2]
            parts = {"ffn_gate_exps": ex.gate_up_proj[:, :F, :], "ffn_up_exps": ex.gate_up_proj[:, F:, :],
                     "ffn_down_exps": ex.down_proj}
            back = {}
            for name, t in parts.items():
                a = t.detach().to(torch.float32).numpy()
                if expert_types[i] == T.F16:
                    raw = a.astype(np.float16)
                    back[name] = raw.astype(np.float32)
                else:
                    raw = quants.quantize(np.ascontiguousarray(a), expert_types[i])
                    back[name] = quants.dequantize(raw, expert_types[i]).astype(np.float32).reshape(a.shape)
                stored[f"blk.{i}.{name}.weight"] = raw
            ex.gate_up_proj.copy_(torch.from_numpy(np.concatenate([back["ffn_gate_exps"], back["ffn_up_exps"]], axis=1)))
            ex.down_proj.copy_(torch.from_numpy(back["ffn_down_exps"]))
    return stored


def write_expert_tensors(out: common.GgufOut, layer: int, qtype: T, experts: dict[str, np.ndarray]) -> None:
    """Layer `layer`'s three expert tensors, as quantize_experts_ returned them."""
    for name in EXPERT_TENSORS:
        full = f"blk.{layer}.{name}.weight"
        if qtype == T.F16:
            out.writer.add_tensor(full, experts[full])
        else:
            out.writer.add_tensor(full, experts[full], raw_dtype=qtype)


@torch.no_grad()
def routing_gap_min(model, ids: list[int]) -> float:
    k = model.config.num_experts_per_tok
    gaps = []

    def hook(_module, _inputs, output):
        probs = torch.softmax(output[0].double(), dim=-1)  # router logits
        top = probs.topk(k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    handles = [layer.mlp.gate.register_forward_hook(hook) for layer in model.model.layers
               if hasattr(layer.mlp, "experts")]
    model(torch.tensor([ids], dtype=torch.long))
    for h in handles:
        h.remove()
    return min(gaps)
