#!/usr/bin/env bash
# Batch inference as a user meets it: `infera serve` with governance and the batch section on, two
# teams' keys made with `infera teams/keys`, and the official openai npm SDK uploading JSONL files,
# creating, polling, listing and cancelling batches, and downloading their output and error files.
# Usage: run_batch_sdk_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" openai
cat > "$work/batch.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
governance:
  store: sqlite:$work/gov.db
  usage_flush_ms: 50
emulators:
  fast: {models: [llama-3-8b, text-embedding-3-small], token_ms: 1, default_max_tokens: 6}
  slow: {models: [slow-model], ttft_ms: 600, token_ms: 1, default_max_tokens: 2}
models:
  - name: llama-3-8b
    price: {prompt_per_1m: 1000000, completion_per_1m: 1000000}   # \$1 a token: costs are token counts
    deployments: [{endpoints: [{emulator: fast}]}]
  - name: text-embedding-3-small
    deployments: [{endpoints: [{emulator: fast}]}]
  - name: slow-model
    deployments: [{endpoints: [{emulator: slow}]}]
  - name: dead-model
    deployments: [{endpoints: [{url: "http://127.0.0.1:1"}]}]
batch:
  data_dir: $work/batch
  concurrency: 4
  chunk_lines: 16
  poll_ms: 50
  lease_ms: 400         # shorter than a slow-model line: leases must be renewed while lines run
  price_factor: 0.5
  max_attempts: 2
  retry_base_ms: 20
vectors: {data_dir: $work/vectors}
YAML
export INFERA_ADMIN_TOKEN="batch-admin-$$"
start_serve "$infera" "$work/batch.yaml" "$work/serve.out"
port="$PORT"
export INFERA_ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"
"$infera" teams create team-a >/dev/null
"$infera" teams create team-b >/dev/null
key_a=$("$infera" keys create --team team-a 2>/dev/null)
key_b=$("$infera" keys create --team team-b 2>/dev/null)
[[ "$key_a" == sk-inf-* && "$key_b" == sk-inf-* ]] || { echo "no keys: $key_a $key_b"; exit 1; }
NODE_PATH="$node_modules" INFERA_BASE_URL="http://127.0.0.1:$port/v1" INFERA_KEY_A="$key_a" \
  INFERA_KEY_B="$key_b" WORK_DIR="$work" node "$here/batch_sdk_test.mjs"

# Every slow-model request that reached the backend was one the cancelled batch counts as answered:
# lines in flight at the cancel were waited for, not listed as "not run" while they ran (and billed).
answered=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["request_counts"]["completed"])' \
  "$work/cancelled.json")
billed=""
for _ in $(seq 1 100); do
  billed=$("$infera" usage --team team-a --model slow-model --granularity total --group-by none --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); r=d.get("rows", d) if isinstance(d, dict) else d; print(sum(x.get("requests", 0) for x in r))')
  [[ "$billed" == "$answered" ]] && break
  sleep 0.05
done
[[ "$billed" == "$answered" ]] || { echo "slow-model billed $billed requests, the batch answered $answered"; exit 1; }
echo "ok - billed slow-model requests ($billed) are the cancelled batch's answered lines"

# The same from the command line: `infera batches create --wait`, list, show, output.
export INFERA_URL="http://127.0.0.1:$port" INFERA_API_KEY="$key_a"
for i in 1 2 3; do
  printf '{"custom_id":"cli-%s","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3-8b","max_tokens":2,"messages":[{"role":"user","content":"hi %s"}]}}\n' "$i" "$i"
done >"$work/cli.jsonl"
created=$("$infera" batches create "$work/cli.jsonl" --metadata job=cli --wait --json)
id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$created")
python3 -c 'import json,sys; b=json.load(sys.stdin); assert b["status"]=="completed" and b["request_counts"]=={"total":3,"completed":3,"failed":0} and b["metadata"]=={"job":"cli"}, b' <<<"$created"
"$infera" batches list | grep -q "^$id  *completed" || { echo "infera batches list does not show $id"; exit 1; }
"$infera" batches show "$id" | grep -q "3 of 3 done" || { echo "infera batches show: no progress line"; exit 1; }
[[ $("$infera" batches output "$id" | wc -l) == 3 ]] || { echo "infera batches output: not 3 lines"; exit 1; }
"$infera" batches output "$id" -o "$work/cli-out.jsonl"
[[ $(grep -c '"status_code":200' "$work/cli-out.jsonl") == 3 ]] || { echo "output file not 3 answers"; exit 1; }
if "$infera" batches output "$id" --errors 2>"$work/cli-err.txt"; then echo "a batch without errors has an error file?"; exit 1; fi
grep -q "has no error file" "$work/cli-err.txt" || { cat "$work/cli-err.txt"; exit 1; }
INFERA_API_KEY="$key_b" "$infera" batches show "$id" 2>"$work/cli-b.txt" && { echo "team b sees team a's batch"; exit 1; }
grep -q "error 404" "$work/cli-b.txt" || { cat "$work/cli-b.txt"; exit 1; }
echo "ok - infera batches create/list/show/output, and another team's key gets a 404"

# `infera batches embed`: `infera vectors embed`'s input (id, text, payload) as a batch into the
# collection the SDK test made, the text kept in the payload.
printf '%s\n' '{"id": 5000, "text": "cli item", "payload": {"src": "cli"}}' '{"id": 5001, "text": "cli item 2"}' >"$work/texts.jsonl"
embedded=$("$infera" batches embed catalogue "$work/texts.jsonl" --model text-embedding-3-small --wait --json)
python3 -c 'import json,sys; b=json.load(sys.stdin); assert b["status"]=="completed" and b["request_counts"]=={"total":2,"completed":2,"failed":0} and b["vector_collection"]=="catalogue", b' <<<"$embedded"
point=$(curl -sf -H "api-key: $key_a" -H 'content-type: application/json' -d '{"ids":[5000,5001],"with_payload":true}' \
  "http://127.0.0.1:$port/collections/catalogue/points")
python3 -c 'import json,sys; r=json.load(sys.stdin)["result"]; p={x["id"]: x["payload"] for x in r}; assert p=={5000:{"src":"cli","text":"cli item"},5001:{"text":"cli item 2"}}, p' <<<"$point"
echo "ok - infera batches embed upserts a file of texts into a collection with their payloads"

# Usage: every llama-3-8b request of team-a so far was a batch line, marked and billed at half
# price; one interactive request beside them is billed in full and not marked.
unset INFERA_API_KEY
interactive=$(curl -sf -H "authorization: Bearer $key_a" -H 'content-type: application/json' \
  -d '{"model":"llama-3-8b","max_tokens":2,"messages":[{"role":"user","content":"hello there"}]}' \
  "http://127.0.0.1:$port/v1/chat/completions" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["total_tokens"])')
row=""
for _ in $(seq 1 100); do
  row=$("$infera" usage --team team-a --model llama-3-8b --granularity total --group-by none --json)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["rows"][0]; sys.exit(0 if r["requests"] == r["batch_requests"] + 1 else 1)' "$row" 2>/dev/null && break
  sleep 0.05
done
python3 - "$row" "$interactive" <<'PY'
import json, sys
r = json.loads(sys.argv[1])["rows"][0]
interactive = int(sys.argv[2])
assert r["batch_requests"] > 100 and r["requests"] == r["batch_requests"] + 1, r
batch_tokens = r["total_tokens"] - interactive
want = 0.5 * batch_tokens + interactive
assert abs(r["cost_usd"] - want) < 1e-6, (r, want)
print(f"ok - usage: {r['batch_requests']} batch requests at half price, 1 interactive at full price (cost {r['cost_usd']})")
PY

# The operator's view: every team's batches on the admin port (not for a team key), and an admin
# cancel that lands in the audit log.
export INFERA_API_KEY="$key_b"
for i in $(seq 1 40); do
  printf '{"custom_id":"adm-%s","method":"POST","url":"/v1/chat/completions","body":{"model":"slow-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}}\n' "$i"
done >"$work/adm.jsonl"
adm=$("$infera" batches create "$work/adm.jsonl" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
admin_auth="authorization: Bearer $INFERA_ADMIN_TOKEN"
curl -sf -H "$admin_auth" "$INFERA_ADMIN_URL/admin/batches?team=team-b" | grep -q "\"id\":\"$adm\"" ||
  { echo "the admin API does not list team-b's batch"; exit 1; }
[[ $(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $key_b" "$INFERA_ADMIN_URL/admin/batches") == 403 ]] ||
  { echo "a team key reads every team's batches"; exit 1; }
curl -sf -X POST -H "$admin_auth" -H 'x-infera-actor: ops-ann' "$INFERA_ADMIN_URL/admin/batches/$adm/cancel" | grep -q '"status":"cancelling"' ||
  { echo "the admin cancel did not answer cancelling"; exit 1; }
curl -sf -H "$admin_auth" "$INFERA_ADMIN_URL/admin/audit?limit=20" | grep -q "batch.cancel" ||
  { echo "the admin cancel is not in the audit log"; exit 1; }
echo "ok - /admin/batches lists every team's batches (admin token only); an admin cancel is audited"
