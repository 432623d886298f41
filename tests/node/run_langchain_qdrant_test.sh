#!/usr/bin/env bash
# LangChain's Qdrant vector store (npm `@langchain/qdrant` 1.0.3 with `@langchain/core` 1.4.0) as a
# LangChain app uses it, against a real `infera serve` with the vector index on.
# Usage: run_langchain_qdrant_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" @langchain/qdrant
require_module "$node_modules" @langchain/core
write_vectors_config "$work/vectors.yaml" "$work/data"
start_serve "$infera" "$work/vectors.yaml" "$work/serve.out"
NODE_PATH="$node_modules" INFERA_QDRANT_URL="http://127.0.0.1:$PORT" node "$here/langchain_qdrant_test.mjs"
