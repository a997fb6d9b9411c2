#!/usr/bin/env bash
# clang-format (check only) and clang-tidy (.clang-tidy: bugprone, performance,
# readability-function-size) over the project's sources.
#
#   bash scripts/lint.sh                 # every file under src/
#   bash scripts/lint.sh FILE...         # just these
#   FIX=1 bash scripts/lint.sh FILE...   # clang-format rewrites the files in place
#   JOBS=2 bash scripts/lint.sh          # clang-tidy processes at once (default 1)
#
# clang-tidy reads build/compile_commands.json (configure with
# -DCMAKE_EXPORT_COMPILE_COMMANDS=ON). Exit 1 when a file is not formatted or clang-tidy warns.
# The tree is formatted (every tracked C++ file); keep it so: run it on the files you touch.
# Highway kernels are checked once, for the static target (HWY_COMPILE_ONLY_STATIC): the same
# source is otherwise parsed once per dispatch target, several times the work for no new finding.
# A whole-tree run parses ~290 translation units, about 5 s of CPU each.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
for tool in clang-format clang-tidy; do
  command -v "$tool" > /dev/null || { echo "[lint] $tool is needed: apt-get install clang-format clang-tidy" >&2; exit 1; }
done
[[ -f build/compile_commands.json ]] || { echo "[lint] configure first: cmake -S . -B build" >&2; exit 1; }
FILES=("$@")
((${#FILES[@]})) || mapfile -t FILES < <(git ls-files 'src/*.cpp' 'src/*.h')
# clang-format would "format" any file it is given (a Python file comes back broken): C and C++ only.
for f in "${FILES[@]}"; do
  case "$f" in
    *.cpp | *.cc | *.c | *.h | *.hpp) ;;
    *) echo "[lint] $f is not a C or C++ file: clang-format and clang-tidy check C and C++ only" >&2; exit 2 ;;
  esac
done
status=0
if [[ "${FIX:-0}" == "1" ]]; then
  clang-format -i "${FILES[@]}"
else
  clang-format --dry-run --Werror "${FILES[@]}" || { echo "[lint] not formatted (FIX=1 rewrites)" >&2; status=1; }
fi
# clang-tidy on translation units only; headers are checked through them (HeaderFilterRegex).
SOURCES=()
for f in "${FILES[@]}"; do [[ "$f" == *.cpp ]] && SOURCES+=("$f"); done
if ((${#SOURCES[@]})); then
  out="$(printf '%s\0' "${SOURCES[@]}" |
    xargs -0 -n 1 -P "${JOBS:-1}" nice clang-tidy -p build --quiet --extra-arg=-DHWY_COMPILE_ONLY_STATIC=1 \
      2> /dev/null || true)"
  # A header's warning shows once per translation unit that includes it: counted once. An
  # "error:" is a translation unit clang could not parse (checked nothing): a failure too.
  if grep -qE "(warning|error):" <<< "$out"; then
    echo "$out"
    echo "[lint] clang-tidy: $(grep -E '(warning|error):' <<< "$out" | sort -u | wc -l) distinct warning(s)/error(s)" >&2
    status=1
  fi
fi
exit $status
