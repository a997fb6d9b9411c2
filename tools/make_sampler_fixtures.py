#!/usr/bin/env python3
"""Reference outputs of mlx_lm's sampling chain for lm::Sampler.

For random logit vectors (continuous values, so no ties) and a grid of options, records what
mlx_lm computes before its categorical draw:
  * the logits after make_repetition_penalty(penalty, context) on a token history;
  * the probabilities softmax(chain(logprobs) / temperature), where chain applies
    apply_top_p, apply_min_p and apply_top_k in make_sampler's order.
lm::Sampler::distribution() must match them (same support, probabilities to ~1e-6).

Usage (pip install mlx-cpu==0.32.4 numpy; pip install --no-deps mlx-lm==0.32.2):
    python3 tools/make_sampler_fixtures.py tests/fixtures/sampler/mlx_lm_sampler.json
"""
import importlib.util
import json
import sys
import types

import mlx.core as mx
import numpy as np


def load_sample_utils():
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None:
        sys.exit("mlx_lm is not installed (pip install --no-deps mlx-lm==0.32.2)")
    package = types.ModuleType("mlx_lm")  # skip the package __init__ (it imports transformers)
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["mlx_lm"] = package
    from mlx_lm import sample_utils  # noqa: E402

    return sample_utils


def main(out_path):
    su = load_sample_utils()
    rng = np.random.default_rng(20240607)
    vocab = 40
    grid = [
        # temperature, top_p, min_p, top_k, repetition_penalty, repetition_context
        (1.0, 1.0, 0.0, 0, 1.0, 20),
        (0.7, 0.9, 0.0, 0, 1.0, 20),
        (1.0, 0.5, 0.0, 0, 1.0, 20),
        (1.3, 1.0, 0.1, 0, 1.0, 20),
        (1.0, 1.0, 0.0, 5, 1.0, 20),
        (0.8, 0.95, 0.05, 10, 1.0, 20),
        (1.0, 0.6, 0.0, 3, 1.0, 20),
        (1.0, 1.0, 0.0, 0, 1.3, 20),
        (0.9, 0.9, 0.02, 8, 1.5, 6),
        (2.0, 0.3, 0.2, 2, 0.8, 12),
    ]
    cases = []
    for case_index in range(30):
        logits = (rng.standard_normal(vocab) * 1.5).astype(np.float32)
        history = [int(x) for x in rng.integers(0, vocab, size=int(rng.integers(0, 30)))]
        temp, top_p, min_p, top_k, penalty, context = grid[case_index % len(grid)]
        x = mx.array(logits)[None]
        if penalty != 1.0:
            x = su.make_repetition_penalty(penalty, context)(history, x)
        penalised = np.array(x[0], dtype=np.float32)
        logprobs = x - mx.logsumexp(x, axis=-1, keepdims=True)
        if 0 < top_p < 1.0:
            logprobs = su.apply_top_p(logprobs, top_p)
        if min_p != 0.0:
            logprobs = su.apply_min_p(logprobs, min_p)
        if top_k > 0:
            logprobs = su.apply_top_k(logprobs, top_k)
        probs = mx.softmax(logprobs * (1 / temp), axis=-1)
        cases.append({
            "logits": [float(v) for v in logits],
            "history": history,
            "temperature": temp, "top_p": top_p, "min_p": min_p, "top_k": top_k,
            "repetition_penalty": penalty, "repetition_context": context,
            "penalised_logits": [float(v) for v in penalised],
            "probabilities": [float(v) for v in np.array(probs[0], dtype=np.float64)],
        })
    with open(out_path, "w") as f:
        json.dump({"generator": "tools/make_sampler_fixtures.py", "mlx": mx.__version__, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/sampler/mlx_lm_sampler.json")
