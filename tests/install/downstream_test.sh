#!/usr/bin/env bash
# The install tree is a usable package: `cmake --install` into a scratch prefix, then a
# downstream project (examples/downstream) finds it with find_package(veloxquant CONFIG),
# links veloxquant::veloxquant, and generates with a TurboQuant-RVQ cache on stories260K.
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
