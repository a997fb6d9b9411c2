#!/usr/bin/env python3
"""tools/frontier_plot.py's eviction rows on a hand-made bench-methods record: a row whose
settings name a budget (or streaming_llm's window) is an eviction point, labelled with its method
and rows; `eviction_storage=...` moves it to the stored series with its storage and bits; rows
without a budget (presets, plain quantizers) are not eviction points. Standard library only."""
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import frontier_plot  # noqa: E402


def row(method, settings, nbytes, kl):
    return {"method": method, "settings": settings, "kv_bytes_per_token": nbytes, "kld": kl}


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.json")
        json.dump({"results": [
            row("h2o", "h2o_budget=558", 6473.7, 0.0617),
            row("streaming_llm", "stream_window_size=554", 6375.6, 0.0528),
            row("h2o", "config=h2o_budget=1290,eviction_storage=turboquant_rvq,bit_width_inlier=4,rvq_value_bits=4",
                6462.6, 0.0065),
            row("snapkv", "config=snap_budget=1600,eviction_storage=kivi,bit_width_inlier=4", 6187.5, 0.0205),
            row("turboquant_block", "config=preset=q4,key_bits=5,value_bits=3", 6480.0, 0.0224),
            row("kivi", "config=bit_width_inlier=4", 9000.0, 0.0029),
        ]}, open(path, "w"))
        plain, stored = frontier_plot.eviction_rows([path])
    want_plain = [("h2o 558", 6473.7, 0.0617), ("streaming_llm 554", 6375.6, 0.0528)]
    want_stored = [("h2o 1290 / RVQ 4/4", 6462.6, 0.0065), ("snapkv 1600 / KIVI 4", 6187.5, 0.0205)]
    if plain != want_plain or stored != want_stored:
        sys.exit(f"eviction rows differ:\n  plain  {plain}\n  stored {stored}\n"
                 f"expected:\n  plain  {want_plain}\n  stored {want_stored}")
    print("ok")


if __name__ == "__main__":
    main()
