#!/usr/bin/env bash
# `infera models upload` never leaves a version without its files (issue 37): a file that cannot be
# opened is found before any version is made; a version the command made is removed when an
# upload of it fails (here: over registry.max_artifact_bytes); an existing --version is left as it
# was. A good upload still makes a READY version with its files.
# Usage: models_cli_test.sh INFERA_BINARY WORK_DIR
set -uo pipefail
infera="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/lib.sh"
rm -rf "$work"
mkdir -p "$work"
cat >"$work/serve.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 1
log_level: warn
health_check: {enabled: false}
registry:
  store: sqlite:$work/registry.db
  data_dir: $work/registry
  max_artifact_bytes: 1000
YAML
start_serve "$infera" "$work/serve.yaml" "$work/serve.out"
if [[ -z "$admin" ]]; then
  echo "FAIL - infera serve did not start: $(cat "$work/serve.out")"
  exit 1
fi
export INFERA_ADMIN_URL="http://127.0.0.1:$admin"
unset INFERA_ADMIN_TOKEN

# The number of versions of fraud (deleted ones are not listed); "failed" when the search does
# not answer, so that a check of 0 fails too.
versions() {
  local body
  body=$(curl -sf "$INFERA_ADMIN_URL/api/2.0/mlflow/model-versions/search?filter=name%3D%27fraud%27") ||
    { echo failed; return; }
  grep -o '"version":"[0-9]*"' <<<"$body" | wc -l
}
fails() { ! "$@" >"$work/cmd.out" 2>&1; }

"$infera" models create fraud >/dev/null
echo '{"framework":"onnx"}' >"$work/meta.json"
head -c 5000 /dev/zero >"$work/big.bin"

check "an upload of a missing file fails" fails "$infera" models upload fraud "$work/meta.json" "$work/missing.bin"
check "it says which file" grep -q "missing.bin" "$work/cmd.out"
check "and made no version" test "$(versions)" -eq 0

check "an upload the server refuses fails" fails "$infera" models upload fraud "$work/meta.json" "$work/big.bin"
check "it says the version was removed" grep -q "was removed" "$work/cmd.out"
check "and left no version" test "$(versions)" -eq 0

check "a good upload works" "$infera" models upload fraud "$work/meta.json" >"$work/good.out"
good=$(sed -n 's/^model fraud version \([0-9]*\)$/\1/p' "$work/good.out")
check "and made one version" test "$(versions)" -eq 1
check "an upload to an existing version that fails" fails "$infera" models upload fraud "$work/big.bin" --version "$good"
check "leaves that version in place" test "$(versions)" -eq 1
check "with its files" "$infera" models download fraud "$good" meta.json -o "$work/meta.out"
check "unchanged" cmp -s "$work/meta.json" "$work/meta.out"

finish
