#!/usr/bin/env bash
# High availability: two `infera sched serve` replicas with leader election on one Lease. Only the
# holder binds; the active replica is killed (SIGKILL, so it cannot hand over) and the standby
# takes the lease within its duration, lists again and binds what arrived meanwhile. No pod is
# bound twice (the test API server counts bindings and 409 conflicts).
#   sched_ha_test.sh INFERA WORK_DIR
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
node_json gpu-a10-0 8 A10 >"$work/n0.json"
k create --validate=false -f "$work/n0.json" >/dev/null

config() {  # config IDENTITY
  cat <<EOF
kube: {api_server: "$API_URL", ca_file: "$CA", retry_interval_ms: 300, backoff_initial_ms: 20, backoff_max_ms: 500}
metrics: {port: 0}
leader_election: {identity: $1, lease_duration_s: 2, renew_interval_ms: 200}
EOF
}
config replica-a >"$work/a.yaml"
config replica-b >"$work/b.yaml"
"$infera" sched serve -c "$work/a.yaml" >"$work/a.log" 2>&1 &
pid_a=$!
PIDS+=("$pid_a")
wait_for 10 grep -q 'acquired the lease' "$work/a.log" || { echo "replica a never led"; cat "$work/a.log"; exit 1; }
"$infera" sched serve -c "$work/b.yaml" >"$work/b.log" 2>&1 &
pid_b=$!
PIDS+=("$pid_b")
wait_for 10 grep -q 'metrics http' "$work/b.log" || { echo "replica b did not start"; cat "$work/b.log"; exit 1; }
holder() { k get lease infera-scheduler -n infera-system -o jsonpath='{.spec.holderIdentity}'; }
check "replica a holds the lease" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get lease infera-scheduler -n infera-system -o jsonpath='{.spec.holderIdentity}') == replica-a ]]"

bound() { [[ -n "$(k get pod "$1" -n ml -o jsonpath='{.spec.nodeName}' 2>/dev/null)" ]]; }
for i in 1 2 3; do gpu_pod_json "p$i" 1 | k create --validate=false -f - >/dev/null; done
check "the leader binds" wait_for 20 bash -c "for i in 1 2 3; do [[ -n \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod p\$i -n ml -o jsonpath='{.spec.nodeName}') ]] || exit 1; done"
check "the standby did not bind (no 'bound' line in its log)" file_lacks "$work/b.log" 'bound ml/'

kill -KILL "$pid_a"
for i in 4 5; do gpu_pod_json "p$i" 1 | k create --validate=false -f - >/dev/null; done
check "the standby takes the lease" wait_for 10 grep -q 'replica-b acquired the lease' "$work/b.log"
# The takeover's timing, from the API server's log alone (one clock; neither the test's pace, its
# kubectl runs included, nor the replicas' clocks are in it): from replica a's last Lease write to
# replica b's first, and P, the longest gap between Lease requests in that span (b polls every
# renew interval, 200 ms; on a busy box the gaps stretch, and so does the bound).
# - At least the lease duration (2 s): b counts it from when it first read a's last write, which
#   is after the server took it; a standby that took over sooner would run beside a live leader.
# - At most the duration + 4 P: b reads a's last write within one poll, sees the expiry within one
#   more, and each answer's latency is within a gap. A lease held twice as long (4 s) fails it.
takeover_timing() {
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n");
    const lease = "infera-system/infera-scheduler";
    const request = /^(GET|PUT) \/apis\/coordination\.k8s\.io\/v1\/namespaces\/infera-system\/leases\/infera-scheduler /;
    let a = null, b = null;
    const polls = [];
    for (const l of lines) {
      const sp = l.indexOf(" ");
      const t = Date.parse(l.slice(0, sp)), rest = l.slice(sp + 1);
      if (rest === `lease ${lease} holder replica-a` && b === null) a = t;
      else if (rest === `lease ${lease} holder replica-b` && b === null) b = t;
      else if (request.test(rest)) polls.push(t);
    }
    if (a === null || b === null) { console.log("none none"); process.exit(0); }
    const span = [a, ...polls.filter(t => t > a && t < b), b];
    let p = 0;
    for (let i = 1; i < span.length; ++i) p = Math.max(p, span[i] - span[i - 1]);
    console.log(`${b - a} ${p}`);' "$work/api.log"
}
read -r takeover_ms poll_ms < <(takeover_timing)
check "... not before the lease expired: $takeover_ms ms from a's last renewal (>= 2000)" \
  bash -c "[[ '$takeover_ms' =~ ^[0-9]+\$ ]] && (( $takeover_ms >= 2000 ))"
check "... and within the duration + 4 polls (longest poll $poll_ms ms)" \
  bash -c "[[ '$poll_ms' =~ ^[0-9]+\$ ]] && (( $takeover_ms <= 2000 + 4 * $poll_ms ))"
check "the standby binds what arrived meanwhile" wait_for 20 bash -c "for i in 4 5; do [[ -n \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod p\$i -n ml -o jsonpath='{.spec.nodeName}') ]] || exit 1; done"
check "the lease names replica b" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get lease infera-scheduler -n infera-system -o jsonpath='{.spec.holderIdentity}') == replica-b ]]"
stats=$(api GET /_test/stats)
binds=$(node -e 'console.log(JSON.parse(process.argv[1]).binds)' "$stats")
conflicts=$(node -e 'console.log(JSON.parse(process.argv[1]).bindConflicts)' "$stats")
check "five pods, five bindings, no double binding (binds $binds, conflicts $conflicts)" \
  bash -c "[[ $binds == 5 && $conflicts == 0 ]]"
finish
