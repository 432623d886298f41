#!/usr/bin/env bash
# OpenAI's Responses API as its users meet it: `infera serve` with governance on in front of an
# engine that speaks only chat completions (the emulator), a key made with `infera keys create`,
# and the official openai SDK's client.responses (responses_sdk_test.mjs); then the usage the
# gateway recorded for the team is exactly the tokens the SDK was told.
# Usage: run_responses_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
start_governed_serve "$infera" "$work" responses-sdk
port="$PORT"

"$infera" teams create resp --models 'llama*' --tpm 100000 >/dev/null
key=$("$infera" keys create --team resp 2>/dev/null)
[[ "$key" == sk-inf-* ]] || { echo "no key from infera keys create"; exit 1; }
out=$(NODE_PATH="$node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" INFERA_KEY="$key" \
  node "$here/responses_sdk_test.mjs")
echo "$out"
read -r _ sdk_input sdk_output < <(grep '^usage ' <<<"$out")
expect_team_usage "$infera" resp "$sdk_input" "$sdk_output"
