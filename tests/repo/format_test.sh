#!/usr/bin/env bash
# STYLE.md's formatting, checked on every C++ file the repository tracks: each is exactly what
# `clang-format -i` (the repository's .clang-format, Debian's clang-format 14) makes of it.
# Prints the files that differ and how to fix them. Skipped (77) outside a git checkout.
# Usage: format_test.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git checkout"; exit 77; }
command -v clang-format >/dev/null || { echo "clang-format missing (scripts/install-deps.sh)"; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cpp' '*.hpp')
[[ ${#files[@]} -gt 0 ]] || { echo "no C++ files found"; exit 1; }
bad=()
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'not formatted: %s\n' "${bad[@]}"
  echo "fix: clang-format -i ${bad[*]}"
  exit 1
fi
echo "${#files[@]} C++ files formatted"
