#!/usr/bin/env bash
# Idle reclaim from a real Prometheus: the test API server also serves a DCGM exporter stand-in
# (DCGM_FI_DEV_GPU_UTIL with dcgm-exporter's labels) that a real `prometheus` scrapes every second;
# `infera sched serve` queries Prometheus, warns the idle notebook (Warning Event), then evicts it
# through the Eviction API with an Event naming the policy; the busy training pod and the idle pod
# no policy covers stay, past the eviction of a second idle notebook that came with them (what a
# wrong policy would have done to them, it would have done by then). A first run with dry_run only
# reports.
#   sched_reclaim_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
command -v prometheus >/dev/null || { echo "prometheus not on PATH (Debian package prometheus)"; exit 1; }
start_apiserver "$work" --fake-kubelet --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
node_json gpu-a10-0 4 A10 | k create --validate=false -f - >/dev/null

prom_port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: dcgm
    scheme: https
    metrics_path: /_test/dcgm/metrics
    honor_labels: true
    tls_config: {ca_file: $CA}
    static_configs: [{targets: ["127.0.0.1:$API_PORT"]}]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
PIDS+=("$!")
check "prometheus is ready" wait_for 30 curl -sf "http://127.0.0.1:$prom_port/-/ready"

serve() {  # serve NAME DRY_RUN
  cat >"$work/$1.yaml" <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
reclaim:
  prometheus_url: http://127.0.0.1:$prom_port
  interval_ms: 300
  warn_before_s: 1
  dry_run: $2
scheduling:
  idle_reclaim:
    - {name: idle-notebooks, match: {labels: {kind: notebook}}, idle_hours: 0.0005, utilization_below: 0.05}
YAML
  "$infera" sched serve -c "$work/$1.yaml" >"$work/$1.log" 2>&1 &
  SERVE_PID=$!
  PIDS+=("$SERVE_PID")
  wait_for 10 grep -q 'metrics http' "$work/$1.log" || { echo "sched serve did not start"; cat "$work/$1.log"; exit 1; }
}
bound() { pod_bound "$@"; }
gone() { pod_gone "$@"; }

# Dry run first: it warns and reports, evicts nothing.
serve dry true
gpu_pod_json nb 1 '' '{"kind":"notebook"}' | k create --validate=false -f - >/dev/null
check "notebook bound" wait_for 20 bound nb
api POST /_test/dcgm '{"ml/nb": 0}' >/dev/null
check "dry run: the idle notebook is warned" wait_for 30 has_event nb IdleReclaimWarning "idle policy idle-notebooks"
check "dry run: the report says what would happen" wait_for 30 has_event nb IdleReclaim "dry run: would evict"
check "dry run: nothing evicted" bound nb
kill "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null

# For real.
serve real false
gpu_pod_json train 1 '' '{"kind":"training"}' | k create --validate=false -f - >/dev/null
gpu_pod_json stray 1 | k create --validate=false -f - >/dev/null
gpu_pod_json nb2 1 '' '{"kind":"notebook"}' | k create --validate=false -f - >/dev/null
three_bound() { bound train && bound stray && bound nb2; }
check "training, unlabelled and a second notebook pod bound" wait_for 20 three_bound
api POST /_test/dcgm '{"ml/nb": 0, "ml/train": 87, "ml/stray": 0, "ml/nb2": 0}' >/dev/null
check "Prometheus has the DCGM series" wait_for 30 bash -c "curl -s 'http://127.0.0.1:$prom_port/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL' | grep -q '\"pod\":\"train\"'"
warned_for_real() {
  k get events -n ml -o json | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.exit(JSON.parse(s).items.some(e=>
      e.involvedObject.name==="nb"&&e.reason==="IdleReclaimWarning"&&e.message.includes("evicted in 1 s unless it is used")&&!e.message.includes("dry run"))?0:1))'
}
check "the idle notebook is warned (not the dry run's warning)" wait_for 30 warned_for_real
check "the idle notebook is evicted" wait_for 30 gone nb
check "... with an Event naming the policy" wait_for 10 has_event nb IdleReclaimed "idle policy idle-notebooks"
check "the notebook idle since the other two came is evicted too" wait_for 30 gone nb2
check "the busy training pod stays" bound train
check "... never warned" not_has_event train IdleReclaimWarning ""
check "the idle pod no policy covers stays" bound stray
check "... never warned" not_has_event stray IdleReclaimWarning ""
mport=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/real.log")
check "reclaim counted (two notebooks)" wait_for 10 bash -c "curl -s http://127.0.0.1:$mport/metrics | grep -q 'infera_sched_idle_reclaims_total{policy=\"idle-notebooks\",action=\"evicted\"} 2\$'"
finish
