#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of user input (fuzz/fuzz_*.cpp) with libFuzzer and
# AddressSanitizer, for SECONDS seconds per target (default 60):
#
#   bash scripts/fuzz.sh [--plain] [--parallel N] [SECONDS] [TARGET...]
#     targets: gguf llama2c prompt_cache field_assignment tokenizer image mmproj chat_template
#
# Default (instrumented): the libraries the targets link are themselves compiled with clang and
# -fsanitize=fuzzer-no-link,address (-O1 -g) in build-fuzz-lib/, so libFuzzer's coverage
# counters sit in the parsers' own branches (lm's GGUF / llama2.c / tokenizer / prompt-cache /
# chat-template / image / mmproj code, veloxquant's config and registry code) and AddressSanitizer
# checks their memory accesses. Only the libraries a target needs are built: base + lm for
# every target but field_assignment, which also needs the veloxquant library (its registry
# rows reach every method's cache), so that one is built only when field_assignment is asked
# for, with only its config/ and registry/ sources instrumented (cmake/fuzz_instrumented.cmake).
# Builds run at nice 19 with -j2 (the machine is shared).
#
# --plain: the old mode, the targets alone compiled with clang and linked against the regular
# build's GCC libraries (build/, made by scripts/setup.sh): counters in the target files only.
#
# --parallel N: run N targets at once (each target still gets SECONDS of wall time).
#
# The corpora are copied into build-fuzz/corpus/<target>/ (libFuzzer adds the inputs it finds
# there, not in the repository); each target's full libFuzzer log is build-fuzz/fuzz_<target>.log
# and a crash leaves crash-* / leak-* / timeout-* / oom-* files in build-fuzz/ — minimise them
# (./fuzz_<target> -minimize_crash=1 -runs=10000 FILE), fix the cause and copy the reproducer into
# fuzz/corpus/<target>/ so the replay tests (ctest -R fuzz_replay) keep it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=instrumented
PARALLEL=1
while (($#)); do
  case "$1" in
    --plain) MODE=plain; shift ;;
    --instrumented) MODE=instrumented; shift ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    *) break ;;
  esac
done
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(gguf llama2c prompt_cache field_assignment tokenizer image mmproj chat_template)
command -v clang++ > /dev/null || { echo "[fuzz] clang++ is needed: apt-get install clang" >&2; exit 1; }
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT/corpus"
SHARED="$ROOT/../shared"

needs_veloxquant() { [[ "$1" == field_assignment ]]; }

if [[ $MODE == plain ]]; then
  LIBDIR="$ROOT/build"
  [[ -f "$LIBDIR/src/veloxquant/libveloxquant.a" ]] || { echo "[fuzz] build first: bash scripts/setup.sh" >&2; exit 1; }
else
  LIBDIR="$ROOT/build-fuzz-lib"
  # -O1 -g as libFuzzer's documentation suggests: fast enough to fuzz, still readable stacks.
  # CMAKE_BUILD_TYPE=Fuzz has no flags of its own, so the project's Release -O3 stays out.
  # cmake/fuzz_instrumented.cmake compiles veloxquant's method code (everything but config/ and
  # registry/) plainly at -O0: no fuzz input reaches it, and instrumented it takes far too long.
  nice -n 19 cmake -S "$ROOT" -B "$LIBDIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Fuzz \
    "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer -O1 -g" \
    "-DCMAKE_PROJECT_INCLUDE=$ROOT/cmake/fuzz_instrumented.cmake" \
    -DVELOXQUANT_BUILD_TESTS=OFF -DVELOXQUANT_BUILD_BENCH=OFF -DVELOXQUANT_BUILD_FUZZ=OFF > /dev/null
  LIB_TARGETS=(vq_base lm)
  for t in "${TARGETS[@]}"; do
    if needs_veloxquant "$t"; then LIB_TARGETS+=(veloxquant_lib); break; fi
  done
  echo "[fuzz] building the instrumented libraries (${LIB_TARGETS[*]}) in $LIBDIR"
  nice -n 19 cmake --build "$LIBDIR" -j2 --target "${LIB_TARGETS[@]}"
fi

libs_for() {
  local l=()
  if needs_veloxquant "$1"; then
    l+=("$LIBDIR/src/veloxquant/libveloxquant.a" "$LIBDIR/src/veloxquant/libveloxquant_eval.a")
  fi
  l+=("$LIBDIR/src/lm/libveloxquant_lm.a" "$LIBDIR/src/base/libveloxquant_base.a")
  echo "${l[@]}"
}

for t in "${TARGETS[@]}"; do
  echo "[fuzz] building fuzz_$t"
  # shellcheck disable=SC2046  # libs_for prints paths without spaces (the build dirs')
  nice -n 19 clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$ROOT/src" -DVQ_SHARED_DIR="\"$SHARED\"" \
    "$ROOT/fuzz/fuzz_$t.cpp" $(libs_for "$t") -lhwy -lpthread -o "$OUT/fuzz_$t"
  corpus="$OUT/corpus/$t"
  mkdir -p "$corpus"
  cp -n "$ROOT/fuzz/corpus/$t/"* "$corpus/" 2> /dev/null || true
  case "$t" in
    chat_template) cp -n "$ROOT/tests/fixtures/tokenizer/chat_templates/"*.jinja "$corpus/" 2> /dev/null || true ;;
    gguf) cp -n "$SHARED/models/stories260K/stories260K.gguf" "$corpus/" 2> /dev/null || true ;;
    llama2c) cp -n "$SHARED/models/stories260K/stories260K.bin" "$corpus/" 2> /dev/null || true ;;
    image) cp -n "$ROOT/tests/fixtures/reference/hf/llava_tiny."{png,jpg} "$corpus/" 2> /dev/null || true ;;
    mmproj) cp -n "$ROOT/tests/fixtures/reference/hf/"*.mmproj.gguf "$corpus/" 2> /dev/null || true ;;
  esac
done

# One target's run: the full log stays in build-fuzz/fuzz_<t>.log, the summary lines are printed.
fuzz_one() {
  local t="$1" log="$OUT/fuzz_$1.log" rc=0
  echo "[fuzz] fuzz_$t for ${SECONDS_PER_TARGET}s ($(date -u +%H:%M:%S) UTC)"
  (cd "$OUT" && nice -n 19 "./fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=4096 -max_len=1200000 \
     -print_final_stats=1 "corpus/$t" > "$log" 2>&1) || rc=$?
  { grep -E "^#[0-9]+.*cov:" "$log" | tail -1; grep -E "^stat::" "$log"; } | sed "s/^/[fuzz] $t: /" || true
  grep -E "^(==[0-9]+==ERROR|SUMMARY)" "$log" | sed "s/^/[fuzz] $t: /" || true
  if ((rc)); then echo "[fuzz] fuzz_$t FOUND A PROBLEM (exit $rc): see $log and $OUT/crash-*" >&2; fi
  return $rc
}

status=0
pids=()
for t in "${TARGETS[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
  if ((${#pids[@]} >= PARALLEL)); then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
