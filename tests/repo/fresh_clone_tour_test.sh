#!/usr/bin/env bash
# A user's first hour from a bare clone: `git clone` into an empty directory (nothing beside it),
# then the README's tour run from there — the scheduler on the shipped trace from an unrelated
# working directory, the scheduler trace tests on the clone's data, the quickstart gateway's curl
# commands, the governance tour's CLI and the vector index tour (create, load, search, embed) — with
# this build's binaries copied into the clone (the suite has built them once; building again would
# double `make test`).
# Usage: fresh_clone_tour_test.sh SOURCE_DIR INFERA_BINARY SCHEDULER_TRACE_TEST_BINARY
set -uo pipefail
src="$1"
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: nothing to clone"; exit 77; }
top=$(mktemp -d)
pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$top"; }
trap cleanup EXIT
source "$src/tests/cli/lib.sh"
# wait_for_s SECONDS COMMAND...: COMMAND until it succeeds, every 100 ms; false at the deadline.
wait_for_s() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do (( SECONDS >= deadline )) && return 1; sleep 0.1; done
}

git clone -q "$src" "$top/clone"
check "the clone is the only thing in its parent" test "$(ls -A "$top")" = clone
clone="$top/clone"
mkdir -p "$clone/build/bin" "$top/elsewhere"
cp "$2" "$clone/build/bin/infera"
cp "$3" "$clone/build/bin/scheduler_trace_test"
infera="$clone/build/bin/infera"
cd "$top/elsewhere"

# --- scheduler (README: "GPU scheduler on the Alibaba trace") -------------------------------------
"$infera" sched simulate --policy infera,fgd,gpu-packing --seeds 1 --no-progress -o "$top/sr" >"$top/sim.out" 2>&1
check "sched simulate runs from another directory without --data" test $? -eq 0
check "it read the clone's own trace" grep -q "trace: $clone/data/alibaba-gpu-v2023/csv/openb_node_list_gpu_node.csv" "$top/sim.out"
check "it reports every policy asked for" test "$(grep -cE '^(infera|fgd|gpu-packing) ' "$top/sim.out")" = 3
check "it writes the JSON report and the chart" test -s "$top/sr/report.json" -a -s "$top/sr/alloc_vs_load.svg"
"$infera" sched simulate --mode replay --offered-load 1.0 --horizon 2 --policy infera --no-progress \
  --config "$clone/examples/scheduler/queues.yaml" -o "$top/replay" >"$top/replay.out" 2>&1
check "the replay tour runs (2 h of arrivals)" test $? -eq 0
# The printed pending-time line, read field by field, against the JSON report's figures (an error
# message that says "pending" matches neither).
replay_pending_reported() {
  node -e '
    const fs = require("fs");
    const r = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
    const m = fs.readFileSync(process.argv[1], "utf8")
      .match(/^  pending time: mean (\d+) s, p99 (\d+) s; ([\d.]+)% of started pods waited$/m);
    const p = r.pending;
    process.exit(m && p && r.mode === "replay" && r.scheduled > 0 &&
      Number(m[1]) === Math.round(p.mean_s) && Number(m[2]) === Math.round(p.p99_s) &&
      Math.abs(Number(m[3]) - 100 * p.waited_share) < 0.05 &&
      p.waited === Math.round(p.waited_share * r.scheduled) ? 0 : 1);' "$top/replay.out" "$top/replay/report.json"
}
check "the replay reports pending times (summary line = report.json)" replay_pending_reported
"$infera" sched validate "$clone/examples/scheduler/queues.yaml" >"$top/val.out" 2>&1
check "sched validate accepts the example queues" test $? -eq 0
INFERA_DATA_DIR="$clone/data" "$clone/build/bin/scheduler_trace_test" --gtest_brief=1 >"$top/trace.out" 2>&1
check "the scheduler trace tests pass on the clone's data" test $? -eq 0
for f in "$clone"/examples/*.yaml; do
  "$infera" config validate "$f" >/dev/null 2>&1
  check "config validate $(basename "$f")" test $? -eq 0
done

# --- quickstart gateway (README: "A five-minute tour"), on free ports ------------------------------
sed -e 's/port: 8080/port: 0/' -e 's/port: 9090/port: 0/' "$clone/examples/quickstart.yaml" >"$top/qs.yaml"
start_serve "$infera" "$top/qs.yaml" "$top/qs.out"
check "the quickstart gateway starts" test -n "$port"
d="http://127.0.0.1:$port"
code() { curl -s -o "$top/body" -w '%{http_code}' "$@"; }
c=$(code -N "$d/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"llama-3-8b","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Tell me a story"}]}')
check "a streamed chat answers 200" test "$c" = 200
check "the stream ends with [DONE] after a usage chunk" bash -c "grep -q '\"usage\"' '$top/body' && tail -c 200 '$top/body' | grep -q 'data: \[DONE\]'"
c=$(code "$d/v1/chat/completions" -d '{"model":"gpt-4o-mini","max_tokens":5,"messages":[]}')
check "an alias routes to its model" test "$c" = 200
c=$(code "$d/v1/models")
check "/v1/models lists the quickstart's models" bash -c "test $c = 200 && grep -q llama-3-8b '$top/body' && grep -q resnet50 '$top/body'"
c=$(code "$d/v1/embeddings" -d '{"model":"text-embedding-3-small","input":"hello"}')
check "embeddings answer 200" test "$c" = 200
c=$(code "$d/v2/models/resnet50/infer" -d '{"inputs":[{"name":"INPUT0","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}')
check "KServe v2 infer answers 200" test "$c" = 200
c=$(code "$d/v1/chat/completions" -d '{"model":"nope","messages":[]}')
check "an unknown model is an OpenAI-shaped 404" bash -c "test $c = 404 && grep -q '\"error\"' '$top/body'"
check "metrics count the requests" bash -c "curl -s http://127.0.0.1:$admin/metrics | grep -q infera_gateway_requests_total"
c=$(code "http://127.0.0.1:$admin/ui")
check "the web console is served at /ui on the admin port" bash -c "test $c = 200 && grep -q '/ui/app.js' '$top/body'"
c=$(code "http://127.0.0.1:$admin/admin/endpoints")
check "/admin/endpoints answers 200" test "$c" = 200
c=$(code -X POST "http://127.0.0.1:$admin/admin/reload")
check "POST /admin/reload answers 200" test "$c" = 200
kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""

# --- governance tour (README: "Keys, limits and usage"), on free ports -----------------------------
mkdir -p "$top/gov" && cd "$top/gov"
sed -e 's/port: 8080/port: 0/' -e 's/port: 9090/port: 0/' "$clone/examples/governance.yaml" >"$top/gov.yaml"
export INFERA_ADMIN_TOKEN=dev-admin-token
start_serve "$infera" "$top/gov.yaml" "$top/gov.out"
check "the governance example starts" test -n "$port"
export INFERA_ADMIN_URL="http://127.0.0.1:$admin"
"$infera" teams create ml --models 'llama*,text-*' --tpm 20000 --rpm 3 >/dev/null
check "infera teams create" test $? -eq 0
key=$("$infera" keys create --team ml --expires 30d)
key_rc=$?
# Its whole output is one secret, sk-inf-<12-character id>-<secret>; the id is what lists and the
# audit log name.
key_id=""
[[ "$key" =~ ^sk-inf-([A-Za-z0-9]{12})-[A-Za-z0-9]{20,}$ ]] && key_id="${BASH_REMATCH[1]}"
check "infera keys create prints a secret of the sk-inf- shape (status $key_rc)" \
  bash -c "[[ $key_rc == 0 && -n '$key_id' ]]"
chat() { code "http://127.0.0.1:$port/v1/chat/completions" "$@" \
  -d '{"model":"llama3","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'; }
codes=""
for _ in 1 2 3 4; do codes="$codes $(chat -H "authorization: Bearer $key")"; done
check "three calls pass, the fourth in the minute is a 429 (rpm 3)" test "$codes" = " 200 200 200 429"
check "without a key: 401" test "$(chat)" = 401
"$infera" teams create other --models 'text-*' >/dev/null
okey=$("$infera" keys create --team other)
check "a model outside the team's list: 403" test "$(chat -H "authorization: Bearer $okey")" = 403
# Usage is flushed every second (usage_flush_ms). Summed over team ml's minute rows for
# llama-3-8b: four requests (the 429 is recorded, with no tokens) and the three answered calls'
# tokens, 4 prompt + 8 completion each from the emulator (the other team's 403 is not ml's).
ml_usage() {  # ml_usage REQUESTS TOTAL_TOKENS
  "$infera" usage --team ml --granularity minute >"$top/usage.out" 2>"$top/usage.err" || return 1
  [[ "$(head -1 "$top/usage.out")" == "BUCKET (UTC)"*" REQUESTS "*" TOTAL "* ]] || return 1
  [[ "$(awk 'NR > 1 && $3 == "ml" && $4 == "llama-3-8b" {n += $5; t += $8} END {print n + 0, t + 0}' \
    "$top/usage.out")" == "$1 $2" ]]
}
check "infera usage shows ml's calls: 4 requests, 36 tokens" wait_for_s 10 ml_usage 4 36
"$infera" keys list >"$top/keys.out" 2>&1
keys_rc=$?
check "infera keys list shows the key, team ml, state active (status $keys_rc)" \
  bash -c "[[ $keys_rc == 0 && -n '$key_id' ]] && grep -Eq '^$key_id +ml +active ' '$top/keys.out'"
"$infera" audit >"$top/audit.out" 2>&1
audit_rc=$?
check "infera audit lists the key creation by the admin (status $audit_rc)" \
  bash -c "[[ $audit_rc == 0 && -n '$key_id' ]] && grep -Eq '^[0-9-]+ [0-9:]+Z +admin +key\.create +$key_id ' '$top/audit.out'"

kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""

# --- vector index tour (README: "Vector index"), on free ports -------------------------------------
mkdir -p "$top/vec" && cd "$top/vec"
unset INFERA_ADMIN_URL
sed -e 's/port: 8080/port: 0/' -e 's/port: 9090/port: 0/' -e "s|./infera-data/vectors|$top/vec/data|" \
  "$clone/examples/vectors.yaml" >"$top/vec.yaml"
start_serve "$infera" "$top/vec.yaml" "$top/vec.out"
check "the vectors example starts" test -n "$port"
export INFERA_URL="http://127.0.0.1:$port"
"$infera" vectors create sift --dim 128 --distance Euclid >/dev/null 2>&1
check "infera vectors create" test $? -eq 0
"$infera" vectors load sift "$clone/data/ngt-sift-5k/sift-dataset-5k.tsv" --ignore-extra-columns >"$top/vload.out" 2>&1
check "infera vectors load reads the clone's SIFT TSV" grep -q "loaded 5000 points" "$top/vload.out"
"$infera" vectors search sift --from-file "$clone/data/ngt-sift-5k/sift-query-3.tsv" --limit 5 >"$top/vsearch.out" 2>&1
check "search finds the README's neighbours" bash -c "sed -n '2,6p' '$top/vsearch.out' | awk '{print \$2}' | tr '\n' ' ' | grep -q '^3030 4078 3163 3717 156 $'"
"$infera" vectors stats sift >"$top/vstats.out" 2>&1
check "infera vectors stats" grep -q "^points *5000" "$top/vstats.out"
printf '{"id":1,"text":"a red apple"}\n{"id":2,"text":"a green pear","payload":{"kind":"fruit"}}\n' >texts.jsonl
"$infera" vectors embed docs texts.jsonl --model text-embedding-3-small --create >"$top/vembed.out" 2>&1
check "infera vectors embed through the example's emulator" grep -q "embedded 2 texts" "$top/vembed.out"
check "the embedded collection has the emulator's 384 dimensions" bash -c "curl -s $INFERA_URL/collections/docs | grep -q '\"size\":384'"
kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""
# --- batch tour (README: "Batch inference"), on free ports -----------------------------------------
mkdir -p "$top/batch" && cd "$top/batch"
sed -e 's/port: 8080/port: 0/' -e 's/port: 9090/port: 0/' -e "s|./infera-data/batch|$top/batch/data|" \
  "$clone/examples/batch.yaml" >"$top/batch.yaml"
start_serve "$infera" "$top/batch.yaml" "$top/batch.out"
check "the batch example starts" test -n "$port"
export INFERA_URL="http://127.0.0.1:$port"
for i in 1 2 3; do echo "{\"custom_id\":\"q$i\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"llama-3-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"question $i\"}]}}"; done >requests.jsonl
"$infera" batches create requests.jsonl --wait >"$top/bcreate.out" 2>&1
check "infera batches create --wait ends completed, 3 of 3" grep -q "completed.*3 of 3 done" "$top/bcreate.out"
batch_id=$(awk 'NR==1 {print $1}' "$top/bcreate.out")
"$infera" batches list >"$top/blist.out" 2>&1
check "infera batches list shows it" bash -c "[[ -n '$batch_id' ]] && grep -q '^$batch_id ' '$top/blist.out'"
"$infera" batches output "$batch_id" >"$top/boutput.out" 2>&1
check "infera batches output has one answer per line" bash -c "[[ \$(grep -c '\"status_code\":200' '$top/boutput.out') == 3 ]]"
"$infera" vectors create catalogue --dim 384 --distance Cosine >/dev/null 2>&1
check "infera vectors create beside the batches" test $? -eq 0
printf '{"id":1,"text":"a red apple"}\n{"id":2,"text":"a green pear","payload":{"kind":"fruit"}}\n' >texts.jsonl
"$infera" batches embed catalogue texts.jsonl --model text-embedding-3-small --wait >"$top/bembed.out" 2>&1
check "infera batches embed ends completed, 2 of 2" grep -q "completed.*2 of 2 done" "$top/bembed.out"
"$infera" vectors stats catalogue >"$top/bstats.out" 2>&1
check "the collection holds the 2 points" grep -Eq '"?points"?[:= ]+2\b' "$top/bstats.out"
kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""
finish
