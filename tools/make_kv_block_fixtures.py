#!/usr/bin/env python3
"""Reference blocks of llama.cpp's KV cache types (q8_0, q5_0, q4_0) for lm's quantizers.

Calls ggml's own reference quantizers (quantize_row_q8_0_ref, quantize_row_q5_0_ref,
quantize_row_q4_0_ref) and dequantizers in the libggml-base shared library that
llama-cpp-python ships, through ctypes, on fixed rows chosen to hit the rounding rules: random
Gaussian rows at several scales, channel outliers, rows whose extreme is negative, ties in
magnitude, exact .5 rounding points, all-zero rows, tiny (f16-subnormal) scales, and rows from
the real key/value ranges of a small model (|x| up to ~20). Writes, per row, the f32 inputs as
their bit patterns, each type's blocks as hex and each type's dequantized values as bit
patterns, so the C++ test compares bytes and floats exactly.

    python3 tools/make_kv_block_fixtures.py tests/fixtures/kv_blocks/ggml_kv_blocks.json

Needs llama-cpp-python (tools/requirements-bench.txt) and numpy.
"""
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

TYPES = {"q8_0": 34, "q5_0": 22, "q4_0": 18}  # bytes per block of 32
D = 64  # elements per row: two blocks, as a head of SmolLM2


def load_ggml():
    import llama_cpp

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    for name in TYPES:
        for fn in (f"quantize_row_{name}_ref", f"dequantize_row_{name}"):
            getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            getattr(lib, fn).restype = None
    return lib, llama_cpp.__version__


def rows():
    rng = np.random.default_rng(20261203)
    out = [rng.standard_normal(D) * scale for scale in (1.0, 0.01, 3.0, 20.0)]
    outlier = rng.standard_normal(D)
    outlier[5] = 40.0
    outlier[40] = -55.0
    out.append(outlier)
    negative = rng.standard_normal(D)
    negative[3] = -9.0  # the block's extreme is negative: q4_0/q5_0 keep its sign
    out.append(negative)
    tie = rng.standard_normal(D)
    tie[1], tie[2] = -6.0, 6.0  # equal magnitudes: the first one sets the sign
    tie[33], tie[34] = 7.0, -7.0
    out.append(tie)
    # q8_0 with max 127: scale 1, so x.5 values sit exactly on rounding points.
    halves = np.arange(D) * 0.5 - 15.75
    halves[0] = 127.0
    halves[32] = -127.0
    out.append(halves)
    # q4_0 with extreme -8 (scale 1): x + 8.5 lands on integers and past the top code.
    nibble = np.linspace(-8.0, 8.0, D)
    nibble[32] = -8.0
    out.append(nibble)
    out.append(np.zeros(D))
    out.append(rng.standard_normal(D) * 1e-6)  # scales below f16's normal range
    one_hot = np.zeros(D)
    one_hot[17] = 3.25
    one_hot[50] = -0.125
    out.append(one_hot)
    out.extend(rng.standard_normal(D) * rng.uniform(0.5, 8.0, D) for _ in range(8))  # uneven channels
    return [np.asarray(r, dtype=np.float32) for r in out]


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    lib, version = load_ggml()
    records = []
    for x in rows():
        record = {"input_bits": x.view(np.uint32).tolist()}
        for name, block_bytes in TYPES.items():
            blocks = (ctypes.c_uint8 * (D // 32 * block_bytes))()
            getattr(lib, f"quantize_row_{name}_ref")(x.ctypes.data, blocks, D)
            back = np.zeros(D, dtype=np.float32)
            getattr(lib, f"dequantize_row_{name}")(blocks, back.ctypes.data, D)
            record[name] = bytes(blocks).hex()
            record[name + "_dequantized_bits"] = back.view(np.uint32).tolist()
        records.append(record)
    out = {"source": f"ggml reference quantizers of llama-cpp-python {version} (libggml-base)",
           "elements_per_row": D, "rows": records}
    Path(sys.argv[1]).parent.mkdir(parents=True, exist_ok=True)
    Path(sys.argv[1]).write_text(json.dumps(out) + "\n")
    print(f"wrote {len(records)} rows to {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
