#!/usr/bin/env bash
# Engine-aware routing and flow control against the usual policies (issue 38; docs/routing.md,
# figures in docs/benchmarks.md "Engine-aware routing").
#
# Emulated vLLM engines (`infera emulate` in engine mode, one process per engine: the calibrated
# Llama-3.1-8B/H100 step profile, slowed by --scale so the load generator keeps up on two cores),
# one gateway (one worker), and bench/load/engine_client.js sending Poisson arrivals of streaming
# chat completions. Every measurement starts fresh engines and a fresh gateway (cold caches).
#
# Parts (--parts, default "prefix fairness priority"):
#   prefix    llm-d's prefix benchmark scaled down: TENANTS tenants, each with a shared system
#             prompt of PREFIX_WORDS words, and short fresh questions; the pool of --engines
#             engines at each --rates (requests/s per engine), under each --policies:
#               random       policy: random
#               round_robin  policy: round_robin
#               least_queue  policy: engine, weights {queue: 1} (fewest running + waiting)
#               latency      the default policy (latency EWMA, two random choices)
#               prefix_load  policy: engine with its default weights (prefix 3, queue 2, kv 1)
#             TTFT percentiles, output tokens/s, the engines' prefix-cache hit rate (their own
#             vllm:prefix_cache_hits_total / queries_total) against the best possible.
#   fairness  prefix_load + flow control (max_waiting 4, fairness: team) on the first engine count:
#             a light team (short prompts, LIGHT_RATE/s) alone, then beside a heavy team sending
#             long unshared prompts at twice the pool's prefill capacity; the light team's TTFT.
#   priority  the same pool (fairness: none): interactive (standard) traffic alone, then beside
#             batch-class (x-infera-priority: batch) load at twice the pool's capacity.
#
# Lists take spaces or commas.
# Usage: bench/load/engine_routing.sh [--engines "8 16"] [--rates "1 2 3 4"] [--duration 30]
#          [--scale 10] [--policies "..."] [--parts "..."] [--seed 1]
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the run too
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENGINES="8 16" RATES="1 2 3 4" DURATION=30 SCALE=10 SEED=1
POLICIES="random round_robin least_queue latency prefix_load"
PARTS="prefix fairness priority"
TENANTS=48 PREFIX_WORDS=1531 QUESTION_WORDS=50 MAX_TOKENS=32 BLOCKS=1600
LIGHT_RATE=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --engines) ENGINES="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --scale) SCALE="$2"; shift 2 ;;
    --policies) POLICIES="$2"; shift 2 ;;
    --parts) PARTS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# Lists may be comma- or space-separated.
ENGINES="${ENGINES//,/ }" RATES="${RATES//,/ }" POLICIES="${POLICIES//,/ }" PARTS="${PARTS//,/ }"
for p in $POLICIES; do
  [[ " random round_robin least_queue latency prefix_load " == *" $p "* ]] ||
    { echo "unknown policy $p" >&2; exit 2; }
done
for p in $PARTS; do
  [[ " prefix fairness priority " == *" $p "* ]] || { echo "unknown part $p" >&2; exit 2; }
done

bench_init node curl python3
CLIENT="$BENCH_ROOT/bench/load/engine_client.js"
export INFERA_ADMIN_TOKEN="bench-admin-token"

cat >"$BENCH_TMP/engine.yaml" <<EOF
host: 127.0.0.1
port: 0
models: [m]
engine:
  num_gpu_blocks: $BLOCKS
  max_model_len: 4096
  time_scale: $SCALE
EOF

ENGINE_PORTS=()
start_engines() {  # start_engines N
  ENGINE_PORTS=()
  local i
  for ((i = 0; i < $1; i++)); do
    start_emulator "engine$i" "" -c "$BENCH_TMP/engine.yaml"
    ENGINE_PORTS+=("$EMU_PORT")
    RUN_PIDS+=("$EMU_PID")
  done
}

routing_yaml() {  # routing_yaml POLICY [FLOW]
  case "$1" in
    random) echo "routing: {policy: random$2}" ;;
    round_robin) echo "routing: {policy: round_robin$2}" ;;
    least_queue) echo "routing: {policy: engine, weights: {prefix: 0, queue: 1, kv_cache: 0, lora: 0}$2}" ;;
    latency) echo "" ;;
    prefix_load) echo "routing: {policy: engine$2}" ;;
    *) echo "unknown policy $1" >&2; exit 2 ;;
  esac
}

start_pool_gateway() {  # start_pool_gateway NAME ROUTING_YAML [GOVERNANCE_YAML]
  local cfg="$BENCH_TMP/$1.yaml" p
  {
    echo "region: local"
    echo "workers: 1"
    echo "listen: {host: 127.0.0.1, port: 0}"
    echo "admin: {host: 127.0.0.1, port: 0}"
    echo 'access_log: ""'
    echo "log_level: warn"
    [[ -n "${3:-}" ]] && echo "$3"
    echo "models:"
    echo "  - name: m"
    echo "    deployments:"
    echo "      - name: pool"
    echo "        timeouts: {first_byte_ms: 600000, total_ms: 1200000}"
    [[ -n "$2" ]] && echo "        $2"
    echo "        endpoints:"
    for p in "${ENGINE_PORTS[@]}"; do
      echo "          - {url: \"http://127.0.0.1:$p\", region: local, max_concurrent: 100000}"
    done
  } >"$cfg"
  serve_gateway "$1" ""
  RUN_PIDS+=("$GW_PID")
}


# The engines' own prefix-cache counters, summed: "hits queries preemptions".
engine_counters() {
  local p
  for p in "${ENGINE_PORTS[@]}"; do curl -sf "http://127.0.0.1:$p/metrics"; done | awk '
    /^vllm:prefix_cache_hits_total/ {h += $NF}
    /^vllm:prefix_cache_queries_total/ {q += $NF}
    /^vllm:num_preemptions_total/ {p += $NF}
    END {printf "%d %d %d\n", h, q, p}'
}

stream_json() {  # stream_json NAME RATE TENANTS PREFIX QUESTION MAX_TOKENS [KEY] [PRIORITY] [TENANT_BASE]
  printf '{"name":"%s","rate":%s,"tenants":%s,"prefix_words":%s,"question_words":%s,"max_tokens":%s' \
    "$1" "$2" "$3" "$4" "$5" "$6"
  [[ -n "${7:-}" ]] && printf ',"key":"%s"' "$7"
  [[ -n "${8:-}" ]] && printf ',"priority":"%s"' "$8"
  printf ',"tenant_base":%s}' "${9:-0}"
}

run_client() {  # run_client STREAMS_JSON: prints the client's JSON line
  node "$CLIENT" "{\"port\":$GW_PORT,\"duration_s\":$DURATION,\"seed\":$SEED,\"drain_s\":300,\"streams\":[$1]}"
}

echo "# engine routing benchmark: engines {$ENGINES}, rates/engine {$RATES}, ${DURATION}s each," \
  "time_scale $SCALE, $TENANTS tenants x $PREFIX_WORDS-word prefix, $QUESTION_WORDS-word questions," \
  "$MAX_TOKENS output tokens, $BLOCKS KV blocks/engine; $(bench_env_note)"

if [[ " $PARTS " == *" prefix "* ]]; then
  echo
  echo "## prefix"
  echo "| engines | req/s | policy | TTFT p50 s | p90 s | p99 s | out tok/s | hit rate | best | hit/best | preempt | failed |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for n in $ENGINES; do
    for per in $RATES; do
      rate="$(python3 -c "print(round($per * $n, 3))")"
      for policy in $POLICIES; do
        start_engines "$n"
        start_pool_gateway "gw-$policy" "$(routing_yaml "$policy" "")"
        out="$(run_client "$(stream_json llm "$rate" "$TENANTS" "$PREFIX_WORDS" "$QUESTION_WORDS" "$MAX_TOKENS")")"
        read -r hits queries preempt <<<"$(engine_counters)"
        stop_run
        python3 - "$n" "$rate" "$policy" "$hits" "$queries" "$preempt" "$out" <<'PY'
import json, sys
n, rate, policy, hits, queries, preempt, out = sys.argv[1:]
o = json.loads(out)
s = o["streams"]["llm"]
hit = int(hits) / max(1, int(queries))
best = s["best_hit_rate"]
print(f"| {n} | {rate} | {policy} | {s['ttft_p50']} | {s['ttft_p90']} | {s['ttft_p99']} | "
      f"{o['total']['tokens_per_s']} | {hit:.3f} | {best:.3f} | {hit / best if best else 0:.2f} | "
      f"{preempt} | {s['failed']} |")
PY
      done
    done
  done
fi

# Keys for two teams (fairness: team needs access control on).
make_team_key() {  # make_team_key ADMIN_PORT TEAM
  local auth="authorization: Bearer $INFERA_ADMIN_TOKEN"
  curl -sf -H "$auth" -d "{\"name\":\"$2\",\"rpm\":1000000000,\"tpm\":1000000000000}" \
    "http://127.0.0.1:$1/admin/teams" >/dev/null
  curl -sf -H "$auth" -d "{\"team\":\"$2\",\"rpm\":1000000000,\"tpm\":1000000000000}" \
    "http://127.0.0.1:$1/admin/keys" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'
}

first_n="${ENGINES%% *}"
# Twice the pool's prefill capacity in unshared 1,500-word prompts: an engine computes about
# 1000 / (17.25 us x scale) prompt tokens per second.
heavy_rate="$(python3 -c "print(round(2 * $first_n * 1000 / (0.01725 * $SCALE) / 1540, 2))")"
FLOW=", max_waiting: 4, flow_control: {fairness: team, queue_timeout_ms: 600000}"
GOV="governance: {store: \"sqlite:$BENCH_TMP/gov-@RUN@.db\", key_secret: bench-secret-0123456789abcdef0123456789}"

two_team_run() {  # two_team_run LABEL WITH_HEAVY(0|1) HEAVY_PRIORITY [FLOW]: the client's JSON line
  start_engines "$first_n"
  start_pool_gateway "gw-$1" "$(routing_yaml prefix_load "${4-$FLOW}")" "${GOV/@RUN@/$1}"
  local light heavy streams
  light="$(make_team_key "$GW_ADMIN" light)"
  heavy="$(make_team_key "$GW_ADMIN" heavy)"
  streams="$(stream_json light "$LIGHT_RATE" 4 200 20 "$MAX_TOKENS" "$light" "" 1000)"
  if [[ "$2" == "1" ]]; then
    # Every heavy prompt its own tenant: nothing shared, all prefill.
    streams+=",$(stream_json heavy "$heavy_rate" 1000000 1500 40 "$MAX_TOKENS" "$heavy" "$3" 0)"
  fi
  run_client "$streams"
  stop_run
}

report_pair() {  # report_pair LABEL ALONE_JSON WITH_JSON STREAM
  python3 - "$@" <<'PY'
import json, sys
label, alone, both, name = sys.argv[1:]
a = json.loads(alone)["streams"][name]
b = json.loads(both)
w = b["streams"][name]
h = b["streams"].get("heavy", {})
print(f"| {label} | {a['ttft_p50']} | {a['ttft_p90']} | {w['ttft_p50']} | {w['ttft_p90']} | "
      f"**{w['ttft_p90'] / a['ttft_p90']:.2f}x** | {w['failed']} | {h.get('sent', 0)} sent, "
      f"{h.get('ok', 0)} ok, TTFT p50 {h.get('ttft_p50')} s, {h.get('statuses', {})} |")
PY
}

if [[ " $PARTS " == *" fairness "* || " $PARTS " == *" priority "* ]]; then
  echo
  echo "## flow control ($first_n engines, prefix_load, max_waiting 4; heavy/batch at $heavy_rate req/s of 1,540-token unshared prompts; light/interactive $LIGHT_RATE req/s)"
  echo "| case | alone TTFT p50 s | alone p90 s | beside TTFT p50 s | beside p90 s | p90 / alone | failed | the other stream |"
  echo "|---|---|---|---|---|---|---|---|"
  alone="$(two_team_run alone 0 "")"
  if [[ " $PARTS " == *" fairness "* ]]; then
    both="$(two_team_run fair 1 "")"
    report_pair "light team beside a heavy team (same priority)" "$alone" "$both" light
    both="$(two_team_run nofc 1 "" "")"
    report_pair "the same without flow control (prefix_load only)" "$alone" "$both" light
  fi
  if [[ " $PARTS " == *" priority "* ]]; then
    # Priority alone: no fairness between the two teams, so only the class orders them.
    both="$(two_team_run prio 1 batch "${FLOW/fairness: team/fairness: none}")"
    report_pair "interactive beside batch-class load" "$alone" "$both" light
  fi
fi
