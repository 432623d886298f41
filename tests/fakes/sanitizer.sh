# Sourced by every shell harness that starts infera (tests/cli/lib.sh, tests/node/lib.sh,
# tests/kube/lib.sh): a process of a sanitizer build (the asan preset) that printed a report fails
# the test, though it did its work first (a use after free at shutdown, say). Without sanitizers
# no such line is ever printed, so the check costs nothing there.
SANITIZER_PATTERNS=(-e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error:')

# sanitizer_report PATH...: succeeds (and prints the first report line to stderr) when a file, or
# a file under a directory, among PATHs holds a sanitizer report. Missing paths are skipped.
sanitizer_report() {
  local p line
  for p in "$@"; do
    [[ -e "$p" ]] || continue
    line=$(grep -rsh -m1 -a "${SANITIZER_PATTERNS[@]}" "$p" | head -1 || true)
    if [[ -n "$line" ]]; then
      echo "sanitizer report in $p: $line" >&2
      return 0
    fi
  done
  return 1
}

# no_sanitizer_report PATH...: the negation, for `check`.
no_sanitizer_report() { ! sanitizer_report "$@"; }
