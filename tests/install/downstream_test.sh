#!/usr/bin/env bash
# The install tree is a usable package: `cmake --install` into a scratch prefix, then a
# downstream project (examples/downstream) finds it with find_package(veloxquant CONFIG),
# links veloxquant::veloxquant, and generates with a TurboQuant-RVQ cache on stories260K, and from
# an image with the LLaVA fixture (patch_vlm_kv_cache).
set -euo pipefail
SRC="$1"; BUILD="$2"; SHARED="$3"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log"
cmake -S "$SRC/examples/downstream" -B "$WORK/build" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$WORK/configure.log"
cmake --build "$WORK/build" > "$WORK/build.log"
out="$("$WORK/build/demo" "$SHARED/models/stories260K/stories260K.gguf" 2>&1)"
echo "$out"
grep -q "^5 caches$" <<< "$out"
grep -q "Wired 5 layer cache(s) with 'turboquant_rvq' (fresh per call)" <<< "$out"
# A vision-language model: patch_vlm_kv_cache, then two generations from the LLaVA fixture's
# image, each with fresh compressed caches on the language model.
HF="$SRC/tests/fixtures/reference/hf"
vlm="$("$WORK/build/demo_vlm" "$HF/llava_tiny.gguf" "$HF/llava_tiny.mmproj.gguf" "$HF/llava_tiny.png" 2>&1)"
echo "$vlm"
grep -q "Wired 2 layer cache(s) with 'turboquant_rvq' on the language model (fresh per call)" <<< "$vlm"
grep -q "^2 caches, 16 image tokens$" <<< "$vlm"
grep -q "^fresh caches per generation: yes (TurboQuantRvqCache)$" <<< "$vlm"
grep -q "^same answer twice: yes$" <<< "$vlm"
