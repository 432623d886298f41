#!/usr/bin/env bash
# Interactive latency while a batch runs (issue 39; docs/batch.md, figures in docs/benchmarks.md
# "Batch inference"): does a batch yield to the people waiting for answers on the same engines?
#
# Emulated vLLM engines (`infera emulate` in engine mode, one process each, slowed by --scale),
# one `infera serve` (one worker, Release) with a `batch:` section, and bench/load/engine_client.js
# sending Poisson arrivals of interactive streaming chat completions for --duration seconds. Each
# case starts fresh engines and a fresh gateway:
#   alone       the interactive stream alone: its P90 time to first token is the baseline;
#   batch       the same stream while a batch of chat lines (batch.concurrency --batch-conc) runs
#               through the same model with nothing to hold it back (latency balancing, no cap,
#               no max_concurrent: requests queue in the engines);
#   protected   the same, with engine routing, flow control (max_waiting 2) and
#               max_batch_share --share: the batch waits behind interactive requests and holds at
#               most that share of each endpoint's max_concurrent (--max-concurrent);
#   borrowing   protected, plus batch_idle_ms --idle-ms: with no interactive request for that
#               long, the batch may fill the endpoints; the next interactive request takes the
#               share back.
# The batch is created before the stream starts and cancelled after it; its lines answered during
# the window give its throughput in each case (what the protection costs the batch), and its
# lines answered in the --idle-window seconds before the stream starts, its throughput with no
# interactive traffic at all.
#
# Usage: bench/load/batch_interactive.sh [--engines 2] [--rate 4] [--duration 40] [--scale 10]
#          [--batch-conc 32] [--share 0.25] [--max-concurrent 16] [--seed 1] [--idle-ms 2000]
#          [--idle-window 8] [--cases "alone batch protected borrowing"]
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENGINES=2 RATE=4 DURATION=40 SCALE=10 BATCH_CONC=32 SHARE=0.25 MAX_CONC=16 SEED=1 IDLE_MS=2000
IDLE_WINDOW=8 CASES="alone batch protected borrowing"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --engines) ENGINES="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --scale) SCALE="$2"; shift 2 ;;
    --batch-conc) BATCH_CONC="$2"; shift 2 ;;
    --share) SHARE="$2"; shift 2 ;;
    --max-concurrent) MAX_CONC="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --idle-ms) IDLE_MS="$2"; shift 2 ;;
    --idle-window) IDLE_WINDOW="$2"; shift 2 ;;
    --cases) CASES="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

bench_init node curl python3
CLIENT="$BENCH_ROOT/bench/load/engine_client.js"
TENANTS=8 PREFIX_WORDS=200 QUESTION_WORDS=40 MAX_TOKENS=32
BATCH_LINES=20000

cat >"$BENCH_TMP/engine.yaml" <<EOF
host: 127.0.0.1
port: 0
models: [m]
engine:
  num_gpu_blocks: 1600
  max_model_len: 4096
  time_scale: $SCALE
EOF

# The batch's input: chat lines of the interactive stream's size (a fresh prompt each).
python3 - "$BENCH_TMP/lines.jsonl" "$BATCH_LINES" "$QUESTION_WORDS" "$MAX_TOKENS" <<'PY'
import json, sys
path, n, words, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path, "w") as f:
    for i in range(n):
        text = " ".join(f"b{i}w{w}" for w in range(words + 200))
        f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "m", "max_tokens": max_tokens,
                                     "messages": [{"role": "user", "content": text}]}}) + "\n")
PY


start_case() {  # start_case NAME DEPLOYMENT_EXTRA_YAML MAX_CONCURRENT
  local cfg="$BENCH_TMP/$1.yaml" i
  local ports=()
  for ((i = 0; i < ENGINES; i++)); do
    start_emulator "$1-engine$i" "" -c "$BENCH_TMP/engine.yaml"
    ports+=("$EMU_PORT")
    RUN_PIDS+=("$EMU_PID")
  done
  {
    echo "workers: 1"
    echo "listen: {host: 127.0.0.1, port: 0}"
    echo "admin: {host: 127.0.0.1, port: 0}"
    echo 'access_log: ""'
    echo "log_level: warn"
    echo "models:"
    echo "  - name: m"
    echo "    deployments:"
    echo "      - name: pool"
    echo "        timeouts: {first_byte_ms: 600000, total_ms: 1200000}"
    [[ -n "$2" ]] && echo "        $2"
    echo "        endpoints:"
    for p in "${ports[@]}"; do
      echo "          - {url: \"http://127.0.0.1:$p\", max_concurrent: $3}"
    done
    echo "batch:"
    echo "  data_dir: $BENCH_TMP/$1-batch"
    echo "  concurrency: $BATCH_CONC"
    echo "  max_lines: 10000000"
    echo "  poll_ms: 20"
  } >"$cfg"
  serve_gateway "$1" ""
  RUN_PIDS+=("$GW_PID")
}

field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$1"; }

# start_batch: uploads the lines and creates the batch; waits until it runs. Sets BATCH_ID.
start_batch() {
  local file status
  file=$(curl -sf -F purpose=batch -F "file=@$BENCH_TMP/lines.jsonl" "http://127.0.0.1:$GW_PORT/v1/files" | field '["id"]')
  BATCH_ID=$(curl -sf -H 'content-type: application/json' \
    -d "{\"input_file_id\":\"$file\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}" \
    "http://127.0.0.1:$GW_PORT/v1/batches" | field '["id"]')
  for _ in $(seq 1 600); do
    status=$(curl -sf "http://127.0.0.1:$GW_PORT/v1/batches/$BATCH_ID" | field '["status"]')
    [[ "$status" == in_progress ]] && return 0
    sleep 0.1
  done
  echo "batch $BATCH_ID did not start: $status" >&2
  return 1
}
done_lines() { curl -sf "http://127.0.0.1:$GW_PORT/v1/batches/$BATCH_ID" | field '["request_counts"]["completed"]'; }

run_client() {
  node "$CLIENT" "{\"port\":$GW_PORT,\"duration_s\":$DURATION,\"seed\":$SEED,\"drain_s\":300,\"streams\":[{\"name\":\"interactive\",\"rate\":$RATE,\"tenants\":$TENANTS,\"prefix_words\":$PREFIX_WORDS,\"question_words\":$QUESTION_WORDS,\"max_tokens\":$MAX_TOKENS}]}"
}

echo "# batch beside interactive traffic: $ENGINES engines (time_scale $SCALE), interactive $RATE req/s" \
  "for ${DURATION}s ($TENANTS tenants x $PREFIX_WORDS-word prefix, $QUESTION_WORDS-word questions," \
  "$MAX_TOKENS tokens), batch.concurrency $BATCH_CONC, endpoints max_concurrent $MAX_CONC; $(bench_env_note)"
echo
echo "| case | TTFT p50 s | p90 s | p99 s | p90 / alone | interactive failed | batch lines/s in the window | batch lines/s, no interactive traffic |"
echo "|---|---|---|---|---|---|---|---|"
alone_p90=""
[[ " $CASES " == *" alone "* ]] || { echo "--cases must include alone (the baseline)" >&2; exit 2; }
for c in $CASES; do
  case "$c" in
    alone|batch) extra="" conc=100000 ;;
    protected) extra="max_batch_share: $SHARE
        routing: {policy: engine, metrics_interval_ms: 20, max_waiting: 2, flow_control: {queue_timeout_ms: 600000}}"
      conc=$MAX_CONC ;;
    borrowing) extra="max_batch_share: $SHARE
        batch_idle_ms: $IDLE_MS
        routing: {policy: engine, metrics_interval_ms: 20, max_waiting: 2, flow_control: {queue_timeout_ms: 600000}}"
      conc=$MAX_CONC ;;
  esac
  start_case "$c" "$extra" "$conc"
  rate="-" idle_rate="-"
  if [[ "$c" != alone ]]; then
    start_batch
    # The batch with no interactive traffic yet.
    idle0=$(done_lines)
    i0=$(date +%s.%N)
    sleep "$IDLE_WINDOW"
    before=$(done_lines)
    idle_rate=$(python3 -c "print(round(($before - $idle0) / ($(date +%s.%N) - $i0), 1))")
    t0=$(date +%s.%N)
  fi
  out="$(run_client)"
  if [[ "$c" != alone ]]; then
    after=$(done_lines)
    t1=$(date +%s.%N)
    (( after < BATCH_LINES )) || echo "warning: the batch ended inside the window (raise BATCH_LINES)" >&2
    rate=$(python3 -c "print(round(($after - $before) / ($t1 - $t0), 1))")
    curl -sf -X POST "http://127.0.0.1:$GW_PORT/v1/batches/$BATCH_ID/cancel" >/dev/null
  fi
  stop_run
  read -r p50 p90 p99 failed <<<"$(python3 -c 'import json,sys; s=json.loads(sys.argv[1])["streams"]["interactive"]; st=",".join(f"{k}:{v}" for k,v in s["statuses"].items()); print(s["ttft_p50"], s["ttft_p90"], s["ttft_p99"], str(s["failed"]) + (f"({st})" if st else ""))' "$out")"
  [[ "$c" == alone ]] && alone_p90="$p90"
  ratio=$(python3 -c "print(round($p90 / $alone_p90, 2) if '$p90' != 'None' else '-')")
  echo "| $c | $p50 | $p90 | $p99 | ${ratio}x | $failed | $rate | $idle_rate |"
done
