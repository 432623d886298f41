# Shared by the CLI end-to-end scripts (sourced): named checks with a tally, and starting
# `infera serve` in the background until it prints its ports.
source "$(dirname "${BASH_SOURCE[0]}")/../fakes/sanitizer.sh"
passed=0
failed=0
SERVE_LOGS=()  # every start_serve's output, checked for sanitizer reports by finish
SERVE_PIDS=()
check() {  # check NAME CONDITION...
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); echo "ok - $name"; else failed=$((failed + 1)); echo "FAIL - $name"; fi
}
# finish: prints the tally; the script's status is whether every check passed. The output of
# every server started (start_serve, and $work/*.out|*.log) must hold no sanitizer report; the
# servers start_serve started are stopped first.
finish() {
  # The servers stop first: a report printed at shutdown counts too.
  local p
  for p in "${SERVE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${SERVE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  local logs=("${SERVE_LOGS[@]}")
  if [[ -n "${work:-}" ]]; then
    shopt -s nullglob
    logs+=("$work"/*.out "$work"/*.log)
    shopt -u nullglob
  fi
  check "no sanitizer report in the servers' output" no_sanitizer_report "${logs[@]}"
  echo "$passed passed, $failed failed"
  [[ "$failed" -eq 0 ]]
}
# start_serve INFERA CONFIG OUT: sets pid, port, admin (empty if it did not come up within 10 s).
start_serve() { start_serve_args "$1" "$3" -c "$2"; }
# start_serve_args INFERA OUT SERVE_ARGS...: the same for `infera serve SERVE_ARGS...`.
start_serve_args() {
  local infera="$1" out="$2"; shift 2
  set -- "$infera" "" "$out" "$@"
  # Emptied here, not only by the child's redirection: a restart on the same output file must not
  # read the previous run's ports before the child has truncated it.
  : >"$3"
  SERVE_LOGS+=("$3")
  "$1" serve "${@:4}" >"$3" 2>&1 &
  pid=$!
  SERVE_PIDS+=("$pid")
  port=""; admin=""
  for _ in $(seq 1 500); do
    port=$(sed -n 's|.*data http://127.0.0.1:\([0-9]*\).*|\1|p' "$3")
    admin=$(sed -n 's|.*admin http://127.0.0.1:\([0-9]*\).*|\1|p' "$3")
    [[ -n "$port" && -n "$admin" ]] && break
    sleep 0.02
  done
}
