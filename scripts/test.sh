#!/usr/bin/env bash
# The test command: sets up (packages, models, build) and runs the whole suite with CTest.
#
#   bash scripts/test.sh                                # the README's test command (CI runs it)
#   bash scripts/test.sh --sanitize address [CTEST...]  # ASan + UBSan build in build-asan/
#   bash scripts/test.sh --sanitize thread [CTEST...]   # TSan build in build-tsan/
#   bash scripts/test.sh --sanitize address --targets 'veloxquant_.*key_scores_test' [CTEST...]
#   bash scripts/test.sh --sanitize thread --include cmake/tsan_pooled_caches.cmake \
#        --targets 'veloxquant_(kivi|kivi_sink|kvquant|gear|skvq|nsnquant|adakv|a2ats)_cache_test'
#   bash scripts/test.sh --sanitize thread --include cmake/tsan_eviction_caches.cmake \
#        --targets 'veloxquant_(eviction_(fused|methods|rules|rules_layer_value_anchor|invariants)|xkv_cache|xquant_cache)_test'
#
# --sanitize configures with the CMake preset (CMakePresets.json: asan or tsan), builds every
# test target into its own build folder and runs CTest there; further arguments go to CTest
# (e.g. -R 'Kivi'). It does not run setup: the packages and models must be there
# (bash scripts/setup.sh once). A sanitizer report fails the test that triggered it.
# --targets REGEX builds and runs only the test executables whose target names match (the
# target of tests/<top>/.../<name>_test.cpp is <top>_<name>_test; CTest selects their tests by
# the label each carries, its target's name): the whole sanitized suite takes hours to build on
# a 2-core machine, so it is run in batches (docs/reliability.md, "Sanitizer builds").
# --include FILE (before --targets) configures with -DCMAKE_PROJECT_INCLUDE=FILE: a cmake/ include
# that narrows veloxquant_lib to what some tests link (cmake/tsan_pooled_caches.cmake: the
# quantization caches that run on the thread pool; cmake/tsan_eviction_caches.cmake: the eviction
# and cross-layer caches; cmake/tsan_attention_only.cmake; cmake/sanitize_quick.cmake); only the
# test executables that link against it can be built then, and a test that names a method the
# include's table lacks fails (docs/reliability.md lists them). Switching the include of
# a folder recompiles its whole veloxquant_lib (every object depends on the target's flags.make,
# which lists the per-source options of the sources it holds), not only the sources it gains.
# Without --include the folder's include is cleared, so a plain run builds the whole library.
# JOBS sets the build and CTest parallelism (default: every core).
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
  include_arg=-UCMAKE_PROJECT_INCLUDE
  if [[ "${1:-}" == "--include" ]]; then
    [[ -f "${2:-}" ]] || { echo "scripts/test.sh: --include takes a CMake file (e.g. cmake/tsan_pooled_caches.cmake), got '${2:-}'" >&2; exit 2; }
    include_arg="-DCMAKE_PROJECT_INCLUDE=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
    shift 2
  fi
  targets=()
  if [[ "${1:-}" == "--targets" ]]; then
    pattern="${2:-}"
    [[ -n "$pattern" ]] || { echo "scripts/test.sh: --targets takes a regular expression over test target names" >&2; exit 2; }
    shift 2
    while IFS= read -r src; do
      rel="${src#tests/}"
      target="${rel%%/*}_$(basename "$src" .cpp)"
      if [[ "$target" =~ $pattern ]]; then targets+=("$target"); fi
    done < <(find tests -name '*_test.cpp' | sort)
    if ((${#targets[@]} == 0)); then
      echo "scripts/test.sh: no test target matches '$pattern' (names like veloxquant_kivi_cache_test)" >&2
      exit 2
    fi
  fi
  cmake --preset "$preset" "$include_arg" > /dev/null
  if ((${#targets[@]})); then
    # tests/apps start the `veloxquant` binary itself (tests/support/cli_run.h, server_process.h):
    # build it with them, or they would run a stale one or fail on a missing one.
    build_targets=("${targets[@]}")
    [[ " ${targets[*]}" == *" apps_"* ]] && build_targets+=(veloxquant_cli)
    cmake --build "build-$preset" -j "$JOBS" --target "${build_targets[@]}"
    labels="$(IFS='|'; echo "${targets[*]}")"
    set -- -L "^($labels)\$" "$@"
  else
    cmake --build "build-$preset" -j "$JOBS"
  fi
  # halt_on_error: the first report ends the process with a failure (UBSan is also built with
  # -fno-sanitize-recover, so this holds without the variable). detect_leaks: a leak fails
  # the test at exit. ASan and UBSan need no suppressions. TSan's file, tests/support/tsan.supp,
  # holds one line with its reason (Debian's uninstrumented cpp-httplib); it is added to a
  # TSAN_OPTIONS given from outside too, unless that names its own suppressions file. The serve
  # tests' child process inherits the variable.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:strict_string_checks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
  tsan_options="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
  [[ "$tsan_options" == *suppressions=* ]] || tsan_options+=":suppressions=$ROOT/tests/support/tsan.supp"
  export TSAN_OPTIONS="$tsan_options"
  ctest --test-dir "build-$preset" --output-on-failure -j "$JOBS" "$@"
  exit
fi

bash "$ROOT/scripts/setup.sh"
cd "$ROOT/build"
ctest --output-on-failure -j "${JOBS}"
