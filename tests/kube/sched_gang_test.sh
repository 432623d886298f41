#!/usr/bin/env bash
# A gang whose binding fails part-way is completed, not stranded. Three pods of one group (size 3)
# on one 8-GPU node; the test API server fails the first binding call (HTTP 500). The two members
# bound stay bound and keep their room; the third is placed again alone (the gang counts the
# members it already has) and bound. Without that, the gang would wait for good ("1 of 3 pods").
#   sched_gang_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --grace-ms-per-second 100 --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
node_json gpu-a10-0 8 A10 | k create --validate=false -f - >/dev/null
cat >"$work/sched.yaml" <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
YAML
start_sched "$infera" "$work/sched.yaml" "$work/serve.log"
all_bound() { pod_bound g1 && pod_bound g2 && pod_bound g3; }
stat() { api GET /_test/stats | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s)[process.argv[1]]))' "$1"; }

fail_next_bind() { api POST /_test/fail-binds '{"count":1,"status":500}' | grep -q '"count":1'; }
check "the next binding will fail" fail_next_bind
for g in g1 g2 g3; do
  gpu_pod_json "$g" 2 '{"infera.ai/group":"job1","infera.ai/group-size":"3"}' | k create --validate=false -f - >/dev/null
done
check "every member is bound" wait_for 20 all_bound
check "one binding failed (got $(stat bindsFailed))" test "$(stat bindsFailed)" = 1
check "three bindings succeeded (got $(stat binds))" test "$(stat binds)" = 3
check "the failure is counted" wait_for 5 bash -c "curl -s http://127.0.0.1:$MPORT/metrics | grep -q 'infera_sched_api_errors_total{op=\"bind\"} 1'"

for g in g1 g2 g3; do
  api POST "/api/v1/namespaces/ml/pods/$g/eviction" "{\"apiVersion\":\"policy/v1\",\"kind\":\"Eviction\",\"metadata\":{\"name\":\"$g\",\"namespace\":\"ml\"}}" >/dev/null
done
check "the old members are stopping" pod_deleting g1
gpu_pod_json h1 2 '{"infera.ai/group":"job1","infera.ai/group-size":"3"}' | k create --validate=false -f - >/dev/null
check "a new member alone waits: stopping members do not count" \
  wait_for 10 has_event h1 FailedScheduling "gang job1: 1 of 3 pods created"
check "... and is not bound" pod_unbound h1
for g in h2 h3; do
  gpu_pod_json "$g" 2 '{"infera.ai/group":"job1","infera.ai/group-size":"3"}' | k create --validate=false -f - >/dev/null
done
new_bound() { pod_bound h1 && pod_bound h2 && pod_bound h3; }
check "the new gang is bound once the old one is gone" wait_for 20 new_bound
finish
