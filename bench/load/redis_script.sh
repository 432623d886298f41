#!/usr/bin/env bash
# Cost inside Redis of the rate limiter's reserve script (src/gateway/limiter.cc): the script body
# run N times in one EVAL against a private redis-server, each time as a call of K admissions on
# the counters of one key and its team (4 minute counters) that all fit, the common case under
# load. Prints microseconds per call from Redis's own command statistics, so neither the client
# nor the network is in the figure. With --base REV, the script of that git revision is measured
# too, interleaved, and the ratio printed (same run, same box).
#
#   bench/load/redis_script.sh [--calls N] [--admissions K] [--rounds R] [--base REV]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CALLS=20000 ADMISSIONS=15 ROUNDS=3 BASE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --calls) CALLS="$2"; shift 2 ;;
    --admissions) ADMISSIONS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bench_start redis-server redis-cli awk git

PORT="$(free_port)"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$BENCH_TMP" --save "" --appendonly no >"$BENCH_TMP/redis.log" 2>&1 &
BENCH_PIDS+=("$!")
for _ in $(seq 1 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

# script FILE OUT: the counters library and the reserve body of limiter.cc FILE, wrapped so that the
# body runs once per call id; the last argument is the number of calls.
script() {
  {
    awk '/kCountersLua = R"lua\(/{f=1;next} /^\)lua";/{f=0} f' "$1"
    echo 'local function body()'
    awk '/kReserveBody = R"lua\(/{f=1;next} /^\)lua";/{f=0} f' "$1"
    echo 'end'
    echo 'local n = tonumber(table.remove(ARGV))'
    echo "for i = 1, n do ARGV[1] = 'call' .. i; body() end"
    echo 'return 1'
  } >"$2"
}
# args FILE: the call's ARGV after the id (per counter: window, limit, ttl, sum[, seed]).
args() {
  local per_counter="0 1000000000 61 $ADMISSIONS|0 1000000000000 61 $((ADMISSIONS * 40))"
  grep -q 'p.seed' "$1" && per_counter="0 1000000000 61 $ADMISSIONS 0|0 1000000000000 61 $((ADMISSIONS * 40)) 0"
  local r="${per_counter%%|*}" t="${per_counter##*|}" packed="1 4 2 1 1 2 2 3 1 4 2"
  for ((i = 0; i < ADMISSIONS; i++)); do packed+=" 1 1 40"; done
  echo "4 $r $t $r $t $ADMISSIONS|$packed"
}
run() {  # run LABEL LIMITER_CC: prints microseconds per call
  local a packed
  a="$(args "$2")"
  packed="${a##*|}"
  redis-cli -p "$PORT" flushall >/dev/null
  # shellcheck disable=SC2086
  redis-cli -p "$PORT" eval "$(cat "$BENCH_TMP/$1.lua")" 4 infera:rl:k:b:r infera:rl:k:b:t infera:rl:t:b:r infera:rl:t:b:t \
    id ${a%%|*} "$packed" 1 >/dev/null  # the counters' summaries exist, as under load
  redis-cli -p "$PORT" config resetstat >/dev/null
  # shellcheck disable=SC2086
  redis-cli -p "$PORT" eval "$(cat "$BENCH_TMP/$1.lua")" 4 infera:rl:k:b:r infera:rl:k:b:t infera:rl:t:b:r infera:rl:t:b:t \
    id ${a%%|*} "$packed" "$CALLS" >/dev/null
  redis-cli -p "$PORT" info commandstats | awk -F'[=,]' -v n="$CALLS" '/^cmdstat_eval:/{printf "%.2f\n", $4 / n}'
}

script "$ROOT/src/gateway/limiter.cc" "$BENCH_TMP/head.lua"
if [[ -n "$BASE" ]]; then
  git -C "$ROOT" show "$BASE:src/gateway/limiter.cc" >"$BENCH_TMP/base.cc"
  script "$BENCH_TMP/base.cc" "$BENCH_TMP/base.lua"
fi
echo "reserve script: $CALLS calls of $ADMISSIONS admissions on 4 minute counters, in one EVAL; $ROUNDS rounds"
HEAD_US="" BASE_US=""
for ((r = 1; r <= ROUNDS; r++)); do
  h="$(run head "$ROOT/src/gateway/limiter.cc")"
  HEAD_US+="$h "
  line="  round $r  working tree $h us/call"
  if [[ -n "$BASE" ]]; then
    b="$(run base "$BENCH_TMP/base.cc")"
    BASE_US+="$b "
    line+="   $BASE $b us/call"
  fi
  echo "$line"
done
h="$(tr ' ' '\n' <<<"$HEAD_US" | grep . | median)"
echo "median: working tree $h us per call"
if [[ -n "$BASE" ]]; then
  b="$(tr ' ' '\n' <<<"$BASE_US" | grep . | median)"
  awk -v h="$h" -v b="$b" -v base="$BASE" 'BEGIN {printf "median: %s %s us per call; working tree / base = %.3f\n", base, b, h / b}'
fi
