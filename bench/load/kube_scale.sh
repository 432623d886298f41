#!/usr/bin/env bash
# kube_scale.sh INFERA [NODES] [PODS]: `infera sched serve` against the test API server
# (tests/kube/fake_apiserver.mjs) with NODES GPU nodes (8 GPUs each, A10/A100 alternating) and
# PODS pending pods (whole, half and no GPUs; the mix below), all loaded
# before the scheduler starts. Prints the time to bind them all, the binding rate, the engine's
# decision rate (from infera_sched_decision_seconds), the scheduler's peak RSS, and the share of
# free GPUs on empty nodes at the end. Defaults: 5000 nodes, 50000 pods.
set -euo pipefail
infera="$1"
nodes="${2:-5000}"
pods="${3:-50000}"
src="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'kill $api_pid $sched_pid 2>/dev/null || true; rm -rf "$work"' EXIT
sched_pid=""
node "$src/tests/kube/fake_apiserver.mjs" --port-file "$work/port" --fake-kubelet --bookmark-ms 1000 \
  >"$work/api.out" 2>&1 &
api_pid=$!
for _ in $(seq 1 500); do [[ -s "$work/port" ]] && break; sleep 0.02; done
api="http://127.0.0.1:$(cat "$work/port")"
node_tpl=$(node -e 'const n=JSON.parse(require("fs").readFileSync(process.argv[1]));n.status.allocatable["nvidia.com/gpu"]="8";n.status.allocatable.cpu="96";n.status.allocatable.memory="768Gi";process.stdout.write(JSON.stringify(n))' \
  "$src/tests/testdata/kube/node.json")
half=$((nodes / 2))
for product in A10 A100; do
  tpl=$(node -e 'const n=JSON.parse(process.argv[1]);n.metadata.labels["nvidia.com/gpu.product"]=process.argv[2];process.stdout.write(JSON.stringify(n))' "$node_tpl" "$product")
  curl -sS -X POST "$api/_test/bulk" -d "{\"resource\":\"nodes\",\"prefix\":\"gpu-$product\",\"count\":$half,\"template\":$tpl}" >/dev/null
done
curl -sS -X POST "$api/api/v1/namespaces" -H 'content-type: application/json' -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ml"}}' >/dev/null
# The mix: 45% 1 GPU, 30% half a GPU, 15% 2 GPUs, 10% CPU-only: 0.9 GPU a pod on average, so
# 50,000 pods ask for ~45,000 of the 40,000 GPUs (some stay pending, as on a busy cluster).
mix=("1:45" "500m:30" "2:15" "0:10")
for m in "${mix[@]}"; do
  gpus=${m%%:*}
  share=${m##*:}
  count=$((pods * share / 100))
  tpl=$(node -e '
    const p=JSON.parse(require("fs").readFileSync(process.argv[1]));const g=process.argv[2];
    const c=p.spec.containers[0];
    c.resources.requests={cpu:"2",memory:"8Gi"};
    if (g==="500m") {c.resources.limits={"nvidia.com/gpu":"1"};p.metadata.annotations={"infera.ai/gpu-milli":"500"};}
    else if (g==="0") delete c.resources.limits;
    else c.resources.limits={"nvidia.com/gpu":g};
    process.stdout.write(JSON.stringify(p))' "$src/tests/testdata/kube/gpu-pod.json" "$gpus")
  curl -sS -X POST "$api/_test/bulk" -d "{\"resource\":\"pods\",\"namespace\":\"ml\",\"prefix\":\"p$gpus\",\"count\":$count,\"template\":$tpl}" >/dev/null
done
total=$(curl -s "$api/_test/stats" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).resourceVersion))')
cat >"$work/sched.yaml" <<YAML
kube: {api_server: "$api", retry_interval_ms: 60000, watch_timeout_s: 600, max_binds_in_flight: 32}
policy: ${POLICY:-infera}
metrics: {port: 0}
YAML
start=$(date +%s.%N)
"$infera" sched serve -c "$work/sched.yaml" --log-level warn >"$work/sched.log" 2>&1 &
sched_pid=$!
for _ in $(seq 1 500); do grep -q 'metrics http' "$work/sched.log" && break; sleep 0.02; done
mport=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/sched.log")
peak_kb=0
first_bind=""
last=-1
stable=0
while :; do
  binds=$(curl -s "$api/_test/stats" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).binds))')
  rss=$(awk '/VmRSS/ {print $2}' /proc/$sched_pid/status)
  (( rss > peak_kb )) && peak_kb=$rss
  # Done when bindings have started and their count stops moving for 3 s (what fits is bound;
  # the rest is pending). The first pass decides every pending pod before it binds.
  if [[ "$binds" == "$last" && "$binds" != 0 ]]; then stable=$((stable + 1)); else stable=0; fi
  [[ -z "$first_bind" && "$binds" != 0 ]] && first_bind=$(date +%s.%N)
  last=$binds
  (( stable >= 6 )) && break
  sleep 0.5
done
end=$(date +%s.%N)
metrics=$(curl -s "http://127.0.0.1:$mport/metrics")
dsum=$(awk '$1=="infera_sched_decision_seconds_sum" {print $2}' <<<"$metrics")
dcount=$(awk '$1=="infera_sched_decision_seconds_count" {print $2}' <<<"$metrics")
empty=$(awk '$1=="infera_sched_free_gpus_on_empty_nodes_ratio" {print $2}' <<<"$metrics")
alloc=$(awk '$1=="infera_sched_gpus{state=\"allocated\"}" {print $2}' <<<"$metrics")
cap=$(awk '$1=="infera_sched_gpus{state=\"capacity\"}" {print $2}' <<<"$metrics")
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a - 3}')
echo "nodes $nodes, pods $pods (objects loaded: rv $total)"
bind_s=$(awk -v a="$first_bind" -v b="$end" 'BEGIN {printf "%.1f", b - a - 3}')
echo "bound $last pods ${elapsed} s after start; binding took ${bind_s} s: $(awk -v n="$last" -v t="$bind_s" 'BEGIN {printf "%.0f", n / t}') bindings/s (the test API server's rate)"
echo "engine: $dcount decisions in ${dsum} s: $(awk -v n="$dcount" -v t="$dsum" 'BEGIN {printf "%.0f", n / t}') decisions/s"
echo "GPUs allocated $alloc of $cap; free GPUs on empty nodes: $empty"
echo "scheduler peak RSS: $((peak_kb / 1024)) MiB"
