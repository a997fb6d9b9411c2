#!/usr/bin/env python3
"""tools/decode_speed_plot.py on hand-made records: a llama-bench row's context is its depth plus
its generated tokens (the context at which bench-host's row ends), prompt-processing rows and
bench-host's prefill rows are not drawn, the native cache is named, each line gets its points in
context order, and every line is in the SVG. Standard library only."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ours = os.path.join(tmp, "ours.json")
        llama = os.path.join(tmp, "llama.json")
        out = os.path.join(tmp, "plot.svg")
        rows = [{"kind": "prefill", "ctx": 512, "method": "none", "decode_tokens_per_s": 0.0}]
        for method, speeds in (("none", (100.0, 50.0)), ("kivi --bits 4", (90.0, 60.0))):
            for ctx, tps in zip((4096, 1024), speeds[::-1]):
                rows.append({"kind": "decode", "ctx": ctx, "method": method, "decode_tokens_per_s": tps})
        json.dump({"rows": rows}, open(ours, "w"))
        json.dump([
            {"n_prompt": 0, "n_gen": 32, "n_depth": 992, "type_k": "q4_0", "type_v": "q4_0", "flash_attn": 1, "avg_ts": 40.0},
            {"n_prompt": 0, "n_gen": 32, "n_depth": 4064, "type_k": "q4_0", "type_v": "q4_0", "flash_attn": 1, "avg_ts": 20.0},
            {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "type_k": "q4_0", "type_v": "q4_0", "flash_attn": 1, "avg_ts": 300.0},
        ], open(llama, "w"))
        printed = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "decode_speed_plot.py"), "--bench-host", ours,
                                  "--llama-bench", llama, "--out", out], check=True, capture_output=True, text=True).stdout
        # Rows were written 4096 first; the points come back in context order.
        expected = ("native f16 (veloxquant): 1024: 100.0, 4096: 50.0\n"
                    "kivi --bits 4: 1024: 90.0, 4096: 60.0\n"
                    "llama.cpp q4_0/q4_0 KV (flash attn on): 1024: 40.0, 4096: 20.0\n")
        if printed != expected:
            sys.exit("printed points differ:\n" + printed + "expected:\n" + expected)
        svg = open(out, encoding="utf-8").read()
        if svg.count("<polyline") != 3 or "llama.cpp q4_0/q4_0 KV" not in svg or not svg.startswith("<svg"):
            sys.exit("the SVG does not hold the three lines")
    print("ok")


if __name__ == "__main__":
    main()
