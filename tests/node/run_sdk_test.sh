#!/usr/bin/env bash
# Runs the official openai npm SDK against a real `infera serve` (in-process emulator backend).
# Usage: run_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
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
start_serve "$infera" "$work/sdk.yaml" "$work/serve.out"
port="$PORT"
NODE_PATH="$node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" node "$here/openai_sdk_test.mjs"
