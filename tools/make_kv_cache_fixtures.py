#!/usr/bin/env python3
"""Reference traces of mlx_lm's KVCache and RotatingKVCache for lm's C++ caches.

Runs the real mlx_lm cache classes (CPU build of MLX) over scripted update/trim sequences
and records, after every step, what the C++ port must reproduce exactly:
  * the token positions of the returned keys, in buffer order (each fed token carries its
    absolute position in key[..., 0]), stored as inclusive runs [[first, last], ...];
  * the mask make_mask(N, window) returned before the update (None, "causal" or a boolean
    array), as mlx_lm's attention would use it;
  * offset, buffer rows (keys.shape[2]: growth and trimming), is_trimmable, meta_state.

Usage (needs `pip install mlx-cpu==0.32.4 numpy` and `pip install --no-deps mlx-lm==0.32.2`;
mlx_lm's package __init__ pulls in transformers, so only its models.cache module is loaded):
    python3 tools/make_kv_cache_fixtures.py tests/fixtures/kv_cache/mlx_lm_caches.json
"""
import importlib.util
import json
import sys
import types

import mlx.core as mx


def load_mlx_lm_cache():
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None:
        sys.exit("mlx_lm is not installed (pip install --no-deps mlx-lm==0.32.2)")
    package = types.ModuleType("mlx_lm")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["mlx_lm"] = package
    from mlx_lm.models import cache  # noqa: E402

    return cache


H = 2  # kv heads
D = 3  # head dim: (position, head, 0.5)


def tokens(first, count):
    pos = mx.arange(first, first + count, dtype=mx.float32)
    k = mx.zeros((1, H, count, D), dtype=mx.float32)
    k = k + mx.expand_dims(mx.stack([pos, mx.zeros_like(pos), mx.full(pos.shape, 0.5)], axis=-1), 0)
    head = mx.arange(H, dtype=mx.float32).reshape(1, H, 1, 1)
    k = mx.concatenate([k[..., :1], head + mx.zeros_like(k[..., 1:2]), k[..., 2:]], axis=-1)
    v = -k
    return k, v


def runs(positions):
    """[3,4,5,9,10] -> [[3,5],[9,10]]: inclusive runs of consecutive positions (keeps the file small)."""
    out = []
    for p in positions:
        if out and p == out[-1][1] + 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return out


def mask_json(mask):
    if mask is None:
        return None
    if isinstance(mask, str):
        return mask
    return [[bool(x) for x in row] for row in mx.array(mask).reshape(-1, mask.shape[-1]).tolist()]


def trace(cache_obj, ops, window):
    fed = 0
    steps = []
    for op in ops:
        if op[0] == "trim":
            removed = cache_obj.trim(op[1]) if cache_obj.is_trimmable() else 0
            fed -= removed
            steps.append({"op": "trim", "n": op[1], "removed": removed, "offset": cache_obj.offset})
            continue
        n = op[1]
        rotating = isinstance(cache_obj, CACHE.RotatingKVCache)
        # lm's FullKVCache keeps the contract's default mask; only the rotating one has its own.
        mask = cache_obj.make_mask(n, window_size=window) if rotating else None
        k, v = tokens(fed, n)
        keys, values = cache_obj.update_and_fetch(k, v)
        mx.eval(keys, values)
        fed += n
        step = {
            "op": "update",
            "n": n,
            "mask": mask_json(mask) if rotating else "n/a",
            "position_runs": runs([int(x) for x in keys[0, 0, :, 0].tolist()]),
            "offset": cache_obj.offset,
            "buffer_rows": int(cache_obj.keys.shape[2]),
            "trimmable": bool(cache_obj.is_trimmable()),
        }
        if rotating:
            # Newer mlx_lm folds these into `state`; record the four fields directly.
            step["meta_state"] = [str(cache_obj.keep), str(cache_obj.max_size), str(cache_obj.offset),
                                  str(cache_obj._idx)]
        steps.append(step)
    return steps


def main(out_path):
    ones = [("update", 1)] * 20
    rotating = [
        (8, 0, None, ones),
        (8, 0, None, [("update", s) for s in [5, 1, 1, 1, 1, 1, 4, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1]]),
        (8, 2, None, [("update", s) for s in [3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1]]),
        (5, 1, None, [("update", s) for s in [12, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1]]),
        (8, 0, 4, [("update", s) for s in [2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1]]),
        (6, 0, 3, [("update", s) for s in [7, 1, 1, 1, 1, 1, 1, 1, 1, 5, 1, 1, 1, 1, 1, 1, 1]]),
        (16, 2, None, [("update", 9), ("update", 1), ("trim", 4), ("update", 1), ("update", 3),
                       ("trim", 2), ("update", 1)] + [("update", 1)] * 12 + [("trim", 3), ("update", 2)]),
        (300, 0, None, [("update", 1)] * 257 + [("update", 8), ("update", 1)]),
    ]
    out = {"generator": "tools/make_kv_cache_fixtures.py", "mlx": mx.__version__, "kv_heads": H,
           "head_dim": D, "rotating": [], "full": []}
    for max_size, keep, window, ops in rotating:
        c = CACHE.RotatingKVCache(max_size=max_size, keep=keep)
        out["rotating"].append({"max_size": max_size, "keep": keep, "window": window,
                                "steps": trace(c, ops, window)})
    full = [
        [("update", 3), ("update", 253), ("update", 1), ("update", 300), ("trim", 10), ("update", 1)],
        [("update", 5), ("trim", 2), ("update", 1)] + [("update", 1)] * 260 + [("trim", 100), ("update", 200)],
    ]
    for ops in full:
        out["full"].append({"steps": trace(CACHE.KVCache(), ops, None)})
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


CACHE = load_mlx_lm_cache()

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/kv_cache/mlx_lm_caches.json")
