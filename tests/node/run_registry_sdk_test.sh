#!/usr/bin/env bash
# The model registry as a user meets it (issue 16's "done when"), with access control on:
# register a model and upload versions with `infera models`, point an alias at one, bind the
# versions to deployments, send traffic to name@alias with the official openai npm SDK, move the
# alias and roll it back with one command, read the history, run an A/B split with a shadow and
# read the per-arm figures, flag an answer and review it, export the reviewed cases.
# Usage: run_registry_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
rm -rf "$work"/reg-sdk.db* "$work/registry"
cat > "$work/reg-sdk.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
governance:
  store: sqlite:$work/reg-sdk.db
registry:
  data_dir: $work/registry
emulators:
  v1: {models: [fraud-backend], token_ms: 0}
  v2: {models: [fraud-backend], token_ms: 0}
models:
  - name: fraud-backend
    deployments:
      - {name: fraud-v1, endpoints: [{emulator: v1}]}
      - {name: fraud-v2, endpoints: [{emulator: v2}]}
YAML
export INFERA_ADMIN_TOKEN="reg-admin-$$"
start_serve "$infera" "$work/reg-sdk.yaml" "$work/reg-serve.out"
port="$PORT"
export INFERA_ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"
fail() { echo "FAIL: $*"; exit 1; }

"$infera" models create fraud --description "fraud scoring" >/dev/null
head -c 3000000 /dev/urandom > "$work/weights.bin"
echo '{"framework":"onnx"}' > "$work/meta.json"
"$infera" models upload fraud "$work/weights.bin" "$work/meta.json" | tee "$work/upload1.out"
grep -q "version 1" "$work/upload1.out" || fail "upload did not make version 1"
"$infera" models upload fraud "$work/meta.json" | grep -q "version 2" || fail "upload did not make version 2"
"$infera" models download fraud 1 weights.bin -o "$work/weights.out" 2>/dev/null
cmp "$work/weights.bin" "$work/weights.out" || fail "downloaded artifact differs"
"$infera" models bind fraud --version 1 --deployment fraud-v1 >/dev/null
"$infera" models bind fraud --version 2 --deployment fraud-v2 >/dev/null
"$infera" models alias fraud champion 1 --reason "first release" --actor alice >/dev/null
"$infera" models alias fraud challenger 2 >/dev/null
"$infera" models show fraud | tee "$work/show.out"
grep -q "champion->1" "$work/show.out" || fail "show lists no champion alias"

"$infera" teams create risk --models 'fraud*' >/dev/null
key=$("$infera" keys create --team risk --allow-user 2>/dev/null)
[[ "$key" == sk-inf-* ]] || fail "no key: $key"
# The MLflow API on the data port: a key reads, only the admin token writes.
curl -sf "http://127.0.0.1:$port/api/2.0/mlflow/registered-models/get?name=fraud" -H "authorization: Bearer $key" \
  | grep -q '"name":"fraud"' || fail "a key cannot read the registry"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/api/2.0/mlflow/registered-models/create" \
  -H "authorization: Bearer $key" -H 'content-type: application/json' -d '{"name":"x"}')
[[ "$code" == 403 ]] || fail "a key wrote to the registry ($code)"

run_sdk() {
  NODE_PATH="$node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" INFERA_KEY="$key" node "$here/registry_sdk_test.mjs" "$@"
}
run_sdk route fraud@champion fraud/1
run_sdk route fraud fraud/1
"$infera" models alias fraud champion 2 --reason "v2 is better" --actor bob >/dev/null
run_sdk route fraud@champion fraud/2
"$infera" models rollback fraud --alias champion --reason "v2 regressed" --actor carol | tee "$work/rollback.out"
grep -q "2 -> 1" "$work/rollback.out" || fail "rollback did not move 2 -> 1"
run_sdk route fraud@champion fraud/1
"$infera" models history fraud --alias champion | tee "$work/history.out"
[[ $(grep -c "champion" "$work/history.out") == 3 ]] || fail "history does not have three moves"
grep -q "carol" "$work/history.out" && grep -q "v2 regressed" "$work/history.out" || fail "history misses who and why"

# An A/B split with a shadow: per-arm figures from the CLI, the arm in every answer.
"$infera" models experiment fraud --arm ctl=@champion:50 --arm new=@challenger:50 --sticky user --shadow 2:1.0 >/dev/null
run_sdk split 40 | tee "$work/split.out"
want_ctl=$(sed -n 's/^arms ctl=\([0-9]*\) new=[0-9]*$/\1/p' "$work/split.out")
want_new=$(sed -n 's/^arms ctl=[0-9]* new=\([0-9]*\)$/\1/p' "$work/split.out")
[[ -n "$want_ctl" && -n "$want_new" ]] || fail "the split printed no per-arm counts"
"$infera" models experiment fraud | tee "$work/experiment.out"
# The CLI's per-arm request counts are the ones the clients saw (columns: ARM TARGET WEIGHT REQUESTS).
got_ctl=$(awk '$1 == "ctl" {print $4}' "$work/experiment.out")
got_new=$(awk '$1 == "new" {print $4}' "$work/experiment.out")
[[ "$got_ctl" == "$want_ctl" && "$got_new" == "$want_new" ]] \
  || fail "per-arm figures ctl=$got_ctl new=$got_new, the clients saw ctl=$want_ctl new=$want_new"
grep -q "shadow fraud/2" "$work/experiment.out" || fail "no shadow figures"
# (to a file, not `| grep -q`: grep's early exit would fail curl with SIGPIPE under pipefail)
curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" -H "authorization: Bearer $INFERA_ADMIN_TOKEN" > "$work/metrics.txt" \
  || fail "no /metrics"
grep -q 'infera_gateway_arm_requests_total{model="fraud",arm="ctl"' "$work/metrics.txt" || fail "no per-arm metrics in Prometheus"

# Capture, flag, review, export.
"$infera" models capture fraud 1 --sample 1 >/dev/null
rid=$(run_sdk capture)
[[ -n "$rid" ]] || fail "no request id"
"$infera" models flag "$rid" --reason "looks wrong" >/dev/null
"$infera" models reviews fraud > "$work/reviews.out" || fail "models reviews failed"
grep -q "$rid" "$work/reviews.out" || fail "the flagged answer $rid is not in the review queue: $(cat "$work/reviews.out")"
"$infera" models review "$rid" --verdict bad --label "not fraud" >/dev/null
"$infera" models export fraud > "$work/export.jsonl"
grep -q '"label":"not fraud"' "$work/export.jsonl" || fail "export misses the reviewed case"
grep -q '"request_id":"'"$rid"'"' "$work/export.jsonl" || fail "export misses the request id"
# The capture opt-out list from the CLI: add, list, remove.
"$infera" models opt-out key-under-contract >/dev/null || fail "models opt-out failed"
"$infera" models opt-out > "$work/optouts.out"
grep -qx "key-under-contract" "$work/optouts.out" || fail "opt-out not listed: $(cat "$work/optouts.out")"
"$infera" models opt-out key-under-contract --remove >/dev/null
"$infera" models opt-out > "$work/optouts.out"
[[ ! -s "$work/optouts.out" ]] || fail "opt-out still listed after --remove: $(cat "$work/optouts.out")"
"$infera" audit --json > "$work/audit.json" || fail "audit failed"
grep -q "optout.set" "$work/audit.json" || fail "the opt-out is not audited"
grep -q "registry.alias.rollback" "$work/audit.json" || fail "the rollback is not audited"
echo "registry end to end ok"
