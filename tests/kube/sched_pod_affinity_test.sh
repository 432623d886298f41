#!/usr/bin/env bash
# Inter-pod constraints end to end against the test API server, with kubectl's own pod JSON
# (tests/testdata/kube/spread-pod.json: required anti-affinity by kubernetes.io/hostname):
#   - three replicas on three 4-GPU nodes are bound one to a node, though packing alone would
#     stack them;
#   - a fourth waits with a FailedScheduling Event naming the inter-pod constraints, and so does a
#     plain pod with the same label (the replicas' anti-affinity is symmetric);
#   - deleting one replica lets the fourth in, on the node it left;
#   - a hard zone spread (maxSkew 1) keeps two zones even, the zone with the more nodes included;
#   - preferred anti-affinity and a ScheduleAnyway spread (preferred-pod.json) spread replicas
#     without ever keeping one pending.
#   sched_pod_affinity_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
zone_node() {  # zone_node NAME ZONE: a 4-GPU A10 node in ZONE
  node_json "$1" 4 A10 | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const n=JSON.parse(s);
    n.metadata.labels["topology.kubernetes.io/zone"]=process.argv[1];
    process.stdout.write(JSON.stringify(n))})' "$2" | k create --validate=false -f - >/dev/null
}
zone_node n-a z1
zone_node n-b z1
zone_node n-c z2
cat >"$work/sched.yaml" <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
scheduling:
  queues: [{name: ml, max: {gpus: {"*": 12}}}]
  placement: [{match: {namespace: ml}, queue: ml}]
YAML
start_sched "$infera" "$work/sched.yaml" "$work/serve.log"

# replica NAME: spread-pod.json with only its required anti-affinity (app=serve, by host).
replica() {
  node -e '
    const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    p.metadata.name = process.argv[2];
    p.spec.containers[0].name = process.argv[2];
    delete p.spec.affinity.podAffinity;
    delete p.spec.topologySpreadConstraints;
    process.stdout.write(JSON.stringify(p));' "$FIXTURES/spread-pod.json" "$1" |
    k create --validate=false -f - >/dev/null
}
for i in 0 1 2; do replica "serve-$i"; done
all_bound() { for i in 0 1 2; do pod_bound "serve-$i" || return 1; done; }
check "three replicas are bound" wait_for 20 all_bound
nodes_used() { for i in 0 1 2; do pod_node "serve-$i"; echo; done | sort -u | grep -c .; }
check "... one to a node" test "$(nodes_used)" = 3
replica serve-3
check "a fourth waits, its reason naming the inter-pod constraints" \
  wait_for 20 has_event serve-3 FailedScheduling "3 of 3 nodes ruled out by its pod affinity, anti-affinity or topology spread"
gpu_pod_json plain 1 "" '{"app":"serve"}' | k create --validate=false -f - >/dev/null
check "a plain pod with the replicas' label waits too (their anti-affinity is symmetric)" \
  wait_for 20 has_event plain FailedScheduling "ruled out by its pod affinity"
gpu_pod_json other 1 "" '{"app":"other"}' | k create --validate=false -f - >/dev/null
check "a pod with another label is bound" wait_for 20 pod_bound other
freed=$(pod_node serve-1)
k delete pod serve-1 -n ml --wait=false >/dev/null
k delete pod plain -n ml --wait=false >/dev/null
check "deleting a replica lets the fourth in, on the node it left" wait_for 20 pod_on serve-3 "$freed"

# A hard zone spread, maxSkew 1: z1 has two nodes, z2 one; four pods go two and two.
spread() {
  node -e '
    const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    p.metadata.name = process.argv[2];
    p.metadata.labels = {app: "api"};
    p.spec.containers[0].name = process.argv[2];
    delete p.spec.affinity;
    p.spec.topologySpreadConstraints = [{maxSkew: 1, topologyKey: "topology.kubernetes.io/zone",
      whenUnsatisfiable: "DoNotSchedule", labelSelector: {matchLabels: {app: "api"}}}];
    process.stdout.write(JSON.stringify(p));' "$FIXTURES/spread-pod.json" "$1" |
    k create --validate=false -f - >/dev/null
}
for i in 0 1 2 3; do spread "api-$i"; done
spread_bound() { for i in 0 1 2 3; do pod_bound "api-$i" || return 1; done; }
check "four spread pods are bound" wait_for 20 spread_bound
in_z2() { local c=0; for i in 0 1 2 3; do [[ "$(pod_node "api-$i")" == n-c ]] && c=$((c + 1)); done; echo $c; }
check "... two of them in z2, the zone with one node" test "$(in_z2)" = 2

# Soft terms (tests/testdata/kube/preferred-pod.json: preferred anti-affinity with app=serve by
# host, weight 100, and a ScheduleAnyway zone spread): with the cluster emptied, three replicas go
# one to a node, where packing alone would stack them; a fourth is bound all the same (soft), in
# z2, the zone with fewer of them.
for p in serve-0 serve-2 serve-3 other api-0 api-1 api-2 api-3; do
  k delete pod "$p" -n ml --wait=false >/dev/null
done
emptied() { for p in serve-0 serve-2 serve-3 other api-0 api-1 api-2 api-3; do pod_gone "$p" || return 1; done; }
check "the cluster is emptied" wait_for 20 emptied
preferred() {
  node -e '
    const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    p.metadata.name = process.argv[2];
    p.spec.containers[0].name = process.argv[2];
    process.stdout.write(JSON.stringify(p));' "$FIXTURES/preferred-pod.json" "$1" |
    k create --validate=false -f - >/dev/null
}
for i in 0 1 2; do
  preferred "pref-$i"
  check "preferred replica $i is bound" wait_for 20 pod_bound "pref-$i"
done
pref_nodes() { for i in 0 1 2; do pod_node "pref-$i"; echo; done | sort -u | grep -c .; }
check "... one to a node (preferred anti-affinity)" test "$(pref_nodes)" = 3
preferred pref-3
check "a fourth is bound as well (the terms are soft), in z2" wait_for 20 pod_on pref-3 n-c
kill -TERM "$SCHED_PID"
check "sched serve stops on SIGTERM" wait_for 10 bash -c "! kill -0 $SCHED_PID"
check "... with exit status 0" exited_ok "$SCHED_PID"
finish
