#!/usr/bin/env python3
"""Re-solve q3's per-layer bit allocation from an `allocate-bits` sensitivity table for other
turboquant_block options (block sizes, means, sinks, budget rows) without measuring again.

The table (docs/frontier/q3_allocation/allocate_bits_tinyshakespeare_ctx512.txt) was measured
with key_block=32 value_block=64 mean_rows=256 sink_rows=1; for other options its KLs are only
an estimate, so every allocation printed here must be measured (docs/frontier.md, "q3: what was
tried"). Prices are SmolLM2-135M's real bytes per token (30 layers x 3 kv heads x head_dim 64):
per row and head ceil(64*b/8) code bytes + 2*ceil(64/block) f16 scale bytes; means (2 f16 rows)
and sink rows (K + V in f16) per head, amortised over --rows rows. Exact multiple-choice
knapsack by dynamic programming over half-byte costs.

  python3 tools/q3_knapsack_from_sensitivity.py --key-block 64 --value-block 64 --bits 3,4,5
"""
import argparse
import re

HEADS, DIM = 3, 64

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--table", default="docs/frontier/q3_allocation/allocate_bits_tinyshakespeare_ctx512.txt")
ap.add_argument("--key-block", type=int, default=32)
ap.add_argument("--value-block", type=int, default=64)
ap.add_argument("--no-mean", action="store_true")
ap.add_argument("--sink-rows", type=int, default=1)
ap.add_argument("--bits", default="2,3,4,5", help="candidate widths (subset of the table's 2..5)")
ap.add_argument("--penalty-2bit", type=float, default=1.0,
                help="multiply predicted 2-bit KLs (the distortion-ratio prediction underestimates them)")
ap.add_argument("--budget", type=float, default=5040.0, help="bytes per token")
ap.add_argument("--rows", type=int, default=256, help="rows over which fixed bytes are counted")
a = ap.parse_args()

rows = [l.split() for l in open(a.table) if re.match(r"\s+\d+\s+0\.", l)]
kl = [[float(x.rstrip("*")) for x in r[1:]] for r in rows]  # keys@2..5, values@2..5
layers = len(kl)
cands = [int(b) for b in a.bits.split(",")]
fixed = layers * HEADS * ((0 if a.no_mean else 2 * DIM * 2) + a.sink_rows * 2 * DIM * 2) / a.rows


def price(b, block):
    return HEADS * (-(-DIM * b // 8) + 2 * -(-DIM // block))


items = []
for l in range(layers):
    for part, block, off in (("k", a.key_block, 0), ("v", a.value_block, 4)):
        items.append([(int(round(2 * price(b, block))), kl[l][off + b - 2] * (a.penalty_2bit if b == 2 else 1.0),
                       (part, l, b)) for b in cands])
cap = int(round(2 * (a.budget - fixed)))
front = {0: (0.0, [])}
for item in items:
    nxt = {}
    for cost, (val, chosen) in front.items():
        for c, k, tag in item:
            if cost + c <= cap and (cost + c not in nxt or nxt[cost + c][0] > val + k):
                nxt[cost + c] = (val + k, chosen + [tag])
    front, best = {}, float("inf")
    for cost in sorted(nxt):  # keep the Pareto front only
        if nxt[cost][0] < best:
            best = nxt[cost][0]
            front[cost] = nxt[cost]
if not front:
    raise SystemExit("budget below the cheapest widths")
cost, (val, chosen) = min(front.items(), key=lambda kv: kv[1][0])
bits = {"k": [0] * layers, "v": [0] * layers}
for part, l, b in chosen:
    bits[part][l] = b
print(f"bytes/token at {a.rows} rows {cost / 2 + fixed:.1f} (fixed {fixed:.1f}); predicted KL (sum) {val:.4f}")
print("key_bits=" + ",".join(map(str, bits["k"])))
print("value_bits=" + ",".join(map(str, bits["v"])))
