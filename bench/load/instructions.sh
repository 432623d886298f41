#!/usr/bin/env bash
# Instructions per request of two infera builds, counted by valgrind's callgrind: the same number
# of small chat completions, one keep-alive connection, through gateway A and gateway B, with
# governance off and with keys + limits + usage (SQLite, in-process counters). Unlike req/s this
# does not move with the rest of the box: the figure repeats to a fraction of a percent, so it
# shows differences too small for wrk to see on a shared 2-core machine. Start-up and shutdown are
# taken out by running each case twice (N1 and N2 requests) and dividing the difference.
#
#   bench/load/instructions.sh --a OLD_INFERA --b NEW_INFERA [--requests N] [--variants off,gov]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

A="" B="" N=2000 VARIANTS="off,gov"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --a) A="$2"; shift 2 ;;
    --b) B="$2"; shift 2 ;;
    --requests) N="$2"; shift 2 ;;
    --variants) VARIANTS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$A" && -x "$B" ]] || { echo "need --a and --b: two infera binaries" >&2; exit 2; }
IFS=',' read -r -a VARS <<<"$VARIANTS"
INFERA="$B"
bench_start valgrind curl python3
export INFERA_ADMIN_TOKEN="bench-admin-token"
start_emulator emulator "" --models m --ttft-ms 0 --token-ms 0 --workers 1

# send PORT COUNT KEY: COUNT sequential chat completions on one keep-alive connection.
send() {
  python3 - "$1" "$2" "$3" <<'PY'
import http.client, sys
port, n, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
h = {"Content-Type": "application/json"}
if key != "-":
    h["Authorization"] = "Bearer " + key
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(n):
    c.request("POST", "/v1/chat/completions", body, h)
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit("status %d" % r.status)
PY
}

# count BINARY VARIANT REQUESTS: total instructions of a gateway that served REQUESTS requests.
count() {
  local bin="$1" v="$2" n="$3" name="cg-$RANDOM"
  local cfg="$BENCH_TMP/$name.yaml" log="$BENCH_TMP/$name.log" out="$BENCH_TMP/$name.out"
  local gov=""
  [[ "$v" == gov ]] && gov="governance: {store: \"sqlite:$BENCH_TMP/$name.db\", key_secret: bench-secret-0123456789abcdef0123456789}"
  cat >"$cfg" <<EOF
workers: 1
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
log_level: warn
health_check: {enabled: false}
$gov
models:
  - name: m
    deployments:
      - name: emu
        endpoints: [{url: "http://127.0.0.1:$EMU_PORT"}]
EOF
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve -c "$cfg" >"$log" 2>&1 &
  local pid=$!
  BENCH_PIDS+=("$pid")
  local line port admin key="-"
  line="$(wait_for_line "$log" 'data http://127\.0\.0\.1:[0-9]+ +admin http://127\.0\.0\.1:[0-9]+' 120)"
  port="$(sed -E 's/data http:\/\/127\.0\.0\.1:([0-9]+).*/\1/' <<<"$line")"
  admin="$(sed -E 's/.*admin http:\/\/127\.0\.0\.1:([0-9]+)/\1/' <<<"$line")"
  if [[ "$v" == gov ]]; then
    local auth="authorization: Bearer $INFERA_ADMIN_TOKEN"
    curl -sf -H "$auth" -d '{"name":"bench","rpm":1000000000,"tpm":1000000000000}' "http://127.0.0.1:$admin/admin/teams" >/dev/null
    key="$(curl -sf -H "$auth" -d '{"team":"bench"}' "http://127.0.0.1:$admin/admin/keys" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')"
  fi
  send "$port" "$n" "$key"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  sed -n 's/^summary: //p' "$out"
}

echo "instructions per request (callgrind): A=$A B=$B; $N requests after a first run of $((N / 4))"
for v in "${VARS[@]}"; do
  declare -A PER=()
  for side in a b; do
    bin="$A"; [[ "$side" == b ]] && bin="$B"
    i1="$(count "$bin" "$v" $((N / 4)))"
    i2="$(count "$bin" "$v" $((N / 4 + N)))"
    PER[$side]="$(awk -v a="$i1" -v b="$i2" -v n="$N" 'BEGIN {printf "%.0f", (b - a) / n}')"
  done
  printf '  %-4s A %8d  B %8d  B/A %.3f\n' "$v" "${PER[a]}" "${PER[b]}" \
    "$(awk -v a="${PER[a]}" -v b="${PER[b]}" 'BEGIN {print b / a}')"
done
