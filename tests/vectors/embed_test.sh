#!/usr/bin/env bash
# `infera vectors embed` end to end: texts embedded through a real `infera serve` (gateway +
# in-process emulator answering /v1/embeddings with 24-d vectors, some calls answered 429) into its
# own vector index; the embed process is SIGKILLed midway and rerun: it resumes at its checkpoint,
# and every id is there exactly once with its payload and text. Also: rerunning a finished job does
# nothing, a changed input is refused, a bad line is named and its batch refused.
# Usage: embed_test.sh INFERA_BINARY WORK_DIR
set -uo pipefail
infera="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work/state"
pid=""
embed_pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; [[ -n "$embed_pid" ]] && kill -9 "$embed_pid" 2>/dev/null; }
trap cleanup EXIT
source "$here/../cli/lib.sh"

# The emulator's embedding vectors have embedding_dim components (src/emulator: default 16).
cat >"$work/e.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
emulators:
  emb:
    models: [embedder]
    embedding_dim: 24
    faults: {added_latency_ms: 30, error_rate: 0.2, error_status: 429}
models:
  - name: embedder
    deployments: [{endpoints: [{emulator: emb}]}]
vectors:
  data_dir: $work/data
YAML
start_serve "$infera" "$work/e.yaml" "$work/serve.out"
[[ -n "$port" ]] || { cat "$work/serve.out"; echo "serve did not start"; exit 1; }
export INFERA_URL="http://127.0.0.1:$port"
count() { curl -s -X POST "$INFERA_URL/collections/$1/points/count" -d '{"exact":true}' | sed -n 's/.*"count":\([0-9]*\).*/\1/p'; }

n=400
{
  for i in $(seq 0 $((n - 1))); do
    printf '{"id":%d,"text":"document %d about topic %d","payload":{"n":%d,"topic":"t%d"}}\n' "$i" "$i" $((i % 7)) "$i" $((i % 7))
  done
  printf '{"id":"6f1c7d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f","text":"the last one"}\n'
} >"$work/in.jsonl"
total=$((n + 1))
"$infera" vectors create docs --dim 24 --distance Cosine >/dev/null 2>&1
check "collection created" test "$(count docs)" = 0

embed() { "$infera" vectors embed docs "$work/in.jsonl" --model embedder --batch 10 --concurrency 2 \
  --state "$work/state" --no-progress "$@"; }
cp_file="$work/state/in.jsonl.docs.embed-checkpoint"
cp_line() { sed -n 's/.*"line": *\([0-9]*\).*/\1/p' "$cp_file" 2>/dev/null; }

# Started directly, not through the function: $! of a backgrounded function is its subshell, and
# SIGKILL to that would leave the embed process running beside the rerun.
"$infera" vectors embed docs "$work/in.jsonl" --model embedder --batch 10 --concurrency 2 \
  --state "$work/state" --no-progress >"$work/run1.out" 2>&1 &
embed_pid=$!
for _ in $(seq 1 3000); do
  l=$(cp_line); [[ -n "$l" && "$l" -ge 100 ]] && break
  kill -0 "$embed_pid" 2>/dev/null || break
  sleep 0.01
done
kill -9 "$embed_pid" 2>/dev/null
wait "$embed_pid" 2>/dev/null
embed_pid=""
killed_at=$(cp_line)
mid=$(count docs)
echo "killed with the checkpoint at line $killed_at, $mid points in the collection"
check "the embed process was killed midway (checkpoint past line 100, before the end)" \
  bash -c "test -n '$killed_at' && test '$killed_at' -ge 100 && test '$killed_at' -lt $total"
check "the collection holds at least the checkpointed lines, not all of them" \
  bash -c "test '$mid' -ge '$killed_at' && test '$mid' -lt $total"

embed >"$work/run2.out" 2>&1
rc=$?
cat "$work/run2.out"
check "the rerun succeeds" test $rc -eq 0
check "it resumes after the checkpoint's line" grep -q "resumed at line $((killed_at + 1)) " "$work/run2.out"
check "it reports every line done" grep -q "lines 1-$total done" "$work/run2.out"
check "the collection holds every point once" test "$(count docs)" = "$total"
curl -s -X POST "$INFERA_URL/collections/docs/points/scroll" -d '{"limit":1000,"with_payload":true}' >"$work/scroll.json"
python3 - "$work/scroll.json" "$n" >"$work/verify.out" 2>&1 <<'PY'
import json, sys
pts = json.load(open(sys.argv[1]))["result"]["points"]
n = int(sys.argv[2])
ids = [p["id"] for p in pts]
want = list(range(n)) + ["6f1c7d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"]
assert sorted(ids, key=str) == sorted(want, key=str), f"ids differ: {len(ids)} got"
assert len(set(map(str, ids))) == len(ids), "an id twice"
for p in pts:
    if p["id"] == want[-1]:
        assert p["payload"] == {"text": "the last one"}, p
        continue
    i = p["id"]
    assert p["payload"] == {"n": i, "topic": f"t{i % 7}", "text": f"document {i} about topic {i % 7}"}, p
print("ok", len(pts))
PY
check "every id exactly once, with its payload and its text under \"text\"" grep -q "^ok $total" "$work/verify.out"
cat "$work/verify.out"

# The stored vector is the model's: the embedding of document 17, asked directly, finds point 17.
curl -s "$INFERA_URL/v1/embeddings" -d '{"model":"embedder","input":["document 17 about topic 3"]}' >"$work/e17.json"
vec=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["data"][0]["embedding"])))' "$work/e17.json" 2>/dev/null)
if [[ -z "$vec" ]]; then  # an injected 429: ask once more
  curl -s "$INFERA_URL/v1/embeddings" -d '{"model":"embedder","input":["document 17 about topic 3"]}' >"$work/e17.json"
  vec=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["data"][0]["embedding"])))' "$work/e17.json" 2>/dev/null)
fi
"$infera" vectors search docs --vector "$vec" --limit 1 >"$work/s.out" 2>&1
check "the vector stored for document 17 is the model's (cosine 1)" bash -c "awk '{print \$2, substr(\$3,1,5)}' '$work/s.out' | grep -Eq '^17 (1|0\.999)'"
# Retries, from one whole run (the rerun above may have had only a batch or two left, when the box
# was slow to kill the first run): 41 calls at a 20% 429 rate.
"$infera" vectors create retried --dim 24 --distance Cosine >/dev/null 2>&1
"$infera" vectors embed retried "$work/in.jsonl" --model embedder --batch 10 --concurrency 2 \
  --state "$work/state-retried" --no-progress >"$work/run-retried.out" 2>&1
retries=$(sed -n 's/.*, \([0-9]*\) retries).*/\1/p' "$work/run-retried.out" | head -1)
check "injected 429s were retried (a whole run reports its retries, and every point is in)" \
  bash -c "test -n '$retries' && test '$retries' -gt 0 && test '$(count retried)' = $total"

embed >"$work/run3.out" 2>&1
check "rerunning a finished job embeds nothing" bash -c "test $? -eq 0 && grep -q 'embedded 0 texts' '$work/run3.out' && test '$(count docs)' = $total"
sed -i '3s/document 2 /DOCUMENT 2 /' "$work/in.jsonl"
embed >"$work/run4.out" 2>&1
check "an input changed before the checkpoint is refused" bash -c "test $? -eq 1 && grep -q 'changed before line' '$work/run4.out'"
embed --restart >"$work/run5.out" 2>&1
check "--restart embeds everything again (idempotent: the count stays)" bash -c \
  "test $? -eq 0 && grep -q 'embedded $total texts' '$work/run5.out' && test '$(count docs)' = $total"

# A bad line: named with its line, its batch refused, the ones before upserted; --create makes the
# collection with the model's dimension.
printf '{"id":1,"text":"a"}\n{"id":2,"text":"b"}\n{"id":3,"text":"c"}\n{"id":4,"text":"d"}\n{"id":5,"text":""}\n{"id":6,"text":"f"}\n' >"$work/bad.jsonl"
"$infera" vectors embed fresh "$work/bad.jsonl" --model embedder --batch 2 --concurrency 1 --create --no-progress >"$work/bad.out" 2>&1
check "a bad line fails the run" test $? -eq 1
check "it names line 5 and its column" grep -q 'bad.jsonl:5:[0-9]*: "text" must be a non-empty string' "$work/bad.out"
check "--create made the collection with the model's 24 dimensions" bash -c \
  "curl -s $INFERA_URL/collections/fresh | grep -q '\"size\":24'"
check "lines 1-4 are upserted, the bad line's batch is not" test "$(count fresh)" = 4
"$infera" vectors embed docs "$work/in.jsonl" --model nope --state "$work/state" --restart --no-progress >"$work/nope.out" 2>&1
check "an unknown model is the gateway's error, not retried" bash -c "test $? -eq 1 && grep -q 'embeddings API.*answered 404' '$work/nope.out'"
finish
