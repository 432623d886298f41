#!/usr/bin/env bash
# Governance as a user meets it: `infera serve` with governance on, a team and a key made with the
# `infera teams/keys` commands, the official openai npm SDK calling with that key until a 429, and
# the usage seen with `infera usage`.
# Usage: run_governance_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
start_governed_serve "$infera" "$work" gov-sdk
port="$PORT"

"$infera" teams create sdk --models 'llama*' --tpm 100000 >/dev/null
key=$("$infera" keys create --team sdk --rpm 3 2>/dev/null)
[[ "$key" == sk-inf-* ]] || { echo "no key from infera keys create: $key"; exit 1; }
NODE_PATH="$node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" INFERA_KEY="$key" \
  node "$here/governance_sdk_test.mjs"

# Usage by team and model: the three admitted requests (the 429 is recorded with no tokens).
for _ in $(seq 1 200); do
  usage=$("$infera" usage --team sdk --granularity total --json)
  if echo "$usage" | grep -q '"completion_tokens": 10'; then break; fi
  sleep 0.02
done
echo "$usage" | grep -q '"completion_tokens": 10' || { echo "usage not as expected: $usage"; exit 1; }
echo "$usage" | grep -q '"model": "llama-3-8b"' || { echo "usage has no model row: $usage"; exit 1; }
"$infera" usage --team sdk --granularity total
echo "usage ok"
