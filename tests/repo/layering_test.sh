#!/usr/bin/env bash
# The dependency rule of docs/architecture.md, checked on every include of src/: a component
# includes only the public headers of the components below it, and never another component's
# internal/ headers (a test may include the internals of the component it tests).
# Usage: layering_test.sh SOURCE_DIR
set -uo pipefail
src="$1/src"
# component: the components whose headers it may include (besides its own).
declare -A ALLOWED=(
  [core]=""
  [net]="core"
  [obs]="core net"
  [store]="core net"
  [emulator]="core net obs"
  [access]="core net obs store"
  [gateway]="core net obs access"
  [vectors]="core net obs store access"
  [features]="core net obs store access"
  [registry]="core net obs store access gateway"
  [batch]="core net obs store access"
  [scheduler]="core net obs"
  [console]="core net"
  [server]="core net obs store emulator access gateway vectors features registry batch console"
  [cli]="core net emulator scheduler server vectors features"
)
fail=0
for dir in "$src"/*/; do
  comp=$(basename "$dir")
  if [[ -z "${ALLOWED[$comp]+set}" ]]; then
    echo "src/$comp: a component docs/architecture.md and this test do not know (add it to both)"
    fail=1
    continue
  fi
  while IFS= read -r hit; do
    file=${hit%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:}")
    other=${inc%%/*}
    [[ "$inc" == */* ]] || continue
    [[ -d "$src/$other" ]] || continue  # a system or generated header
    if [[ "$other" != "$comp" ]]; then
      if [[ "$inc" == */internal/* ]]; then
        echo "${file#$1/}: includes another component's internals: $inc"
        fail=1
      elif [[ " ${ALLOWED[$comp]} " != *" $other "* ]]; then
        echo "${file#$1/}: $comp may not depend on $other: $inc"
        fail=1
      fi
    fi
  done < <(grep -rHn '^#include "' "$dir")
done
# Tests of component X include only X's internals (fuzz targets: tests/fuzz/X/).
while IFS= read -r hit; do
  file=${hit%%:*}
  inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:}")
  comp=$(cut -d/ -f2 <<<"${file#$1/}")
  [[ "$comp" == fuzz ]] && comp=$(cut -d/ -f3 <<<"${file#$1/}")
  [[ "$inc" == */internal/* && "${inc%%/*}" != "$comp" ]] && { echo "${file#$1/}: includes $inc"; fail=1; }
done < <(grep -rHn '^#include "[a-z_]*/internal/' "$1/tests" "$1/bench" 2>/dev/null)
[[ $fail -eq 0 ]] && echo "every include follows the dependency rule"
exit $fail
