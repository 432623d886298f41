#!/usr/bin/env bash
# Added latency at a fixed moderate rate: h2load --h1 --rps against the emulator directly, through
# Infera and (for reference) through nginx, interleaved and repeated. Latencies come from
# h2load's per-request log (--log-file: microseconds until the end of the response); p50/p99 per
# run, then the added latency (proxy minus direct) per round and its median over rounds.
#
#   bench/load/latency.sh [--clients N] [--rps-per-client N] [--duration S] [--rounds N] [--no-nginx]
#
# Defaults: 1 client x 1,000 req/s, 10 s per measurement, 3 rounds, one worker for
# every server. BENCH_PIN=1 pins: h2load and emulator on CPU 0, proxies on CPU 1.
# One client, not ten at 100/s: h2load starts every client's --rps timer together, so N clients
# send N requests in the same instant and the single-worker servers queue them; that burst
# (not the proxy) then dominates p50. One connection at 1,000/s is an even 1 ms spacing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLIENTS=1 RPS=1000 DURATION=10 ROUNDS=3 WITH_NGINX=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --rps-per-client) RPS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --no-nginx) WITH_NGINX=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_init h2load curl python3
command -v nginx >/dev/null || WITH_NGINX=0

LOAD_CPUS=0 PROXY_CPUS=1 BACKEND_CPUS=0
start_emulator emulator "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers 1
start_gateway gateway "$PROXY_CPUS" 1 "$EMU_PORT"
TARGETS=(direct infera)
if [[ "$WITH_NGINX" == "1" ]]; then
  start_nginx nginx "$PROXY_CPUS" 1 "$EMU_PORT"
  TARGETS+=(nginx)
fi
for p in "$EMU_PORT" "$GW_PORT" ${NGX_PORT:+"$NGX_PORT"}; do check_chat "$p"; done

printf '%s' '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}' \
  >"$BENCH_TMP/chat.json"

port_of() { case "$1" in direct) echo "$EMU_PORT" ;; infera) echo "$GW_PORT" ;; nginx) echo "$NGX_PORT" ;; esac; }

# run_h2load LABEL PORT SECONDS: prints "p50_us p99_us requests"; fails on errors or non-200s.
run_h2load() {
  local label="$1" port="$2" secs="$3" out="$BENCH_TMP/h2load-$1.txt" log="$BENCH_TMP/h2load-$1.tsv"
  rm -f "$log"
  pin_prefix "$LOAD_CPUS"
  "${PIN[@]}" timeout $((secs + 30)) h2load --h1 -c "$CLIENTS" --rps "$RPS" -D "$secs" -m 1 \
    -d "$BENCH_TMP/chat.json" -H 'content-type: application/json' --log-file "$log" \
    "http://127.0.0.1:$port/v1/chat/completions" >"$out" 2>&1
  if ! grep -Eq 'requests: .* 0 failed, 0 errored' "$out" || ! grep -Eq 'status codes: [0-9]+ 2xx, 0 3xx, 0 4xx, 0 5xx' "$out"; then
    echo "h2load against $label reported failures:" >&2
    cat "$out" >&2
    return 1
  fi
  # Column 3: microseconds from the request's start to the end of its response.
  awk -F'\t' '$2 == 200 {print $3}' "$log" | sort -n | awk '
    {a[NR] = $1}
    END {
      if (NR == 0) { print "0 0 0"; exit }
      p50 = a[int(NR * 0.50 + 0.5) > 0 ? int(NR * 0.50 + 0.5) : 1]
      i99 = int(NR * 0.99 + 0.5); if (i99 < 1) i99 = 1; if (i99 > NR) i99 = NR
      print p50, a[i99], NR
    }'
}


echo "latency: h2load --h1 -c$CLIENTS --rps $RPS (= $((CLIENTS * RPS)) req/s) -D $DURATION," \
  "$ROUNDS rounds, POST /v1/chat/completions (16 tokens); $(bench_env_note)"
for t in "${TARGETS[@]}"; do run_h2load warmup "$(port_of "$t")" 2 >/dev/null; done

declare -A P50 P99
for t in "${TARGETS[@]}"; do P50[$t]=""; P99[$t]=""; done
ADD50_I="" ADD99_I="" ADD50_N="" ADD99_N=""
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${TARGETS[@]}")
  for ((k = 0; k < (r - 1) % ${#TARGETS[@]}; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  declare -A R50 R99
  for t in "${order[@]}"; do
    read -r p50 p99 n < <(run_h2load "$t" "$(port_of "$t")" "$DURATION")
    R50[$t]="$p50" R99[$t]="$p99"
    P50[$t]+="$p50 " P99[$t]+="$p99 "
    printf '  round %d  %-7s p50 %6d us  p99 %6d us  (%d requests)\n' "$r" "$t" "$p50" "$p99" "$n"
  done
  ADD50_I+="$((R50[infera] - R50[direct])) " ADD99_I+="$((R99[infera] - R99[direct])) "
  if [[ "$WITH_NGINX" == "1" ]]; then
    ADD50_N+="$((R50[nginx] - R50[direct])) " ADD99_N+="$((R99[nginx] - R99[direct])) "
  fi
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo
echo "== latency summary (median of $ROUNDS rounds, microseconds) =="
for t in "${TARGETS[@]}"; do
  printf '  %-7s p50 %6.0f  p99 %6.0f\n' "$t" "$(med "${P50[$t]}")" "$(med "${P99[$t]}")"
done
A50="$(med "$ADD50_I")" A99="$(med "$ADD99_I")"
printf '  infera added: p50 %+.0f us (target <= 50)  p99 %+.0f us (target <= 300)\n' "$A50" "$A99"
if [[ "$WITH_NGINX" == "1" ]]; then
  printf '  nginx  added: p50 %+.0f us  p99 %+.0f us  (reference)\n' "$(med "$ADD50_N")" "$(med "$ADD99_N")"
fi
awk -v a="$A50" -v b="$A99" 'BEGIN {exit !(a <= 50 && b <= 300)}' && echo "  targets met" || echo "  targets NOT met"
