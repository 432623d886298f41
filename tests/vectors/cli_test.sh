#!/usr/bin/env bash
# `infera vectors` end to end against a real `infera serve`: create, load every file format
# (TSV like data/ngt-sift-5k, .fvecs, .ivecs, .bvecs, JSON lines with payloads), search (a vector,
# a query file, a filter), stats, list, delete; bad input names its line and column and its whole
# batch is refused (the count does not move). Usage: cli_test.sh INFERA_BINARY WORK_DIR
set -uo pipefail
infera="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
sift="$here/../../data/ngt-sift-5k"
rm -rf "$work"
mkdir -p "$work"
pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; }
trap cleanup EXIT
source "$here/../cli/lib.sh"

cat >"$work/v.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
vectors:
  data_dir: $work/data
YAML
start_serve "$infera" "$work/v.yaml" "$work/serve.out"
[[ -n "$port" ]] || { cat "$work/serve.out"; echo "serve did not start"; exit 1; }
export INFERA_URL="http://127.0.0.1:$port"
count() { curl -s -X POST "$INFERA_URL/collections/$1/points/count" -d '{"exact":true}' | sed -n 's/.*"count":\([0-9]*\).*/\1/p'; }

# --- TSV: the shipped SIFT set (129 columns: the vector, then NGT's id, ignored) ---------------
"$infera" vectors create sift --dim 128 --distance Euclid >"$work/out" 2>&1
check "create answers" grep -q "created collection sift (dim 128, Euclid)" "$work/out"
"$infera" vectors create sift --dim 128 --distance Euclid >"$work/out" 2>&1
check "create of an existing name fails with the API's 409 text" bash -c "test $? -eq 1 && grep -q 'already exists' '$work/out'"
"$infera" vectors load sift "$sift/sift-dataset-5k.tsv" --no-progress >"$work/out" 2>&1
check "load without --ignore-extra-columns refuses the 129th column, naming line and column" \
  grep -q "sift-dataset-5k.tsv:1:[0-9]*: column 129: more columns than the dimension 128" "$work/out"
check "and nothing was written" test "$(count sift)" = 0
"$infera" vectors load sift "$sift/sift-dataset-5k.tsv" --ignore-extra-columns --batch 500 --concurrency 3 >"$work/out" 2>&1
check "load of the SIFT TSV reports 5000 points" grep -q "loaded 5000 points" "$work/out"
check "the collection holds 5000 points" test "$(count sift)" = 5000
"$infera" vectors search sift --from-file "$sift/sift-query-3.tsv" --limit 5 >"$work/out" 2>&1
# NGT's README (1-based ids 3031, 4079, 3164, 3718, 157) = rows 3030, 4078, 3163, 3717, 156.
check "search by query file finds NGT's nearest neighbours" bash -c \
  "sed -n '2,6p' '$work/out' | awk '{print \$2}' | tr '\n' ' ' | grep -q '^3030 4078 3163 3717 156 $'"
check "scores are L2 distances (239.332 first)" bash -c "sed -n 2p '$work/out' | grep -q ' 239\.33'"
check "three queries answered" test "$(grep -c '^query ' "$work/out")" = 3
q1=$(head -1 "$sift/sift-query-3.tsv" | tr '\t' ',')
"$infera" vectors search sift --vector "$q1" --limit 3 --exact >"$work/out" 2>&1
check "search --vector --exact answers the same first hit" bash -c "sed -n 1p '$work/out' | awk '{print \$2}' | grep -qx 3030"
"$infera" vectors stats sift >"$work/out" 2>&1
check "stats shows points, dimension, segments and memory" bash -c \
  "grep -q '^points *5000' '$work/out' && grep -q 'dim 128, Euclid' '$work/out' && grep -q '^segments' '$work/out' && grep -q '^index memory.*per point' '$work/out'"

# --- binary TEXMEX formats ---------------------------------------------------------------------
python3 - "$work" <<'PY'
import struct, sys, random
w = sys.argv[1]
random.seed(7)
rows = [[random.random() for _ in range(8)] for _ in range(300)]
with open(f"{w}/a.fvecs", "wb") as f:
    for r in rows: f.write(struct.pack("<i", 8) + struct.pack("<8f", *r))
with open(f"{w}/a.ivecs", "wb") as f:
    for i in range(50): f.write(struct.pack("<i", 8) + struct.pack("<8i", *[i * 8 + j for j in range(8)]))
with open(f"{w}/a.bvecs", "wb") as f:
    for i in range(40): f.write(struct.pack("<i", 8) + bytes([(i + j) % 256 for j in range(8)]))
with open(f"{w}/bad.fvecs", "wb") as f:
    for r in rows[:20]: f.write(struct.pack("<i", 8) + struct.pack("<8f", *r))
    f.write(struct.pack("<i", 7) + struct.pack("<7f", *rows[20][:7]))
with open(f"{w}/q.fvecs", "wb") as f:
    f.write(struct.pack("<i", 8) + struct.pack("<8f", *rows[123]))
PY
"$infera" vectors create bin --dim 8 --distance Euclid --m 8 --ef-construct 64 >/dev/null 2>&1
"$infera" vectors load bin "$work/a.fvecs" --batch 64 --no-progress >"$work/out" 2>&1
check ".fvecs loads 300 points" bash -c "grep -q 'loaded 300 points' '$work/out' && test \$(curl -s -X POST $INFERA_URL/collections/bin/points/count -d '{}' | grep -o '\"count\":[0-9]*') = '\"count\":300'"
"$infera" vectors search bin --from-file "$work/q.fvecs" --limit 1 >"$work/out" 2>&1
check "a query from an .fvecs file finds its own vector (id 123, distance 0)" bash -c "awk '{print \$2, \$3}' '$work/out' | grep -qx '123 0'"
"$infera" vectors load bin "$work/a.ivecs" --first-id 1000 >"$work/out" 2>&1
check ".ivecs loads 50 points from id 1000" grep -q 'loaded 50 points' "$work/out"
"$infera" vectors load bin "$work/a.bvecs" --first-id 2000 >"$work/out" 2>&1
check ".bvecs loads 40 points from id 2000" grep -q 'loaded 40 points' "$work/out"
check "the collection holds 390 points" test "$(count bin)" = 390
"$infera" vectors search bin --vector 8,9,10,11,12,13,14,15 --limit 1 >"$work/out" 2>&1
check "the .ivecs row 1 is found at id 1001" bash -c "awk '{print \$2}' '$work/out' | grep -qx 1001"
"$infera" vectors load bin "$work/bad.fvecs" --batch 16 --first-id 5000 >"$work/out" 2>&1
rc=$?
check "a record of the wrong dimension fails the load" test $rc -eq 1
check "it names the record and its byte offset" grep -q "bad.fvecs: record 21 (byte 720): dimension 7, the collection's is 8" "$work/out"
check "its batch (records 17-20 with it) is refused; the first 16 were written" bash -c \
  "grep -q 'records 17 onwards) was refused' '$work/out' && grep -q '16 points of earlier batches were written' '$work/out' && test '$(count bin)' = 406"

# --- JSON lines with payloads, filters ---------------------------------------------------------
{
  for i in $(seq 1 200); do
    city=Berlin; (( i % 4 == 0 )) && city=Paris
    printf '{"id":%d,"vector":[%d,1,0,0],"payload":{"city":"%s","n":%d}}\n' "$i" "$i" "$city" "$i"
  done
  printf '{"id":"550e8400-e29b-41d4-a716-446655440000","vector":[0.5,1,0,0],"payload":{"city":"Rome"}}\n'
} >"$work/a.jsonl"
"$infera" vectors create docs --dim 4 --distance Euclid >/dev/null 2>&1
"$infera" vectors load docs "$work/a.jsonl" --batch 50 >"$work/out" 2>&1
check "JSON lines load 201 points (a UUID id among them)" bash -c "grep -q 'loaded 201 points' '$work/out' && test '$(count docs)' = 201"
"$infera" vectors search docs --vector 9,1,0,0 --limit 3 --filter '{"must":[{"key":"city","match":{"value":"Paris"}}]}' --with-payload >"$work/out" 2>&1
check "a filtered search returns only Paris, nearest first (8, 12, 4)" bash -c \
  "awk '{print \$2}' '$work/out' | tr '\n' ' ' | grep -q '^8 12 4 \$' && ! grep -q Berlin '$work/out'"
"$infera" vectors search docs --vector 0.5,1,0,0 --limit 1 --with-payload >"$work/out" 2>&1
check "the UUID point comes back with its payload" grep -q '550e8400-e29b-41d4-a716-446655440000.*"city":"Rome"' "$work/out"
"$infera" vectors search docs --vector 1,2 >"$work/out" 2>&1
check "a query of the wrong dimension is the API's 400" bash -c "test $? -eq 1 && grep -q 'Vector dimension error: expected dim: 4, got 2' '$work/out'"
{
  for i in $(seq 301 310); do printf '{"id":%d,"vector":[%d,0,0,0]}\n' "$i" "$i"; done
  printf '{"id":311,"vector":[1,0,0,0]}\n{"id":312,"vector":[1,0,0,"x"]}\n{"id":313,"vector":[1,0,0,0]}\n'
} >"$work/bad.jsonl"
"$infera" vectors load docs "$work/bad.jsonl" --batch 8 >"$work/out" 2>&1
check "a bad JSON line fails the load, naming line and column" bash -c \
  "test $? -eq 1 && grep -q 'bad.jsonl:12:[0-9]*: \"vector\"\[3\] is \"x\", not a number' '$work/out'"
check "its batch (lines 9-12) is refused, the first 8 points are written" test "$(count docs)" = 209
printf '{"id":1,"vector":[1,0,0,0]}\n{"id":2,"vector":[1,0,0,0],}\n' >"$work/broken.jsonl"
"$infera" vectors load docs "$work/broken.jsonl" --dry-run >"$work/out" 2>&1
check "--dry-run finds malformed JSON at line 2 and sends nothing" bash -c \
  "test $? -eq 1 && grep -q 'broken.jsonl:2:[0-9]*: not JSON' '$work/out' && grep -q 'dry run' '$work/out' && test '$(count docs)' = 209"
printf '1 2 3 4\n5 6 x 8\n' >"$work/bad.tsv"
"$infera" vectors load docs "$work/bad.tsv" --first-id 900 >"$work/out" 2>&1
check "a bad TSV cell names line 2, column 5 (field 3)" bash -c "test $? -eq 1 && grep -q 'bad.tsv:2:5: column 3: .x. is not a number' '$work/out'"
check "and that batch wrote nothing" test "$(count docs)" = 209

# --- list, delete, errors ----------------------------------------------------------------------
"$infera" vectors list >"$work/out" 2>&1
check "list shows every collection with its size" bash -c \
  "grep -Eq '^sift +5000 +128 Euclid' '$work/out' && grep -Eq '^bin +406 +8' '$work/out' && grep -Eq '^docs +209 +4' '$work/out'"
"$infera" vectors delete bin >"$work/out" 2>&1
check "delete answers" grep -q "deleted collection bin" "$work/out"
"$infera" vectors delete bin >"$work/out" 2>&1
check "deleting it again fails" test $? -eq 1
"$infera" vectors stats nope >"$work/out" 2>&1
check "an unknown collection is the API's 404 text" bash -c "test $? -eq 1 && grep -q 'Collection .nope. doesn.t exist' '$work/out'"
"$infera" vectors list --url http://127.0.0.1:1 --retries 1 >"$work/out" 2>&1
check "an unreachable server is a clear error" bash -c "test $? -eq 1 && grep -q 'cannot reach' '$work/out'"
finish
