#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine: Debian packages, PyPI packages, the default models, and a
# Release build in build/. Idempotent: a second run only rebuilds what changed.
#   bash scripts/setup.sh            # everything
#   SKIP_APT=1 bash scripts/setup.sh # when the packages are known to be there
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(build-essential cmake pkg-config git python3 python3-pip python3-venv unzip
  libhwy-dev googletest libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libcli11-dev libcpp-httplib-dev libeigen3-dev libstb-dev chromium chromium-driver)

if [[ "${SKIP_APT:-0}" != "1" ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "[setup] installing Debian packages: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  fi
fi

bash "$ROOT/scripts/fetch_models.sh"

# The real clients the server is tested with (the official openai package and Selenium for
# the page in Debian's headless chromium, pinned), in a virtual environment of their own:
# .venv-test/.
VENV="$ROOT/.venv-test"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/tests/python/requirements.txt"

JOBS="${JOBS:-$(nproc)}"
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$ROOT/build" -j "$JOBS"
echo "[setup] built $ROOT/build/veloxquant"
