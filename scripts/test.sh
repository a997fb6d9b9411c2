#!/usr/bin/env bash
# The test command: sets up (packages, models, build) and runs the whole suite with CTest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT/build"
ctest --output-on-failure -j "${JOBS:-$(nproc)}"
