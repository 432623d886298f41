#!/usr/bin/env bash
# The official openai npm SDK over TLS: the same checks as run_sdk_test.sh against `infera serve`
# with TLS on its data port, trusting the test CA through NODE_EXTRA_CA_CERTS (the SDK's own
# fetch verifies the certificate and the name 127.0.0.1).
# Usage: run_tls_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
bash "$here/../fakes/make_test_pki.sh" "$work/pki"
cat > "$work/sdk.yaml" <<YAML
listen:
  host: 127.0.0.1
  port: 0
  tls: {cert_file: $work/pki/server.pem, key_file: $work/pki/server.key}
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
grep -q "data https://127.0.0.1:$PORT" "$work/serve.out" || { echo "the data port is not TLS"; exit 1; }
# Without the CA the SDK refuses the server.
if NODE_PATH="$node_modules" INFERA_BASE_URL="https://127.0.0.1:$PORT/v1" node "$here/openai_sdk_test.mjs" \
  >"$work/untrusted.out" 2>&1; then
  echo "the SDK accepted a certificate from an unknown CA"
  exit 1
fi
grep -qi "certificate" "$work/untrusted.out" || { echo "the SDK failed, but not on the certificate:"; cat "$work/untrusted.out"; exit 1; }
echo "ok - the SDK refuses the server without the test CA"
NODE_EXTRA_CA_CERTS="$work/pki/ca.pem" NODE_PATH="$node_modules" INFERA_BASE_URL="https://127.0.0.1:$PORT/v1" \
  node "$here/openai_sdk_test.mjs"
