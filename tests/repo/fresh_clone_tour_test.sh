#!/usr/bin/env bash
# A user's first hour from a bare clone: `git clone` into an empty directory (nothing beside it),
# then the README's tour run from there — the scheduler on the shipped trace from an unrelated
# working directory, the scheduler trace tests on the clone's data, every example validated, then
# the whole platform as `make run` serves it (no -c, a data directory outside the clone): the
# gateway's curl commands, keys and limits, the registry, the feature store, the vector index and
# batches on that one server; then examples/governance.yaml (keys required) — with
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

"$infera" --help >"$top/help.out" 2>&1
check "infera --help names every component" bash -c "for c in gateway 'batch inference' 'model registry' 'feature store' 'vector index' console emulator 'GPU scheduler'; do grep -qi \"\$c\" '$top/help.out' || exit 1; done"

# --- the whole platform (README: "A five-minute tour"): `infera serve` without -c, on free ports ----
# `make run` is `infera serve` with no config: a data directory outside the clone, created on first
# run from examples/platform.yaml. Here `infera init` writes it first, to move the ports.
home="$top/home"
"$infera" init --data-dir "$home" --port 0 --admin-port 0 >"$top/init.out" 2>&1
check "infera init writes the data directory's config" grep -q "^wrote $home/infera.yaml$" "$top/init.out"
check "the copy keeps its state in the data directory" bash -c "grep -q 'sqlite:$home/governance.db' '$home/infera.yaml' && ! grep -q '\./infera-data/' '$home/infera.yaml'"
check "the feature repository is written beside it" cmp -s "$home/features/repo.yaml" "$clone/examples/features/repo.yaml"
export INFERA_HOME="$home"
unset INFERA_ADMIN_TOKEN INFERA_ADMIN_URL
start_serve_args "$infera" "$top/platform.out"
check "infera serve (no -c) starts the platform from INFERA_HOME" test -n "$port"
check "it names the config it serves and where the admin token is" bash -c "grep -q '^infera: serving $home/infera.yaml' '$top/platform.out' && grep -q 'admin token in $home/admin-token' '$top/platform.out'"
check "the admin token was created, for this user only" bash -c "test \$(stat -c %a '$home/admin-token') = 600 && test -s '$home/admin-token'"
d="http://127.0.0.1:$port"
export INFERA_URL="$d" INFERA_ADMIN_URL="http://127.0.0.1:$admin"
code() { curl -s -o "$top/body" -w '%{http_code}' "$@"; }
c=$(code -N "$d/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"llama-3-8b","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Tell me a story"}]}')
check "a keyless streamed chat answers 200 (team anonymous)" test "$c" = 200
check "the stream ends with [DONE] after a usage chunk" bash -c "grep -q '\"usage\"' '$top/body' && tail -c 200 '$top/body' | grep -q 'data: \[DONE\]'"
c=$(code "$d/v1/chat/completions" -d '{"model":"gpt-4o-mini","max_tokens":5,"messages":[]}')
check "an alias routes to its model" test "$c" = 200
c=$(code "$d/v1/models")
check "/v1/models lists the platform's models" bash -c "test $c = 200 && grep -q llama-3-8b '$top/body' && grep -q resnet50 '$top/body' && grep -q fraud-backend '$top/body'"
c=$(code "$d/v1/embeddings" -d '{"model":"text-embedding-3-small","input":"hello"}')
check "embeddings answer 200" test "$c" = 200
c=$(code "$d/v2/models/resnet50/infer" -d '{"inputs":[{"name":"INPUT0","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}')
check "KServe v2 infer answers 200" test "$c" = 200
c=$(code "$d/v1/chat/completions" -d '{"model":"nope","messages":[]}')
check "an unknown model is an OpenAI-shaped 404" bash -c "test $c = 404 && grep -q '\"error\"' '$top/body'"
check "metrics count the requests" bash -c "curl -s $INFERA_ADMIN_URL/metrics | grep -q infera_gateway_requests_total"
c=$(code "$INFERA_ADMIN_URL/ui")
check "the web console is served at /ui on the admin port" bash -c "test $c = 200 && grep -q '/ui/app.js' '$top/body'"
c=$(code "$INFERA_ADMIN_URL/admin/status" -H "authorization: Bearer $(cat "$home/admin-token")")
check "every component runs in the one process (/admin/status)" node -e '
  const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const c = s.components || {};
  const want = ["gateway", "governance", "registry", "features", "vectors", "batch"];
  process.exit(want.every((k) => c[k] === true) ? 0 : 1);' "$top/body"
c=$(code -X POST "$INFERA_ADMIN_URL/admin/reload")
check "the admin API refuses a call without the token (401)" test "$c" = 401
# Keys, limits and usage: the CLI reads the admin token from the data directory.
"$infera" teams create ml --models 'llama*,text-*' --tpm 20000 --rpm 3 >/dev/null
check "infera teams create (admin token read from INFERA_HOME)" test $? -eq 0
key=$("$infera" keys create --team ml --expires 30d)
check "infera keys create prints a secret" bash -c "[[ '$key' =~ ^sk-inf-[A-Za-z0-9]{12}-[A-Za-z0-9]{20,}$ ]]"
chat() { code "$d/v1/chat/completions" "$@" \
  -d '{"model":"llama3","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'; }
codes=""
for _ in 1 2 3 4; do codes="$codes $(chat -H "authorization: Bearer $key")"; done
check "three calls pass, the fourth in the minute is a 429 (rpm 3)" test "$codes" = " 200 200 200 429"
check "a bad key: 401" test "$(chat -H 'authorization: Bearer sk-inf-nope')" = 401
c=$(code "$d/v1/embeddings" -H "authorization: Bearer $key" -d '{"model":"resnet50","input":"x"}')
check "a model outside the team's list: 403" test "$c" = 403
# Registry: two versions bound to the two deployments; the alias routes.
"$infera" models create fraud --description "fraud scoring" >/dev/null &&
  "$infera" models upload fraud "$clone/README.md" >/dev/null &&
  "$infera" models upload fraud "$clone/README.md" >/dev/null &&
  "$infera" models bind fraud --version 1 --deployment fraud-v1 >/dev/null &&
  "$infera" models bind fraud --version 2 --deployment fraud-v2 >/dev/null &&
  "$infera" models alias fraud champion 1 --reason "first release" >/dev/null
check "the registry tour: create, upload twice, bind, alias" test $? -eq 0
c=$(code "$d/v1/chat/completions" -d '{"model":"fraud@champion","messages":[{"role":"user","content":"hi"}]}')
check "fraud@champion answers through version 1's deployment" test "$c" = 200
"$infera" models alias fraud champion 2 >/dev/null && "$infera" models rollback fraud --alias champion >/dev/null
check "alias moved and rolled back" bash -c "'$infera' models history fraud --alias champion | grep -c champion | grep -qv '^0$'"
# Feature store: the example repository is loaded; ingest its CSV and read it back.
"$infera" features ingest driver_hourly_stats "$clone/examples/features/driver_stats.csv" >"$top/ingest.out" 2>&1
check "infera features ingest writes the CSV's rows" grep -q "rows written to driver_hourly_stats" "$top/ingest.out"
c=$(code "$d/get-online-features" -d '{"feature_service":"driver_activity","entities":{"driver_id":[1001]}}')
check "get-online-features answers the ingested row" bash -c "test $c = 200 && grep -q '\"PRESENT\"' '$top/body'"
# Vector index and batches on the same server.
"$infera" vectors create sift --dim 128 --distance Euclid >/dev/null 2>&1
check "infera vectors create" test $? -eq 0
"$infera" vectors load sift "$clone/data/ngt-sift-5k/sift-dataset-5k.tsv" --ignore-extra-columns >"$top/vload.out" 2>&1
check "infera vectors load reads the clone's SIFT TSV" grep -q "loaded 5000 points" "$top/vload.out"
"$infera" vectors search sift --from-file "$clone/data/ngt-sift-5k/sift-query-3.tsv" --limit 5 >"$top/vsearch.out" 2>&1
check "search finds the README's neighbours" bash -c "sed -n '2,6p' '$top/vsearch.out' | awk '{print \$2}' | tr '\n' ' ' | grep -q '^3030 4078 3163 3717 156 $'"
printf '{"id":1,"text":"a red apple"}\n{"id":2,"text":"a green pear","payload":{"kind":"fruit"}}\n' >"$top/texts.jsonl"
"$infera" vectors embed docs "$top/texts.jsonl" --model text-embedding-3-small --create >"$top/vembed.out" 2>&1
check "infera vectors embed through the platform's emulator" grep -q "embedded 2 texts" "$top/vembed.out"
check "the embedded collection has the emulator's 384 dimensions" bash -c "curl -s $INFERA_URL/collections/docs | grep -q '\"size\":384'"
# README: hybrid search (a dense and an IDF sparse vector, two prefetches fused by RRF)
curl -s -X PUT "$INFERA_URL/collections/hybrid" -d '{"vectors":{"dense":{"size":2,"distance":"Cosine"}},"sparse_vectors":{"text":{"modifier":"idf"}}}' >/dev/null
curl -s -X PUT "$INFERA_URL/collections/hybrid/points?wait=true" -d '{"points":[{"id":1,"vector":{"dense":[0.9,0.1],"text":{"indices":[7,42],"values":[1,1]}}},{"id":2,"vector":{"dense":[0.1,0.9],"text":{"indices":[42],"values":[2]}}}]}' >/dev/null
curl -s -X POST "$INFERA_URL/collections/hybrid/points/query" -d '{"prefetch":[{"query":[1,0],"using":"dense","limit":20},{"query":{"indices":[7],"values":[1]},"using":"text","limit":20}],"query":{"fusion":"rrf"},"limit":5}' >"$top/hybrid.out"
check "the README's hybrid query ranks point 1 (both lists) before point 2" grep -q '"points":\[{"id":1,"version":[0-9]*,"score":1},{"id":2,' "$top/hybrid.out"
for i in 1 2 3; do echo "{\"custom_id\":\"q$i\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"llama-3-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"question $i\"}]}}"; done >"$top/requests.jsonl"
"$infera" batches create "$top/requests.jsonl" --wait >"$top/bcreate.out" 2>&1
check "infera batches create --wait ends completed, 3 of 3" grep -q "completed.*3 of 3 done" "$top/bcreate.out"
batch_id=$(awk 'NR==1 {print $1}' "$top/bcreate.out")
"$infera" batches output "$batch_id" >"$top/boutput.out" 2>&1
check "infera batches output has one answer per line" bash -c "[[ \$(grep -c '\"status_code\":200' '$top/boutput.out') == 3 ]]"
"$infera" vectors create catalogue --dim 384 --distance Cosine >/dev/null 2>&1
"$infera" batches embed catalogue "$top/texts.jsonl" --model text-embedding-3-small --wait >"$top/bembed.out" 2>&1
check "infera batches embed ends completed, 2 of 2" grep -q "completed.*2 of 2 done" "$top/bembed.out"
kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""
check "the platform's run wrote no file of the clone" bash -c "cd '$clone' && git diff --quiet && test -z \"\$(git status --porcelain --untracked-files=all | grep -v '^?? build/')\""
# A second start serves the same data directory: the team is still there.
start_serve_args "$infera" "$top/platform2.out" --data-dir "$home"
check "a restart serves the same data directory" bash -c "grep -q '^infera: serving $home/infera.yaml' '$top/platform2.out' && test -n '$port'"
export INFERA_ADMIN_URL="http://127.0.0.1:$admin"
check "the team created before the restart is kept" bash -c "'$infera' teams list | grep -q '^ml '"
kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""
unset INFERA_HOME INFERA_URL INFERA_ADMIN_URL

# --- governance tour (README: "Keys, limits and usage"), on free ports -----------------------------
mkdir -p "$top/gov" && cd "$top/gov"
sed -e 's/port: 8080/port: 0/' -e 's/port: 9090/port: 0/' "$clone/examples/governance.yaml" >"$top/gov.yaml"
# Access control on and no admin token anywhere: the start says so (the admin API is closed).
start_serve "$infera" "$top/gov.yaml" "$top/gov-notoken.out"
check "without an admin token the start warns that the admin API is closed" \
  bash -c "test -n '$port' && grep -q 'access control is on but no admin token is set' '$top/gov-notoken.out'"
kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""
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

finish
