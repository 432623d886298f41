#!/usr/bin/env bash
# Throughput of small non-streaming chat completions: wrk against the emulator directly, through
# nginx (proxy_pass, upstream keepalive, HTTP/1.1) and through Infera, in the same run,
# interleaved and repeated. Prints req/s of each round, the medians and the ratios
# Infera/nginx and Infera/direct (the figure; absolute req/s on a shared box are noise).
#
#   bench/load/throughput.sh [--connections N] [--threads N] [--duration S] [--rounds N]
#                            [--proxy-workers N] [--emulator-workers N]
#
# Defaults: 64 connections, 1 wrk thread, 10 s per measurement, 3 rounds, 1 worker for nginx and
# Infera alike, 1 emulator worker. BENCH_PIN=1 pins: wrk and emulator on CPU 0, proxy on CPU 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=64 THREADS=1 DURATION=10 ROUNDS=3 PROXY_WORKERS=1 EMU_WORKERS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --proxy-workers) PROXY_WORKERS="$2"; shift 2 ;;
    --emulator-workers) EMU_WORKERS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_init wrk nginx curl python3

LOAD_CPUS=0 PROXY_CPUS=1 BACKEND_CPUS=0
start_emulator emulator "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers "$EMU_WORKERS"
start_nginx nginx "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT"
start_gateway gateway "$PROXY_CPUS" "$PROXY_WORKERS" "$EMU_PORT"
for p in "$EMU_PORT" "$NGX_PORT" "$GW_PORT"; do check_chat "$p"; done

cat >"$BENCH_TMP/chat.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
EOF


echo "throughput: wrk -t$THREADS -c$CONNS -d${DURATION}s POST /v1/chat/completions (16 tokens)," \
  "$ROUNDS rounds; proxy workers $PROXY_WORKERS, emulator workers $EMU_WORKERS, $(bench_env_note)"
# Warm-up: pools, page cache, CPU frequency.
for p in "$EMU_PORT" "$NGX_PORT" "$GW_PORT"; do run_wrk warmup "$p" 2 "$BENCH_TMP/chat.lua" >/dev/null; done

declare -A RESULTS=([direct]="" [nginx]="" [infera]="")
for ((r = 1; r <= ROUNDS; r++)); do
  # Rotate the order each round so no target always runs first or last.
  order=(direct nginx infera)
  for ((k = 0; k < (r - 1) % 3; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  for t in "${order[@]}"; do
    case "$t" in direct) p="$EMU_PORT" ;; nginx) p="$NGX_PORT" ;; infera) p="$GW_PORT" ;; esac
    rps="$(run_wrk "$t" "$p" "$DURATION" "$BENCH_TMP/chat.lua")"
    RESULTS[$t]+="$rps "
    printf '  round %d  %-7s %10.0f req/s\n' "$r" "$t" "$rps"
  done
  ratio_n="$(awk -v a="$(awk '{print $NF}' <<<"${RESULTS[infera]}")" -v b="$(awk '{print $NF}' <<<"${RESULTS[nginx]}")" 'BEGIN {printf "%.3f", a / b}')"
  echo "  round $r  infera/nginx $ratio_n"
done

D="$(med direct)" N="$(med nginx)" I="$(med infera)"
# Ratios per round (the two proxies ran back to back), then their median.
RN="$(ratio infera nginx)"
RD="$(ratio infera direct)"

echo
echo "== throughput summary (median of $ROUNDS rounds) =="
printf '  direct   %10.0f req/s\n' "$D"
printf '  nginx    %10.0f req/s\n' "$N"
printf '  infera   %10.0f req/s\n' "$I"
printf '  infera/nginx  %.3f   (target >= 1.0)\n' "$RN"
printf '  infera/direct %.3f\n' "$RD"
awk -v r="$RN" 'BEGIN {exit !(r >= 1.0)}' && echo "  target met" || echo "  target NOT met"
