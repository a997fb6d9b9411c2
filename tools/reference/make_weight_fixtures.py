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

The formats added later (NEW_TYPES: Q5_0, Q5_1, Q5_K, Q3_K, Q2_K, IQ4_NL, IQ4_XS) need only
gguf-py and numpy: Q5_0/Q5_1 are quantized by gguf.quants.quantize; the others, which gguf-py
cannot quantize, get random valid blocks everywhere ("w.matrix"/"w.odd": random codes and
packed scales with realistic positive f16 scales; "w.edge": byte-level corner cases: an
all-zero row, subnormal scales, every code/scale byte 0xff, every code/scale byte 0x00).
Each of them draws from its own generator (seeded with SEED and its index in NEW_TYPES), so
`--types Q5_K ...` regenerates exactly the committed bytes without llama.cpp and without
touching the other types; the manifest entries of types not regenerated are kept. When
llama-cpp-python is importable, their dequantization is also checked against ggml's C code.

Usage: python3 tools/reference/make_weight_fixtures.py [--out DIR] [--types T ...]
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
NEW_TYPES = ["Q5_0", "Q5_1", "Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"]
# NEW_TYPES that gguf-py can quantize; the rest are random valid blocks throughout.
GGUF_QUANTIZABLE = {"Q5_0", "Q5_1"}

# Byte offsets of the f16 scale fields inside one block (ggml-common.h layouts); every other
# byte of a block is a code / packed-scale byte for which any value is valid.
F16_FIELDS = {
    "Q4_0": [0],        # d, qs[16]                                   18 bytes
    "Q4_1": [0, 2],     # d, m, qs[16]                                20 bytes
    "Q8_0": [0],        # d, qs[32] int8                              34 bytes
    "Q4_K": [0, 2],     # d, dmin, scales[12] (6-bit packed), qs[128] 144 bytes
    "Q6_K": [208],      # ql[128], qh[64], scales[16] int8, d         210 bytes
    "Q5_0": [0],        # d, qh[4], qs[16]                            22 bytes
    "Q5_1": [0, 2],     # d, m, qh[4], qs[16]                         24 bytes
    "Q5_K": [0, 2],     # d, dmin, scales[12], qh[32], qs[128]        176 bytes
    "Q3_K": [108],      # hmask[32], qs[64], scales[12], d            110 bytes
    "Q2_K": [80, 82],   # scales[16], qs[64], d, dmin                 84 bytes
    "IQ4_NL": [0],      # d, qs[16] (codebook indices)                18 bytes
    "IQ4_XS": [0],      # d, scales_h u16, scales_l[4], qs[128]       136 bytes
}


def repo_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[2]


def ggml_lib_or_none() -> ctypes.CDLL | None:
    try:
        return ggml_lib()
    except ImportError:
        return None


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


def raw_blocks(rng: np.random.Generator, type_name: str, rows: int, cols: int, realistic: bool) -> np.ndarray:
    """Random valid blocks: random code / packed-scale bytes, f16 fields replaced by finite
    scales (realistic: positive 1e-3..2e-2, as trained weights have; else random_f16_scales)."""
    qtype = T[type_name]
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block
    raw = rng.integers(0, 256, size=(nblocks, type_size), dtype=np.uint32).astype(np.uint8)
    for off in F16_FIELDS[type_name]:
        if realistic:
            scales = np.exp(rng.uniform(np.log(1e-3), np.log(2e-2), size=nblocks)).astype(np.float16)
        else:
            scales = random_f16_scales(rng, nblocks)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, cols // block * type_size)


def edge_blocks(rng: np.random.Generator, type_name: str, cols: int) -> np.ndarray:
    """EDGE_ROWS rows of byte-level corner cases for a format without a quantizer here."""
    qtype = T[type_name]
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = cols // block
    rows = np.zeros((EDGE_ROWS, nblocks, type_size), dtype=np.uint8)   # row 0: all zero
    rows[1] = rng.integers(0, 256, size=(nblocks, type_size), dtype=np.uint32).astype(np.uint8)
    rows[2] = 0xFF                                                      # every code / scale at max
    # row 3 stays 0x00 in its code and packed-scale bytes (negative-most scales for Q3_K/IQ4_XS)
    tiny = np.full(nblocks, 3e-7, dtype=np.float16)                     # f16 subnormal
    normal = np.full(nblocks, 0.01, dtype=np.float16)
    for off in F16_FIELDS[type_name]:
        rows[1, :, off:off + 2] = tiny.view(np.uint8).reshape(nblocks, 2)
        rows[2, :, off:off + 2] = normal.view(np.uint8).reshape(nblocks, 2)
        rows[3, :, off:off + 2] = normal.view(np.uint8).reshape(nblocks, 2)
    return rows.reshape(EDGE_ROWS, nblocks * type_size)


def ggml_dequantize(lib: ctypes.CDLL | None, type_name: str, data: np.ndarray, numel: int) -> np.ndarray | None:
    fn_name = {"Q4_0": "dequantize_row_q4_0", "Q4_1": "dequantize_row_q4_1", "Q8_0": "dequantize_row_q8_0",
               "Q4_K": "dequantize_row_q4_K", "Q6_K": "dequantize_row_q6_K",
               "Q5_0": "dequantize_row_q5_0", "Q5_1": "dequantize_row_q5_1", "Q5_K": "dequantize_row_q5_K",
               "Q3_K": "dequantize_row_q3_K", "Q2_K": "dequantize_row_q2_K",
               "IQ4_NL": "dequantize_row_iq4_nl", "IQ4_XS": "dequantize_row_iq4_xs"}.get(type_name)
    if fn_name is None or lib is None:
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
SCALE_MIN_FIELDS = {"Q4_1": (0, 2), "Q4_K": (0, 2), "Q5_1": (0, 2), "Q5_K": (0, 2), "Q2_K": (80, 82)}


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


def make_type(lib: ctypes.CDLL | None, type_name: str, rng: np.random.Generator, out_dir: pathlib.Path) -> dict:
    qtype = T[type_name]
    tensors: dict[str, np.ndarray] = {}
    if type_name in NEW_TYPES and type_name not in GGUF_QUANTIZABLE:
        tensors["w.matrix"] = raw_blocks(rng, type_name, ROWS, COLS, realistic=True)
        tensors["w.edge"] = edge_blocks(rng, type_name, COLS)
        tensors["w.odd"] = raw_blocks(rng, type_name, 5, 256, realistic=True)
    else:
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
        if type_name in GGUF_QUANTIZABLE and t.name != "w.edge":
            # gguf-py's own quantizer round trip: within half a step of the source values
            # (a layout slip in either direction would be far off).
            src = {"w.matrix": matrix, "w.odd": odd}.get(t.name)
            if src is not None:
                step = np.abs(deq - src).max()
                assert step < 0.05 * np.abs(src).max(), (type_name, t.name, step)
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


def version_or_none(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(repo_root() / "tests/fixtures/reference/weights"))
    ap.add_argument("--types", nargs="+", choices=TYPES + NEW_TYPES, default=TYPES + NEW_TYPES,
                    help="regenerate only these (the manifest keeps the other entries); the TYPES "
                         "share one generator stream, so they are regenerated all together")
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    old_types = [t for t in TYPES if t in args.types]
    if old_types and old_types != TYPES:
        sys.exit(f"{', '.join(TYPES)} share one random stream: regenerate all of them or none")
    lib = ggml_lib() if old_types else ggml_lib_or_none()
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"types": {}}
    manifest.update({
        "generator": "tools/reference/make_weight_fixtures.py",
        "seed": SEED,
        "reference_dequantizer": "gguf.quants.dequantize (gguf-py), cross-checked bit-exact against "
                                 "llama.cpp dequantize_row_* for the block types",
    })
    # Versions per run: a partial run records its own beside the ones of the full run.
    versions = {p: version_or_none(p) for p in ("gguf", "numpy", "llama_cpp_python")}
    if old_types:
        manifest["versions"] = versions
    else:
        manifest["versions_new_types"] = versions
    rng = np.random.default_rng(SEED)
    for type_name in args.types:
        if type_name in NEW_TYPES:
            type_rng = np.random.default_rng([SEED, NEW_TYPES.index(type_name)])
        else:
            type_rng = rng
        manifest["types"][type_name] = make_type(lib, type_name, type_rng, out_dir)
        print(f"{type_name}: ok", file=sys.stderr)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
