#!/usr/bin/env bash
# Cost of tracing: wrk throughput and gateway CPU per request of small chat completions through
# the same Infera build with tracing off, at 1% and at 100% head sampling, in one run, interleaved
# and repeated. The traces go to a real OTLP/HTTP endpoint (nginx answering 200 on /v1/traces, so
# the collector's own cost is not the gateway's). Prints req/s per round, medians, ratios against
# off and CPU per request.
#
#   bench/load/tracing.sh [--connections N] [--duration S] [--rounds N] [--proxy-workers N]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=64 DURATION=2 ROUNDS=15 PROXY_WORKERS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --proxy-workers) PROXY_WORKERS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_init wrk curl nginx

# The OTLP sink: nginx answering every POST /v1/traces with 200 and an empty body.
SINK="$BENCH_TMP/sink"
mkdir -p "$SINK/logs" "$SINK/tmp"
SINK_PORT="$(free_port)"
user_line=""
[[ "$(id -u)" == "0" ]] && user_line="user root;"
cat >"$SINK/nginx.conf" <<NGINX
$user_line
daemon off;
worker_processes 1;
pid $SINK/nginx.pid;
error_log $SINK/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $SINK/tmp/body;
  client_max_body_size 64m;
  server {
    listen 127.0.0.1:$SINK_PORT;
    location = /v1/traces { client_body_buffer_size 64m; return 200 ""; }
  }
}
NGINX
nginx -p "$SINK" -c "$SINK/nginx.conf" -e "$SINK/logs/error.log" >"$SINK/stdout.log" 2>&1 &
BENCH_PIDS+=("$!")
for _ in $(seq 1 100); do
  [[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$SINK_PORT/v1/traces" -d x)" == 200 ]] && break
  sleep 0.05
done

start_emulator emulator 0 --models m --ttft-ms 0 --token-ms 0 --workers 1
start_gateway off 1 "$PROXY_WORKERS" "$EMU_PORT"
OFF_PORT="$GW_PORT" OFF_PID="$GW_PID"
start_gateway one 1 "$PROXY_WORKERS" "$EMU_PORT" \
  "tracing: {endpoint: \"http://127.0.0.1:$SINK_PORT/v1/traces\", sample_ratio: 0.01}"
ONE_PORT="$GW_PORT" ONE_PID="$GW_PID" ONE_ADMIN="$GW_ADMIN"
start_gateway all 1 "$PROXY_WORKERS" "$EMU_PORT" \
  "tracing: {endpoint: \"http://127.0.0.1:$SINK_PORT/v1/traces\", sample_ratio: 1.0}"
ALL_PORT="$GW_PORT" ALL_PID="$GW_PID" ALL_ADMIN="$GW_ADMIN"
for p in "$OFF_PORT" "$ONE_PORT" "$ALL_PORT"; do check_chat "$p"; done

cat >"$BENCH_TMP/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
LUA
echo "tracing cost: wrk -t1 -c$CONNS -d${DURATION}s POST /v1/chat/completions (16 tokens), $ROUNDS rounds;" \
  "proxy workers $PROXY_WORKERS, $(bench_env_note)"
declare -A RESULTS=([off]="" [one]="" [all]="") CPU_TICKS=([off]=0 [one]=0 [all]=0) REQS=([off]=0 [one]=0 [all]=0)
port_of() { case "$1" in off) echo "$OFF_PORT" ;; one) echo "$ONE_PORT" ;; all) echo "$ALL_PORT" ;; esac; }
pid_of() { case "$1" in off) echo "$OFF_PID" ;; one) echo "$ONE_PID" ;; all) echo "$ALL_PID" ;; esac; }
for t in off one all; do run_wrk "$t" "$(port_of "$t")" 1 "$BENCH_TMP/chat.lua" >/dev/null; done
for ((r = 1; r <= ROUNDS; r++)); do
  order=(off one all)
  for ((k = 0; k < (r - 1) % 3; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  for t in "${order[@]}"; do
    pid="$(pid_of "$t")"
    t0="$(ticks "$pid")"
    rps="$(run_wrk "$t" "$(port_of "$t")" "$DURATION" "$BENCH_TMP/chat.lua")"
    CPU_TICKS[$t]=$((CPU_TICKS[$t] + $(ticks "$pid") - t0))
    REQS[$t]="$(awk -v a="${REQS[$t]}" -v b="$rps" -v d="$DURATION" 'BEGIN {printf "%.0f", a + b * d}')"
    RESULTS[$t]+="$rps "
    printf '  round %d  %-4s %10.0f req/s\n' "$r" "$t" "$rps"
  done
done
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v s="$2" '$1 == s {print $2}'; }
echo
echo "== tracing summary (median of $ROUNDS rounds) =="
printf '  off          %10.0f req/s                 CPU %s us/request\n' "$(med off)" "$(us_per "${CPU_TICKS[off]}" "${REQS[off]}")"
printf '  1%% sampled   %10.0f req/s   ratio %.3f   CPU %s us/request\n' "$(med one)" "$(ratio one)" "$(us_per "${CPU_TICKS[one]}" "${REQS[one]}")"
printf '  100%% sampled %10.0f req/s   ratio %.3f   CPU %s us/request\n' "$(med all)" "$(ratio all)" "$(us_per "${CPU_TICKS[all]}" "${REQS[all]}")"
echo "  spans exported: 1% $(metric "$ONE_ADMIN" 'infera_trace_spans_total{outcome="exported"}')," \
  "100% $(metric "$ALL_ADMIN" 'infera_trace_spans_total{outcome="exported"}');" \
  "dropped at 100%: $(metric "$ALL_ADMIN" 'infera_trace_spans_total{outcome="dropped"}')"
