# Shared by the SDK test scripts (sourced): installs the openai npm package into the work dir
# once, and starts `infera serve` on free ports.

# install_openai WORK_DIR
install_openai() {
  if [[ ! -d "$1/node_modules/openai" ]]; then
    (cd "$1" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund --silent openai@4 >/dev/null)
  fi
}

# start_serve INFERA CONFIG OUT: starts the gateway (stopped by an EXIT trap), waits for its
# "data ... admin ..." line; sets SERVE_PID, PORT and ADMIN_PORT.
start_serve() {
  local infera="$1" config="$2" out="$3"
  "$infera" serve -c "$config" >"$out" 2>&1 &
  SERVE_PID=$!
  trap 'kill $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null || true' EXIT
  PORT=""
  for _ in $(seq 1 500); do
    PORT=$(sed -n 's|.*data http://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
    [[ -n "$PORT" ]] && break
    kill -0 $SERVE_PID 2>/dev/null || { cat "$out"; exit 1; }
    sleep 0.02
  done
  [[ -n "$PORT" ]] || { echo "gateway did not start"; cat "$out"; exit 1; }
  ADMIN_PORT=$(sed -n 's|.*admin http://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
}
