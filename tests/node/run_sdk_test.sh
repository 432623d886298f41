#!/usr/bin/env bash
# Runs the official openai npm SDK against a real `infera serve` (in-process emulator backend).
# Usage: run_sdk_test.sh INFERA_BINARY WORK_DIR
set -euo pipefail
infera="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
if [[ ! -d "$work/node_modules/openai" ]]; then
  (cd "$work" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund --silent openai@4 >/dev/null)
fi
cat > "$work/sdk.yaml" <<'YAML'
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
emulators:
  local: {models: [llama-3-8b, text-embedding-3-small], token_ms: 1, default_max_tokens: 12}
models:
  - name: llama-3-8b
    aliases: [gpt-4o-mini]
    deployments: [{endpoints: [{emulator: local}]}]
  - name: text-embedding-3-small
    deployments: [{endpoints: [{emulator: local}]}]
YAML
out="$work/serve.out"
"$infera" serve -c "$work/sdk.yaml" >"$out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 500); do
  port=$(sed -n 's|.*data http://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
  [[ -n "$port" ]] && break
  kill -0 $pid 2>/dev/null || { cat "$out"; exit 1; }
  sleep 0.02
done
[[ -n "$port" ]] || { echo "gateway did not start"; cat "$out"; exit 1; }
NODE_PATH="$work/node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" node "$here/openai_sdk_test.mjs"
