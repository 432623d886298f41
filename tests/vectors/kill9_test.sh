#!/usr/bin/env bash
# kill -9 during a stream of upserts loses no acknowledged write: a client upserts batches with
# wait=true and records each batch the server acknowledged; the server is SIGKILLed mid-stream,
# restarted on the same data directory (snapshot + WAL replay), and every acknowledged point must
# be there with its payload. Usage: kill9_test.sh INFERA_BINARY WORK_DIR
set -euo pipefail
infera="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
source "$here/../node/lib.sh"
cat > "$work/v.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
vectors:
  data_dir: $work/data
  snapshot_min_points: 300   # snapshots happen mid-stream too: the restart reads one plus a WAL tail
  max_batch_points: 50
YAML
start_serve "$infera" "$work/v.yaml" "$work/serve1.out"
base="http://127.0.0.1:$PORT"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$base/collections/k9" -d '{"vectors":{"size":8,"distance":"Euclid"}}')
[[ "$code" == 200 ]] || { echo "create: $code"; exit 1; }

# Bad input gets a clear 400/404 and changes nothing.
expect() {  # expect CODE SUBSTRING METHOD PATH BODY
  local out
  out=$(curl -s -w '\n%{http_code}' -X "$3" "$base$4" -d "$5")
  [[ "${out##*$'\n'}" == "$1" && "$out" == *"$2"* ]] || { echo "$3 $4 $5 -> $out (wanted $1, $2)"; exit 1; }
}
expect 400 'Vector dimension error: expected dim: 8, got 2' PUT '/collections/k9/points?wait=true' '{"points":[{"id":1,"vector":[1,2]}]}'
expect 400 'is not a finite number' PUT '/collections/k9/points?wait=true' '{"points":[{"id":1,"vector":[1e39,0,0,0,0,0,0,0]}]}'
expect 400 'Format error in JSON body' PUT '/collections/k9/points?wait=true' '{"points":[{"id":1,"vector":[NaN,0,0,0,0,0,0,0]}]}'
big=$(for i in $(seq 1 51); do printf '{"id":%d,"vector":[0,0,0,0,0,0,0,0]},' "$i"; done)
expect 400 'exceeds the limit of 50' PUT '/collections/k9/points?wait=true' "{\"points\":[${big%,}]}"
expect 400 'Format error in JSON body' POST '/collections/k9/points/query' '{"query":[0,0,0,0,0,0,0,0],"filter":{"must":[{"key":"b","match":{"value":[1]}}]}}'
expect 422 'At least one field condition' POST '/collections/k9/points/query' '{"query":[0,0,0,0,0,0,0,0],"filter":{"must":[{"key":"b"}]}}'
expect 404 'Collection `nope` doesn'"'"'t exist!' PUT '/collections/nope/points?wait=true' '{"points":[{"id":1,"vector":[1,2]}]}'
expect 400 'not a valid point ID' PUT '/collections/k9/points?wait=true' '{"points":[{"id":"5","vector":[0,0,0,0,0,0,0,0]}]}'
expect 200 '"count":0' POST '/collections/k9/points/count' '{}'

# The writer: batch b holds ids 10b..10b+9; its line goes to acked only after a 200.
(
  for b in $(seq 0 100000); do
    pts=""
    for j in $(seq 0 9); do
      id=$((b * 10 + j))
      pts+="{\"id\":$id,\"vector\":[$id,1,2,3,4,5,6,7],\"payload\":{\"b\":$b}},"
    done
    out=$(curl -s -w '\n%{http_code}' -X PUT "$base/collections/k9/points?wait=true" -d "{\"points\":[${pts%,}]}") || exit 0
    [[ "${out##*$'\n'}" == 200 ]] || exit 0
    echo "$b" >> "$work/acked"
  done
) &
writer=$!
for _ in $(seq 1 3000); do
  [[ -f "$work/acked" && $(wc -l < "$work/acked") -ge 60 ]] && break
  sleep 0.01
done
kill -9 "$SERVE_PID"
wait "$writer" 2>/dev/null || true
wait "$SERVE_PID" 2>/dev/null || true
acked=$(wc -l < "$work/acked")
[[ "$acked" -ge 60 ]] || { echo "only $acked batches acknowledged before the kill"; exit 1; }

start_serve "$infera" "$work/v.yaml" "$work/serve2.out"
base="http://127.0.0.1:$PORT"
count=$(curl -s -X POST "$base/collections/k9/points/count" -d '{}' | sed -n 's/.*"count":\([0-9]*\).*/\1/p')
want=$((acked * 10))
echo "acknowledged batches: $acked ($want points); after kill -9 and restart: $count points"
[[ "$count" -ge "$want" ]] || { echo "LOST acknowledged writes"; exit 1; }
# Every acknowledged point, by id, with its payload (a count alone lets an unacknowledged batch
# in flight make up for a lost acknowledged one).
ids=$(for b in $(cat "$work/acked"); do seq $((b * 10)) $((b * 10 + 9)); done | paste -sd,)
curl -s -X POST "$base/collections/k9/points" -d "{\"ids\":[$ids],\"with_payload\":true}" >"$work/retrieved.json"
node -e '
  const fs = require("fs");
  const acked = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(Number);
  const got = new Map(JSON.parse(fs.readFileSync(process.argv[2], "utf8")).result.map((p) => [p.id, p.payload]));
  const lost = [];
  for (const b of acked) for (let j = 0; j < 10; j++) {
    const id = b * 10 + j;
    if (!got.has(id) || got.get(id).b !== b) lost.push(id);
  }
  if (lost.length) { console.log(`LOST ${lost.length} acknowledged points, e.g. ${lost.slice(0, 10)}`); process.exit(1); }
  console.log(`all ${acked.length * 10} acknowledged points are back with their payloads`);
' "$work/acked" "$work/retrieved.json" || exit 1
last=$(tail -1 "$work/acked")
hit=$(curl -s -X POST "$base/collections/k9/points/query" -d "{\"query\":[$((last * 10 + 3)),1,2,3,4,5,6,7],\"limit\":1}")
[[ "$hit" == *"\"id\":$((last * 10 + 3)),"* ]] || { echo "search after restart: $hit"; exit 1; }
echo "1 passed, 0 failed"
