#!/usr/bin/env bash
# Node constraints and live reload, end to end against the test API server:
#   - a pod with a nodeSelector, required node affinity (In, DoesNotExist, matchFields) and
#     tolerations (kubectl's own JSON, tests/testdata/kube/constrained-pod.json) is bound to the
#     one node that matches and whose NoSchedule taint it tolerates;
#   - pods without tolerations never land on the tainted node; `kubectl taint` on another node
#     keeps them off it too (the pending pod's reason counts the excluded nodes), and removing the
#     taint lets the waiting pod in;
#   - sched.yaml edited in place (no signal): a raised queue max is taken and a pod waiting on it
#     is bound; a change that needs a restart (SIGHUP) and a file with an unknown key are refused
#     with the key named, and the running config stays; the webhook answers by the new rules;
#   - `kubectl cordon` on a node keeps its pods counted against their queue.
#   sched_constraints_reload_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --bookmark-ms 200
k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
# node_with NAME LABELS_JSON TAINTS_JSON: a 4-GPU A10 node with these extra labels and taints.
node_with() {
  node_json "$1" 4 A10 | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const n=JSON.parse(s);
    Object.assign(n.metadata.labels, JSON.parse(process.argv[1]));
    n.spec = Object.assign(n.spec || {}, {taints: JSON.parse(process.argv[2])});
    process.stdout.write(JSON.stringify(n))})' "$2" "$3" | k create --validate=false -f - >/dev/null
}
node_with n-reserved '{"topology.kubernetes.io/zone":"z2","pool":"train"}' '[{"key":"team","value":"vision","effect":"NoSchedule"}]'
node_with n-z1 '{"topology.kubernetes.io/zone":"z1","pool":"train"}' '[]'
node_with n-spot '{"topology.kubernetes.io/zone":"z2","pool":"batch","spot":"true"}' '[]'

sched_yaml() {  # sched_yaml MAX_GPUS [API_URL] [EXTRA]
  cat <<YAML
kube: {api_server: "${2:-$API_URL}", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20}
metrics: {port: 0}
webhook:
  port: 0
  tls: {cert_file: $work/pki/server.pem, key_file: $work/pki/server.key}
  cpu_per_gpu: $(( $1 / 2 ))
scheduling:
  queues:
    - name: ml
      max: {gpus: {"*": $1}}
  placement:
    - match: {namespace: ml}
      queue: ml
${3:-}
YAML
}
# Written whole to a new file and renamed over the old one, as a ConfigMap update does.
write_config() { "$@" >"$work/sched.yaml.new" && mv "$work/sched.yaml.new" "$work/sched.yaml"; }
write_config sched_yaml 6
"$infera" sched serve -c "$work/sched.yaml" >"$work/serve.log" 2>&1 &
sched_pid=$!
PIDS+=("$sched_pid")
check "sched serve started" wait_for 10 grep -q 'metrics http' "$work/serve.log"
mport=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
wport=$(sed -n 's|.*webhook https://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
node_of() { k get pod "$1" -n ml -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
on_node() { [[ "$(node_of "$1")" == "$2" ]]; }
bound() { [[ -n "$(node_of "$1")" ]]; }
plain() { gpu_pod_json "$1" "$2" | k create --validate=false -f - >/dev/null; }

# 1. The constrained pod: zone z2 (n-reserved, n-spot), pool train or batch without a spot label
#    (n-reserved only), and it tolerates team=vision:NoSchedule.
k create --validate=false -f "$FIXTURES/constrained-pod.json" >/dev/null
check "the constrained pod is bound to the only node that matches and whose taint it tolerates" \
  wait_for 20 on_node train n-reserved

# 2. A NoSchedule taint added with kubectl on n-spot: four plain pods fill n-z1, a fifth waits.
rebuilds() { curl -s "http://127.0.0.1:$mport/metrics" | sed -n 's/^infera_sched_engine_rebuilds_total \([0-9]*\).*/\1/p'; }
rebuilt_since() { [[ "$(rebuilds)" -gt "$1" ]]; }
before=$(rebuilds)
k taint nodes n-spot maintenance=now:NoSchedule >"$work/taint.out" 2>&1
check "kubectl taint is accepted" grep -q 'tainted' "$work/taint.out"
check "... and the node carries it" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get node n-spot -o jsonpath='{.spec.taints[0].key}') == maintenance ]]"
# The scheduler has seen it (a node change rebuilds its engine) before the pods come.
check "... and the scheduler took the change" wait_for 20 rebuilt_since "$before"
for i in 1 2 3 4; do plain "p$i" 1; done
all_bound() { for i in 1 2 3 4; do bound "p$i" || return 1; done; }
all_on() { for i in 1 2 3 4; do on_node "p$i" "$1" || return 1; done; }
check "four plain pods are bound" wait_for 20 all_bound
check "... all on the untainted node" all_on n-z1
plain p5 1
check "the fifth waits, its reason counting the nodes its tolerations exclude" \
  wait_for 20 has_event p5 FailedScheduling "2 of 3 nodes excluded by its node selector, node affinity or taints it does not tolerate"
k taint nodes n-spot maintenance- >/dev/null 2>&1
check "removing the taint lets it in" wait_for 20 on_node p5 n-spot
none_on() { for i in 1 2 3 4 5; do pod_not_on "p$i" "$1" || return 1; done; }
check "no plain pod was ever put on the reserved node" none_on n-reserved

# 3. Live reload. Queue ml holds 6 GPUs (1 + 5 in use): a 1-GPU pod waits on its quota.
plain q1 1
check "a pod beyond the queue's max waits on the quota" wait_for 20 has_event q1 FailedScheduling "max GPU quota (6 GPUs) reached"
write_config sched_yaml 10
check "the edited file is reloaded without a signal" wait_for 20 grep -q 'reload (the file changed): applied' "$work/serve.log"
check "... and the waiting pod is bound under the raised max" wait_for 20 bound q1
reloads() { curl -s "http://127.0.0.1:$mport/metrics" | sed -n "s/^infera_sched_config_reloads_total{result=\"$1\"} \([0-9]*\).*/\1/p"; }
check "the reload is counted" test "$(reloads applied)" = 1
check "the queue's max gauge follows" bash -c "curl -s http://127.0.0.1:$mport/metrics | grep -Eq '^infera_sched_queue_gpus\{queue=\"ml\",gpu_type=\"\*\",kind=\"max\"\} 10(\.0+)?$'"
review() {  # the webhook's patch for a 1-GPU pod: its CPU request after the per-GPU share
  curl -sS --cacert "$CA" -H 'content-type: application/json' \
    --data-binary @"$FIXTURES/admission/namespace_rule.request.json" "https://127.0.0.1:$wport/mutate" |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const r=JSON.parse(s).response;
      const p=r.patch?JSON.parse(Buffer.from(r.patch,"base64").toString()):[];
      const c=p.find(o=>o.path.endsWith("/resources/requests/cpu")||o.path.endsWith("/resources/requests"));
      console.log(c?JSON.stringify(c.value):"none")})'
}
review >"$work/review.out" 2>&1
check "the webhook answers by the reloaded rules (cpu_per_gpu 5)" grep -qx '"5"' "$work/review.out"

# A change that needs a restart is refused whole, by SIGHUP as by a file change.
write_config sched_yaml 12 "https://127.0.0.1:1"
check "a kube.api_server change is refused, naming the key" \
  wait_for 20 grep -q 'reload (the file changed): reload refused, these need a restart: kube' "$work/serve.log"
kill -HUP "$sched_pid"
check "... by SIGHUP too" \
  wait_for 20 grep -q 'reload (SIGHUP): reload refused, these need a restart: kube' "$work/serve.log"
# An unknown key: refused with its path and line.
write_config sched_yaml 12 "" "  surprise: 1"
check "an unknown key is refused with its path and line" \
  wait_for 20 grep -Eq '^  scheduling\.surprise \(line [0-9]+\): unknown key' "$work/serve.log"
check "refusals are counted (file change, SIGHUP, unknown key)" test "$(reloads refused)" = 3
plain q2 2
check "the running config stays: max 10 admits 8 of 10, not the refused 12" wait_for 20 bound q2
plain q3 3
check "... and holds at 10" wait_for 20 has_event q3 FailedScheduling "max GPU quota (10 GPUs) reached"
check "the applied count did not move" test "$(reloads applied)" = 1

# 4. kubectl cordon on n-z1, which holds four of the queue's pods (9 of its 10 GPUs in use): they
#    keep counting (the node is closed, not dropped), so a 2-GPU pod created after the change
#    waits on the quota, though n-reserved has room for it and it tolerates that node's taint.
before=$(rebuilds)
k cordon n-z1 >"$work/cordon.out" 2>&1
check "kubectl cordon is accepted" grep -q 'cordoned' "$work/cordon.out"
check "... and the node is unschedulable" test "$(k get node n-z1 -o jsonpath='{.spec.unschedulable}')" = true
check "... and the scheduler took the change" wait_for 20 rebuilt_since "$before"
gpu_pod_json q4 2 | node -e '
  let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s);
  p.spec.tolerations=[{key:"team",operator:"Equal",value:"vision",effect:"NoSchedule"}];
  process.stdout.write(JSON.stringify(p))})' | k create --validate=false -f - >/dev/null
check "the cordoned node's pods still count: the new pod waits on the quota" \
  wait_for 20 has_event q4 FailedScheduling "max GPU quota (10 GPUs) reached"
k uncordon n-z1 >/dev/null 2>&1
k delete pod p1 -n ml --wait=false >/dev/null
check "uncordoned, with one of its pods gone, the queue has room for it" wait_for 20 on_node q4 n-reserved
kill -TERM "$sched_pid"
check "sched serve stops on SIGTERM" wait_for 10 bash -c "! kill -0 $sched_pid"
check "... with exit status 0" exited_ok "$sched_pid"
finish
