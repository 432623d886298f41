#!/usr/bin/env bash
# The console at scale (issue 21: < 300 ms on loopback with 200 models and 1,000 keys): `infera
# serve` with 200 models (400 endpoints) and 1,000 keys in 20 teams, and beside it a small one
# (2 models, 10 keys) as the baseline; console_scale_test.mjs times each page of both, interleaved,
# in Chromium from navigation to its data on screen, and checks what the pages show at scale.
# Usage: run_console_scale_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" playwright-core
[[ -x /usr/bin/chromium ]] || { echo "/usr/bin/chromium missing (scripts/install-deps.sh installs it)"; exit 1; }
rm -rf "$work"/scale.db* "$work"/scale.yaml* "$work"/small.db* "$work"/small.yaml*
config() {  # config NAME MODELS
  local name="$1" models="$2"
  {
    echo "listen: {host: 127.0.0.1, port: 0}"
    echo "admin: {host: 127.0.0.1, port: 0}"
    echo "workers: 2"
    echo "log_level: warn"
    echo "health_check: {enabled: false}"
    echo "governance: {store: 'sqlite:$work/$name.db', usage_flush_ms: 100}"
    echo "emulators:"
    echo "  e: {token_ms: 0}"
    echo "models:"
    for i in $(seq -w 1 "$models"); do
      echo "  - name: model-$i"
      echo "    aliases: [m$i]"
      echo "    deployments:"
      echo "      - {name: d$i-east, endpoints: [{emulator: e, region: us-east, weight: 2}]}"
      echo "      - {name: d$i-west, endpoints: [{emulator: e, region: us-west}]}"
    done
  } > "$work/$name.yaml"
}
config small 2
config scale 200
export INFERA_ADMIN_TOKEN="scale-admin-$$"
start_serve "$infera" "$work/small.yaml" "$work/small-serve.out"
small_admin="http://127.0.0.1:$ADMIN_PORT"
start_serve "$infera" "$work/scale.yaml" "$work/scale-serve.out"
NODE_PATH="$node_modules" ADMIN_URL="http://127.0.0.1:$ADMIN_PORT" DATA_URL="http://127.0.0.1:$PORT" \
  SMALL_ADMIN_URL="$small_admin" SHOTS="$work/shots" node "$here/console_scale_test.mjs"
