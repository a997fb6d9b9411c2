#!/usr/bin/env python3
"""Every servable method and preset through one `veloxquant serve`, two requests at once.

Starts the server binary given (a sanitizer build finds races and memory errors this way: the
server decodes two requests of the same method in two slots on one shared thread pool), then for
each method of `veloxquant methods --json --servable-only` and each preset sends the same greedy
completion twice concurrently. A method passes when both answers come back 200, non-empty and
equal to each other (greedy decoding of the same prompt in two slots must not differ: a data race
between slots would show here). At the end the server must still answer /health, and its stderr
must hold no sanitizer report. Exit status 1 names every failure (77: the model file is missing).

  python3 tools/serve_every_method.py --veloxquant build-tsan/veloxquant \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --prompt-chars 2600

The default prompt (2,600 characters of tinystories, about 620 SmolLM2 tokens) is longer than the
eviction methods' default budgets (512 rows), so their eviction runs during the prompt's chunked
prefill (--prefill-step 128) and during decoding.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
SANITIZER_MARKS = ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def post(port, body, timeout):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {"error": error.read().decode(errors="replace")}


def wait_ready(server, timeout):
    """Returns the port from the server's ready line (VELOXQUANT_READY {json})."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = server.stdout.readline()
        if not line:
            if server.poll() is not None:
                return None
            continue
        if line.startswith("VELOXQUANT_READY "):
            return json.loads(line.split(" ", 1)[1])["port"]
    return None


def is_budget_field(name):
    """The rows an eviction method keeps: h2o_budget, snap_budget, ..., streaming_llm's window (not
    kvtc's bit budget, nor the budgets pyramidkv and squeeze resolve from it)."""
    if name == "stream_window_size":
        return True
    return name.endswith("_budget") and name != "kvtc_bit_budget" and not name.endswith("_resolved_budget")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--veloxquant", default=str(ROOT / "build" / "veloxquant"))
    parser.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--text", default=str(ROOT.parent / "shared" / "data" / "tinystories_valid_head794k.txt"))
    parser.add_argument("--prompt-chars", type=int, default=2600)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one request may take")
    parser.add_argument("--budget", type=int,
                        help="rows every eviction method keeps (its *_budget field, streaming_llm's window): a "
                        "budget below the prompt's length makes eviction act on a short prompt (default: the "
                        "methods' own, 512)")
    parser.add_argument("--methods",
                        help="comma list of methods and presets (preset:q4) (default: every servable method, then "
                        "every preset)")
    args = parser.parse_args()

    if not pathlib.Path(args.model).is_file():
        print(f"{args.model} is not here (scripts/fetch_models.sh)", file=sys.stderr)
        return 77  # what ctest's SKIP_RETURN_CODE takes: no model, nothing to check
    listing = json.loads(subprocess.run([args.veloxquant, "methods", "--json", "--servable-only"], check=True,
                                        capture_output=True, text=True).stdout)
    if args.methods:
        cases = [{"preset": m[len("preset:"):]} if m.startswith("preset:") else {"method": m}
                 for m in args.methods.split(",")]
    else:
        cases = [{"method": m["name"]} for m in listing["methods"]]
        cases += [{"preset": p["name"]} for p in listing["presets"]]
    if args.budget is not None:
        budget_fields = {m["name"]: [f["name"] for f in m["fields"] if is_budget_field(f["name"])]
                         for m in listing["methods"]}
        for case in cases:
            sets = {name: args.budget for name in budget_fields.get(case.get("method"), [])}
            if sets:
                case["set"] = sets
    prompt = pathlib.Path(args.text).read_text(encoding="utf-8", errors="replace")[: args.prompt_chars]

    stderr_file = tempfile.NamedTemporaryFile(prefix="serve_every_method_", suffix=".err", delete=False)
    server = subprocess.Popen(
        [args.veloxquant, "serve", "-m", args.model, "--port", "0", "--threads", str(args.threads), "--parallel", "2",
         "--prefill-step", "128", "--prompt-cache-entries", "0"],
        stdout=subprocess.PIPE, stderr=stderr_file, text=True)
    failures = []
    failed_cases = set()
    try:
        port = wait_ready(server, 600)
        if port is None:
            print(f"serve did not become ready; stderr in {stderr_file.name}", file=sys.stderr)
            return 1
        for case in cases:
            label = case.get("method") or "--preset " + case["preset"]
            if "set" in case:
                label += " " + " ".join(f"{k}={v}" for k, v in case["set"].items())
            body = {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0, "veloxquant": case}
            started = time.time()
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(lambda _: post(port, body, args.timeout), range(2)))
            texts = [a[1].get("choices", [{}])[0].get("text") if a[0] == 200 else None for a in answers]
            if any(status != 200 for status, _ in answers):
                failures.append(f"{label}: HTTP {[s for s, _ in answers]}: {[a for s, a in answers if s != 200]}")
                failed_cases.add(label)
            elif not texts[0] or texts[0] != texts[1]:
                failures.append(f"{label}: the two concurrent answers differ or are empty: {texts!r}")
                failed_cases.add(label)
            print(f"{label}: {time.time() - started:.1f} s, {'FAILED' if label in failed_cases else 'ok'}", flush=True)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=60) as response:
                if response.status != 200:
                    failures.append(f"/health answered {response.status} at the end")
        except (urllib.error.URLError, OSError) as error:
            failures.append(f"/health failed at the end: {error}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            failures.append("serve did not stop within 120 s of SIGTERM")
        stderr_file.close()
    stderr_text = pathlib.Path(stderr_file.name).read_text(errors="replace")
    reports = [mark for mark in SANITIZER_MARKS if mark in stderr_text]
    if reports:
        failures.append(f"sanitizer report(s) {reports} in the server's stderr: {stderr_file.name}")
    if server.returncode not in (0, -15):
        failures.append(f"serve exited with status {server.returncode} (stderr: {stderr_file.name})")
    for failure in failures:
        print("FAILED " + failure, file=sys.stderr)
    print(f"{len(cases) - len(failed_cases)} of {len(cases)} cases answered alike; "
          f"{'no sanitizer report' if not reports else 'sanitizer reports'}"
          f"{'' if not failures else '; server stderr kept in ' + stderr_file.name}")
    if not failures:
        os.unlink(stderr_file.name)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
