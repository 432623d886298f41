# Shared by the SDK test scripts (sourced): checks the npm packages installed at build time
# (tests/node/CMakeLists.txt: `npm ci` from package-lock.json), and starts `infera serve` on free
# ports.

# require_module NODE_MODULES NAME: fails the test when the build did not install NAME.
require_module() {
  [[ -d "$1/$2" ]] || { echo "npm package $2 missing from $1 (the build runs npm ci)"; exit 1; }
}

# start_serve INFERA CONFIG OUT: starts the gateway (stopped by an EXIT trap), waits for its
# "data ... admin ..." line; sets SERVE_PID, PORT and ADMIN_PORT.
start_serve() {
  local infera="$1" config="$2" out="$3"
  : >"$out"  # emptied before the child starts: a restart must not read the previous run's ports
  "$infera" serve -c "$config" >"$out" 2>&1 &
  SERVE_PID=$!
  trap 'kill $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null || true' EXIT
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
