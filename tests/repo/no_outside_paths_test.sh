#!/usr/bin/env bash
# No tracked file points at a folder beside the checkout: the development machine's notes and data
# folder next to the repository is not there for a user. (The pattern is built so that this file
# does not match itself.)
# Usage: no_outside_paths_test.sh SOURCE_DIR
set -uo pipefail
src="$1"
cd "$src" || exit 1
parent='\.\.'/shared
# grep answers 1 for no match; anything above is its own failure, which must not read as clean.
if git rev-parse --git-dir >/dev/null 2>&1; then
  hits=$(git grep -nE "$parent([/\"' ]|$)" -- . ':!data/*.csv')
else
  hits=$(grep -rnE --exclude-dir=build --exclude-dir=node_modules --exclude='*.csv' \
         "$parent([/\"' ]|$)" .)
fi
rc=$?
if (( rc > 1 )); then
  echo "the search itself failed (exit $rc)"
  exit 1
fi
if [[ -n "$hits" ]]; then
  echo "files that read or name a folder outside the checkout:"
  echo "$hits"
  exit 1
fi
echo "no tracked file names a folder outside the checkout"
