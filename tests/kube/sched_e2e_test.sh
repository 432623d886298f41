#!/usr/bin/env bash
# End to end: the test API server + `infera sched serve` (watch, webhook, place, bind, preempt)
# on free loopback ports, driven with the real kubectl and raw API calls.
#   pods created -> the webhook (called by the API server from a MutatingWebhookConfiguration)
#   sets schedulerName and the queue/tier annotations -> queued -> bound, packed on one node ->
#   a full queue's pod stays pending with an Event and PodScheduled=False -> bound when a node
#   joins -> tier 1 before an older tier 2 -> a tier-0 pod reclaims its guarantee by evicting a
#   tier-2 pod (Eviction API, Event naming the beneficiary) and a PDB-protected victim is not
#   evicted -> watches dropped and the history compacted (410 Gone) while pods are created:
#   none is lost -> gang: all or none -> /metrics.
#   sched_e2e_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --bookmark-ms 200

k create --validate=false -f "$FIXTURES/namespace.json" >/dev/null
for ns in team-a team-b; do
  node -e 'const n=JSON.parse(require("fs").readFileSync(process.argv[1]));n.metadata.name=process.argv[2];process.stdout.write(JSON.stringify(n))' \
    "$FIXTURES/namespace.json" "$ns" | k create --validate=false -f - >/dev/null
done
node_json gpu-a10-0 4 A10 >"$work/n0.json"
node_json gpu-a10-1 4 A10 >"$work/n1.json"
k create --validate=false -f "$work/n0.json" >/dev/null
k create --validate=false -f "$work/n1.json" >/dev/null
echo -n "test-token" >"$work/token"

cat >"$work/sched.yaml" <<EOF
kube:
  api_server: $API_URL
  ca_file: $CA
  token_file: $work/token
  retry_interval_ms: 300
  backoff_initial_ms: 20
  backoff_max_ms: 500
  watch_timeout_s: 30
policy: infera
metrics: {host: 127.0.0.1, port: 0}
webhook:
  host: 127.0.0.1
  port: 0
  tls: {cert_file: $work/pki/server.pem, key_file: $work/pki/server.key}
  cpu_per_gpu: 4
  memory_gib_per_gpu: 16
scheduling:
  gpu_types: [{name: A10, rank: 1, cost: 1.0}, {name: A100, rank: 2, cost: 3.0}]
  queues:
    - name: team-a
      guaranteed: {gpus: {A10: 2}}
      max: {gpus: {"*": 8}}
    - name: team-b
      max: {gpus: {"*": 32}}
  placement:
    - match: {namespace: team-a}
      queue: team-a
      tier: 0
    - match: {namespace: team-b, labels: {tier: best-effort}}
      queue: team-b
      tier: 2
    - match: {namespace: team-b}
      queue: team-b
      tier: 1
EOF
"$infera" sched validate-serve "$work/sched.yaml" >"$work/validate.txt" 2>"$work/validate.err"
validate_rc=$?
# Its exit status, an empty stderr and its one summary line read back field by field: an error
# message (which names keys such as webhook or token_file) cannot pass for it.
check "sched validate-serve accepts the config (status $validate_rc)" test "$validate_rc" -eq 0
check "... saying nothing on stderr" test ! -s "$work/validate.err"
check "... and summing it up: scheduler infera, 2 queues, 3 placement rules, webhook on" \
  test "$(cat "$work/validate.txt")" = "$work/sched.yaml: ok (scheduler infera, 2 queues, 3 placement rules, webhook on)"

"$infera" sched serve -c "$work/sched.yaml" >"$work/sched.log" 2>&1 &
sched_pid=$!
PIDS+=("$sched_pid")
wait_for 10 grep -q 'metrics http://127.0.0.1:' "$work/sched.log" || { echo "sched serve did not start"; cat "$work/sched.log"; exit 1; }
metrics_port=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/sched.log" | head -1)
webhook_port=$(sed -n 's|.*webhook https://127.0.0.1:\([0-9]*\).*|\1|p' "$work/sched.log" | head -1)
check "webhook port printed" test -n "$webhook_port"

# The API server calls the webhook for every pod created (url clientConfig + caBundle).
ca_b64=$(base64 -w0 "$CA")
cat >"$work/mwc.json" <<EOF
{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingWebhookConfiguration",
 "metadata":{"name":"infera-scheduler"},
 "webhooks":[{"name":"pods.infera.ai","admissionReviewVersions":["v1"],"sideEffects":"None",
   "failurePolicy":"Fail","timeoutSeconds":5,
   "clientConfig":{"url":"https://127.0.0.1:$webhook_port/mutate","caBundle":"$ca_b64"},
   "rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}]}]}
EOF
k create --validate=false -f "$work/mwc.json" >/dev/null

# pod NAME NS GPUS [LABELS_JSON] [ANNOTATIONS_JSON]: a GPU pod from the fixture with the default
# scheduler (the webhook makes it Infera's).
pod() {
  gpu_pod_json "$1" "$3" "${5:-}" "${4:-}" |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s);p.metadata.namespace=process.argv[1];delete p.spec.schedulerName;process.stdout.write(JSON.stringify(p))})' "$2" |
    k create --validate=false -f - >/dev/null
}
# NS POD: node_of fails when kubectl does, so unbound (and gone: a NotFound answer) cannot pass on
# an error.
node_of() { k get pod "$2" -n "$1" -o jsonpath='{.spec.nodeName}'; }
bound() { local n; n=$(node_of "$1" "$2") && [[ -n "$n" ]]; }
unbound() { local n; n=$(node_of "$1" "$2") && [[ -z "$n" ]]; }
gone() { absent pod "$2" -n "$1"; }
has_event() { events_match "$@"; }  # has_event NS POD REASON TEXT
export -f k node_of bound
export KCFG KCACHE

# 1. Webhook + packing: four 1-GPU tier-1 pods land on one node.
for i in 1 2 3 4; do pod "b$i" team-b 1; done
check "webhook set schedulerName infera" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod b1 -n team-b -o jsonpath='{.spec.schedulerName}') == infera ]]"
check "webhook set the queue and tier annotations" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod b1 -n team-b -o jsonpath='{.metadata.annotations}' | grep -q '\"infera.ai/queue\":\"team-b\",\"infera.ai/tier\":\"1\"'"
check "webhook raised CPU to 4 per GPU" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod b1 -n team-b -o jsonpath='{.spec.containers[0].resources.requests.cpu}') == 4 ]]"
check "all four bound" wait_for 20 bash -c "for i in 1 2 3 4; do [[ -n \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod b\$i -n team-b -o jsonpath='{.spec.nodeName}') ]] || exit 1; done"
nodes=$(for i in 1 2 3 4; do node_of team-b "b$i"; echo; done | sort -u | grep -c .)
check "packed on one node (got $nodes nodes)" test "$nodes" = 1
packed_node=$(node_of team-b b1)

# 2. A tier-2 pod takes the other node whole.
pod be1 team-b 4 '{"tier":"best-effort"}'
check "tier-2 pod bound" wait_for 20 bound team-b be1
check "... on the other node" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod be1 -n team-b -o jsonpath='{.spec.nodeName}') != '$packed_node' ]]"

# 3. Unschedulable: a 3-GPU pod while no node has 3 free GPUs stays pending with a reason.
pod b5 team-b 3
check "unschedulable pod gets a FailedScheduling Event with the engine's reason" wait_for 20 has_event team-b b5 FailedScheduling "pod team-b/b5: "
check "... and PodScheduled=False Unschedulable" wait_for 10 bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod b5 -n team-b -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].reason}' | grep -qx Unschedulable"
check "... and stays unbound" unbound team-b b5

# 4. Tier order: a tier-2 pod created first and a tier-1 pod after it, both waiting; a node joins
#    with room for one: the tier-1 pod gets it.
node_json gpu-a10-2 4 A10 >"$work/n2.json"
k create --validate=false -f "$work/n2.json" >/dev/null
check "the pending pod is bound when a node joins" wait_for 20 bound team-b b5
pod be2 team-b 4 '{"tier":"best-effort"}'
check "tier-2 pod waits (FailedScheduling)" wait_for 20 has_event team-b be2 FailedScheduling "pod team-b/be2"
pod b6 team-b 4
check "tier-1 pod waits" wait_for 20 has_event team-b b6 FailedScheduling "pod team-b/b6"
node_json gpu-a10-3 4 A10 >"$work/n3.json"
k create --validate=false -f "$work/n3.json" >/dev/null
check "the tier-1 pod gets the new node" wait_for 20 bound team-b b6
check "the older tier-2 pod still waits" unbound team-b be2
k delete pod be2 -n team-b --wait=false >/dev/null

# 5. Preemption: team-a's tier-0 pod within its guarantee (2 A10) finds no room and evicts the
#    tier-2 pod be1 through the Eviction API.
pod a1 team-a 2
check "tier-0 pod bound" wait_for 20 bound team-a a1
nominated() { k get pod "$2" -n "$1" -o jsonpath='{.status.nominatedNodeName}' 2>/dev/null; }
check "its status.nominatedNodeName named the node its victim left" \
  bash -c "[[ -n '$(nominated team-a a1)' && '$(nominated team-a a1)' == '$(node_of team-a a1)' ]]"
check "the tier-2 victim was evicted" gone team-b be1
check "victim's Event names the beneficiary" wait_for 10 has_event team-b be1 Preempted "tier-0 pod team-a/a1"
check "tier-1 pods were not touched" bash -c "for i in 1 2 3 4 5 6; do [[ -n \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod b\$i -n team-b -o jsonpath='{.spec.nodeName}') ]] || exit 1; done"
check "preemptions counted" wait_for 10 bash -c "[[ \$(curl -s http://127.0.0.1:$metrics_port/metrics | awk '\$1==\"infera_sched_preemptions_total\" {print \$2}') == 1 ]]"

# 6. A PodDisruptionBudget protects a victim: the eviction is refused (429), the victim keeps
#    running and the beneficiary is told. a1 leaves so a2 is within team-a's guarantee; be3
#    (tier 2, under the PDB) and b7 (tier 1) fill the room it left.
k delete pod a1 -n team-a --wait=false >/dev/null
pod be3 team-b 2 '{"tier":"best-effort","job":"protected"}'
check "tier-2 pod be3 bound" wait_for 20 bound team-b be3
pod b7 team-b 2
check "tier-1 pod b7 bound" wait_for 20 bound team-b b7
node -e 'const p=JSON.parse(require("fs").readFileSync(process.argv[1]));p.metadata.namespace="team-b";p.spec.selector.matchLabels={job:"protected"};process.stdout.write(JSON.stringify(p))' \
  "$FIXTURES/pdb.json" | k create --validate=false -f - >/dev/null
pod a2 team-a 2
check "refused eviction is counted" wait_for 20 bash -c "[[ \$(curl -s http://127.0.0.1:$metrics_port/metrics | awk '\$1==\"infera_sched_evictions_refused_total\" {print \$2}') -ge 1 ]]"
check "the PDB-protected pod still runs" bound team-b be3
check "the beneficiary is told why" wait_for 20 has_event team-a a2 PreemptionRefused "HTTP 429"
check "... and stays pending" unbound team-a a2
# The nomination is written before the eviction is asked and withdrawn when it is refused (and so
# again on each periodic retry): the API server's log shows it was set, and a read that succeeds
# shows it empty. An unset field alone would pass at the first sample without any preemption.
nominated_once() {  # NS POD: a status patch that set a node came in for the pod
  awk -v url="/api/v1/namespaces/$1/pods/$2/status " 'index($0, url) {hit = 1; next}
    hit && /  patch .*"nominatedNodeName":"[^"]+"/ {found = 1} {hit = 0} END {exit !found}' "$work/api.log"
}
nomination_withdrawn() { local n; nominated_once "$1" "$2" && n=$(k get pod "$2" -n "$1" -o jsonpath='{.status.nominatedNodeName}') && [[ -z "$n" ]]; }
check "... its nominated node was set, then withdrawn (the preemption did not happen)" \
  wait_for 10 nomination_withdrawn team-a a2
check "... and no pod was evicted for it (still 1 preemption)" \
  bash -c "[[ \$(curl -s http://127.0.0.1:$metrics_port/metrics | awk '\$1==\"infera_sched_preemptions_total\" {print \$2}') == 1 ]]"
k delete pod a2 -n team-a --wait=false >/dev/null

# 7. Watch disconnects: compact the history and drop every watch (the scheduler's
#    resourceVersion is now too old: 410 Gone), create pods meanwhile; then drop again without
#    compaction. No pod is lost.
k delete pod b1 b2 b3 b4 -n team-b --wait=false >/dev/null
# Compaction first: the scheduler's resourceVersion is then older than the compaction point when
# it reconnects, whenever that is.
api POST /_test/compact '' >/dev/null
api POST /_test/drop-watches '' >/dev/null
pod w1 team-b 1
pod w2 team-b 1
check "pods created across a 410 relist are bound" wait_for 20 bash -c "bound team-b w1 && bound team-b w2"
api POST /_test/drop-watches '' >/dev/null
pod w3 team-b 1
check "a pod created across a plain disconnect is bound" wait_for 20 bound team-b w3
check "the scheduler relisted after 410" bash -c "curl -s http://127.0.0.1:$metrics_port/metrics | grep -q 'infera_sched_watch_restarts_total{resource=\"pods\",reason=\"expired\"} [1-9]'"
binds=$(api GET /_test/stats | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).binds))')
conflicts=$(api GET /_test/stats | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).bindConflicts))')
check "one binding per pod placed, none refused as double ($binds bindings, $conflicts conflicts)" \
  bash -c "[[ $binds == 13 && $conflicts == 0 ]]"

# 8. Gang: 3 pods of one group, all or none. Two created: both wait; the third: all bound.
#    (b5 leaves first: the shared tier-1 pool would not hold 3 more GPUs.)
k delete pod b5 -n team-b --wait=false >/dev/null
pod g1 team-b 1 '{}' '{"infera.ai/group":"job1","infera.ai/group-size":"3"}'
pod g2 team-b 1 '{}' '{"infera.ai/group":"job1","infera.ai/group-size":"3"}'
check "an incomplete gang waits" wait_for 20 has_event team-b g1 FailedScheduling "gang job1: 2 of 3"
pod g3 team-b 1 '{}' '{"infera.ai/group":"job1","infera.ai/group-size":"3"}'
check "the complete gang is bound" wait_for 20 bash -c "bound team-b g1 && bound team-b g2 && bound team-b g3"

# 9. Metrics.
curl -s "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt"
check "decisions counted" grep -q 'infera_sched_decisions_total{result="bound"}' "$work/metrics.txt"
check "pending time histogram per queue and tier" grep -q 'infera_sched_pending_seconds_bucket{queue="team-b",tier="1",le=' "$work/metrics.txt"
check "free GPUs on empty nodes share exported" grep -q '^infera_sched_free_gpus_on_empty_nodes_ratio ' "$work/metrics.txt"
check "tier-0 guarantee node share exported" grep -q '^infera_sched_nodes_for_guarantees_ratio ' "$work/metrics.txt"
check "queue guarantee per GPU type exported" grep -Eq '^infera_sched_queue_gpus\{queue="team-a",gpu_type="A10",kind="guaranteed"\} 2(\.0+)?$' "$work/metrics.txt"
check "queue max over all types exported" grep -Eq '^infera_sched_queue_gpus\{queue="team-b",gpu_type="\*",kind="max"\} 32(\.0+)?$' "$work/metrics.txt"
check "queue use exported (team-b's bound pods)" grep -Eq '^infera_sched_queue_gpus\{queue="team-b",gpu_type="\*",kind="used"\} [1-9]' "$work/metrics.txt"
dashboard_metrics_exported() {  # every infera_sched_* name a dashboard query uses is served
  local name missing=0
  for name in $(grep -o 'infera_sched_[a-z_0-9]*' "$SRC_DIR/deploy/grafana/scheduler-dashboard.json" | sort -u); do
    grep -q "^$name[{ ]" "$work/metrics.txt" || { echo "dashboard metric $name not exported"; missing=1; }
  done
  return $missing
}
check "every metric the Grafana dashboard queries is exported" dashboard_metrics_exported
if command -v promtool >/dev/null; then
  check "promtool check metrics passes" bash -c "promtool check metrics <'$work/metrics.txt'"
fi
kill -TERM "$sched_pid"
check "sched serve stops on SIGTERM" wait_for 10 bash -c "! kill -0 $sched_pid"
check "... with exit status 0" exited_ok "$sched_pid"
finish
