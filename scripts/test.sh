#!/usr/bin/env bash
# The test command: sets up (packages, models, build) and runs the whole suite with CTest.
#
#   bash scripts/test.sh                                # the README's test command (CI runs it)
#   bash scripts/test.sh --sanitize address [CTEST...]  # ASan + UBSan build in build-asan/
#   bash scripts/test.sh --sanitize thread [CTEST...]   # TSan build in build-tsan/
#
# --sanitize configures with the CMake preset (CMakePresets.json: asan or tsan), builds every
# test target into its own build folder and runs CTest there; further arguments go to CTest
# (e.g. -R 'lm_|fuzz_replay'). It does not run setup: the packages and models must be there
# (bash scripts/setup.sh once). A sanitizer report fails the test that triggered it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"

if [[ "${1:-}" == "--sanitize" ]]; then
  kind="${2:-address}"
  shift 2 || shift $#
  case "$kind" in
    address) preset=asan ;;
    thread) preset=tsan ;;
    *) echo "scripts/test.sh: --sanitize takes 'address' (ASan + UBSan) or 'thread' (TSan), got '$kind'" >&2; exit 2 ;;
  esac
  cd "$ROOT"
  cmake --preset "$preset" > /dev/null
  cmake --build "build-$preset" -j "$JOBS"
  # halt_on_error: the first report ends the process with a failure (UBSan is also built with
  # -fno-sanitize-recover, so this holds without the variable). detect_leaks: a leak fails
  # the test at exit. No suppressions: none are needed (see docs/reliability.md).
  export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:strict_string_checks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
  ctest --test-dir "build-$preset" --output-on-failure -j "$JOBS" "$@"
  exit
fi

bash "$ROOT/scripts/setup.sh"
cd "$ROOT/build"
ctest --output-on-failure -j "${JOBS}"
