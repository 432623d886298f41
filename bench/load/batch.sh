#!/usr/bin/env bash
# Batch inference against the client-side loop it replaces, in one run, on one `infera serve`
# (Release) with an in-process emulator:
#   1. lines/s: N chat lines as a batch (upload, create, poll to completed; batch.concurrency C)
#      against the same N requests sent by a client loop with C in flight (batch_client.js);
#   2. memory: the server's peak RSS growth over its idle RSS while a batch of N/10 lines runs and
#      while one of N lines runs (flat in the number of lines: the two should be close).
# Usage: bench/load/batch.sh [N] [C]      (defaults 100000 and 16)
# Prints a summary table; docs/benchmarks.md ("Batch inference") has the figures.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
shopt -s inherit_errexit
N="${1:-100000}"
C="${2:-16}"
[[ "$N" =~ ^[0-9]+$ && "$N" -ge 100 && "$C" =~ ^[0-9]+$ && "$C" -ge 1 ]] || {
  echo "usage: $0 [LINES >= 100] [CONCURRENCY >= 1]" >&2; exit 2; }
bench_init node curl python3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

cat >"$BENCH_TMP/batch.yaml" <<YAML
workers: 2
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
access_log: ""
log_level: warn
emulators:
  e: {models: [m], ttft_ms: 2, token_ms: 1, default_max_tokens: 4}
models:
  - name: m
    deployments: [{endpoints: [{emulator: e}]}]
batch:
  data_dir: $BENCH_TMP/batch
  concurrency: $C
  max_lines: 10000000
  poll_ms: 20
YAML
serve_gateway batch ""

# lines FILE COUNT: COUNT chat lines.
lines() {
  python3 - "$1" "$2" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "m", "max_tokens": 4,
                                     "messages": [{"role": "user", "content": f"question {i}"}]}}) + "\n")
PY
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$GW_PID/status"; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$1"; }

# run_batch FILE: uploads FILE, runs it as a batch to completion; prints "seconds peak_rss_kb".
run_batch() {
  local file id batch status t0 t1 peak=0 r
  file=$(curl -sf -F purpose=batch -F "file=@$1" "http://127.0.0.1:$GW_PORT/v1/files" | field '["id"]')
  t0=$(date +%s.%N)
  id=$(curl -sf -H 'content-type: application/json' \
    -d "{\"input_file_id\":\"$file\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}" \
    "http://127.0.0.1:$GW_PORT/v1/batches" | field '["id"]')
  while :; do
    r=$(rss_kb); (( r > peak )) && peak=$r
    batch=$(curl -sf "http://127.0.0.1:$GW_PORT/v1/batches/$id")
    status=$(field '["status"]' <<<"$batch")
    [[ "$status" == completed || "$status" == failed || "$status" == cancelled ]] && break
    sleep 0.05
  done
  t1=$(date +%s.%N)
  [[ "$status" == completed ]] || { echo "batch ended $status: $batch" >&2; return 1; }
  [[ "$(field '["request_counts"]["completed"]' <<<"$batch")" == "$(wc -l <"$1")" ]] || {
    echo "batch did not answer every line: $batch" >&2; return 1; }
  echo "$(python3 -c "print(round($t1 - $t0, 3))") $peak"
  # The phases, from the batch's own timestamps (whole seconds): validating, running, finalizing.
  python3 -c "import json,sys; b=json.loads(sys.argv[1]); print('  phases of', b['request_counts']['total'], 'lines: validating', b['in_progress_at']-b['created_at'], 's, running', b['finalizing_at']-b['in_progress_at'], 's, finalizing', b['completed_at']-b['finalizing_at'], 's')" "$batch" >>"$BENCH_TMP/phases.txt"
}

lines "$BENCH_TMP/small.jsonl" $((N / 10))
lines "$BENCH_TMP/big.jsonl" "$N"
# Warm-up (connections, caches), then the idle RSS.
run_batch "$BENCH_TMP/small.jsonl" >/dev/null
idle=$(rss_kb)
read -r small_s small_peak < <(run_batch "$BENCH_TMP/small.jsonl")
read -r big_s big_peak < <(run_batch "$BENCH_TMP/big.jsonl")
loop=$(node "$here/batch_client.js" "$GW_PORT" "$BENCH_TMP/big.jsonl" "$C")
loop_s=$(field '["seconds"]' <<<"$loop")
[[ "$(field '["failed"]' <<<"$loop")" == 0 ]] || { echo "client loop failed: $loop" >&2; exit 1; }

tail -1 "$BENCH_TMP/phases.txt"
python3 - "$N" "$C" "$big_s" "$loop_s" "$idle" "$small_peak" "$big_peak" <<'PY'
import sys
n, c, big_s, loop_s, idle, small_peak, big_peak = sys.argv[1:]
n, big_s, loop_s = int(n), float(big_s), float(loop_s)
idle, small_peak, big_peak = int(idle), int(small_peak), int(big_peak)
print(f"batch inference, {n} chat lines, concurrency {c} (batch.concurrency and the client loop's)")
print(f"  batch (create to completed, output written): {big_s:8.2f} s  {n / big_s:9.0f} lines/s")
print(f"  client-side loop (same requests):            {loop_s:8.2f} s  {n / loop_s:9.0f} lines/s")
print(f"  batch / loop throughput: {loop_s / big_s:.2f}x")
print(f"  server RSS: idle {idle / 1024:.1f} MiB; peak growth {(small_peak - idle) / 1024:.1f} MiB "
      f"at {n // 10} lines, {(big_peak - idle) / 1024:.1f} MiB at {n} lines")
PY
