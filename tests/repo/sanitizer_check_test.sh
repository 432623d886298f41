#!/usr/bin/env bash
# The harnesses' sanitizer check (tests/fakes/sanitizer.sh) can fail: it finds an AddressSanitizer,
# LeakSanitizer or UBSan report in a server's output file or under a work directory, and stays
# quiet on a clean log. And every harness that starts infera uses it.
set -euo pipefail
src="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
source "$src/tests/fakes/sanitizer.sh"
passed=0
failed=0
check() {
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); echo "ok - $name"; else failed=$((failed + 1)); echo "FAIL - $name"; fi
}
printf 'serving on 127.0.0.1:1\nshutting down\n' >"$work/clean.out"
printf 'x\n==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x1\n' >"$work/asan.out"
printf 'src/a.cc:3:5: runtime error: signed integer overflow\n' >"$work/ubsan.log"
mkdir -p "$work/dir/sub" && printf '==1==ERROR: LeakSanitizer: detected memory leaks\n' >"$work/dir/sub/x.log"
check "a clean log has no report" no_sanitizer_report "$work/clean.out"
check "finds an AddressSanitizer report" sanitizer_report "$work/asan.out"
check "finds a UBSan runtime error" sanitizer_report "$work/clean.out" "$work/ubsan.log"
check "finds a LeakSanitizer report under a directory" sanitizer_report "$work/dir"
check "skips a missing file" no_sanitizer_report "$work/missing.out" "$work/clean.out"
# The harness libraries that start infera all check.
for lib in tests/cli/lib.sh tests/node/lib.sh tests/kube/lib.sh; do
  check "$lib sources the check" grep -q 'fakes/sanitizer.sh' "$src/$lib"
done
check "tests/cli/lib.sh's finish checks the servers' output" grep -q 'no_sanitizer_report "${logs\[@\]}"' "$src/tests/cli/lib.sh"
check "tests/node/lib.sh's exit trap checks the servers' output" grep -q 'trap stop_and_check_serves EXIT' "$src/tests/node/lib.sh"
# A script that starts `infera serve` itself (not through start_serve) must still be covered:
# its output goes to $work/*.out or *.log, which finish reads.
for f in "$src"/tests/cli/*.sh "$src"/tests/vectors/*.sh "$src"/tests/repo/fresh_clone_tour_test.sh; do
  [[ "$(basename "$f")" == lib.sh ]] && continue
  if grep -q 'serve -c' "$f" && ! grep -q 'lib.sh' "$f"; then
    check "$(basename "$f") uses a harness library" false
  fi
done
echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
