#!/usr/bin/env python3
"""Weight-format fixtures: one small GGUF file per GGML tensor type + independent reference values.

For each type in TYPES this writes, under tests/fixtures/reference/weights/:

  <type>.gguf      a GGUF v3 file (gguf-py's GGUFWriter) holding three tensors of that type:
                     "w.matrix" [ROWS x COLS]  realistic weights quantized by a real quantizer
                     "w.edge"   [4 x COLS]     rows that hit the corner cases (an all-zero row,
                                               a row of tiny values, a row with one big outlier,
                                               a constant row)
                     "w.odd"    [5 x 256]      realistic, a row count that is not a multiple of 4
                                               (kernels working on groups of rows have a tail)
                     "w.raw"    [4 x COLS]     random but valid raw blocks: random code bytes and
                                               random finite f16 scales (every bit pattern of the
                                               packed scales / high bits is reachable)
                                   (F32/F16/BF16 have no blocks: "w.raw" holds random finite
                                    bit patterns of the element type instead, subnormals included)
  <type>.ref.bin   little-endian arrays, located by the manifest (offset/count/dtype):
                     deq.<tensor>   f32, row-major, gguf-py's gguf.quants.dequantize of the tensor
                     x.<tensor>     f32 [COLS], a random input vector
                     y.<tensor>     f64 [rows], sum_j deq[r, j] * x[j] accumulated in float64
                     absterms.<tensor> f64 [rows], sum_j (|scale_term[r, j]| + |offset_term[r, j]|) * |x[j]|
                                   where deq = scale_term + offset_term (d*q and the block
                                   min: m for Q4_1, -dmin*mn for Q4_K; zero for other types).
                                   It is the magnitude of what a factored f32 dot really
                                   sums, so it bounds its rounding error (see the test).
  manifest.json    versions, per type: file names, sha256, tensor shapes, array locations

Two independent dequantizers are compared before anything is written: gguf-py's numpy code
(the reference stored) and llama.cpp's own C dequantize_row_* from the libggml-base that
llama-cpp-python ships. They must agree to the bit, or the script stops.

Quantizers: gguf.quants.quantize for BF16, Q8_0, Q4_0, Q4_1 (as gguf-py supports them);
gguf-py cannot quantize Q4_K/Q6_K, so for those we call llama.cpp's ggml_quantize_chunk
(the code llama-quantize uses), giving the same block statistics as real model files.

Usage: python3 tools/reference/make_weight_fixtures.py [--out DIR]
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.metadata
import json
import os
import pathlib
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS, EDGE_ROWS, RAW_ROWS = 8, 512, 4, 4
SEED = 20240611
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]

# Byte offsets of the f16 scale fields inside one block (ggml-common.h layouts); every other
# byte of a block is a code / packed-scale byte for which any value is valid.
F16_FIELDS = {
    "Q4_0": [0],        # d, qs[16]                                   18 bytes
    "Q4_1": [0, 2],     # d, m, qs[16]                                20 bytes
    "Q8_0": [0],        # d, qs[32] int8                              34 bytes
    "Q4_K": [0, 2],     # d, dmin, scales[12] (6-bit packed), qs[128] 144 bytes
    "Q6_K": [208],      # ql[128], qh[64], scales[16] int8, d         210 bytes
}


def repo_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[2]


def ggml_lib() -> ctypes.CDLL:
    import llama_cpp  # noqa: F401  (only to locate its bundled libggml-base)
    libdir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    lib = ctypes.CDLL(str(libdir / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def realistic_weights(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    # Trained matrices: roughly Gaussian with per-row scale spread and heavy tails (a few
    # outliers per row), which is what makes block scales and mins non-trivial.
    row_scale = 0.02 * np.exp(rng.normal(0.0, 0.5, size=(rows, 1)))
    w = rng.standard_t(df=4, size=(rows, cols)) * row_scale
    w += rng.normal(0.0, 0.005, size=(rows, 1))  # a per-row offset exercises Q4_1/Q4_K mins
    return w.astype(np.float32)


def edge_weights(rng: np.random.Generator, cols: int) -> np.ndarray:
    e = np.zeros((EDGE_ROWS, cols), dtype=np.float32)
    e[1] = rng.normal(0.0, 1e-6, size=cols)           # tiny: f16 scales become subnormal
    e[2] = rng.normal(0.0, 0.01, size=cols)
    e[2, cols // 3] = 3.5                              # one outlier dominates its block
    e[3] = 0.125                                       # constant row: zero range per block
    return e


def quantize(lib: ctypes.CDLL, data: np.ndarray, qtype: T) -> np.ndarray:
    if qtype in (T.Q4_K, T.Q6_K):
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        rows, cols = data.shape
        src = np.ascontiguousarray(data, dtype=np.float32)
        out = np.zeros((rows, cols // block * type_size), dtype=np.uint8)
        n = lib.ggml_quantize_chunk(int(qtype), src.ctypes.data, out.ctypes.data, 0, rows, cols, None)
        assert n == out.nbytes, (n, out.nbytes)
        return out
    q = quants.quantize(data, qtype)
    return q


def random_f16_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    # Finite, signed, spanning normal and a few subnormal magnitudes.
    mag = np.exp(rng.uniform(np.log(1e-7), np.log(0.05), size=n))
    sign = np.where(rng.random(n) < 0.8, 1.0, -1.0)
    return (mag * sign).astype(np.float16)


def raw_tensor(rng: np.random.Generator, type_name: str, rows: int, cols: int) -> np.ndarray:
    if type_name == "F32":
        v = rng.normal(0, 0.05, size=(rows, cols)).astype(np.float32)
        # Signed zeros, subnormals and the smallest normal: a reader must pass them unchanged.
        v[0, :6] = np.array([0.0, -0.0, 1e-40, -1e-42, 1.1754944e-38, 7.0], np.float32)
        return v
    if type_name == "F16":
        bits = rng.integers(0, 0x10000, size=(rows, cols), dtype=np.uint32).astype(np.uint16)
        bits[(bits & 0x7C00) == 0x7C00] &= 0xBBFF  # remove inf/nan: exponent 31 -> 14
        return bits.view(np.float16)
    if type_name == "BF16":
        # Random sign and mantissa; exponent either 0 (zero/subnormal) or within 2^-40..2^10, so
        # the values stay finite and a matvec over them cannot overflow f32.
        n = rows * cols
        sign = rng.integers(0, 2, size=n, dtype=np.uint32) << 15
        exponent = np.where(rng.random(n) < 0.05, 0, rng.integers(127 - 40, 127 + 11, size=n)).astype(np.uint32)
        mantissa = rng.integers(0, 128, size=n, dtype=np.uint32)
        bits = (sign | (exponent << 7) | mantissa).astype(np.uint16).reshape(rows, cols)
        return bits.view(np.uint8).reshape(rows, cols * 2)  # gguf-py stores BF16 as raw bytes
    qtype = T[type_name]
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block
    raw = rng.integers(0, 256, size=(nblocks, type_size), dtype=np.uint32).astype(np.uint8)
    for off in F16_FIELDS[type_name]:
        raw[:, off:off + 2] = random_f16_scales(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, cols // block * type_size)


def ggml_dequantize(lib: ctypes.CDLL, type_name: str, data: np.ndarray, numel: int) -> np.ndarray | None:
    fn_name = {"Q4_0": "dequantize_row_q4_0", "Q4_1": "dequantize_row_q4_1", "Q8_0": "dequantize_row_q8_0",
               "Q4_K": "dequantize_row_q4_K", "Q6_K": "dequantize_row_q6_K"}.get(type_name)
    if fn_name is None:
        return None
    fn = getattr(lib, fn_name)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    src = np.ascontiguousarray(data)
    out = np.empty(numel, dtype=np.float32)
    fn(src.ctypes.data, out.ctypes.data, numel)
    return out


# Offsets (bytes in a block) of the fields holding the scale and the min of types whose
# values are scale*q + min; zeroing one field isolates the other term.
SCALE_MIN_FIELDS = {"Q4_1": (0, 2), "Q4_K": (0, 2)}


def split_terms(type_name: str, raw: np.ndarray, qtype: T, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale_term, offset_term) with scale_term + offset_term == the dequantized values."""
    if type_name not in SCALE_MIN_FIELDS:
        return None, None
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    d_off, m_off = SCALE_MIN_FIELDS[type_name]
    blocks = raw.view(np.uint8).reshape(-1, type_size)
    no_min, no_scale = blocks.copy(), blocks.copy()
    no_min[:, m_off:m_off + 2] = 0
    no_scale[:, d_off:d_off + 2] = 0
    scale_term = quants.dequantize(no_min.reshape(rows, -1), qtype).reshape(rows, cols)
    offset_term = quants.dequantize(no_scale.reshape(rows, -1), qtype).reshape(rows, cols)
    return scale_term.astype(np.float64), offset_term.astype(np.float64)


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_type(lib: ctypes.CDLL, type_name: str, rng: np.random.Generator, out_dir: pathlib.Path) -> dict:
    qtype = T[type_name]
    tensors: dict[str, np.ndarray] = {}
    matrix = realistic_weights(rng, ROWS, COLS)
    edge = edge_weights(rng, COLS)
    odd = realistic_weights(rng, 5, 256)
    for name, values in (("w.matrix", matrix), ("w.edge", edge), ("w.odd", odd)):
        if type_name == "F32":
            tensors[name] = values
        elif type_name == "F16":
            tensors[name] = values.astype(np.float16)
        else:
            tensors[name] = quantize(lib, values, qtype)
    tensors["w.raw"] = raw_tensor(rng, type_name, RAW_ROWS, COLS)

    gguf_path = out_dir / f"{type_name.lower()}.gguf"
    writer = gguf.GGUFWriter(str(gguf_path), arch="vq_weights_fixture")
    writer.add_name(f"veloxquant weight-format fixture {type_name}")
    writer.add_description("Tensors of one GGML type + reference values in the .ref.bin next to it")
    if type_name == "Q4_K":
        writer.add_custom_alignment(64)  # one file with a non-default general.alignment
    for name, data in tensors.items():
        if type_name in ("F32", "F16"):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    # Read the file back with gguf-py's own reader and dequantize what is really in it.
    reader = gguf.GGUFReader(str(gguf_path))
    arrays: list[tuple[str, np.ndarray]] = []
    entries = []
    for t in reader.tensors:
        assert t.tensor_type == qtype, (t.name, t.tensor_type)
        cols, rows = int(t.shape[0]), int(t.shape[1])  # GGUF ne[0] is the contiguous dim
        raw = np.array(t.data)
        if qtype == T.F32:
            deq = raw.astype(np.float32).reshape(rows, cols)
        else:
            deq = quants.dequantize(raw.view(np.uint8) if qtype != T.F16 else raw, qtype).reshape(rows, cols)
        deq = deq.astype(np.float32)
        other = ggml_dequantize(lib, type_name, raw, rows * cols)
        if other is not None and not np.array_equal(other.view(np.uint32), deq.reshape(-1).view(np.uint32)):
            bad = np.flatnonzero(other.view(np.uint32) != deq.reshape(-1).view(np.uint32))
            sys.exit(f"{type_name} {t.name}: gguf-py and ggml dequantize differ at {bad[:8]}: "
                     f"{deq.reshape(-1)[bad[:4]]} vs {other[bad[:4]]}")
        if not np.all(np.isfinite(deq)):
            sys.exit(f"{type_name} {t.name}: non-finite dequantized values")
        x = rng.normal(0.0, 1.0, size=cols).astype(np.float32)
        xd = x.astype(np.float64)
        prod = deq.astype(np.float64) * xd
        scale_term, offset_term = split_terms(type_name, raw, qtype, rows, cols)
        if scale_term is None:
            absterms = np.abs(prod).sum(axis=1)
        else:
            assert np.array_equal((scale_term + offset_term).astype(np.float32), deq), type_name
            absterms = ((np.abs(scale_term) + np.abs(offset_term)) * np.abs(xd)).sum(axis=1)
        arrays += [(f"deq.{t.name}", deq.reshape(-1)), (f"x.{t.name}", x),
                   (f"y.{t.name}", prod.sum(axis=1)), (f"absterms.{t.name}", absterms)]
        entries.append({"name": t.name, "rows": rows, "cols": cols, "n_bytes": int(t.n_bytes),
                        "checked_against_ggml_dequantize": other is not None})

    ref_path = out_dir / f"{type_name.lower()}.ref.bin"
    index = {}
    with open(ref_path, "wb") as f:
        for name, arr in arrays:
            arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
            index[name] = {"offset": f.tell(), "count": int(arr.size),
                           "dtype": "f64" if arr.dtype == np.float64 else "f32"}
            f.write(arr.tobytes())
    return {"gguf": gguf_path.name, "gguf_sha256": sha256(gguf_path),
            "ref": ref_path.name, "ref_sha256": sha256(ref_path),
            "alignment": 64 if type_name == "Q4_K" else 32,
            "tensors": entries, "arrays": index}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(repo_root() / "tests/fixtures/reference/weights"))
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = ggml_lib()
    rng = np.random.default_rng(SEED)
    manifest = {
        "generator": "tools/reference/make_weight_fixtures.py",
        "seed": SEED,
        "versions": {p: importlib.metadata.version(p) for p in ("gguf", "numpy", "llama_cpp_python")},
        "reference_dequantizer": "gguf.quants.dequantize (gguf-py), cross-checked bit-exact against "
                                 "llama.cpp dequantize_row_* for the block types",
        "types": {},
    }
    for type_name in TYPES:
        manifest["types"][type_name] = make_type(lib, type_name, rng, out_dir)
        print(f"{type_name}: ok", file=sys.stderr)
    with open(out_dir / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
