#!/usr/bin/env bash
# OpenTelemetry traces from `infera serve` to an OTLP/HTTP receiver decoding them with the
# OpenTelemetry project's definitions (otlp_test.mjs). A sanitizer report in a server's output
# fails it.
# Usage: run_otlp_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -uo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" @opentelemetry/otlp-transformer
NODE_PATH="$node_modules" node "$here/otlp_test.mjs" "$infera" "$work"
rc=$?
if sanitizer_report "$work"/*.out; then
  echo "FAIL - a sanitizer report in a server's output"
  exit 1
fi
exit "$rc"
