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
expect_team_usage "$infera" anth "$sdk_input" "$sdk_output"
