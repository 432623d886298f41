#!/usr/bin/env bash
# A preemptor's room is held while its victims stop. One 4-GPU node holds two tier-2 pods of team-b
# (2 GPUs each) that stop at different speeds (terminationGracePeriodSeconds 1 and 40; the test API
# server's kubelet takes 100 ms per second of grace). A third tier-2 pod waits for room; a tier-0
# pod of team-a, within the queue's 4-GPU guarantee, preempts both running ones. Once the quick
# victim is gone its 2 GPUs would fit the waiting pod, which the tier-0 pod outranks: the node is
# held for the nominee, the waiting pod is told so and stays pending, and the tier-0 pod is bound
# there once the slow victim is gone, after two evictions. Without the hold the waiting pod takes
# the room and is evicted in turn when the tier-0 pod still does not fit (a third eviction; a
# tier-1 pod there, never evicted, would keep the tier-0 pod out for good).
#   sched_preempt_hold_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --grace-ms-per-second 100 --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
node_json gpu-a10-0 4 A10 | k create --validate=false -f - >/dev/null

cat >"$work/sched.yaml" <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
scheduling:
  gpu_types: [{name: A10, rank: 1, cost: 1.0}]
  queues:
    - {name: team-a, guaranteed: {gpus: {A10: 4}}, max: {gpus: {"*": 8}}}
    - {name: team-b, max: {gpus: {"*": 8}}}
YAML
start_sched "$infera" "$work/sched.yaml" "$work/serve.log"

# pod NAME GPUS QUEUE TIER [GRACE_S]
pod() {
  gpu_pod_json "$1" "$2" "{\"infera.ai/queue\":\"$3\",\"infera.ai/tier\":\"$4\"}" | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s);
    if (process.argv[1]) p.spec.terminationGracePeriodSeconds=Number(process.argv[1]);
    process.stdout.write(JSON.stringify(p))})' "${5:-}" |
    k create --validate=false -f - >/dev/null
}

pod quick 2 team-b 2 1
pod slow 2 team-b 2 40
both_bound() { pod_bound quick && pod_bound slow; }
check "both tier-2 pods bound" wait_for 20 both_bound
pod waiter 2 team-b 2
check "the third tier-2 pod waits for room" wait_for 20 has_event waiter FailedScheduling "pod ml/waiter"
pod boss 4 team-a 0
check "the slow victim is stopping (deletionTimestamp)" wait_for 20 pod_deleting slow
check "the quick victim is gone" wait_for 20 pod_gone quick
check "... while the slow one still runs" pod_deleting slow
check "the waiting pod is told the room is held" \
  wait_for 10 has_event waiter FailedScheduling "held for preemptors waiting for their victims to stop: gpu-a10-0"
check "... and is not bound into it" pod_unbound waiter
check "the slow victim goes" wait_for 20 pod_gone slow
check "the tier-0 pod is bound on its node" wait_for 20 pod_on boss gpu-a10-0
check "the waiting pod still waits (no room left)" pod_unbound waiter
check "... and was never preempted" not_has_event waiter Preempted ""
preemptions() { curl -s "http://127.0.0.1:$MPORT/metrics" | awk '$1=="infera_sched_preemptions_total" {print $2}'; }
check "two evictions in all (got $(preemptions))" test "$(preemptions)" = 2
k get events -n ml -o json >"$work/events.json" 2>/dev/null
finish
