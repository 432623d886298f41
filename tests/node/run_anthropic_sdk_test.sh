#!/usr/bin/env bash
# Anthropic's Messages API as its users meet it: `infera serve` with governance on in front of an
# engine that speaks only OpenAI chat completions (the emulator), keys made with `infera keys
# create`, and the official @anthropic-ai/sdk (anthropic_sdk_test.mjs); then the usage the gateway
# recorded for the team is exactly the tokens the SDK was told.
# Usage: run_anthropic_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" @anthropic-ai/sdk
start_governed_serve "$infera" "$work" anthropic-sdk
port="$PORT"

"$infera" teams create anth --models 'llama*' --tpm 100000 >/dev/null
key=$("$infera" keys create --team anth 2>/dev/null)
limited=$("$infera" keys create --team anth --rpm 1 2>/dev/null)
[[ "$key" == sk-inf-* && "$limited" == sk-inf-* ]] || { echo "no keys from infera keys create"; exit 1; }
out=$(NODE_PATH="$node_modules" INFERA_URL="http://127.0.0.1:$port" INFERA_KEY="$key" \
  INFERA_LIMITED_KEY="$limited" node "$here/anthropic_sdk_test.mjs")
echo "$out"
read -r _ sdk_input sdk_output < <(grep '^usage ' <<<"$out")

# The usage the gateway recorded for the team: the tokens the SDK was told, no more, no less
# (refusals and countTokens cost nothing).
got=""
for _ in $(seq 1 200); do
  got=$("$infera" usage --team anth --granularity total --json | python3 -c '
import json, sys
rows = json.load(sys.stdin)
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
print(sum(r.get("prompt_tokens", 0) for r in rows), sum(r.get("completion_tokens", 0) for r in rows))')
  [[ "$got" == "$sdk_input $sdk_output" ]] && break
  sleep 0.02
done
[[ "$got" == "$sdk_input $sdk_output" ]] || { echo "usage recorded ($got) is not what the SDK was told ($sdk_input $sdk_output)"; exit 1; }
echo "usage ok: $got"
