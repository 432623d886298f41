#!/usr/bin/env bash
# Live re-packing as a recommendation: two 8-GPU nodes each hold pods already bound (by someone
# else); `infera sched serve` with `repack:` plans moves that empty a whole node and posts them as
# RepackRecommended Events and infera_sched_repack_* metrics, and moves nothing. A tier-1 pod is
# never proposed (only preemptible tiers move); `dry_run: false` is refused by the config check.
# A PodDisruptionBudget that allows no disruption of a pod takes its move out of the plan; one with
# room lets it back; a second budget over the same pod takes it out again.
#   sched_repack_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
node_json gpu-a10-0 8 A10 | k create --validate=false -f - >/dev/null
node_json gpu-a10-1 8 A10 | k create --validate=false -f - >/dev/null
node_json gpu-a10-2 8 A10 | k create --validate=false -f - >/dev/null
node_json gpu-a10-3 8 A10 | k create --validate=false -f - >/dev/null
bound_pod() {  # bound_pod NAME GPUS NODE TIER: a pod some earlier scheduler bound to NODE
  gpu_pod_json "$1" "$2" "{\"infera.ai/tier\":\"$4\"}" "{\"app\":\"$1\"}" | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s);
    p.spec.nodeName=process.argv[1];process.stdout.write(JSON.stringify(p))})' "$3" |
    k create --validate=false -f - >/dev/null
}
# gpu-a10-0: one 1-GPU tier-2 pod (one move frees it); gpu-a10-1: two 2-GPU tier-2 pods;
# gpu-a10-2: a 1-GPU tier-1 pod (never moves, so never freed); gpu-a10-3 is empty.
bound_pod small 1 gpu-a10-0 2
bound_pod mid1 2 gpu-a10-1 2
bound_pod mid2 2 gpu-a10-1 2
bound_pod keep 1 gpu-a10-2 1

cat >"$work/bad.yaml" <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA"}
repack: {dry_run: false}
YAML
check "dry_run: false is refused with its key" bash -c "! '$infera' sched validate-serve '$work/bad.yaml' >'$work/bad.out' 2>&1 && grep -q 'repack.dry_run' '$work/bad.out'"

cat >"$work/sched.yaml" <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
repack: {interval_ms: 200, max_moves: 1, min_age_s: 0}
YAML
"$infera" sched serve -c "$work/sched.yaml" >"$work/serve.log" 2>&1 &
PIDS+=("$!")
check "sched serve started" wait_for 10 grep -q 'metrics http' "$work/serve.log"
mport=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
count_events() {  # count_events REASON
  k get events -n ml -o json | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).items.filter(e=>e.reason===process.argv[1]).length))' "$1"
}
check "the 1-GPU pod is recommended to move, freeing its node" \
  wait_for 20 has_event small RepackRecommended "re-packing frees node gpu-a10-0 (8 GPUs)"
to_used_node() {
  has_event small RepackRecommended "recommend moving to gpu-a10-" &&
    not_has_event small RepackRecommended "recommend moving to gpu-a10-3"
}
check "... onto a node in use, never the empty one" to_used_node
check "... said to be a dry run" has_event small RepackRecommended "dry run: nothing is moved"
check "the metrics show the plan" wait_for 10 bash -c "curl -s http://127.0.0.1:$mport/metrics | grep -q '^infera_sched_repack_recommended_moves 1' && curl -s http://127.0.0.1:$mport/metrics | grep -q '^infera_sched_repack_freeable_nodes 1'"
plans_now() { curl -s "http://127.0.0.1:$mport/metrics" | sed -n 's/^infera_sched_repack_plans_total \([0-9]*\).*/\1/p'; }
plans_at_least() { [[ "$(plans_now)" -ge "$1" ]]; }
first=$(plans_now)
check "plans keep running" wait_for 10 plans_at_least $((first + 3))
check "the same recommendation is posted once" test "$(count_events RepackRecommended)" = 1
check "nothing moved" test "$(k get pod small -n ml -o jsonpath='{.spec.nodeName}')" = gpu-a10-0
check "the tier-1 pod is never proposed" not_has_event keep RepackRecommended ""

moves_are() { curl -s "http://127.0.0.1:$mport/metrics" | grep -q "^infera_sched_repack_recommended_moves $1\$"; }
pdb_json() {  # pdb_json NAME MIN_AVAILABLE SELECTOR
  printf '{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"%s","namespace":"ml"},"spec":{"minAvailable":%s,"selector":%s}}' "$1" "$2" "$3"
}
# minAvailable 1 of the one Running pod `small`: disruptionsAllowed 0.
pdb_json guard-small 1 '{"matchLabels":{"app":"small"}}' | k create --validate=false -f - >/dev/null
check "a budget allowing no disruption takes the move out of the plan" wait_for 10 moves_are 0
check "... and nothing new is posted" test "$(count_events RepackRecommended)" = 1
k delete pdb guard-small -n ml >/dev/null
# minAvailable 0, selected by expression: disruptionsAllowed 1, room for the one move.
pdb_json room-small 0 '{"matchExpressions":[{"key":"app","operator":"In","values":["small","other"]}]}' |
  k create --validate=false -f - >/dev/null
check "a budget with room for the move lets it back" wait_for 10 moves_are 1
events_are() { test "$(count_events RepackRecommended)" = "$1"; }
check "... and it is recommended again" wait_for 10 events_are 2
# A second budget over the same pod, even with room: the eviction API refuses a pod under two.
pdb_json room-small-2 0 '{"matchLabels":{"app":"small"}}' | k create --validate=false -f - >/dev/null
check "a pod under two budgets is not proposed" wait_for 10 moves_are 0
finish
