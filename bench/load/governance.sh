#!/usr/bin/env bash
# Cost of governance: wrk throughput of small chat completions through the same Infera build with
# governance off, with keys + limits + usage records on (SQLite, in-process counters), and with
# the limits' counters in Redis, in one run, interleaved and repeated. Limits are set high enough
# that nothing is refused, so every request pays authentication, the reservation, the
# reconciliation and a usage record. Prints req/s per round, medians and the ratios
# (targets: keys+limits+usage >= 0.9x off; with Redis >= 0.8x).
#
# --keys N spreads the requests over N keys of the team (each request picks one at random), so a
# Redis call carries admissions of several keys (several shapes) as in production.
#
# --cluster adds a Redis Cluster of 3 masters (pinned like Redis) and three targets: one Redis
# with a model limit as well (redis+model: still one call per admission), the cluster (the team's
# counters in one slot: one call), and the cluster with the model limit (the model's counters in
# another slot: two calls at once, to two masters). Ratios are to off, as for the others.
#
# Defaults: 30 rounds of 2 s per target. On a shared box whose speed drifts from second to second,
# many short interleaved rounds (each ratio taken within one round) give steadier medians than a
# few long ones.
#
#   bench/load/governance.sh [--connections N] [--duration S] [--rounds N] [--proxy-workers N] [--keys N] [--cluster]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=64 DURATION=2 ROUNDS=30 PROXY_WORKERS=1 KEYS=1 CLUSTER=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --proxy-workers) PROXY_WORKERS="$2"; shift 2 ;;
    --keys) KEYS="$2"; shift 2 ;;
    --cluster) CLUSTER=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_init wrk curl python3 redis-server

LOAD_CPUS=0 PROXY_CPUS=1 BACKEND_CPUS=0
REDIS_PORT="$(free_port)"
mkdir -p "$BENCH_TMP/redis"
# Redis shares the gateway's core when pinned (BENCH_PIN=1): all of governance's CPU, the
# gateway's and Redis's, then comes out of the gateway's budget, and the load generator's and
# backend's core is left alone (in production Redis runs on its own machine).
pin_prefix "$PROXY_CPUS"
"${PIN[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$BENCH_TMP/redis" --save "" --appendonly no \
  >"$BENCH_TMP/redis.log" 2>&1 &
REDIS_PID=$!
BENCH_PIDS+=("$REDIS_PID")
for _ in $(seq 1 200); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

export INFERA_ADMIN_TOKEN="bench-admin-token"
SECRET="key_secret: bench-secret-0123456789abcdef0123456789"
MODEL_LIMITS="limits: {rpm: 1000000000, tpm: 1000000000000}"
start_emulator emulator "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers 1
TARGETS=(off gov redis)
[[ "$CLUSTER" == 1 ]] && TARGETS+=(redis+model cluster cluster+model)
[[ "$CLUSTER" == 1 ]] && { LOAD_CPUS="$PROXY_CPUS" start_redis_cluster 3; }
declare -A PORT PID ADMIN TKEYS
for t in "${TARGETS[@]}"; do
  case "$t" in
    off) start_gateway off "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT" ;;
    gov) start_gateway gov "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT" \
      "governance: {store: \"sqlite:$BENCH_TMP/gov.db\", $SECRET}" ;;
    redis | redis+model) start_gateway "$t" "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT" \
      "governance: {store: \"sqlite:$BENCH_TMP/$t.db\", $SECRET, redis: \"redis://127.0.0.1:$REDIS_PORT\"}" \
      "$([[ "$t" == redis+model ]] && echo "$MODEL_LIMITS")" ;;
    cluster | cluster+model) start_gateway "$t" "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT" \
      "governance: {store: \"sqlite:$BENCH_TMP/$t.db\", $SECRET, redis: \"$CLUSTER_URL\"}" \
      "$([[ "$t" == cluster+model ]] && echo "$MODEL_LIMITS")" ;;
  esac
  PORT[$t]="$GW_PORT" PID[$t]="$GW_PID" ADMIN[$t]="$GW_ADMIN"
done

# make_keys ADMIN_PORT: a team and $KEYS keys with per-minute limits no run reaches; prints the
# keys, one per line.
make_keys() {
  local admin="$1" auth="authorization: Bearer $INFERA_ADMIN_TOKEN"
  curl -sf -H "$auth" -d '{"name":"bench","rpm":1000000000,"tpm":1000000000000}' \
    "http://127.0.0.1:$admin/admin/teams" >/dev/null
  for ((i = 0; i < KEYS; i++)); do
    curl -sf -H "$auth" -d '{"team":"bench","rpm":1000000000,"tpm":1000000000000}' \
      "http://127.0.0.1:$admin/admin/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'
  done
}

lua() {  # lua FILE KEYS (one per line): with several keys, each request uses one at random
  {
    echo 'wrk.method = "POST"'
    echo 'wrk.headers["Content-Type"] = "application/json"'
    echo "wrk.body = '{\"model\":\"m\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"Hello, how are you?\"}]}'"
    if [[ "$KEYS" -le 1 ]]; then
      echo "wrk.headers[\"Authorization\"] = \"Bearer $2\""
    else
      # Every target (off too) pays the same per-request Lua in wrk.
      echo 'local keys = {'
      while read -r k; do echo "  \"Bearer $k\","; done <<<"$2"
      echo '}'
      echo 'request = function()'
      echo '  wrk.headers["Authorization"] = keys[math.random(#keys)]'
      echo '  return wrk.format()'
      echo 'end'
    fi
  } >"$1"
}
for t in "${TARGETS[@]}"; do
  TKEYS[$t]="unused"
  [[ "$t" != off ]] && TKEYS[$t]="$(make_keys "${ADMIN[$t]}")"
  lua "$BENCH_TMP/$t.lua" "${TKEYS[$t]}"
  key="$(head -1 <<<"${TKEYS[$t]}")"
  code="$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $key" -H 'content-type: application/json' \
    -d '{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' "http://127.0.0.1:${PORT[$t]}/v1/chat/completions")"
  [[ "$code" == 200 ]] || { echo "$t gateway answered $code" >&2; exit 1; }
done

echo "governance cost: wrk -t1 -c$CONNS -d${DURATION}s POST /v1/chat/completions (16 tokens), $ROUNDS rounds, $KEYS key(s);" \
  "proxy workers $PROXY_WORKERS, $(bench_env_note)"
for t in "${TARGETS[@]}"; do run_wrk "$t" "${PORT[$t]}" 2 "$BENCH_TMP/$t.lua" >/dev/null; done
declare -A RESULTS CPU_TICKS REQS REDIS_TICKS
for t in "${TARGETS[@]}"; do RESULTS[$t]="" CPU_TICKS[$t]=0 REQS[$t]=0 REDIS_TICKS[$t]=0; done
# The Redis side of a target: redis-server, or every node of the cluster.
redis_pids() {
  case "$1" in
    redis | redis+model) echo "$REDIS_PID" ;;
    cluster | cluster+model) for p in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$p" info server | awk -F: '/^process_id/ {print $2}' | tr -d '\r'; done ;;
  esac
}
redis_ticks() { local n=0 p; for p in $(redis_pids "$1"); do n=$((n + $(ticks "$p"))); done; echo "$n"; }
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${TARGETS[@]}")
  for ((k = 0; k < (r - 1) % ${#TARGETS[@]}; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  for t in "${order[@]}"; do
    t0="$(ticks "${PID[$t]}")" r0="$(redis_ticks "$t")"
    rps="$(run_wrk "$t" "${PORT[$t]}" "$DURATION" "$BENCH_TMP/$t.lua")"
    CPU_TICKS[$t]=$((CPU_TICKS[$t] + $(ticks "${PID[$t]}") - t0))
    REDIS_TICKS[$t]=$((REDIS_TICKS[$t] + $(redis_ticks "$t") - r0))
    REQS[$t]="$(awk -v a="${REQS[$t]}" -v b="$rps" -v d="$DURATION" 'BEGIN {printf "%.0f", a + b * d}')"
    RESULTS[$t]+="$rps "
    printf '  round %d  %-14s %10.0f req/s\n' "$r" "$t" "$rps"
  done
done
rows="$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM infera_usage").fetchone()[0])' "$BENCH_TMP/gov.db" 2>/dev/null || echo '?')"
declare -A LABEL=([off]="off" [gov]="keys+limits+usage" [redis]="... with Redis" [redis+model]="... + a model limit"
  [cluster]="... on a cluster" [cluster+model]="cluster + model limit")
echo
echo "== governance summary (median of $ROUNDS rounds) =="
for t in "${TARGETS[@]}"; do
  line="$(printf '  %-22s %10.0f req/s' "${LABEL[$t]}" "$(med "$t")")"
  [[ "$t" != off ]] && line+="$(printf '   ratio %.3f' "$(ratio "$t")")"
  [[ "$t" == gov ]] && line+=" (target >= 0.9)"
  [[ "$t" == redis ]] && line+=" (target >= 0.8)"
  line+="   gateway CPU $(us_per "${CPU_TICKS[$t]}" "${REQS[$t]}") us/req"
  [[ "${REDIS_TICKS[$t]}" != 0 ]] && line+=" + redis $(us_per "${REDIS_TICKS[$t]}" "${REQS[$t]}") us"
  echo "$line"
done
# The per-round ratios show how much of the spread is the box (each round measures all of them).
for t in "${TARGETS[@]}"; do [[ "$t" != off ]] && echo "  per-round ratios ${LABEL[$t]}: $(rounds "$t")"; done
echo "  usage records written by the SQLite run: $rows"
RG="$(ratio gov)" RR="$(ratio redis)"
awk -v a="$RG" -v b="$RR" 'BEGIN {exit !(a >= 0.9 && b >= 0.8)}' && echo "  targets met" || echo "  target NOT met"
