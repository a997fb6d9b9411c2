#!/usr/bin/env python3
"""Quality per byte of every measured method on one plot (SVG, no plotting library needed).

Reads what the measurements already wrote — nothing is re-run and no number is typed in here:
  * the presets' bench-methods run (results.json of docs/frontier/tinyshakespeare),
  * llama.cpp's own KV types on the same windows (llama_cpp.json from tools/llama_cpp_kv_quality.py;
    their sizes are the block formats' bytes per token, taken from the same results.json's
    reference sizes),
  * the per-method `veloxquant eval` rows of docs/results.md's "Issue 17 methods" and "Issue 18
    methods" tables (the same 4 x 2048-token windows of tinyshakespeare, each against the host's
    f16 cache),
  * the eviction runs at llama.cpp's sizes (bench-methods results.json files of
    docs/frontier/tinyshakespeare/eviction_sizes/: the same windows fed 16 tokens a call), split
    into eviction over f16 rows and eviction over quantized storage (`eviction_storage=...`);
    their other rows (presets and plain quantizers re-measured under that feed) are not drawn.
Writes an SVG of KL (log) against KV bytes per token (log) and prints the points it drew.

  python3 tools/frontier_plot.py --out docs/frontier/methods.svg
"""
import argparse
import json
import math
import re
import sys


EVAL_TABLES = ("## Issue 17 methods", "## Issue 18 methods")


def eval_rows(results_md):
    """Rows of the per-method eval tables: (label, bytes per token, KL mean)."""
    rows, inside = [], False
    for line in open(results_md, encoding="utf-8"):
        if line.startswith("## "):
            inside = line.startswith(EVAL_TABLES)
            continue
        if not inside or not line.startswith("| ") or line.startswith("| method") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        method, settings, nbytes, _, kl = cells[:5]
        # The settings cell is prose; the label keeps its first clause ("defaults", "--bits 2", ...).
        short = re.split(r"[:,(]", settings)[0].strip().strip("`")
        rows.append((f"{method} {short}", float(nbytes), float(kl)))
    return rows


def preset_rows(results_json):
    data = json.load(open(results_json, encoding="utf-8"))
    rows = []
    for r in data["results"]:
        preset = re.search(r"preset=(q\d)", r.get("settings", ""))
        label = f"--preset {preset.group(1)}" if preset else f"{r['method']} {r['settings']}"
        rows.append((label, r["kv_bytes_per_token"], r["kld"]))
    sizes = {ref["label"].split()[1]: ref["kv_bytes_per_token"] for ref in data["references"]
             if ref["label"].startswith("llama.cpp")}
    return rows, sizes


def llama_rows(llama_json, sizes):
    data = json.load(open(llama_json, encoding="utf-8"))
    return [(f"llama.cpp {r['type']}", sizes[r["type"]], r["kl_mean"]) for r in data["rows"] if r["type"] in sizes]


STORAGE_NAMES = {"kivi": "KIVI", "turboquant_rvq": "RVQ"}


def eviction_rows(results_jsons):
    """Rows of bench-methods runs whose settings name a budget or a window: (f16 rows, stored rows),
    each (label, bytes per token, KL mean). A setting `eviction_storage=S` puts a row in the second."""
    plain, stored = [], []
    for path in results_jsons:
        for r in json.load(open(path, encoding="utf-8"))["results"]:
            fields = dict(kv.split("=", 1) for kv in r["settings"].removeprefix("config=").split(",") if "=" in kv)
            rows = next((v for k, v in fields.items() if k.endswith("_budget") or k == "stream_window_size"), None)
            if rows is None:
                continue
            label = f"{r['method']} {rows}"
            storage = fields.get("eviction_storage", "dtype")
            if storage == "dtype":
                plain.append((label, r["kv_bytes_per_token"], r["kld"]))
            else:
                bits = fields.get("bit_width_inlier", "?")
                value_bits = fields.get("rvq_value_bits")
                name = STORAGE_NAMES.get(storage, storage)
                stored.append((f"{label} / {name} {bits}" + (f"/{value_bits}" if value_bits else ""),
                               r["kv_bytes_per_token"], r["kld"]))
    return plain, stored


def svg(series, width=980, height=620):
    points = [p for _, _, pts in series for p in pts]
    xs = [math.log10(b) for _, b, _ in points]
    ys = [math.log10(max(kl, 1e-6)) for _, _, kl in points]
    x0, x1 = math.floor(min(xs) * 10) / 10 - 0.05, math.ceil(max(xs) * 10) / 10 + 0.05
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    left, right, top, bottom = 70, 300, 30, 60
    px = lambda x: left + (x - x0) / (x1 - x0) * (width - left - right)
    py = lambda y: top + (y1 - y) / (y1 - y0) * (height - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">KL(native || method) against KV bytes per token — SmolLM2-135M, '
           f'tinyshakespeare, 4 x 2048 tokens (lower left is better)</text>']
    for e in range(int(y0), int(y1) + 1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{py(e):.1f}" y2="{py(e):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{py(e) + 4:.1f}" text-anchor="end">1e{e}</text>')
    for b in (3000, 4000, 5000, 6000, 8000, 10000, 15000, 20000, 30000):
        x = math.log10(b)
        if x0 <= x <= x1:
            out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" y2="{height - bottom}" stroke="#eee"/>')
            out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 16}" text-anchor="middle">{b}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 18}" text-anchor="middle">'
               'KV bytes per token (allocated, log scale)</text>')
    legend_y = top + 10
    placed = []  # label boxes (x0, y0, x1, y1) already drawn: a new label moves up or down until it is clear

    def clear(box):
        return all(box[2] < p[0] or box[0] > p[2] or box[3] < p[1] or box[1] > p[3] for p in placed)

    for name, color, pts in series:
        out.append(f'<circle cx="{width - right + 20}" cy="{legend_y}" r="5" fill="{color}"/>')
        out.append(f'<text x="{width - right + 30}" y="{legend_y + 4}">{name}</text>')
        legend_y += 18
        for label, nbytes, kl in pts:
            x, y = px(math.log10(nbytes)), py(math.log10(max(kl, 1e-6)))
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>{label}: {nbytes:.1f} bytes, '
                       f'KL {kl:.4g}</title></circle>')
            text_w = 5.0 * len(label)
            for dy in (0, 10, -10, 20, -20, 30, -30, 40, -40, 50, -50):
                box = (x + 6, y - 12 + dy, x + 6 + text_w, y - 2 + dy)
                if clear(box):
                    break
            placed.append(box)
            out.append(f'<text x="{box[0]:.1f}" y="{box[3] - 1:.1f}" font-size="9" fill="#333">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results-md", default="docs/results.md")
    ap.add_argument("--presets", default="docs/frontier/tinyshakespeare/results.json")
    ap.add_argument("--llama-cpp", default="docs/frontier/tinyshakespeare/llama_cpp.json")
    ap.add_argument("--eviction", nargs="*", default=[
        "docs/frontier/tinyshakespeare/eviction_sizes/scorers/results.json",
        "docs/frontier/tinyshakespeare/eviction_sizes/others/results.json"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    presets, sizes = preset_rows(args.presets)
    evicting, evicting_stored = eviction_rows(args.eviction)
    series = [("veloxquant presets", "#1f77b4", presets),
              ("llama.cpp KV types (own process)", "#d62728", llama_rows(args.llama_cpp, sizes)),
              ("other methods (veloxquant eval)", "#2ca02c", eval_rows(args.results_md)),
              ("eviction, f16 rows (16 tokens a call)", "#ff7f0e", evicting),
              ("eviction over 4-bit storage (16 a call)", "#9467bd", evicting_stored)]
    if not series[2][2]:
        sys.exit(f"no per-method eval rows ({', '.join(EVAL_TABLES)}) found in {args.results_md}")
    series = [s for s in series if s[2]]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(svg(series))
    for name, _, pts in series:
        for label, nbytes, kl in sorted(pts, key=lambda p: p[1]):
            print(f"{name:34s} {label:45s} {nbytes:9.1f} B/token  KL {kl:.4g}")


if __name__ == "__main__":
    main()
