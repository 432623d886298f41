#!/usr/bin/env bash
# What routing through the model registry costs: the same small chat completions to one emulator
# through a static route (`model: m`), a registry alias (`fraud@champion`) and a registry A/B split
# (`fraud`, two arms sticky by user, both served by the same emulator), one infera binary, same run.
# Two figures: callgrind instructions per request (one keep-alive connection; start-up taken out
# by running each case twice, N1 and N2 requests, and dividing the difference; repeatable to a
# fraction of a percent on a shared box), wrk throughput ratios (ROUNDS interleaved rounds, the
# median of each case), which move with the box, and the gateway's CPU time per request in those
# rounds (user + system from /proc: the kernel's share included). --governance: access control on in every
# case (SQLite, one key of one team, the user from x-infera-user), as a deployment with keys runs.
#
# --keep-profiles DIR: the callgrind profiles of the longer runs stay as DIR/<case>.cg, to compare
# per function (callgrind_annotate DIR/split.cg).
#
#   bench/load/registry.sh [--requests N] [--rounds R] [--seconds S] [--connections C] [--no-wrk] [--no-callgrind] [--governance] [--keep-profiles DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=2000 ROUNDS=10 SECONDS_PER=3 CONNS=32 WRK=1 CG=1 GOV=0 KEEP=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --requests) N="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECONDS_PER="$2"; shift 2 ;;
    --connections) CONNS="$2"; shift 2 ;;
    --no-wrk) WRK=0; shift ;;
    --no-callgrind) CG=0; shift ;;
    --governance) GOV=1; shift ;;
    --keep-profiles) KEEP="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bench_init curl python3
[[ $CG == 1 ]] && { command -v valgrind >/dev/null || { echo "missing valgrind" >&2; exit 2; }; }
[[ $WRK == 1 ]] && { command -v wrk >/dev/null || { echo "missing wrk" >&2; exit 2; }; }
start_emulator emulator "" --models m --ttft-ms 0 --token-ms 0 --workers 1
export INFERA_ADMIN_TOKEN="bench-admin-token"
AUTH="authorization: Bearer $INFERA_ADMIN_TOKEN"
KEY=""  # the data port's key with --governance (set by start_registry_gateway)

config() {  # config FILE DATA_DIR
  cat >"$1" <<EOF
workers: 1
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
log_level: warn
health_check: {enabled: false}
$([[ $GOV == 1 ]] && echo "governance: {store: \"sqlite:$2/access.db\", key_secret: bench-secret-0123456789abcdef0123456789}")
registry:
  store: "sqlite:$2/registry.db"
  data_dir: "$2"
models:
  - name: m
    deployments:
      - name: emu
        endpoints: [{url: "http://127.0.0.1:$EMU_PORT"}]
      - name: emu2
        upstream_model: m
        endpoints: [{url: "http://127.0.0.1:$EMU_PORT"}]
EOF
}

# setup ADMIN_PORT: fraud v1 and v2 bound to the emulator, champion -> 1, challenger -> 2, and a
# 50/50 split of `fraud` over them.
setup() {
  local a="http://127.0.0.1:$1" j='content-type: application/json'
  curl() { command curl -H "$AUTH" "$@"; }
  curl -sf -H "$j" -d '{"name":"fraud"}' "$a/api/2.0/mlflow/registered-models/create" >/dev/null
  for v in 1 2; do
    curl -sf -H "$j" -d '{"name":"fraud","source":"s3://b/f"}' "$a/api/2.0/mlflow/model-versions/create" >/dev/null
  done
  curl -sf -X PUT -H "$j" -d '{"deployments":["emu"]}' "$a/admin/registry/models/fraud/bindings/1" >/dev/null
  curl -sf -X PUT -H "$j" -d '{"deployments":["emu2"]}' "$a/admin/registry/models/fraud/bindings/2" >/dev/null
  curl -sf -H "$j" -d '{"version":"1"}' "$a/admin/registry/models/fraud/aliases/champion" >/dev/null
  curl -sf -H "$j" -d '{"version":"2"}' "$a/admin/registry/models/fraud/aliases/challenger" >/dev/null
  curl -sf -X PUT -H "$j" -d '{"arms":[{"name":"a","target":"@champion","weight":50},{"name":"b","target":"@challenger","weight":50}],"sticky":"user"}' \
    "$a/admin/registry/models/fraud/experiment" >/dev/null
  if [[ $GOV == 1 ]]; then
    curl -sf -d '{"name":"bench","rpm":1000000000,"tpm":1000000000000}' "$a/admin/teams" >/dev/null
    KEY="$(curl -sf -d '{"team":"bench","rpm":1000000000,"tpm":1000000000000,"allow_user":true}' \
      "$a/admin/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')"
  fi
  unset -f curl
}

body() { echo '{"model":"'"$1"'","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}'; }

# send PORT COUNT MODEL: COUNT sequential chat completions on one keep-alive connection (each with
# its own user, so a split spreads them).
send() {
  python3 - "$1" "$2" "$3" "$KEY" <<'PY'
import http.client, sys
port, n, model, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
auth = {"Authorization": "Bearer " + key} if key else {}
body = '{"model":"%s","max_tokens":16,"messages":[{"role":"user","content":"Hello, how are you?"}]}' % model
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for i in range(n):
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json", "x-infera-user": "u%d" % (i % 1000), **auth})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit("status %d: %s" % (r.status, model))
PY
}

# start_registry_gateway PREFIX...: starts infera (under PREFIX, e.g. valgrind) with the registry set up;
# sets GW_PID, GW_PORT, GW_ADMIN.
start_registry_gateway() {
  local name="gw-$RANDOM" line
  mkdir -p "$BENCH_TMP/$name"
  config "$BENCH_TMP/$name.yaml" "$BENCH_TMP/$name"
  "$@" "$INFERA" serve -c "$BENCH_TMP/$name.yaml" >"$BENCH_TMP/$name.log" 2>&1 &
  GW_PID=$!
  BENCH_PIDS+=("$GW_PID")
  line="$(wait_for_line "$BENCH_TMP/$name.log" 'data http://127\.0\.0\.1:[0-9]+ +admin http://127\.0\.0\.1:[0-9]+' 180)"
  GW_PORT="$(sed -E 's/data http:\/\/127\.0\.0\.1:([0-9]+).*/\1/' <<<"$line")"
  GW_ADMIN="$(sed -E 's/.*admin http:\/\/127\.0\.0\.1:([0-9]+)/\1/' <<<"$line")"
  setup "$GW_ADMIN"
  CG_OUT="$BENCH_TMP/$name.cg"
}

declare -A CASES=([static]=m [alias]=fraud@champion [split]=fraud)
ORDER=(static alias split)

if [[ $CG == 1 ]]; then
  echo "instructions per request (callgrind, one worker, one keep-alive connection; $N requests after $((N / 4)); governance $([[ $GOV == 1 ]] && echo on || echo off))"
  declare -A PER=()
  for c in "${ORDER[@]}"; do
    counts=()
    for n in $((N / 4)) $((N / 4 + N)); do
      out="$BENCH_TMP/cg-$RANDOM.out"
      start_registry_gateway valgrind --tool=callgrind --callgrind-out-file="$out"
      # The setup's own requests are the same in both runs: they cancel in the difference.
      send "$GW_PORT" "$n" "${CASES[$c]}"
      kill -TERM "$GW_PID"
      wait "$GW_PID" 2>/dev/null || true
      counts+=("$(sed -n 's/^summary: //p' "$out")")
    done
    if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP" && cp "$out" "$KEEP/$c.cg"; fi
    PER[$c]="$(awk -v a="${counts[0]}" -v b="${counts[1]}" -v n="$N" 'BEGIN {printf "%.0f", (b - a) / n}')"
  done
  for c in "${ORDER[@]}"; do
    printf '  %-7s %8d  x static %.4f\n' "$c" "${PER[$c]}" "$(awk -v a="${PER[static]}" -v b="${PER[$c]}" 'BEGIN {print b / a}')"
  done
fi

if [[ $WRK == 1 ]]; then
  start_registry_gateway
  for c in "${ORDER[@]}"; do
    body "${CASES[$c]}" >"$BENCH_TMP/$c.json"
    cat >"$BENCH_TMP/$c.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
$([[ -n "$KEY" ]] && echo "wrk.headers[\"Authorization\"] = \"Bearer $KEY\"")
wrk.body = io.open("$BENCH_TMP/$c.json"):read("a")
local n = 0
request = function()
  n = n + 1
  wrk.headers["x-infera-user"] = "u" .. (n % 1000)
  return wrk.format(nil, "/v1/chat/completions")
end
EOF
  done
  declare -A RPS=() CPU=()
  # The gateway's CPU time (user + system, all threads, from /proc) per request in each round:
  # what a CPU-bound gateway's throughput is made of, kernel time included, and steadier than
  # req/s on a shared box (another tenant slows wrk and the emulator too).
  ticks() { awk '{print $14 + $15}' "/proc/$GW_PID/stat"; }
  uticks() { awk '{print $14}' "/proc/$GW_PID/stat"; }
  declare -A UT=() ALLT=()
  hz="$(getconf CLK_TCK)"
  for r in $(seq 1 "$ROUNDS"); do
    for c in "${ORDER[@]}"; do
      t0="$(ticks)" u0="$(uticks)"
      out="$(wrk -t1 -c"$CONNS" -d"${SECONDS_PER}s" -s "$BENCH_TMP/$c.lua" "http://127.0.0.1:$GW_PORT")"
      t1="$(ticks)" u1="$(uticks)"
      UT[$c]=$(( ${UT[$c]:-0} + u1 - u0 )) ALLT[$c]=$(( ${ALLT[$c]:-0} + t1 - t0 ))
      v="$(sed -n 's/^Requests\/sec: *//p' <<<"$out")"
      n="$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out")"
      RPS[$c]="${RPS[$c]:-} $v"
      CPU[$c]="${CPU[$c]:-} $(awk -v a="$t0" -v b="$t1" -v n="$n" -v hz="$hz" 'BEGIN {printf "%.2f", (b - a) * 1e6 / hz / n}')"
    done
  done
  median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
  # report ARRAY FORMAT UNIT: each case's median of the rounds in ARRAY and its ratio to static's.
  report() {
    local -n rounds="$1"
    local s m
    s="$(median <<<"${rounds[static]}")"
    for c in "${ORDER[@]}"; do
      m="$(median <<<"${rounds[$c]}")"
      printf "  %-7s $2 %s  x static %.3f   (rounds:%s)\n" "$c" "$m" "$3" "$(awk -v a="$s" -v b="$m" 'BEGIN {print b / a}')" "${rounds[$c]}"
    done
  }
  echo "wrk: one worker, $CONNS connections, $ROUNDS interleaved rounds of ${SECONDS_PER}s, median req/s"
  report RPS '%10.0f' 'req/s'
  echo "gateway CPU per request (user + system, /proc), median of the rounds"
  report CPU '%8.2f' 'us'
  # Each round's cases ran back to back: the ratio within a round cancels what drifts between
  # rounds (the box's load), so its median is the steadiest of these figures.
  echo "gateway CPU per request, median of the per-round ratios to static"
  for c in "${ORDER[@]}"; do
    m="$(paste -d' ' <(tr ' ' '\n' <<<"${CPU[static]}" | sed '/^$/d') <(tr ' ' '\n' <<<"${CPU[$c]}" | sed '/^$/d') |
      awk '{printf "%.4f ", $2 / $1}' | median)"
    printf '  %-7s x static %.3f   (user share of the CPU %.2f)\n' "$c" "$m" "$(awk -v u="${UT[$c]}" -v a="${ALLT[$c]}" 'BEGIN {print u / a}')"
  done
fi
