#!/usr/bin/env bash
# A/B of two infera builds in one run: wrk throughput of small chat completions through build A
# and build B, side by side on the same emulator, with governance off, with keys + limits + usage
# (SQLite, in-process counters) and with the limits in Redis. Each round measures A and B of a
# variant back to back (AB, then BA the next round), so each per-round ratio B/A is taken within
# seconds on the same box; prints per variant the median of those ratios for req/s and for the
# gateway's CPU per request (steadier on a shared box; A/B below 1 = B cheaper). 1.0 = no
# difference; the same binary as A and B shows the noise.
#
#   bench/load/ab.sh --a OLD_INFERA --b NEW_INFERA [--rounds N] [--duration S] [--connections N]
#                    [--variants off,gov,redis]
#
# Defaults: 20 rounds of 2 s per target, 64 connections, one proxy worker each, variants
# off,gov,redis. BENCH_PIN=1 pins: wrk and emulator on CPU 0, both gateways (and Redis) on CPU 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

A="" B="" CONNS=64 DURATION=2 ROUNDS=20 VARIANTS="off,gov,redis"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --a) A="$2"; shift 2 ;;
    --b) B="$2"; shift 2 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --variants) VARIANTS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$A" && -x "$B" ]] || { echo "need --a and --b: two infera binaries" >&2; exit 2; }
IFS=',' read -r -a VARS <<<"$VARIANTS"
INFERA="$B"
bench_start wrk curl python3 redis-server

LOAD_CPUS=0 PROXY_CPUS=1 BACKEND_CPUS=0
export INFERA_ADMIN_TOKEN="bench-admin-token"
REDIS_PORT="$(free_port)"
mkdir -p "$BENCH_TMP/redis"
pin_prefix "$PROXY_CPUS"
"${PIN[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$BENCH_TMP/redis" --save "" --appendonly no \
  >"$BENCH_TMP/redis.log" 2>&1 &
BENCH_PIDS+=("$!")
for _ in $(seq 1 200); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
start_emulator emulator "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers 1

SECRET="key_secret: bench-secret-0123456789abcdef0123456789"
governance_yaml() {  # governance_yaml VARIANT NAME
  case "$1" in
    off) echo "" ;;
    gov) echo "governance: {store: \"sqlite:$BENCH_TMP/$2.db\", $SECRET}" ;;
    redis) echo "governance: {store: \"sqlite:$BENCH_TMP/$2.db\", $SECRET, redis: \"redis://127.0.0.1:$REDIS_PORT\"}" ;;
  esac
}
# A team and a key with limits no run reaches; prints the key.
make_key() {
  local auth="authorization: Bearer $INFERA_ADMIN_TOKEN"
  curl -sf -H "$auth" -d '{"name":"bench","rpm":1000000000,"tpm":1000000000000}' \
    "http://127.0.0.1:$1/admin/teams" >/dev/null
  curl -sf -H "$auth" -d '{"team":"bench","rpm":1000000000,"tpm":1000000000000}' \
    "http://127.0.0.1:$1/admin/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'
}
declare -A PORT PID LUA RESULTS
TARGETS=()
for v in "${VARS[@]}"; do
  for side in a b; do
    name="$v-$side"
    INFERA="$A"; [[ "$side" == b ]] && INFERA="$B"
    start_gateway "$name" "$PROXY_CPUS" 1 "$EMU_PORT" "$(governance_yaml "$v" "$name")"
    PORT[$name]="$GW_PORT"
    PID[$name]="$GW_PID"
    key="unused"
    [[ "$v" != off ]] && key="$(make_key "$GW_ADMIN")"
    LUA[$name]="$BENCH_TMP/$name.lua"
    cat >"${LUA[$name]}" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
EOF
    RESULTS[$name]=""
    TARGETS+=("$name")
  done
done
for t in "${TARGETS[@]}"; do run_wrk "$t" "${PORT[$t]}" 2 "${LUA[$t]}" >/dev/null; done  # warm-up

declare -A CPU  # per-round CPU ticks per request (x 1e6) of each target, space-separated
echo "A/B: A=$A B=$B; wrk -t1 -c$CONNS -d${DURATION}s, $ROUNDS rounds, variants ${VARS[*]}; $(bench_env_note)"
for ((r = 1; r <= ROUNDS; r++)); do
  line="  round $r:"
  for v in "${VARS[@]}"; do
    sides=(a b)
    ((r % 2 == 0)) && sides=(b a)
    for side in "${sides[@]}"; do
      t="$v-$side"
      pid="${PID[$t]}"
      t0="$(ticks "$pid")"
      rps="$(run_wrk "$t" "${PORT[$t]}" "$DURATION" "${LUA[$t]}")"
      dt=$(($(ticks "$pid") - t0))
      RESULTS[$t]+="$rps "
      CPU[$t]+="$(awk -v d="$dt" -v n="$rps" -v s="$DURATION" 'BEGIN {printf "%.4f", (n > 0) ? d / (n * s) * 1e6 : 0}') "
      line+="$(printf ' %s %.0f' "$t" "$rps")"
    done
  done
  echo "$line"
done
echo
echo "== B/A per variant (medians of per-round ratios) =="
ratio_of() {  # ratio_of LIST_B LIST_A: the per-round ratios, one per line
  paste -d' ' <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) | awk '{print ($2 > 0) ? $1 / $2 : 0}'
}
for v in "${VARS[@]}"; do
  rr="$(ratio_of "${RESULTS[$v-b]}" "${RESULTS[$v-a]}")"
  cr="$(ratio_of "${CPU[$v-b]}" "${CPU[$v-a]}")"
  ma="$(tr ' ' '\n' <<<"${RESULTS[$v-a]}" | grep . | median)"
  mb="$(tr ' ' '\n' <<<"${RESULTS[$v-b]}" | grep . | median)"
  ca="$(tr ' ' '\n' <<<"${CPU[$v-a]}" | grep . | median)"
  cb="$(tr ' ' '\n' <<<"${CPU[$v-b]}" | grep . | median)"
  printf '  %-6s req/s A %7.0f B %7.0f  B/A %.3f | CPU/request A %.1f us B %.1f us  B/A %.3f\n' "$v" "$ma" "$mb" \
    "$(median <<<"$rr")" "$(awk -v t="$ca" -v hz="$HZ" 'BEGIN {print t / hz}')" \
    "$(awk -v t="$cb" -v hz="$HZ" 'BEGIN {print t / hz}')" "$(median <<<"$cr")"
  echo "         per-round req/s ratios: $(awk '{printf "%.2f ", $1}' <<<"$rr")"
done
