#!/usr/bin/env bash
# Batch inference as a user meets it: `infera serve` with governance and the batch section on, two
# teams' keys made with `infera teams/keys`, and the official openai npm SDK uploading JSONL files,
# creating, polling, listing and cancelling batches, and downloading their output and error files.
# Usage: run_batch_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
cat > "$work/batch.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
governance:
  store: sqlite:$work/gov.db
emulators:
  fast: {models: [llama-3-8b, text-embedding-3-small], token_ms: 1, default_max_tokens: 6}
  slow: {models: [slow-model], ttft_ms: 150, token_ms: 1, default_max_tokens: 2}
models:
  - name: llama-3-8b
    deployments: [{endpoints: [{emulator: fast}]}]
  - name: text-embedding-3-small
    deployments: [{endpoints: [{emulator: fast}]}]
  - name: slow-model
    deployments: [{endpoints: [{emulator: slow}]}]
batch:
  data_dir: $work/batch
  concurrency: 4
  chunk_lines: 16
  poll_ms: 50
YAML
export INFERA_ADMIN_TOKEN="batch-admin-$$"
start_serve "$infera" "$work/batch.yaml" "$work/serve.out"
port="$PORT"
export INFERA_ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"
"$infera" teams create team-a >/dev/null
"$infera" teams create team-b >/dev/null
key_a=$("$infera" keys create --team team-a 2>/dev/null)
key_b=$("$infera" keys create --team team-b 2>/dev/null)
[[ "$key_a" == sk-inf-* && "$key_b" == sk-inf-* ]] || { echo "no keys: $key_a $key_b"; exit 1; }
NODE_PATH="$node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" INFERA_KEY_A="$key_a" \
  INFERA_KEY_B="$key_b" WORK_DIR="$work" node "$here/batch_sdk_test.mjs"
