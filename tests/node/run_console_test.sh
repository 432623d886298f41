#!/usr/bin/env bash
# The web console in Debian's Chromium (playwright-core): `infera serve` with access control, the
# registry, the feature store (examples/features), the vector index and two emulated deployments
# of one model, a registered model with two versions, an
# alias moved twice and an A/B experiment, then console_test.mjs drives the console at /ui.
# Screenshots go to WORK_DIR/shots.
# Usage: run_console_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" playwright-core
[[ -x /usr/bin/chromium ]] || { echo "/usr/bin/chromium missing (scripts/install-deps.sh installs it)"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"/console.db* "$work/registry" "$work/features" "$work/vectors" "$work/shots" "$work"/console.yaml*
cat > "$work/console.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
region: local
governance:
  store: sqlite:$work/console.db
  usage_flush_ms: 100
registry:
  data_dir: $work/registry
features:
  store: rocksdb
  data_dir: $work/features
  repository: $here/../../examples/features
vectors:
  data_dir: $work/vectors
  fsync: false
emulators:
  a: {models: [chat, fraud-backend], token_ms: 1, default_max_tokens: 4}
  b: {models: [chat, fraud-backend], token_ms: 1, default_max_tokens: 4}
models:
  - name: chat
    price: {prompt_per_1m: 1.0, completion_per_1m: 2.0}
    deployments:
      - name: dep-a
        endpoints: [{emulator: a, region: local, weight: 1}]
      - name: dep-b
        endpoints: [{emulator: b, region: local, weight: 1}]
  - name: fraud-backend
    deployments:
      - {name: fraud-v1, endpoints: [{emulator: a}]}
      - {name: fraud-v2, endpoints: [{emulator: b}]}
YAML
export INFERA_ADMIN_TOKEN="console-admin-$$"
start_serve "$infera" "$work/console.yaml" "$work/console-serve.out"
export INFERA_ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"

# Registry state for the registry page: two versions, champion moved 1 -> 2, an experiment.
echo '{"framework":"onnx"}' > "$work/meta.json"
"$infera" models create fraud --description "fraud scoring" >/dev/null
"$infera" models upload fraud "$work/meta.json" | grep -q "version 1" || fail "no version 1"
"$infera" models upload fraud "$work/meta.json" | grep -q "version 2" || fail "no version 2"
"$infera" models bind fraud --version 1 --deployment fraud-v1 >/dev/null
"$infera" models bind fraud --version 2 --deployment fraud-v2 >/dev/null
"$infera" models alias fraud champion 1 --reason "first release" --actor alice >/dev/null
"$infera" models alias fraud challenger 2 >/dev/null
"$infera" models alias fraud champion 2 --reason "v2 is better" --actor bob >/dev/null
"$infera" models experiment fraud --arm ctl=@champion:50 --arm new=@challenger:50 >/dev/null

NODE_PATH="$node_modules" ADMIN_URL="http://127.0.0.1:$ADMIN_PORT" DATA_URL="http://127.0.0.1:$PORT" \
  CONFIG="$work/console.yaml" SHOTS="$work/shots" node "$here/console_test.mjs"
