"""Shared pieces of the transformers-verified family fixtures (tools/reference/hf/make_<family>.py).

Every family script builds a tiny random-weight Hugging Face transformers model of its
architecture (fixed seed, the 512-piece stories260K vocabulary), writes it as a GGUF file with
llama.cpp's metadata keys and tensor names for that architecture, and records what
transformers computes on a fixed passage:

  tests/fixtures/reference/hf/<family>.gguf         the model (F16 matrices, F32 vectors)
  tests/fixtures/reference/hf/<family>.logits.f32   transformers' float32 logits, [n_tokens, 512]
                                                    row-major, little-endian
  tests/fixtures/reference/hf/<family>.json         tokens, greedy continuation, versions, the
                                                    measured spread the C++ tests' tolerances use

What this module gives a family script:
  - StoriesTokenizer: the stories260K SentencePiece vocabulary (encode, and copy into a GGUF);
  - fixture_passage(): the fixed token sequence (BOS + the start of tinyshakespeare.txt);
  - randomize_(): weights drawn so logits spread over several units (transformers' own init,
    std 0.02, gives near-uniform logits whose argmax is a coin toss between implementations);
  - round_matrices_to_f16_(): the model computes with exactly the weights the GGUF's F16 tensors
    hold, so the only differences left are arithmetic;
  - GgufOut: a gguf.GGUFWriter with the tokenizer copied in and F16/F32 tensor helpers;
  - record_fixture(): logits, greedy tokens (transformers' generate, do_sample=False) and JSON.

Matrices are F16 to keep each family's committed files well under 1.5 MB.
"""
from __future__ import annotations

import copy
import hashlib
import json
import pathlib
import platform
import sys

import gguf
import numpy as np
import torch

VOCAB = 512
N_TOKENS = 64      # passage length (BOS included)
N_GREEDY = 16      # greedy continuation length
CONTEXT = 256      # context length written into every fixture GGUF (passage + continuation fit)


def repo_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[3]


def shared_dir() -> pathlib.Path:
    return repo_root().parent / "shared"


def fixture_dir() -> pathlib.Path:
    return repo_root() / "tests/fixtures/reference/hf"


STORIES_GGUF = shared_dir() / "models/stories260K/stories260K.gguf"
PASSAGE_TEXT = shared_dir() / "data/tinyshakespeare.txt"


class StoriesTokenizer:
    """stories260K's 512-piece SentencePiece (BPE, byte fallback) vocabulary, read from its GGUF.

    encode() is the SentencePiece BPE rule: the text with spaces as U+2581 and one prefixed,
    split into characters, then repeatedly merge the adjacent pair whose joined piece has the
    highest score (leftmost on ties); pieces not in the vocabulary become <0xXX> byte tokens.
    """

    def __init__(self, path: pathlib.Path = STORIES_GGUF):
        r = gguf.GGUFReader(str(path))
        f = r.fields
        self.model = f["tokenizer.ggml.model"].contents()
        self.tokens = list(f["tokenizer.ggml.tokens"].contents())
        self.scores = [float(s) for s in f["tokenizer.ggml.scores"].contents()]
        self.token_types = [int(t) for t in f["tokenizer.ggml.token_type"].contents()]
        self.bos = int(f["tokenizer.ggml.bos_token_id"].contents())
        self.eos = int(f["tokenizer.ggml.eos_token_id"].contents())
        self.unk = int(f["tokenizer.ggml.unknown_token_id"].contents())
        self.index = {t: i for i, t in enumerate(self.tokens)}
        assert len(self.tokens) == VOCAB, f"{path} has {len(self.tokens)} pieces, expected {VOCAB}"

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        symbols = list("\u2581" + text.replace(" ", "\u2581"))
        while True:
            best, best_score = -1, -float("inf")
            for i in range(len(symbols) - 1):
                piece = symbols[i] + symbols[i + 1]
                j = self.index.get(piece)
                if j is not None and self.scores[j] > best_score:
                    best, best_score = i, self.scores[j]
            if best < 0:
                break
            symbols[best:best + 2] = [symbols[best] + symbols[best + 1]]
        ids = [self.bos] if add_bos else []
        for s in symbols:
            if s in self.index:
                ids.append(self.index[s])
            else:
                ids.extend(self.index[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
        return ids

    def copy_into(self, writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model(self.model)
        writer.add_token_list(self.tokens)
        writer.add_token_scores(self.scores)
        writer.add_token_types(self.token_types)
        writer.add_bos_token_id(self.bos)
        writer.add_eos_token_id(self.eos)
        writer.add_unk_token_id(self.unk)


def fixture_passage(tok: StoriesTokenizer, n_tokens: int = N_TOKENS) -> tuple[str, list[int]]:
    """The fixed token sequence: BOS + the encoding of the start of tinyshakespeare.txt, cut to
    n_tokens ids; and a text with its full encoding (for the C++ tokenizer check)."""
    text = PASSAGE_TEXT.read_text(encoding="utf-8")[:300]
    ids = tok.encode(text)
    assert len(ids) >= n_tokens, len(ids)
    return text, ids


def randomize_(model: torch.nn.Module, seed: int, *, head_scale: float = 3.0, norm_base: float = 1.0,
               norm_spread: float = 0.1, bias_spread: float = 0.1) -> None:
    """Redraws every parameter from a seeded generator.

    Matrices: Gaussian with std 1/sqrt(fan_in) (activations stay O(1) through the layers),
    except the output head (`lm_head`), std head_scale/sqrt(fan_in), so logits spread over a
    few units and the argmax is a decision, not a tie. Embedding tables: std 1. Vectors whose
    name contains 'norm': norm_base + N(0, norm_spread) (norm_base 0 for Gemma's (1 + w) norms);
    other vectors (biases): N(0, bias_spread).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                fan_in = p.shape[-1]
                if "embed" in name:
                    std = 1.0
                elif "lm_head" in name:
                    std = head_scale / fan_in ** 0.5
                else:
                    std = 1.0 / fan_in ** 0.5
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * std)
            elif "norm" in name:
                p.copy_(norm_base + norm_spread * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
            else:
                p.copy_(bias_spread * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))


def round_matrices_to_f16_(model: torch.nn.Module) -> None:
    """Rounds every matrix parameter to the nearest f16 value (kept in f32): the GGUF stores
    them as F16, so transformers and the C++ host then compute with identical weights."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(p.to(torch.float16).to(p.dtype))


def f16_matrix(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).numpy().astype(np.float16)


def f32_vector(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).numpy().astype(np.float32)


class GgufOut:
    """A GGUF file for one family: general.* and the tokenizer written, tensors F16 (matrices)
    or F32 (vectors). The family adds its own metadata through .writer (gguf's add_* methods
    write keys prefixed with the architecture name, as llama.cpp reads them)."""

    def __init__(self, path: pathlib.Path, arch: str, name: str, tok: StoriesTokenizer):
        self.path = path
        self.writer = gguf.GGUFWriter(str(path), arch=arch)
        self.writer.add_name(name)
        self.writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        tok.copy_into(self.writer)
        self.writer.add_vocab_size(len(tok.tokens))
        self.writer.add_context_length(CONTEXT)

    def decoder_shape(self, c, head_count_kv=None, head_dim: int | None = None) -> None:
        """The keys every decoder family writes first, in one order (the fixtures' bytes depend on
        it): width, FFN width, layers, query heads, KV heads (a per-layer list where some layers
        have none), then key/value length when head_dim is given."""
        w = self.writer
        w.add_embedding_length(c.hidden_size)
        w.add_feed_forward_length(c.intermediate_size)
        w.add_block_count(c.num_hidden_layers)
        w.add_head_count(c.num_attention_heads)
        w.add_head_count_kv(c.num_key_value_heads if head_count_kv is None else head_count_kv)
        if head_dim is not None:
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)

    def matrix(self, name: str, t: torch.Tensor | np.ndarray) -> None:
        a = t if isinstance(t, np.ndarray) else f16_matrix(t)
        assert a.ndim == 2, name
        self.writer.add_tensor(name, a.astype(np.float16))

    def vector(self, name: str, t: torch.Tensor | np.ndarray) -> None:
        a = t if isinstance(t, np.ndarray) else f32_vector(t)
        assert a.ndim == 1, name
        self.writer.add_tensor(name, a.astype(np.float32))

    def close(self) -> int:
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_tensors_to_file()
        self.writer.close()
        return self.path.stat().st_size


def permute_for_normal_rope(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Q/K rows reordered from transformers' rotate-half RoPE layout (per head: the first halves
    of the pairs, then the second halves) to the adjacent-pair layout llama.cpp's `llama`
    architecture rotates (what convert_hf_to_gguf.py does for LlamaForCausalLM)."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.reshape(n_heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)


def rope_theta(config) -> float:
    """The RoPE base of a transformers config (transformers 5 keeps it in rope_parameters)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    if isinstance(params, dict) and "full_attention" in params:
        return float(params["full_attention"]["rope_theta"])
    return float(config.rope_theta)


def versions() -> dict:
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__, "gguf": _gguf_version(),
            "numpy": np.__version__, "python": platform.python_version()}


def _gguf_version() -> str:
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:  # pragma: no cover
        return "unknown"


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = str(v)
    return out


@torch.no_grad()
def _logits(model: torch.nn.Module, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    return model(torch.tensor([ids], dtype=torch.long)).logits[0].to(dtype)


@torch.no_grad()
def record_fixture(family: str, model: torch.nn.Module, gguf_path: pathlib.Path, tok: StoriesTokenizer,
                   seed: int, extra: dict | None = None) -> dict:
    """Runs `model` (already randomized, f16-rounded, eval mode, eager attention) on the fixed
    passage and writes <family>.logits.f32 and <family>.json beside the GGUF."""
    model.eval()
    text, text_ids = fixture_passage(tok)
    ids = text_ids[:N_TOKENS]
    logits = _logits(model, ids, torch.float32)
    assert logits.shape == (N_TOKENS, VOCAB), logits.shape

    # Transformers' own float32 rounding: the same model in float64. The C++ test's tolerance
    # for lm (f32 arithmetic, different summation order) is a small multiple of this spread.
    model64 = copy.deepcopy(model).to(torch.float64)
    logits64 = _logits(model64, ids, torch.float64)
    d32 = (logits.double() - logits64).abs()
    top1_32 = logits.argmax(-1)
    top1_64 = logits64.argmax(-1)
    top2 = logits.topk(2, dim=-1).values
    gaps = (top2[:, 0] - top2[:, 1]).double()

    # Greedy continuation with transformers' generate (its KV cache, one token per step); EOS
    # may be chosen like any other token and does not stop it.
    gen_cfg = copy.deepcopy(model.generation_config)
    gen_cfg.eos_token_id = None
    gen_cfg.pad_token_id = tok.eos
    gen_cfg.do_sample = False
    gen_cfg.max_new_tokens = N_GREEDY
    gen_cfg.min_new_tokens = 0
    gen_cfg.temperature = None
    gen_cfg.top_p = None
    gen_cfg.top_k = None
    out = model.generate(torch.tensor([ids], dtype=torch.long), generation_config=gen_cfg,
                         attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    greedy = out[0, len(ids):].tolist()
    assert len(greedy) == N_GREEDY, greedy
    # The same continuation by full recomputation, and the top-1/top-2 gap of every choice: a
    # gap near zero would make the greedy check a coin toss, so it is recorded.
    seq = list(ids)
    greedy_gaps = []
    for _ in range(N_GREEDY):
        row = _logits(model, seq, torch.float64)[-1]
        v = row.topk(2).values
        greedy_gaps.append(float(v[0] - v[1]))
        seq.append(int(row.argmax()))
    assert seq[len(ids):] == greedy, ("generate and full recomputation disagree", greedy, seq[len(ids):])

    base = fixture_dir() / family
    logits_path = base.with_suffix(".logits.f32")
    logits.numpy().astype("<f4").tofile(logits_path)
    cfg = model.config.to_dict()
    meta = {
        "family": family,
        "hf_class": type(model).__name__,
        "hf_config": _jsonable(cfg),
        "seed": seed,
        "versions": versions(),
        "gguf_file": gguf_path.name,
        "gguf_sha256": hashlib.sha256(gguf_path.read_bytes()).hexdigest(),
        "vocab_size": VOCAB,
        "tokenizer_check": {"text": text, "add_bos": True, "ids": text_ids},
        "tokens": ids,
        "tokens_note": f"the first {N_TOKENS} ids of tokenizer_check",
        "logits_file": logits_path.name,
        "logits_note": "transformers float32 logits of every position of `tokens`, [n_tokens, vocab] f32 LE; "
                       "row p scores the token after tokens[0..p]",
        "top1": top1_32.tolist(),
        "top1_top2_gap_min": float(gaps.min()),
        "f32_vs_f64": {"max_abs": float(d32.max()), "mean_abs": float(d32.mean()),
                       "top1_agree": int((top1_32 == top1_64).sum()), "positions": N_TOKENS},
        "logit_std": float(logits.double().std()),
        "greedy": greedy,
        "greedy_gaps": greedy_gaps,
        "greedy_note": f"{N_GREEDY} tokens of transformers generate(do_sample=False) after `tokens`, "
                       "EOS not stopping",
    }
    if extra:
        meta.update(extra)
    with open(base.with_suffix(".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    sizes = {p.name: p.stat().st_size for p in (gguf_path, logits_path, base.with_suffix(".json"))}
    print(f"{family}: f32 vs f64 max |d| {meta['f32_vs_f64']['max_abs']:.2e}, logit std {meta['logit_std']:.2f}, "
          f"min top-1 gap {meta['top1_top2_gap_min']:.3f}, min greedy gap {min(greedy_gaps):.3f}; "
          f"files {sizes} = {sum(sizes.values())} bytes", file=sys.stderr)
    return meta


def tiny_model(config_cls, model_cls, seed: int, **config_kwargs) -> torch.nn.Module:
    """A float32 transformers model of `config_cls(**config_kwargs)` with eager attention,
    weights from randomize_() are the caller's next step."""
    torch.manual_seed(seed)
    config = config_cls(vocab_size=VOCAB, **config_kwargs)
    config._attn_implementation = "eager"
    model = model_cls(config).to(torch.float32)
    model.eval()
    return model
