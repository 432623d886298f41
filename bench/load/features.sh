#!/usr/bin/env bash
# Feature reads over HTTP on loopback (Feast's POST /get-online-features), on RocksDB, on one Redis
# and on a Redis Cluster of 3 masters (one config line apart), against floors measured in the same
# run:
#   - latency: wrk with one connection (a closed loop, no queueing) for 1 entity x 50 features from
#     1, 5 and 10 views and 100 entities x 20 features; GET /health is the HTTP stack's floor;
#   - Redis throughput: single-entity reads (one key) with 8 connections, against redis-benchmark
#     GET of a value of the row's size with 8 connections, unpipelined and with 16 in a pipeline
#     (on the cluster: redis-benchmark --cluster, the same).
# Each figure is the median of ROUNDS (default 3) runs of SECONDS. BENCH_PRIO=rt|nice and BENCH_PIN=1
# (wrk and redis-server on CPU 0, infera on CPU 1) as in bench/load/lib.sh.
# Usage: bench/load/features.sh [SECONDS]   (default 3 per run; build/release first)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SECS="${1:-3}"
ROUNDS="${ROUNDS:-3}"
bench_init wrk curl python3 redis-server redis-benchmark
repo="$BENCH_TMP/repo"
mkdir -p "$repo"

python3 - "$repo" "$BENCH_TMP" <<'PY'
import json, sys
repo, tmp = sys.argv[1], sys.argv[2]
views = {f"v{i}": [f"f{j}" for j in range(10)] for i in range(10)}
views["wide"] = [f"w{j}" for j in range(50)]
lines = ["entities: [{name: driver, join_keys: [driver_id], value_type: int64}]", "feature_views:"]
for v, feats in views.items():
    lines.append(f"  - name: {v}\n    entities: [driver]\n    schema:")
    lines += [f"      - {{name: {f}, dtype: double}}" for f in feats]
open(f"{repo}/repo.yaml", "w").write("\n".join(lines) + "\n")
ids = list(range(1, 1001))
for v, feats in views.items():
    df = {"driver_id": ids, "event_timestamp": ["2026-01-01T00:00:00"] * len(ids)}
    for k, f in enumerate(feats):
        df[f] = [round(i * 0.37 + k / 7, 6) for i in ids]
    json.dump({"feature_view_name": v, "df": df}, open(f"{tmp}/load-{v}.json", "w"))
def q(refs, n):
    return {"features": refs, "full_feature_names": True,
            "entities": {"driver_id": list(range(1, n + 1)) if n > 1 else [417]}}
queries = {
    "1x50_1view": q([f"wide:w{j}" for j in range(50)], 1),
    "1x50_5views": q([f"v{i}:f{j}" for i in range(5) for j in range(10)], 1),
    "1x50_10views": q([f"v{i}:f{j}" for i in range(10) for j in range(5)], 1),
    "100x20": q([f"v{i}:f{j}" for i in range(2) for j in range(10)], 100),
    "1x10_1view": q([f"v0:f{j}" for j in range(10)], 1),
}
for name, body in queries.items():
    s = json.dumps(body)
    open(f"{tmp}/q-{name}.json", "w").write(s)
    open(f"{tmp}/q-{name}.lua", "w").write(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [[' + s + ']]\n')
open(f"{tmp}/health.lua", "w").write('wrk.method = "GET"\n')
PY

# latency_us LINE: wrk's "99%   1.23ms" -> microseconds.
to_us() { awk '{v=$2; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); m=(u=="us")?1:(u=="ms")?1000:(u=="s")?1e6:1; printf "%.0f", v*m}'; }

# wrk_once NAME PATH LUA CONNS: prints "req/s p50_us p99_us" of one run.
wrk_once() {
  local out="$BENCH_TMP/wrk-$1.txt"
  pin_prefix "${LOAD_CPUS:-0}"
  "${PIN[@]}" timeout $((SECS + 30)) wrk -t 1 -c "$4" -d "${SECS}s" --latency -s "$3" "http://127.0.0.1:$PORT$2" >"$out" 2>&1
  if grep -q 'Non-2xx\|Socket errors' "$out"; then
    echo "wrk $1 reported errors:" >&2
    cat "$out" >&2
    return 1
  fi
  echo "$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out") $(grep -E '^ +50%' "$out" | to_us) $(grep -E '^ +99%' "$out" | to_us)"
}

# wrk_run NAME PATH LUA CONNS: the median of ROUNDS runs of each of req/s, p50, p99.
wrk_run() {
  local runs=() i
  for ((i = 0; i < ROUNDS; i++)); do runs+=("$(wrk_once "$@")") || return 1; done
  echo "$(printf '%s\n' "${runs[@]}" | awk '{print $1}' | median)" \
    "$(printf '%s\n' "${runs[@]}" | awk '{print $2}' | median)" \
    "$(printf '%s\n' "${runs[@]}" | awk '{print $3}' | median)"
}

start_infera() {  # start_infera STORE_LINE: sets PORT, ADMIN
  local cfg="$BENCH_TMP/serve-$2.yaml" log="$BENCH_TMP/serve-$2.log"
  cat >"$cfg" <<EOF
workers: 1
log_level: warn
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
features:
  store: $1
  data_dir: $BENCH_TMP/data-$2
  repository: $repo
  pool_threads: 1
EOF
  pin_prefix "${SERVER_CPUS:-1}"
  "${PIN[@]}" "$INFERA" serve -c "$cfg" >"$log" 2>&1 &
  BENCH_PIDS+=("$!")
  local line
  line="$(wait_for_line "$log" 'data http://127\.0\.0\.1:[0-9]+ +admin http://127\.0\.0\.1:[0-9]+')"
  PORT="$(sed -E 's/data http:\/\/127\.0\.0\.1:([0-9]+).*/\1/' <<<"$line")"
  ADMIN="$(sed -E 's/.*admin http:\/\/127\.0\.0\.1:([0-9]+)/\1/' <<<"$line")"
  for f in "$BENCH_TMP"/load-*.json; do
    curl -sf -o /dev/null -d @"$f" "http://127.0.0.1:$PORT/write-to-online-store" || { echo "load failed: $f" >&2; exit 1; }
  done
}

REDIS_PORT="$(free_port)"
pin_prefix "${LOAD_CPUS:-0}"
"${PIN[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$BENCH_TMP/redis.log" 2>&1 &
BENCH_PIDS+=("$!")
wait_for_line "$BENCH_TMP/redis.log" "Ready to accept connections" >/dev/null

# A Redis Cluster of 3 masters (no replicas: this measures the read path, not failover).
start_redis_cluster 3

echo "feature reads, medians of $ROUNDS runs of $SECS s, $(nproc) cores, $(bench_env_note)"
printf "%-8s %-14s %10s %9s %9s %12s\n" store query "req/s" "p50 us" "p99 us" "resp bytes"
for store in rocksdb redis cluster; do
  line="rocksdb"
  [[ "$store" == redis ]] && line="redis://127.0.0.1:$REDIS_PORT/0"
  [[ "$store" == cluster ]] && line="$CLUSTER_URL"
  start_infera "$line" "$store"
  read -r rps p50 p99 < <(wrk_run "$store-health" /health "$BENCH_TMP/health.lua" 1)
  printf "%-8s %-14s %10s %9s %9s %12s\n" "$store" "GET /health" "$rps" "$p50" "$p99" 0
  for q in 1x50_1view 1x50_5views 1x50_10views 100x20; do
    bytes=$(curl -s -d @"$BENCH_TMP/q-$q.json" "http://127.0.0.1:$PORT/get-online-features" | wc -c)
    read -r rps p50 p99 < <(wrk_run "$store-$q" /get-online-features "$BENCH_TMP/q-$q.lua" 1)
    printf "%-8s %-14s %10s %9s %9s %12s\n" "$store" "$q" "$rps" "$p50" "$p99" "$bytes"
  done
  if [[ "$store" != rocksdb ]]; then
    read -r rps _ _ < <(wrk_run "$store-tput" /get-online-features "$BENCH_TMP/q-1x10_1view.lua" 8)
    row_bytes=$(redis-cli -p "$REDIS_PORT" --raw STRLEN "$(redis-cli -p "$REDIS_PORT" --scan --pattern 'infera:f:1:*' | head -1)")
    if [[ "$store" == redis ]]; then
      rb() { redis-benchmark -p "$REDIS_PORT" -c 8 -d "$row_bytes" -t get -q "$@" | tr '\r' '\n' | awk '/requests per second/ {printf "%.0f", $2}'; }
    else
      rb() { redis-benchmark --cluster -p "${CLUSTER_PORTS[0]}" -c 8 -d "$row_bytes" -t get -q "$@" | tr '\r' '\n' | awk '/requests per second/ {printf "%.0f", $2}'; }
    fi
    floor=$(rb -n 400000)
    floor_p=$(rb -n 2000000 -P 16)
    echo "$store single-entity reads (8 connections, 1 key of $row_bytes bytes a request): infera $rps req/s;" \
      "redis-benchmark GET $floor/s unpipelined ($(awk -v a="$rps" -v b="$floor" 'BEGIN {printf "%.2f", a/b}')x)," \
      "$floor_p/s pipelined x16 ($(awk -v a="$rps" -v b="$floor_p" 'BEGIN {printf "%.2f", a/b}')x)"
  fi
  kill "${BENCH_PIDS[-1]}" 2>/dev/null
  wait "${BENCH_PIDS[-1]}" 2>/dev/null || true
done
