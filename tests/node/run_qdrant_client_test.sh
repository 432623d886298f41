#!/usr/bin/env bash
# Runs the official Qdrant JS client against a real `infera serve` with the vector index on, then
# restarts the server on the same data directory and checks the data came back.
# Usage: run_qdrant_client_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" @qdrant/js-client-rest
write_vectors_config "$work/vectors.yaml" "$work/data" /qdrant
start_serve "$infera" "$work/vectors.yaml" "$work/serve.out"
NODE_PATH="$node_modules" INFERA_QDRANT_URL="http://127.0.0.1:$PORT" INFERA_QDRANT_PREFIX=/qdrant PHASE=write node "$here/qdrant_client_test.mjs"
kill "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
start_serve "$infera" "$work/vectors.yaml" "$work/serve2.out"
NODE_PATH="$node_modules" INFERA_QDRANT_URL="http://127.0.0.1:$PORT" INFERA_QDRANT_PREFIX=/qdrant PHASE=restart node "$here/qdrant_client_test.mjs"
