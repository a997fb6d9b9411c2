#!/usr/bin/env python3
"""Decode tokens/s against context: veloxquant's caches and llama.cpp's KV types on one plot (SVG,
no plotting library needed).

Reads what the measurements wrote; nothing is re-run and no number is typed in here:
  * one `veloxquant bench-host --methods ... --json-out FILE` record (its decode rows, every method),
  * any number of `llama-bench -o json` records (llama.cpp's own benchmark, run with `-n N -p 0
    -d D1,D2,...`): a row's context is its depth plus its generated tokens, the same context at
    which bench-host's row ends; its label names the K/V type and whether flash attention was on.
Writes an SVG of decode tok/s (log) against context (log 2) and prints the points it drew.

  python3 tools/decode_speed_plot.py --bench-host ours.json --llama-bench llama_q4_0.json \\
      --llama-bench llama_f16.json --out docs/decode_speed_vs_llama_cpp.svg
"""
import argparse
import json
import math
import sys

COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
LLAMA_COLOURS = ["#d62728", "#ff7f0e", "#aa3377", "#555555"]


def bench_host_lines(path):
    """{method label: [(ctx, tok/s)]} from a bench-host --methods record's decode rows."""
    record = json.load(open(path, encoding="utf-8"))
    lines = {}
    for row in record["rows"]:
        if row["kind"] != "decode" or not row["decode_tokens_per_s"]:
            continue
        label = "native f16 (veloxquant)" if row["method"] == "none" else row["method"]
        lines.setdefault(label, []).append((row["ctx"], row["decode_tokens_per_s"]))
    return lines


def llama_bench_lines(path):
    """{label: [(ctx, tok/s)]} from a llama-bench JSON array (generation rows only)."""
    lines = {}
    for row in json.load(open(path, encoding="utf-8")):
        if row.get("n_gen", 0) <= 0 or row.get("n_prompt", 0) != 0:
            continue
        fa = "on" if row.get("flash_attn") in (1, True, "on") else "off"
        label = f"llama.cpp {row['type_k']}/{row['type_v']} KV (flash attn {fa})"
        lines.setdefault(label, []).append((row["n_depth"] + row["n_gen"], row["avg_ts"]))
    return lines


def svg(series, title):
    width, height, left, right, top, bottom = 980, 520, 70, 420, 40, 50
    xs = [x for _, _, pts in series for x, _ in pts]
    ys = [y for _, _, pts in series for _, y in pts]
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    y0, y1 = math.floor(math.log10(min(ys)) * 4) / 4, math.ceil(math.log10(max(ys)) * 4) / 4
    px = lambda x: left + (math.log2(x) - x0) / max(x1 - x0, 1e-9) * (width - left - right)
    py = lambda y: height - bottom - (math.log10(y) - y0) / max(y1 - y0, 1e-9) * (height - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{title}</text>']
    for ctx in sorted(set(xs)):
        out.append(f'<line x1="{px(ctx):.1f}" y1="{top}" x2="{px(ctx):.1f}" y2="{height - bottom}" stroke="#eee"/>')
        out.append(f'<text x="{px(ctx):.1f}" y="{height - bottom + 18}" text-anchor="middle">{ctx}</text>')
    for tick in (5, 10, 20, 50, 100, 200, 500):
        if 10 ** y0 <= tick <= 10 ** y1:
            out.append(f'<line x1="{left}" y1="{py(tick):.1f}" x2="{width - right}" y2="{py(tick):.1f}" stroke="#eee"/>')
            out.append(f'<text x="{left - 8}" y="{py(tick) + 4:.1f}" text-anchor="end">{tick}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">context (tokens cached '
               f'when the 32 decode steps end)</text>')
    out.append(f'<text x="16" y="{(top + height - bottom) / 2}" transform="rotate(-90 16 {(top + height - bottom) / 2})" '
               f'text-anchor="middle">decode tok/s (log)</text>')
    for i, (label, colour, pts) in enumerate(series):
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="6,4"' if label.startswith("llama.cpp") else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = top + 10 + 20 * i
        out.append(f'<line x1="{width - right + 15}" y1="{ly}" x2="{width - right + 45}" y2="{ly}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{width - right + 52}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-host", required=True, help="bench-host --methods --json-out record")
    ap.add_argument("--llama-bench", action="append", default=[], help="llama-bench -o json output (repeatable)")
    ap.add_argument("--title", default="SmolLM2-135M Q4_1, 2 threads: decode tok/s against context")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    series = [(label, COLOURS[i % len(COLOURS)], pts) for i, (label, pts) in enumerate(bench_host_lines(args.bench_host).items())]
    llama = {}
    for path in args.llama_bench:
        llama.update(llama_bench_lines(path))
    series += [(label, LLAMA_COLOURS[i % len(LLAMA_COLOURS)], pts) for i, (label, pts) in enumerate(llama.items())]
    if not series:
        sys.exit("no decode rows in the given records")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(svg(series, args.title))
    for label, _, pts in series:
        print(label + ": " + ", ".join(f"{x}: {y:.1f}" for x, y in sorted(pts)))


if __name__ == "__main__":
    main()
