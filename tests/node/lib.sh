# Shared by the SDK test scripts (sourced): checks the npm packages installed at build time
# (tests/node/CMakeLists.txt: `npm ci` from package-lock.json), and starts `infera serve` on free
# ports. At exit the servers stop and a sanitizer report in their output fails the script.
source "$(dirname "${BASH_SOURCE[0]}")/../fakes/sanitizer.sh"
SERVE_LOGS=()
SERVE_PIDS=()

# stop_and_check_serves [EXTRA_PID...]: the EXIT trap: stops the servers (and EXTRA_PIDs), then
# exits 1 when any server's output holds a sanitizer report, else with the script's own status.
stop_and_check_serves() {
  local rc=$? p
  for p in "${SERVE_PIDS[@]}" "$@"; do kill "$p" 2>/dev/null || true; done
  for p in "${SERVE_PIDS[@]}" "$@"; do wait "$p" 2>/dev/null || true; done
  if sanitizer_report "${SERVE_LOGS[@]}"; then
    echo "FAIL - a sanitizer report in a server's output"
    exit 1
  fi
  exit "$rc"
}

# require_module NODE_MODULES NAME: fails the test when the build did not install NAME.
require_module() {
  [[ -d "$1/$2" ]] || { echo "npm package $2 missing from $1 (the build runs npm ci)"; exit 1; }
}

# start_serve INFERA CONFIG OUT: starts the gateway (stopped by an EXIT trap), waits for its
# "data ... admin ..." line; sets SERVE_PID, PORT and ADMIN_PORT.
start_serve() {
  local infera="$1" config="$2" out="$3"
  : >"$out"  # emptied before the child starts: a restart must not read the previous run's ports
  SERVE_LOGS+=("$out")
  "$infera" serve -c "$config" >"$out" 2>&1 &
  SERVE_PID=$!
  SERVE_PIDS+=("$SERVE_PID")
  trap stop_and_check_serves EXIT
  PORT=""
  for _ in $(seq 1 500); do
    PORT=$(sed -n 's|.*data https\{0,1\}://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
    [[ -n "$PORT" ]] && break
    kill -0 $SERVE_PID 2>/dev/null || { cat "$out"; exit 1; }
    sleep 0.02
  done
  [[ -n "$PORT" ]] || { echo "gateway did not start"; cat "$out"; exit 1; }
  ADMIN_PORT=$(sed -n 's|.*admin https\{0,1\}://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
}

# write_vectors_config FILE DATA_DIR [PATH_PREFIX]: an `infera serve` config with the vector index
# on (free loopback ports, two workers), for start_serve.
write_vectors_config() {
  local file="$1" data="$2" prefix="${3:-}"
  cat >"$file" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
vectors:
  data_dir: $data
YAML
  [[ -z "$prefix" ]] || echo "  path_prefix: $prefix" >>"$file"
}

# start_governed_serve INFERA WORK NAME: `infera serve` with governance on (SQLite at WORK/NAME.db,
# started afresh) in front of an emulated llama-3-8b (token_ms 1, default_max_tokens 12), as the
# SDK tests use it; sets PORT, ADMIN_PORT, INFERA_ADMIN_TOKEN and INFERA_ADMIN_URL (for the CLI).
start_governed_serve() {
  local infera="$1" work="$2" name="$3"
  rm -f "$work/$name".db*
  cat > "$work/$name.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
governance:
  store: sqlite:$work/$name.db
  usage_flush_ms: 100
emulators:
  local: {models: [llama-3-8b], token_ms: 1, default_max_tokens: 12}
models:
  - name: llama-3-8b
    deployments: [{endpoints: [{emulator: local}]}]
YAML
  export INFERA_ADMIN_TOKEN="sdk-admin-$$"
  start_serve "$infera" "$work/$name.yaml" "$work/$name.out"
  export INFERA_ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"
}

# expect_team_usage INFERA TEAM INPUT OUTPUT: waits (the usage flush is 100 ms) until the usage
# `infera usage` reports for TEAM is exactly INPUT prompt and OUTPUT completion tokens; fails
# the test with both figures otherwise.
expect_team_usage() {
  local infera="$1" team="$2" want="$3 $4" got=""
  for _ in $(seq 1 200); do
    got=$("$infera" usage --team "$team" --granularity total --json | python3 -c '
import json, sys
rows = json.load(sys.stdin)
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
print(sum(r.get("prompt_tokens", 0) for r in rows), sum(r.get("completion_tokens", 0) for r in rows))')
    [[ "$got" == "$want" ]] && break
    sleep 0.02
  done
  [[ "$got" == "$want" ]] || { echo "usage recorded ($got) is not what the SDK was told ($want)"; exit 1; }
  echo "usage ok: $got"
}
