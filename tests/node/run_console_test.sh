#!/usr/bin/env bash
# The web console in Debian's Chromium (playwright-core): `infera serve` with access control, the
# registry, the feature store (examples/features), the vector index, an `infera sched serve` (on
# the test API server of tests/kube) and two emulated deployments of one model, a registered model with two versions, an
# alias moved twice and an A/B experiment, then console_test.mjs drives the console at /ui.
# Screenshots go to WORK_DIR/shots.
# Usage: run_console_test.sh INFERA_BINARY NODE_MODULES WORK_DIR
set -euo pipefail
infera="$1"
node_modules="$2"
work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
source "$here/lib.sh"
require_module "$node_modules" playwright-core
[[ -x /usr/bin/chromium ]] || { echo "/usr/bin/chromium missing (scripts/install-deps.sh installs it)"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"/console.db* "$work/registry" "$work/features" "$work/vectors" "$work/batch" "$work/shots" "$work"/console.yaml*
# An `infera sched serve` against the test API server (tests/kube/fake_apiserver.mjs, HTTPS with a
# throwaway CA) for the Scheduler page: one 8-GPU A10 node, a queue with a guarantee and a max, a
# 2-GPU pod it binds.
rm -rf "$work/kube" && mkdir -p "$work/kube"
bash "$here/../fakes/make_test_pki.sh" "$work/kube/pki" >/dev/null
node "$here/../kube/fake_apiserver.mjs" --port-file "$work/kube/api.port" --tls-cert "$work/kube/pki/server.pem" \
  --tls-key "$work/kube/pki/server.key" --fake-kubelet >"$work/kube/api.out" 2>&1 &
API_PID=$!
SCHED_PID=""
trap 'kill $API_PID $SCHED_PID 2>/dev/null; wait $API_PID $SCHED_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 500); do [[ -s "$work/kube/api.port" ]] && break; sleep 0.02; done
[[ -s "$work/kube/api.port" ]] || { cat "$work/kube/api.out"; fail "test API server did not start"; }
api_url="https://127.0.0.1:$(cat "$work/kube/api.port")"
kcreate() {  # kcreate PATH < JSON
  curl -sSf --cacert "$work/kube/pki/ca.pem" -X POST -H 'content-type: application/json' --data-binary @- "$api_url$1" >/dev/null
}
kcreate /api/v1/namespaces <"$here/../testdata/kube/namespace.json" || fail "namespace not created"
node -e 'const n=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
  n.metadata.name="gpu-a10-0"; for (const r of [n.status.capacity,n.status.allocatable]) r["nvidia.com/gpu"]="8";
  process.stdout.write(JSON.stringify(n))' "$here/../testdata/kube/node.json" | kcreate /api/v1/nodes || fail "node not created"
cat >"$work/kube/sched.yaml" <<YAML
kube: {api_server: "$api_url", ca_file: "$work/kube/pki/ca.pem", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
scheduling:
  queues:
    - {name: ml, guaranteed: {gpus: {A10: 2}}, max: {gpus: {"*": 8}}}
  placement:
    - {match: {namespace: ml}, queue: ml, tier: 1}
YAML
"$infera" sched serve -c "$work/kube/sched.yaml" >"$work/kube/sched.log" 2>&1 &
SCHED_PID=$!
for _ in $(seq 1 500); do grep -q 'metrics http' "$work/kube/sched.log" && break; sleep 0.02; done
sched_metrics=$(sed -n 's|.*metrics \(http://127.0.0.1:[0-9]*\).*|\1|p' "$work/kube/sched.log")
[[ -n "$sched_metrics" ]] || { cat "$work/kube/sched.log"; fail "sched serve did not start"; }
node -e 'const p=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
  p.metadata.name="train-1"; p.spec.containers[0].resources.limits["nvidia.com/gpu"]="2";
  process.stdout.write(JSON.stringify(p))' "$here/../testdata/kube/gpu-pod.json" | kcreate /api/v1/namespaces/ml/pods || fail "pod not created"
for _ in $(seq 1 500); do
  curl -s "$sched_metrics/metrics" | grep -q 'infera_sched_queue_gpus{queue="ml",gpu_type="\*",kind="used"} 2' && break
  sleep 0.02
done
curl -s "$sched_metrics/metrics" | grep -q 'infera_sched_queue_gpus{queue="ml",gpu_type="\*",kind="used"} 2' ||
  { cat "$work/kube/sched.log"; fail "sched serve did not bind the pod"; }

cat > "$work/console.yaml" <<YAML
# The console test's gateway (this comment and the one on dep-b must survive a weight change).
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 2
log_level: warn
region: local
governance:
  store: sqlite:$work/console.db
  usage_flush_ms: 100
registry:
  data_dir: $work/registry
features:
  store: rocksdb
  data_dir: $work/features
  repository: $here/../../examples/features
vectors:
  data_dir: $work/vectors
  fsync: false
batch:
  data_dir: $work/batch
  poll_ms: 50
scheduler:
  metrics_url: $sched_metrics/metrics
# Both emulators answer in ~40 ms: the balancer (two weighted draws, the faster kept unless within
# 1.5x + 2 ms) then splits by weight, as the weight step checks; at ~4 ms a loaded box's jitter
# made one look faster and took traffic from the heavier weight (a=15 b=25 at weights 1:60).
emulators:
  a: {models: [chat, fraud-backend], ttft_ms: 40, token_ms: 1, default_max_tokens: 4}
  b: {models: [chat, fraud-backend], ttft_ms: 40, token_ms: 1, default_max_tokens: 4}
models:
  - name: chat
    price: {prompt_per_1m: 1.0, completion_per_1m: 2.0}
    deployments:
      - name: dep-a
        endpoints: [{emulator: a, region: local, weight: 1}]
      - name: dep-b   # the second deployment
        endpoints: [{emulator: b, region: local, weight: 1}]
  - name: fraud-backend
    deployments:
      - {name: fraud-v1, endpoints: [{emulator: a}]}
      - {name: fraud-v2, endpoints: [{emulator: b}]}
YAML
export INFERA_ADMIN_TOKEN="console-admin-$$"
start_serve "$infera" "$work/console.yaml" "$work/console-serve.out"
SERVE_LOGS+=("$work/kube/sched.log")
trap 'stop_and_check_serves $API_PID $SCHED_PID' EXIT
export INFERA_ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"

# Registry state for the registry page: two versions, champion moved 1 -> 2, an experiment.
echo '{"framework":"onnx"}' > "$work/meta.json"
"$infera" models create fraud --description "fraud scoring" >/dev/null
"$infera" models upload fraud "$work/meta.json" | grep -q "version 1" || fail "no version 1"
"$infera" models upload fraud "$work/meta.json" | grep -q "version 2" || fail "no version 2"
"$infera" models bind fraud --version 1 --deployment fraud-v1 >/dev/null
"$infera" models bind fraud --version 2 --deployment fraud-v2 >/dev/null
"$infera" models alias fraud champion 1 --reason "first release" --actor alice >/dev/null
"$infera" models alias fraud challenger 2 >/dev/null
"$infera" models alias fraud champion 2 --reason "v2 is better" --actor bob >/dev/null
"$infera" models experiment fraud --arm ctl=@champion:50 --arm new=@challenger:50 >/dev/null

# Simulator reports for the Scheduler page: the FGD protocol (3 policies, 2 seeds) and a 2-hour
# replay with the example queues (preemptions, evictions).
rm -rf "$work/sim-fgd" "$work/sim-replay"
"$infera" sched simulate --policy infera,fgd,best-fit --seeds 2 --no-progress -o "$work/sim-fgd" >"$work/sim-fgd.out" 2>&1 ||
  { cat "$work/sim-fgd.out"; fail "sched simulate (fgd)"; }
"$infera" sched simulate --mode replay --offered-load 1.0 --horizon 2 --policy infera --no-progress \
  --config "$here/../../examples/scheduler/queues.yaml" -o "$work/sim-replay" >"$work/sim-replay.out" 2>&1 ||
  { cat "$work/sim-replay.out"; fail "sched simulate (replay)"; }

NODE_PATH="$node_modules" ADMIN_URL="http://127.0.0.1:$ADMIN_PORT" DATA_URL="http://127.0.0.1:$PORT" \
  CONFIG="$work/console.yaml" SHOTS="$work/shots" SIM_FGD="$work/sim-fgd/report.json" \
  SIM_REPLAY="$work/sim-replay/report.json" node "$here/console_test.mjs"
