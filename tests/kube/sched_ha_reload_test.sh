#!/usr/bin/env bash
# A config reload with two replicas. Both `infera sched serve` replicas read one file (as both pods
# of the Deployment mount one ConfigMap; identities from hostname + pid) with leader election on
# one Lease. Queue ml may use 2 GPUs: a pod beyond waits. The file is replaced (as a ConfigMap
# update is) raising the max to 4: both replicas apply it, the leader binds the waiting pod. The
# leader is killed; the standby takes the lease and schedules by the reloaded max (a pod the old
# max would refuse is bound, the next one waits at 4). No pod is bound twice.
#   sched_ha_reload_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
node -e 'const n=JSON.parse(require("fs").readFileSync(process.argv[1]));n.metadata.name="infera-system";process.stdout.write(JSON.stringify(n))' \
  "$FIXTURES/namespace.json" | k create --validate=false -f - >/dev/null
node_json gpu-a10-0 8 A10 | k create --validate=false -f - >/dev/null

sched_yaml() {  # sched_yaml MAX_GPUS
  cat <<YAML
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20, backoff_max_ms: 500}
metrics: {port: 0}
leader_election: {lease_duration_s: 2, renew_interval_ms: 200}
scheduling:
  queues:
    - name: ml
      max: {gpus: {"*": $1}}
  placement:
    - match: {namespace: ml}
      queue: ml
YAML
}
write_config() { sched_yaml "$1" >"$work/sched.yaml.new" && mv "$work/sched.yaml.new" "$work/sched.yaml"; }
write_config 2
"$infera" sched serve -c "$work/sched.yaml" >"$work/a.log" 2>&1 &
pid_a=$!
PIDS+=("$pid_a")
wait_for 10 grep -q 'acquired the lease' "$work/a.log" || { echo "replica a never led"; cat "$work/a.log"; exit 1; }
"$infera" sched serve -c "$work/sched.yaml" >"$work/b.log" 2>&1 &
pid_b=$!
PIDS+=("$pid_b")
check "replica b started as the standby" wait_for 10 grep -q 'metrics http' "$work/b.log"

pod() { gpu_pod_json "$1" "$2" | k create --validate=false -f - >/dev/null; }
pod p1 2
check "the leader binds within the max" wait_for 20 pod_bound p1
pod p2 1
check "a pod beyond max 2 waits" wait_for 20 has_event p2 FailedScheduling "max GPU quota (2 GPUs) reached"
write_config 4
check "the leader applies the new file" wait_for 20 grep -q 'reload (the file changed): applied' "$work/a.log"
check "the standby applies it too" wait_for 20 grep -q 'reload (the file changed): applied' "$work/b.log"
check "the waiting pod is bound under max 4" wait_for 20 pod_bound p2
check "only the leader bound (no 'bound' line in the standby's log)" file_lacks "$work/b.log" 'bound ml/'

kill -KILL "$pid_a"
pod p3 1
check "the standby takes the lease" wait_for 10 grep -q 'acquired the lease' "$work/b.log"
check "... and binds by the reloaded max (2 + 1 + 1 of 4)" wait_for 20 pod_bound p3
pod p4 1
check "... and holds at 4" wait_for 20 has_event p4 FailedScheduling "max GPU quota (4 GPUs) reached"
stats=$(api GET /_test/stats)
binds=$(node -e 'console.log(JSON.parse(process.argv[1]).binds)' "$stats")
conflicts=$(node -e 'console.log(JSON.parse(process.argv[1]).bindConflicts)' "$stats")
check "three bindings, no double binding (binds $binds, conflicts $conflicts)" \
  bash -c "[[ $binds == 3 && $conflicts == 0 ]]"
finish
