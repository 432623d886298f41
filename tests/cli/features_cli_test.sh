#!/usr/bin/env bash
# The feature store from the command line, as a user drives it: `infera serve` with the example
# repository (examples/features) on RocksDB; `infera features plan|apply|registry|ingest` against
# its admin API; reads through Feast's /get-online-features; a bad CSV is refused naming its row
# and column and writes nothing; a breaking change is refused. Then durability: pushes stream in,
# the server is killed with SIGKILL mid-stream and started again on the same data directory, and
# every push that was acknowledged (200) is there.
# Usage: features_cli_test.sh INFERA_BINARY SOURCE_DIR
set -uo pipefail
infera="$1"
src="$2"
work=$(mktemp -d)
pid=""
loader=""
cleanup() {
  [[ -n "$loader" ]] && kill "$loader" 2>/dev/null
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cp -r "$src/examples/features" "$work/repo"
cat >"$work/serve.yaml" <<YAML
listen: {port: 0}
admin: {port: 0}
workers: 2
features:
  store: rocksdb
  data_dir: $work/data
  repository: $work/repo
YAML
out=$("$infera" config validate "$work/serve.yaml")
check "config validate checks the repository" grep -q "features.repository $work/repo: ok (1 entities, 2 views, 1 feature services)" <<<"$out"
start() { start_serve "$infera" "$work/serve.yaml" "$work/serve.out"; }
start
check "serve starts with the example repository" test -n "$port"
export INFERA_ADMIN_URL="http://127.0.0.1:$admin"
get() { curl -s "http://127.0.0.1:$port/get-online-features" -d "$1"; }

out=$("$infera" features plan "$work/repo")
check "plan of the applied repository: no changes" test "$out" = "no changes"
out=$("$infera" features registry)
check "registry lists the views" grep -q "view driver_trips \[driver_id\] ttl 604800s source trips_push (aggregations)" <<<"$out"

out=$("$infera" features ingest driver_hourly_stats "$src/examples/features/driver_stats.csv" 2>/dev/null)
check "ingest writes the CSV" grep -q "10 rows written to driver_hourly_stats" <<<"$out"
out=$(get '{"features":["driver_hourly_stats:avg_daily_trips"],"entities":{"driver_id":[1001,1010]}}')
check "ingested rows are served" grep -q '"values":\[667,' <<<"$out"

printf 'driver_id,event_timestamp,conv_rate,acc_rate,avg_daily_trips\n2001,2026-01-01T00:00:00,0.5,0.5,3\n2002,2026-01-01T00:00:00,zero,0.5,3\n' >"$work/bad.csv"
err=$("$infera" features ingest driver_hourly_stats "$work/bad.csv" 2>&1 >/dev/null)
rc=$?
check "a bad CSV fails" test "$rc" -eq 1
check "the error names the row and the column" grep -q 'row 2, column conv_rate: expected a number, got the string "zero"' <<<"$err"
out=$(get '{"features":["driver_hourly_stats:conv_rate"],"entities":{"driver_id":[2001]}}')
check "and nothing of it was written" grep -q '"statuses":\["NOT_FOUND"\]' <<<"$out"

printf 'driver_id,event_timestamp,avg_daily_trips,conv_rate,acc_rate\n3001,1767225600,5,0.25,"1.5"\n' >"$work/more.csv"
printf '{"driver_id":3002,"event_timestamp":"2026-01-01 00:00:00+00:00","conv_rate":0.5,"acc_rate":1,"avg_daily_trips":6}\n' >"$work/more.jsonl"
"$infera" features ingest driver_hourly_stats "$work/more.csv" >/dev/null 2>&1 &&
  "$infera" features ingest driver_hourly_stats "$work/more.jsonl" >/dev/null 2>&1
out=$(get '{"features":["driver_hourly_stats:avg_daily_trips"],"entities":{"driver_id":[3001,3002]}}')
check "CSV columns in any order, epoch seconds, and JSON lines" grep -q '"values":\[5,6\]' <<<"$out"

cat >"$work/repo/extra.yaml" <<'YAML'
feature_views:
  - name: driver_extra
    entities: [driver]
    schema: [{name: score, dtype: int32}]
YAML
out=$("$infera" features plan "$work/repo")
check "plan shows a new view" grep -q "+ feature view driver_extra (1 feature)" <<<"$out"
out=$("$infera" features apply "$work/repo")
check "apply registers it" grep -q "applied" <<<"$out"
check "the registry has it" grep -q "view driver_extra" <<<"$("$infera" features registry)"
sed -i 's/{name: conv_rate, dtype: Float32}/{name: conv_rate, dtype: String}/' "$work/repo/repo.yaml"
out=$("$infera" features plan "$work/repo")
rc=$?
check "plan flags a breaking change" grep -q "BREAKING: feature view driver_hourly_stats: feature conv_rate changes type" <<<"$out"
check "and exits 1" test "$rc" -eq 1
err=$("$infera" features apply "$work/repo" 2>&1)
check "apply refuses it" grep -q "error 409: refused: the change breaks served features" <<<"$err"
sed -i 's/{name: conv_rate, dtype: String}/{name: conv_rate, dtype: Float32}/' "$work/repo/repo.yaml"
sed -i 's/entities: \[driver\]/entities: [drivr]/' "$work/repo/extra.yaml"
err=$("$infera" features apply "$work/repo" 2>&1)
check "an unknown entity is named with its file and line" grep -q "extra.yaml:feature_views\[0\].entities (line 3): unknown entity 'drivr'" <<<"$err"
err=$("$infera" config validate "$work/serve.yaml" 2>&1)
rc=$?
check "config validate refuses a bad repository" test "$rc" -eq 1
check "naming the error" grep -q "unknown entity 'drivr'" <<<"$err"
rm "$work/repo/extra.yaml"

# The documented stream example: JSON lines in, pushes out, the driver's windows move.
now=$(date -u +%FT%T)
for r in r1 r2 r1; do
  printf '{"driver_id":4001,"event_timestamp":"%s","fare":10,"rider_id":"%s","city":"Nice"}\n' "$now" "$r"
done | BATCH=2 "$src/examples/features/push_stream.sh" trips_push "http://127.0.0.1:$port" 2>/dev/null
out=$(get '{"features":["driver_trips:trips_10m","driver_trips:fare_sum_1h","driver_trips:riders_7d"],"entities":{"driver_id":[4001]}}')
check "push_stream.sh feeds the aggregations" grep -q '"values":\[3\].*"values":\[30.0\].*"values":\[2\]' <<<"$out"

# Durability: batches of 20 drivers pushed one after another; each acknowledged batch's number.
(
  b=0
  while :; do
    ids=$(seq -s, $((100000 + b * 20)) $((100000 + b * 20 + 19)))
    n=$(tr -cd , <<<"$ids" | wc -c)
    ts=$(printf '"2026-01-01T00:00:00",%.0s' $(seq 0 "$n"))
    body="{\"push_source_name\":\"driver_stats_push_source\",\"df\":{\"driver_id\":[$ids],\"event_timestamp\":[${ts%,}],\"conv_rate\":0.5,\"acc_rate\":0.5,\"avg_daily_trips\":$b}}"
    code=$(curl -s -o /dev/null -w '%{http_code}' -d "$body" "http://127.0.0.1:$port/push")
    [[ "$code" == 200 ]] && echo "$b" >>"$work/acks"
    b=$((b + 1))
  done
) &
loader=$!
for _ in $(seq 1 1000); do
  [[ -s "$work/acks" && $(wc -l <"$work/acks") -ge 40 ]] && break
  sleep 0.02
done
kill -9 "$pid"
wait "$pid" 2>/dev/null
kill "$loader" 2>/dev/null
wait "$loader" 2>/dev/null
loader=""
acked=$(wc -l <"$work/acks")
check "pushes were acknowledged before the kill ($acked batches)" test "$acked" -ge 40
start
check "serve starts again on the same data" test -n "$port"
ids=$(while read -r b; do seq -s, $((100000 + b * 20)) $((100000 + b * 20 + 19)); done <"$work/acks" | paste -sd,)
out=$(get "{\"features\":[\"driver_hourly_stats:avg_daily_trips\"],\"entities\":{\"driver_id\":[$ids]}}")
present=$(grep -o '"PRESENT"' <<<"$out" | wc -l)
missing=$(grep -o '"NOT_FOUND"' <<<"$out" | wc -l)
check "every acknowledged push survived the kill ($missing of $((acked * 20)) missing)" \
  test "$missing" -eq 0 -a "$present" -eq $((acked * 20 * 2))
finish
