#!/usr/bin/env python3
"""veloxquant's host against llama.cpp, side by side, on the same GGUF (not part of the product).

Times llama.cpp through llama-cpp-python with the same threads, the same context lengths and the
same token counts as `veloxquant bench-host`, alternating the two (A B A B ..., best of --repeat
each, so machine noise hits both), and prints the ratio ours / llama.cpp for decode at each
context and for the fixed prefill row.

What one row times (both engines, identically; src/veloxquant/eval/host_bench.h):
  decode row at ctx L: prefill L - N prompt tokens in calls of --batch tokens, then N greedy
                       steps (forward + argmax, the token fed back); the caches end with L tokens.
  prefill row:         --prefill tokens from empty caches, nothing decoded.
Only the forward calls (and the argmax of each decode step) are inside the clocks; the model
load, tokenizing and cache set-up are not.

The prompt is the same text tokenized by each engine's own tokenizer of the same GGUF, repeated
end to end to the needed length (the BOS only at the start), or without --text a fixed token
pattern both rebuild; either way the token counts are identical.

    python3 tools/bench_llama_cpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 \
        --markdown docs/benchmarks.md

regenerates the measured part of docs/benchmarks.md (between its bench:begin / bench:end marks).

--kv-types f16,q8_0,q4_0 also times llama.cpp with quantized KV caches (type_k = type_v, ggml
type ids; flash attention on for those, which llama.cpp needs for a quantized V cache) at the
same rows, in the same alternating rounds, and reports each against llama.cpp's f16 cache: the
numbers to set beside `veloxquant bench-host --methods`' ratios to our native cache.
llama-cpp-python is installed from tools/requirements-bench.txt when `import llama_cpp` fails;
pip then compiles llama.cpp for this CPU (CMAKE_ARGS=-DGGML_NATIVE=ON), which takes minutes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "tools" / "requirements-bench.txt"
BEGIN_MARK = "<!-- bench:begin (tools/bench_llama_cpp.py --markdown writes this part) -->"
END_MARK = "<!-- bench:end -->"

# ggml type ids llama-cpp-python's type_k / type_v take (ggml.h's enum ggml_type); checked
# against the module's own GGML_TYPE_* constants when it has them.
KV_TYPE_IDS = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}

# The targets (issue 7): ours / llama.cpp at least this much.
DECODE_TARGETS = {128: 0.8, 1024: 0.8, 4096: 1.0}
PREFILL_TARGET = 0.5


def import_llama_cpp():
    """llama_cpp, installed from the pinned requirements first when it is missing."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        env = dict(os.environ)
        env.setdefault("CMAKE_ARGS", "-DGGML_NATIVE=ON")  # built for this CPU, as a user would
        print(f"bench: installing {REQUIREMENTS.name} (pip compiles llama.cpp, this takes minutes)",
              file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-r", str(REQUIREMENTS)], check=True, env=env)
    import llama_cpp
    return llama_cpp


def cycle_tokens(source: list[int], count: int, bos: int | None) -> list[int]:
    """`count` tokens: source repeated end to end, its BOS kept only at the start (host_bench.cpp)."""
    if not source:
        raise SystemExit("bench: the text gives no tokens")
    body_start = 1 if (bos is not None and source[0] == bos and len(source) > 1) else 0
    out = source[:body_start]
    i = body_start
    while len(out) < count:
        out.append(source[i])
        i += 1
        if i == len(source):
            i = body_start
    return out[:count]


def pattern_tokens(count: int, vocab_size: int, bos: int | None) -> list[int]:
    """bos then (7919 * i + 11) mod vocab_size: the same ids `bench-host` uses without --text."""
    return [bos if (i == 0 and bos is not None) else (7919 * i + 11) % vocab_size for i in range(count)]


class LlamaCppBench:
    """One llama.cpp context for every run (loaded once, reset between runs)."""

    def __init__(self, llama_cpp, args, n_ctx: int, kv_type: str = "f16"):
        self.llama_cpp = llama_cpp
        self.kv_type = kv_type
        kwargs = dict(model_path=str(args.model), n_ctx=n_ctx, n_batch=args.batch, n_ubatch=args.batch,
                      n_threads=args.threads, n_threads_batch=args.threads, logits_all=False, verbose=False)
        if args.flash_attn != "default":
            kwargs["flash_attn"] = args.flash_attn == "on"
        if kv_type != "f16":
            type_id = kv_type_id(llama_cpp, kv_type)
            kwargs["type_k"] = type_id
            kwargs["type_v"] = type_id
            kwargs["flash_attn"] = True  # llama.cpp refuses a quantized V cache without it
        self.flash_attn = kwargs.get("flash_attn")
        try:
            self.llm = llama_cpp.Llama(**kwargs)
        except ValueError as error:  # llama-cpp-python's "Failed to create llama_context"
            if kv_type == "f16":
                raise
            # The usual cause: llama.cpp quantizes each head's row in blocks of 32 values, so the
            # head size must be a multiple of 32 (stories260K's is 8).
            raise SystemExit(f"bench: llama.cpp could not create a context with a {kv_type} KV cache for "
                             f"{args.model} ({error}); a quantized K/V cache needs the head size to be a "
                             f"multiple of 32 values") from error
        self.n_vocab = self.llm.n_vocab()

    def prompt(self, args, count: int) -> list[int]:
        bos = self.llm.token_bos()
        bos = bos if bos >= 0 else None
        if args.text:
            tokens = self.llm.tokenize(Path(args.text).read_bytes(), add_bos=True, special=False)
            return cycle_tokens(tokens, count, bos if tokens and tokens[0] == bos else None)
        return pattern_tokens(count, self.llm.n_vocab(), bos)

    def last_logits(self):
        """The last evaluated token's logits, read in place: with logits_all=False eval() no longer
        copies them into llm.scores (sampling moved into llama.cpp's sampler)."""
        import numpy as np
        pointer = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def time_row(self, prompt: list[int], decode_tokens: int) -> tuple[float, float]:
        """(prefill seconds, decode seconds) of one run on an emptied cache."""
        llm = self.llm
        # reset() rewinds n_tokens to 0; the next eval() removes every cache cell from there on,
        # so each run starts from an empty cache as ours does.
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)  # split into n_batch calls by llama-cpp-python, like our --batch
        prefill = time.perf_counter() - start
        decode = 0.0
        if decode_tokens:
            start = time.perf_counter()
            for _ in range(decode_tokens):
                token = int(self.last_logits().argmax())
                llm.eval([token])
            decode = time.perf_counter() - start
        return prefill, decode


def kv_type_id(llama_cpp, kv_type: str) -> int:
    """The ggml type id of `kv_type`; the module's constant wins where it disagrees."""
    expected = KV_TYPE_IDS[kv_type]
    return int(getattr(llama_cpp, f"GGML_TYPE_{kv_type.upper()}", expected))


def parse_kv_types(text: str) -> list[str]:
    """'f16,q8_0,q4_0' -> the list, f16 first (the baseline of every ratio) and added when missing."""
    types = [t.strip() for t in text.split(",") if t.strip()]
    for t in types:
        if t not in KV_TYPE_IDS:
            raise SystemExit(f"bench: --kv-types: unknown KV type '{t}' (known: {', '.join(KV_TYPE_IDS)})")
    if len(set(types)) != len(types):
        raise SystemExit(f"bench: --kv-types: a type is repeated in '{text}'")
    return ["f16"] + [t for t in types if t != "f16"]


def rows_plan(args) -> list[tuple[str, int, int, int]]:
    """(kind, ctx, prompt tokens, decode tokens) in bench-host's row order."""
    plan = []
    if args.prefill > 0:
        plan.append(("prefill", args.prefill, args.prefill, 0))
    for ctx in args.ctx:
        plan.append(("decode", ctx, ctx - args.decode_tokens, args.decode_tokens))
    return plan


def run_ours(args) -> dict:
    cmd = [str(args.veloxquant), "bench-host", "--model", str(args.model), "--ctx", ",".join(map(str, args.ctx)),
           "--decode-tokens", str(args.decode_tokens), "--prefill", str(args.prefill), "--batch", str(args.batch),
           "--threads", str(args.threads), "--repeat", "1", "--json"]
    if args.text:
        cmd += ["--text", str(args.text)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def best(current: float | None, value: float) -> float:
    return value if current is None or value < current else current


def measure(args) -> dict:
    # libgomp reads OMP_WAIT_POLICY once, when llama.cpp's library loads: set it before the import.
    if args.omp_wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
    llama_cpp = import_llama_cpp()
    plan = rows_plan(args)
    n_ctx = max(ctx for _, ctx, _, _ in plan)
    bench = LlamaCppBench(llama_cpp, args, n_ctx)
    # One context per extra KV type, loaded once like the f16 one (the weights are mapped, shared).
    extra = [LlamaCppBench(llama_cpp, args, n_ctx, kv_type) for kv_type in args.kv_types[1:]]
    prompt = bench.prompt(args, n_ctx)
    ours_best = [[None, None] for _ in plan]
    theirs_best = [[None, None] for _ in plan]
    rounds = {"ours": [[] for _ in plan], "llama_cpp": [[] for _ in plan]}  # (prefill, decode) s per round
    extra_rounds = [[[] for _ in plan] for _ in extra]
    ours_record = None
    for r in range(args.repeat):
        print(f"bench: round {r + 1}/{args.repeat}: veloxquant bench-host", file=sys.stderr)
        record = run_ours(args)
        ours_record = ours_record or record
        ours_record["peak_rss_bytes"] = max(ours_record["peak_rss_bytes"], record["peak_rss_bytes"])
        if len(record["rows"]) != len(plan):
            raise SystemExit(f"bench: bench-host gave {len(record['rows'])} rows, expected {len(plan)}")
        for i, row in enumerate(record["rows"]):
            ours_best[i][0] = best(ours_best[i][0], row["prefill_seconds"])
            ours_best[i][1] = best(ours_best[i][1], row["decode_seconds"])
            rounds["ours"][i].append((row["prefill_seconds"], row["decode_seconds"]))
        print(f"bench: round {r + 1}/{args.repeat}: llama.cpp", file=sys.stderr)
        for i, (kind, ctx, n_prompt, n_decode) in enumerate(plan):
            prefill, decode = bench.time_row(prompt[:n_prompt], n_decode)
            theirs_best[i][0] = best(theirs_best[i][0], prefill)
            theirs_best[i][1] = best(theirs_best[i][1], decode)
            rounds["llama_cpp"][i].append((prefill, decode))
        for e, other in enumerate(extra):
            print(f"bench: round {r + 1}/{args.repeat}: llama.cpp, {other.kv_type} KV cache", file=sys.stderr)
            for i, (kind, ctx, n_prompt, n_decode) in enumerate(plan):
                extra_rounds[e][i].append(other.time_row(prompt[:n_prompt], n_decode))
    rows = []
    for i, (kind, ctx, n_prompt, n_decode) in enumerate(plan):
        row = {"kind": kind, "ctx": ctx, "prefill_tokens": n_prompt, "decode_tokens": n_decode}
        phase = 1 if n_decode else 0
        for side, (prefill, decode) in (("ours", ours_best[i]), ("llama_cpp", theirs_best[i])):
            times = [run[phase] for run in rounds[side][i]]
            row[side] = {"prefill_seconds": prefill, "prefill_tokens_per_s": n_prompt / prefill,
                         "decode_seconds": decode,
                         "decode_tokens_per_s": n_decode / decode if n_decode else None,
                         # every round's (prefill, decode) seconds, and slowest / fastest of the
                         # row's phase: how much the machine's noise moved this row
                         "rounds": rounds[side][i], "spread": max(times) / min(times)}
        key = "decode_tokens_per_s" if n_decode else "prefill_tokens_per_s"
        row["ratio"] = row["ours"][key] / row["llama_cpp"][key]
        row["prefill_ratio"] = row["ours"]["prefill_tokens_per_s"] / row["llama_cpp"]["prefill_tokens_per_s"]
        rows.append(row)
    kv_types = [kv_type_rows(other, plan, extra_rounds[e], rows) for e, other in enumerate(extra)]
    system_info = llama_cpp.llama_print_system_info()
    return {
        "command": " ".join(["python3", Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "model": str(args.model), "threads": args.threads, "repeat": args.repeat,
        "decode_tokens": args.decode_tokens, "batch": args.batch, "text": str(args.text) if args.text else "pattern",
        "machine": {"cpu": ours_record["cpu"], "os": f"{platform.system()} {platform.release()}",
                    "python": platform.python_version()},
        "veloxquant": {k: ours_record[k] for k in ("version", "build_type", "simd_target", "kv_dtype",
                                                   "method", "peak_rss_bytes")},
        "llama_cpp": {"llama_cpp_python": llama_cpp.__version__,
                      "system_info": system_info.decode() if isinstance(system_info, bytes) else str(system_info),
                      "flash_attn": args.flash_attn, "omp_wait_policy": args.omp_wait_policy, "n_ctx": n_ctx,
                      "peak_rss_bytes_python_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024},
        "rows": rows,
        # llama.cpp with quantized KV caches, each row against llama.cpp's f16 row (rows[i]["llama_cpp"])
        "llama_cpp_kv_types": kv_types,
    }


def kv_type_rows(bench: "LlamaCppBench", plan, type_rounds, rows) -> dict:
    """One quantized KV type's rows: best of its rounds and the ratio to the f16 cache's best."""
    out = []
    for i, (kind, ctx, n_prompt, n_decode) in enumerate(plan):
        prefill = min(p for p, _ in type_rounds[i])
        decode = min(d for _, d in type_rounds[i])
        phase = 1 if n_decode else 0
        times = [run[phase] for run in type_rounds[i]]
        f16 = rows[i]["llama_cpp"]
        row = {"kind": kind, "ctx": ctx, "prefill_tokens": n_prompt, "decode_tokens": n_decode,
               "prefill_seconds": prefill, "prefill_tokens_per_s": n_prompt / prefill,
               "decode_seconds": decode, "decode_tokens_per_s": n_decode / decode if n_decode else None,
               "rounds": type_rounds[i], "spread": max(times) / min(times)}
        row["prefill_ratio_to_f16"] = row["prefill_tokens_per_s"] / f16["prefill_tokens_per_s"]
        row["decode_ratio_to_f16"] = (row["decode_tokens_per_s"] / f16["decode_tokens_per_s"]) if n_decode else None
        out.append(row)
    return {"kv_type": bench.kv_type, "type_id": kv_type_id(bench.llama_cpp, bench.kv_type),
            "flash_attn": bench.flash_attn, "rows": out}


def target_of(row) -> float | None:
    return PREFILL_TARGET if row["kind"] == "prefill" else DECODE_TARGETS.get(row["ctx"])


def spread(row, side: str) -> str:
    value = row[side].get("spread")  # absent in records written before it existed
    return "-" if value is None else f"{value:.2f}"


def flash_label(setting: str) -> str:
    return "off (llama-cpp-python's default)" if setting == "default" else setting


def markdown(result: dict) -> str:
    lines = [f"Measured {result['date_utc']} with", "", "```",
             result["command"], "```", "",
             f"- Machine: {result['machine']['cpu']}; {result['machine']['os']}; "
             f"{result['threads']} threads for both engines (the machine is shared, hence best of "
             f"{result['repeat']}, alternating the two).",
             f"- veloxquant {result['veloxquant']['version']} ({result['veloxquant']['build_type']} build, "
             f"Highway target {result['veloxquant']['simd_target']}, native {result['veloxquant']['kv_dtype']} "
             f"cache).",
             f"- llama.cpp through llama-cpp-python {result['llama_cpp']['llama_cpp_python']} "
             f"(built with CMAKE_ARGS=-DGGML_NATIVE=ON; flash attention: {flash_label(result['llama_cpp']['flash_attn'])}; "
             f"OMP_WAIT_POLICY {result['llama_cpp'].get('omp_wait_policy', 'default')}; "
             f"n_ctx {result['llama_cpp']['n_ctx']}, f16 KV cache). Its system info: "
             f"`{result['llama_cpp']['system_info'].strip()}`",
             f"- Model `{Path(result['model']).name}`; prompt: {Path(result['text']).name if result['text'] != 'pattern' else 'fixed token pattern'}; "
             f"{result['decode_tokens']} greedy decode steps per context; prefill calls of {result['batch']} tokens.",
             "",
             "| row | ours tok/s | llama.cpp tok/s | ours / llama.cpp | target | met | spread ours / llama.cpp |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for row in result["rows"]:
        key = "decode_tokens_per_s" if row["decode_tokens"] else "prefill_tokens_per_s"
        label = (f"decode at {row['ctx']} ({row['prefill_tokens']} prefilled + {row['decode_tokens']} decoded)"
                 if row["decode_tokens"] else f"prefill {row['ctx']}")
        target = target_of(row)
        met = "-" if target is None else ("yes" if row["ratio"] >= target else "**no**")
        lines.append(f"| {label} | {row['ours'][key]:.1f} | {row['llama_cpp'][key]:.1f} | {row['ratio']:.2f} | "
                     f"{'-' if target is None else f'≥ {target:g}'} | {met} | {spread(row, 'ours')} / {spread(row, 'llama_cpp')} |")
    lines += ["", "Spread: slowest / fastest time of the row's phase over the rounds (1.00 = no noise); "
                  "docs/benchmarks.json has every round's seconds.", "",
              "Prefill of each decode row (the prompt before the decode steps), tokens/s:", "",
              "| ctx | prompt tokens | ours | llama.cpp | ours / llama.cpp |", "|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        if row["decode_tokens"]:
            lines.append(f"| {row['ctx']} | {row['prefill_tokens']} | {row['ours']['prefill_tokens_per_s']:.1f} | "
                         f"{row['llama_cpp']['prefill_tokens_per_s']:.1f} | {row['prefill_ratio']:.2f} |")
    lines += kv_types_markdown(result)
    mib = 1024.0 * 1024.0
    lines += ["", f"Peak RSS: veloxquant bench-host {result['veloxquant']['peak_rss_bytes'] / mib:.1f} MiB "
                  f"(whole process, largest context included); the llama.cpp side runs inside the Python "
                  f"process, whose peak is {result['llama_cpp']['peak_rss_bytes_python_process'] / mib:.1f} MiB "
                  f"(Python and NumPy included, so only an upper bound for llama.cpp).", ""]
    return "\n".join(lines)


def kv_types_markdown(result: dict) -> list[str]:
    """llama.cpp's quantized KV caches beside its f16 cache; nothing for a record without them."""
    types = result.get("llama_cpp_kv_types") or []
    if not types:
        return []
    flash = flash_label(result["llama_cpp"]["flash_attn"])
    lines = ["", f"llama.cpp with quantized KV caches (type_k = type_v; flash attention on, which llama.cpp needs "
                 f"for a quantized V cache; its f16 row: flash attention {flash}), tokens/s and the ratio to "
                 f"llama.cpp's f16 cache in the same rounds:", "",
             "| ctx | KV type | decode tok/s | x f16 | prefill tok/s | x f16 | spread |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for i, base in enumerate(result["rows"]):
        label = str(base["ctx"]) if base["decode_tokens"] else f"prefill {base['ctx']}"
        f16 = base["llama_cpp"]
        f16_decode = f"{f16['decode_tokens_per_s']:.1f}" if base["decode_tokens"] else "-"
        lines.append(f"| {label} | f16 | {f16_decode} | {'1.00' if base['decode_tokens'] else '-'} | "
                     f"{f16['prefill_tokens_per_s']:.1f} | 1.00 | {spread(base, 'llama_cpp')} |")
        for kv in types:
            row = kv["rows"][i]
            decode = f"{row['decode_tokens_per_s']:.1f}" if row["decode_tokens"] else "-"
            ratio = f"{row['decode_ratio_to_f16']:.2f}" if row["decode_tokens"] else "-"
            lines.append(f"| {label} | {kv['kv_type']} | {decode} | {ratio} | {row['prefill_tokens_per_s']:.1f} | "
                         f"{row['prefill_ratio_to_f16']:.2f} | {row['spread']:.2f} |")
    return lines


def write_markdown(path: Path, table: str) -> None:
    """Replaces the text between the marks; the rest of the document is prose kept as it is."""
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{BEGIN_MARK}\n{END_MARK}\n"
    if BEGIN_MARK not in text or END_MARK not in text:
        raise SystemExit(f"bench: {path} lacks the marks {BEGIN_MARK!r} ... {END_MARK!r}")
    head, rest = text.split(BEGIN_MARK, 1)
    _, tail = rest.split(END_MARK, 1)
    path.write_text(f"{head}{BEGIN_MARK}\n{table}{END_MARK}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--veloxquant", type=Path, default=REPO / "build" / "veloxquant",
                        help="the built CLI (default build/veloxquant)")
    parser.add_argument("--text", type=Path, default=None,
                        help="prompt text (default: ../shared/data/tinystories_valid_head794k.txt when present, "
                             "else the fixed token pattern)")
    parser.add_argument("--ctx", default="128,1024,4096,8192", help="comma-separated context lengths")
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--prefill", type=int, default=512, help="tokens of the fixed prefill row")
    parser.add_argument("--batch", type=int, default=512, help="tokens per prefill call (n_batch = n_ubatch)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (A B per round); best of each is kept")
    parser.add_argument("--flash-attn", choices=("default", "on", "off"), default="default",
                        help="llama.cpp's flash attention (default: llama-cpp-python's default)")
    parser.add_argument("--omp-wait-policy", choices=("default", "passive", "active"), default="passive",
                        help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads. passive (the default here): on a "
                             "busy machine libgomp's spinning made llama.cpp's runs swing 1000x (2 to 4000 tok/s "
                             "on stories260K); on a quiet machine try default/active, which may be faster")
    parser.add_argument("--kv-types", default="f16",
                        help="llama.cpp KV cache types to time, comma-separated, from "
                             f"{', '.join(KV_TYPE_IDS)} (default f16 only; f16 is always timed, the baseline of "
                             "the others' ratios; the quantized ones run with flash attention on)")
    parser.add_argument("--out", type=Path, help="write the whole result as JSON here")
    parser.add_argument("--markdown", type=Path, help="regenerate the measured part of this Markdown file")
    parser.add_argument("--from-json", type=Path,
                        help="render a result written earlier by --out instead of measuring")
    args = parser.parse_args()
    if args.from_json:
        table = markdown(json.loads(args.from_json.read_text()))
        print(table)
        if args.markdown:
            write_markdown(args.markdown, table)
        return
    args.ctx = [int(c) for c in args.ctx.split(",") if c]
    args.kv_types = parse_kv_types(args.kv_types)
    if args.text is None:
        default_text = REPO.parent / "shared" / "data" / "tinystories_valid_head794k.txt"
        args.text = default_text if default_text.exists() else None
    if args.threads < 1 or args.repeat < 1 or args.decode_tokens < 1:
        raise SystemExit("bench: --threads, --repeat and --decode-tokens must be >= 1")
    if not args.veloxquant.exists():
        raise SystemExit(f"bench: {args.veloxquant} not built (cmake --build build --target veloxquant_cli)")
    result = measure(args)
    table = markdown(result)
    print(table)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        write_markdown(args.markdown, table)
        print(f"bench: wrote {args.markdown}", file=sys.stderr)


if __name__ == "__main__":
    main()
