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
# Defaults: 30 rounds of 2 s per target. On a shared box whose speed drifts from second to second,
# many short interleaved rounds (each ratio taken within one round) give steadier medians than a
# few long ones.
#
#   bench/load/governance.sh [--connections N] [--duration S] [--rounds N] [--proxy-workers N] [--keys N]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=64 DURATION=2 ROUNDS=30 PROXY_WORKERS=1 KEYS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --proxy-workers) PROXY_WORKERS="$2"; shift 2 ;;
    --keys) KEYS="$2"; shift 2 ;;
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
start_emulator emulator "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers 1
start_gateway off "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT"
OFF_PORT="$GW_PORT" OFF_PID="$GW_PID"
start_gateway gov "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT" \
  "governance: {store: \"sqlite:$BENCH_TMP/gov.db\", key_secret: bench-secret-0123456789abcdef0123456789}"
GOV_PORT="$GW_PORT" GOV_ADMIN="$GW_ADMIN" GOV_PID="$GW_PID"
start_gateway redis "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT" \
  "governance: {store: \"sqlite:$BENCH_TMP/redis.db\", key_secret: bench-secret-0123456789abcdef0123456789, redis: \"redis://127.0.0.1:$REDIS_PORT\"}"
REDIS_GW_PORT="$GW_PORT" REDIS_ADMIN="$GW_ADMIN" REDIS_GW_PID="$GW_PID"

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
GOV_KEYS="$(make_keys "$GOV_ADMIN")"
REDIS_KEYS="$(make_keys "$REDIS_ADMIN")"
GOV_KEY="$(head -1 <<<"$GOV_KEYS")"
REDIS_KEY="$(head -1 <<<"$REDIS_KEYS")"

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
lua "$BENCH_TMP/off.lua" "unused"
lua "$BENCH_TMP/gov.lua" "$GOV_KEYS"
lua "$BENCH_TMP/redis.lua" "$REDIS_KEYS"
for p in "$OFF_PORT:off" "$GOV_PORT:gov" "$REDIS_GW_PORT:redis"; do
  port="${p%%:*}" name="${p##*:}" key=""
  [[ "$name" == gov ]] && key="$GOV_KEY"
  [[ "$name" == redis ]] && key="$REDIS_KEY"
  code="$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $key" -H 'content-type: application/json' \
    -d '{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' "http://127.0.0.1:$port/v1/chat/completions")"
  [[ "$code" == 200 ]] || { echo "$name gateway answered $code" >&2; exit 1; }
done

echo "governance cost: wrk -t1 -c$CONNS -d${DURATION}s POST /v1/chat/completions (16 tokens), $ROUNDS rounds, $KEYS key(s);" \
  "proxy workers $PROXY_WORKERS, $(bench_env_note)"
for t in off gov redis; do
  case "$t" in off) p="$OFF_PORT" ;; gov) p="$GOV_PORT" ;; redis) p="$REDIS_GW_PORT" ;; esac
  run_wrk "$t" "$p" 2 "$BENCH_TMP/$t.lua" >/dev/null
done
declare -A RESULTS=([off]="" [gov]="" [redis]="")
declare -A CPU_TICKS=([off]=0 [gov]=0 [redis]=0) REQS=([off]=0 [gov]=0 [redis]=0)
REDIS_TICKS=0
for ((r = 1; r <= ROUNDS; r++)); do
  order=(off gov redis)
  for ((k = 0; k < (r - 1) % 3; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  for t in "${order[@]}"; do
    case "$t" in off) p="$OFF_PORT" pid="$OFF_PID" ;; gov) p="$GOV_PORT" pid="$GOV_PID" ;;
      redis) p="$REDIS_GW_PORT" pid="$REDIS_GW_PID" ;; esac
    t0="$(ticks "$pid")" r0="$(ticks "$REDIS_PID")"
    rps="$(run_wrk "$t" "$p" "$DURATION" "$BENCH_TMP/$t.lua")"
    CPU_TICKS[$t]=$((CPU_TICKS[$t] + $(ticks "$pid") - t0))
    [[ "$t" == redis ]] && REDIS_TICKS=$((REDIS_TICKS + $(ticks "$REDIS_PID") - r0))
    REQS[$t]="$(awk -v a="${REQS[$t]}" -v b="$rps" -v d="$DURATION" 'BEGIN {printf "%.0f", a + b * d}')"
    RESULTS[$t]+="$rps "
    printf '  round %d  %-6s %10.0f req/s\n' "$r" "$t" "$rps"
  done
done
O="$(med off)" G="$(med gov)" R="$(med redis)" RG="$(ratio gov)" RR="$(ratio redis)"
rows="$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM infera_usage").fetchone()[0])' "$BENCH_TMP/gov.db" 2>/dev/null || echo '?')"
echo
echo "== governance summary (median of $ROUNDS rounds) =="
printf '  off                  %10.0f req/s\n' "$O"
printf '  keys+limits+usage    %10.0f req/s   ratio %.3f (target >= 0.9)\n' "$G" "$RG"
printf '  ... with Redis       %10.0f req/s   ratio %.3f (target >= 0.8)\n' "$R" "$RR"
# The per-round ratios show how much of the spread is the box (each round measures all three).
echo "  per-round ratios: keys+limits+usage $(rounds gov)| with Redis $(rounds redis)"
echo "  usage records written by the SQLite run: $rows"
echo "  gateway CPU per request: off $(us_per "${CPU_TICKS[off]}" "${REQS[off]}") us," \
  "keys+limits+usage $(us_per "${CPU_TICKS[gov]}" "${REQS[gov]}") us," \
  "with Redis $(us_per "${CPU_TICKS[redis]}" "${REQS[redis]}") us (+ redis-server $(us_per "$REDIS_TICKS" "${REQS[redis]}") us)"
awk -v a="$RG" -v b="$RR" 'BEGIN {exit !(a >= 0.9 && b >= 0.8)}' && echo "  targets met" || echo "  target NOT met"
