#!/usr/bin/env bash
# The cost of TLS: wrk POSTing small chat completions through Infera with TLS on neither side
# (plain), on the client side only (wrk -> Infera over TLS), on the upstream side only (Infera ->
# the emulator over TLS) and on both, in the same run, interleaved and repeated. Prints req/s per
# round, the medians, each case's ratio to plain (per round, then the median) and the gateway's CPU
# per request (its utime + stime over the requests wrk counted). Keep-alive on both sides, so the
# steady state is record encryption; --handshakes adds a new client connection per request
# (Connection: close), plain and TLS, which is the handshake's cost.
#
#   bench/load/tls.sh [--connections N] [--duration S] [--rounds N] [--handshakes]
#
# Defaults: 64 connections, 1 wrk thread, 10 s per measurement, 3 rounds, 1 gateway worker, 1
# emulator worker; certificates: EC P-256 from tests/fakes/make_test_pki.sh (TLS 1.3,
# TLS_AES_256_GCM_SHA384 between these OpenSSL 3.0 peers). BENCH_PIN=1 pins wrk and the emulators
# on CPU 0 and the gateways on CPU 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS=64 THREADS=1 DURATION=10 ROUNDS=3 HANDSHAKES=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --handshakes) HANDSHAKES=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_init wrk openssl curl python3
PKI="$BENCH_TMP/pki"
bash "$BENCH_ROOT/tests/fakes/make_test_pki.sh" "$PKI"
LOAD_CPUS=0 PROXY_CPUS=1 BACKEND_CPUS=0
start_emulator emu-plain "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers 1
PLAIN_UP="$EMU_PORT"
start_emulator emu-tls "$BACKEND_CPUS" --models m --ttft-ms 0 --token-ms 0 --workers 1 \
  --tls-cert "$PKI/server.pem" --tls-key "$PKI/server.key"
TLS_UP="$EMU_PORT"

declare -A PORT=() PID=() SCHEME_OF=()
# gateway CASE CLIENT_TLS(0|1) UPSTREAM_TLS(0|1)
gateway() {
  local name="$1" ctls="$2" utls="$3" cfg="$BENCH_TMP/$1.yaml" log="$BENCH_TMP/$1.log"
  local listen_tls="" up="http://127.0.0.1:$PLAIN_UP" up_tls=""
  [[ "$ctls" == 1 ]] && listen_tls=", tls: {cert_file: $PKI/server.pem, key_file: $PKI/server.key}"
  [[ "$utls" == 1 ]] && up="https://127.0.0.1:$TLS_UP" up_tls="tls: {ca_file: $PKI/ca.pem}"
  cat >"$cfg" <<EOF
region: local
workers: 1
listen: {host: 127.0.0.1, port: 0$listen_tls}
admin: {host: 127.0.0.1, port: 0}
access_log: ""
log_level: warn
models:
  - name: m
    deployments:
      - name: emu
        $up_tls
        endpoints:
          - {url: "$up", region: local, max_concurrent: 100000}
EOF
  pin_prefix "$PROXY_CPUS"
  "${PIN[@]}" "$INFERA" serve -c "$cfg" >"$log" 2>&1 &
  PID[$name]=$!
  BENCH_PIDS+=("${PID[$name]}")
  local line
  line="$(wait_for_line "$log" 'data https?://127\.0\.0\.1:[0-9]+')"
  PORT[$name]="$(sed -E 's/.*:([0-9]+)$/\1/' <<<"$line")"
  SCHEME_OF[$name]=http
  [[ "$ctls" == 1 ]] && SCHEME_OF[$name]=https
  local code
  code="$(curl -s -o /dev/null -w '%{http_code}' --cacert "$PKI/ca.pem" \
    "${SCHEME_OF[$name]}://127.0.0.1:${PORT[$name]}/v1/chat/completions" \
    -d '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}')"
  [[ "$code" == 200 ]] || { echo "$name answered $code" >&2; cat "$log" >&2; exit 1; }
}
gateway plain 0 0
gateway client-tls 1 0
gateway upstream-tls 0 1
gateway both 1 1
CASES=(plain client-tls upstream-tls both)

cat >"$BENCH_TMP/chat.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
EOF
cat >"$BENCH_TMP/close.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Connection"] = "close"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
EOF
if [[ "$HANDSHAKES" == 1 ]]; then
  # A new connection per request against the plain-upstream gateways.
  PORT[plain-close]="${PORT[plain]}" PID[plain-close]="${PID[plain]}" SCHEME_OF[plain-close]=http
  PORT[tls-close]="${PORT[client-tls]}" PID[tls-close]="${PID[client-tls]}" SCHEME_OF[tls-close]=https
  CASES+=(plain-close tls-close)
fi

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
declare -A RPS=() CPU=()
# measure CASE SECONDS: req/s into RPS, gateway CPU µs per request into CPU.
measure() {
  local c="$1" secs="$2" lua="$BENCH_TMP/chat.lua" before after reqs rps
  [[ "$c" == *-close ]] && lua="$BENCH_TMP/close.lua"
  before="$(cpu_ticks "${PID[$c]}")"
  rps="$(SCHEME="${SCHEME_OF[$c]}" run_wrk "$c" "${PORT[$c]}" "$secs" "$lua")"
  after="$(cpu_ticks "${PID[$c]}")"
  reqs="$(awk '/requests in/ {print $1}' "$BENCH_TMP/wrk-$c.txt")"
  RPS[$c]+="$rps "
  CPU[$c]+="$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}') "
}

echo "tls: wrk -t$THREADS -c$CONNS -d${DURATION}s POST /v1/chat/completions (16 tokens), $ROUNDS rounds;" \
  "1 gateway worker, 1 emulator worker; $(openssl version | cut -d' ' -f1-2); $(bench_env_note)"
for c in "${CASES[@]}"; do measure "$c" 2 >/dev/null; done  # warm-up
RPS=() CPU=()
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${CASES[@]}")
  for ((k = 0; k < (r - 1) % ${#CASES[@]}; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  for c in "${order[@]}"; do
    measure "$c" "$DURATION"
    printf '  round %d  %-13s %9.0f req/s  %7.2f us CPU/request\n' "$r" "$c" \
      "$(awk '{print $NF}' <<<"${RPS[$c]}")" "$(awk '{print $NF}' <<<"${CPU[$c]}")"
  done
done

col() { tr ' ' '\n' <<<"$1" | grep .; }
med() { col "$1" | median; }
# Per-round ratio of A to B, then the median.
ratio() { paste -d' ' <(col "${RPS[$1]}") <(col "${RPS[$2]}") | awk '{print $1 / $2}' | median; }
echo
echo "== tls summary (median of $ROUNDS rounds; ratios per round, then their median) =="
printf '  %-13s %9s %9s %12s\n' case req/s ratio "CPU us/req"
for c in "${CASES[@]}"; do
  base=plain
  [[ "$c" == *-close ]] && base=plain-close
  printf '  %-13s %9.0f %9.3f %12.2f\n' "$c" "$(med "${RPS[$c]}")" "$(ratio "$c" "$base")" "$(med "${CPU[$c]}")"
done
