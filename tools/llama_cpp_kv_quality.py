#!/usr/bin/env python3
"""KL divergence of llama.cpp's quantized KV cache types against its own f16 cache (not part of
the product): the llama.cpp side of docs/frontier.md, measured the way `veloxquant eval
--chunking llama` measures ours.

Chunks as llama-perplexity: the text tokenized once (with BOS when the vocabulary adds one;
SmolLM2's does not), cut into --chunks chunks of --ctx tokens, each chunk's first token replaced
by BOS when the vocabulary adds one, evaluated in one pass from an empty cache; the logits at positions ctx/2 .. ctx-2 predict the next token (ctx/2 - 1 targets per
chunk). For every cache type the same chunks are evaluated and compared position by position
with the f16 cache: KL(f16 || type) in nats, top-1 agreement, and each type's perplexity.
Flash attention is on for every type (llama.cpp requires it for a quantized V cache).

    python3 tools/llama_cpp_kv_quality.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --text ../shared/data/tinyshakespeare.txt --ctx 2048 --chunks 4 --threads 2

llama-cpp-python comes from tools/requirements-bench.txt (tools/bench_llama_cpp.py installs it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# ggml type ids (ggml.h enum ggml_type) of the cache types llama.cpp offers for K and V.
GGML_TYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}


def log_softmax(logits):
    import numpy as np

    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--types", default="q8_0,q5_0,q4_0", help="comma list of " + ", ".join(GGML_TYPES))
    parser.add_argument("--slice", type=int, default=64, help="positions per log-softmax slice (bounds memory)")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()

    import numpy as np
    import llama_cpp

    types = [t for t in args.types.split(",") if t]
    if not types:
        sys.exit("--types names no cache type")
    if args.slice < 1:
        sys.exit(f"--slice must be at least 1, got {args.slice}")
    for t in types + ["f16"]:
        if t not in GGML_TYPES:
            sys.exit(f"unknown cache type '{t}'; known: {', '.join(GGML_TYPES)}")

    def load(cache_type: str):
        return llama_cpp.Llama(model_path=args.model, n_ctx=args.ctx, n_batch=args.batch, n_threads=args.threads,
                               type_k=GGML_TYPES[cache_type], type_v=GGML_TYPES[cache_type], flash_attn=True,
                               logits_all=True, verbose=False)

    # Memory is bounded for large vocabularies (Gemma 3: 262,144 ids, where all-position logits are
    # 2 GiB per engine): the f16 engine and one quantized engine are alive at a time, the f16 chunk
    # is evaluated again for each type rather than kept, and the log-softmax runs over --slice
    # positions at a time in float64.
    base = load("f16")
    tokens = base.tokenize(Path(args.text).read_bytes(), add_bos=True, special=False)
    bos = base.token_bos()
    adds_bos = bool(tokens) and tokens[0] == bos  # the vocabulary's add_bos, as llama-perplexity reads it
    n_chunks = min(args.chunks, len(tokens) // args.ctx)
    if n_chunks < 1:
        sys.exit(f"the text has {len(tokens)} tokens, fewer than one chunk of {args.ctx}")
    first = args.ctx // 2
    stats = {t: {"kl": [], "top1": [], "nll": []} for t in types}
    base_nll = []
    chunks = []
    for c in range(n_chunks):
        chunk = list(tokens[c * args.ctx:(c + 1) * args.ctx])
        if adds_bos:
            chunk[0] = bos
        chunks.append(chunk)

    def evaluate(llm, chunk):
        llm.reset()
        llm.eval(chunk)

    def slice_log_probs(llm, lo, hi):
        return log_softmax(np.asarray(llm.scores[lo:hi], dtype=np.float64))

    for t in types:
        engine = load(t)
        for c, chunk in enumerate(chunks):
            targets = np.array(chunk[first + 1:])
            evaluate(base, chunk)
            evaluate(engine, chunk)
            for lo in range(first, args.ctx - 1, args.slice):
                hi = min(lo + args.slice, args.ctx - 1)
                ref = slice_log_probs(base, lo, hi)
                got = slice_log_probs(engine, lo, hi)
                rows_t = targets[lo - first:hi - first]
                idx = np.arange(hi - lo)
                if t == types[0]:
                    base_nll.append(-ref[idx, rows_t])
                stats[t]["kl"].append((np.exp(ref) * (ref - got)).sum(axis=-1))
                stats[t]["top1"].append(ref.argmax(axis=-1) == got.argmax(axis=-1))
                stats[t]["nll"].append(-got[idx, rows_t])
            print(f"llama_cpp_kv_quality: {t} chunk {c + 1}/{n_chunks}", file=sys.stderr)
        del engine

    ppl_f16 = float(np.exp(np.concatenate(base_nll).mean()))
    rows = []
    for t in types:
        kl = np.concatenate(stats[t]["kl"])
        rows.append({"type": t, "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
                     "top1_percent": 100.0 * float(np.concatenate(stats[t]["top1"]).mean()),
                     "ppl": float(np.exp(np.concatenate(stats[t]["nll"]).mean())), "ppl_f16": ppl_f16})
    result = {"model": args.model, "text": args.text, "ctx": args.ctx, "chunks": n_chunks,
              "targets": int(n_chunks * (args.ctx - 1 - first)), "llama_cpp_python": llama_cpp.__version__,
              "rows": rows}
    print(f"| llama.cpp cache | KL mean | KL max | top-1 % | PPL (f16 {ppl_f16:.4f}) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['type']} K+V | {r['kl_mean']:.4g} | {r['kl_max']:.4g} | {r['top1_percent']:.2f} | {r['ppl']:.4f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
