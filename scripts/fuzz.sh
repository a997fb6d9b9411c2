#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of user input (fuzz/fuzz_*.cpp) with libFuzzer and
# AddressSanitizer, for SECONDS seconds per target (default 60):
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]     (targets: gguf llama2c prompt_cache field_assignment tokenizer image mmproj)
#
# Each target is compiled with clang (-fsanitize=fuzzer,address) and linked against the libraries
# of the regular build (build/, made by scripts/setup.sh), so only the target files carry
# coverage counters. The corpora are copied into build-fuzz/corpus/<target>/ (libFuzzer adds the
# inputs it finds there, not in the repository); a crash leaves crash-* files in build-fuzz/ —
# copy them into fuzz/corpus/<target>/ so the replay tests keep them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(gguf llama2c prompt_cache field_assignment tokenizer image mmproj)
command -v clang++ > /dev/null || { echo "[fuzz] clang++ is needed: apt-get install clang" >&2; exit 1; }
[[ -f "$ROOT/build/src/veloxquant/libveloxquant.a" ]] || { echo "[fuzz] build first: bash scripts/setup.sh" >&2; exit 1; }
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT/corpus"
(($#)) || TARGETS+=(chat_template)  # also a default target
SHARED="$ROOT/../shared"
LIBS=("$ROOT/build/src/veloxquant/libveloxquant.a" "$ROOT/build/src/veloxquant/libveloxquant_eval.a" "$ROOT/build/src/lm/libveloxquant_lm.a"
      "$ROOT/build/src/base/libveloxquant_base.a")
status=0
for t in "${TARGETS[@]}"; do
  echo "[fuzz] building fuzz_$t"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$ROOT/src" -DVQ_SHARED_DIR="\"$SHARED\"" \
    "$ROOT/fuzz/fuzz_$t.cpp" "${LIBS[@]}" -lhwy -lpthread -o "$OUT/fuzz_$t"
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
  echo "[fuzz] fuzz_$t for ${SECONDS_PER_TARGET}s"
  (cd "$OUT" && "./fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=4096 -max_len=1200000 \
     -print_final_stats=1 "$corpus" 2>&1 | grep -E "stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY") ||
    { echo "[fuzz] fuzz_$t FOUND A PROBLEM: see $OUT/crash-*" >&2; status=1; }
done
exit $status
