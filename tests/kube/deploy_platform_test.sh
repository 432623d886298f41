#!/usr/bin/env bash
# deploy/platform/ (kustomize) checked with the real kubectl against the test API server: both
# overlays render; overlays/try applies (client dry-run, server dry-run, a real apply, a second
# apply that changes nothing) and its objects fit together — the Deployment's Secret keys exist,
# its probes name its ports, the Services, PodDisruptionBudget and PodMonitor select its pods, the
# stores it names are Services of the overlay — and the ConfigMap's infera.yaml is a config
# `infera config validate` accepts, as is overlays/external's.
#   deploy_platform_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work"
platform="$SRC_DIR/deploy/platform"

for o in try external; do
  kubectl kustomize "$platform/overlays/$o" >"$work/$o.yaml" 2>"$work/$o.err"
  rc=$?
  check "overlays/$o renders (status $rc)" bash -c "[[ $rc == 0 ]] && grep -q '^kind: Deployment' '$work/$o.yaml'"
done
# Every object of the rendered overlay as JSON lines, for the cross-checks below.
node -e '
  const fs = require("fs");
  const docs = fs.readFileSync(process.argv[1], "utf8").split(/^---$/m).filter((d) => d.trim());
  process.stdout.write(docs.length + "\n");' "$work/try.yaml" >"$work/try.count"
objects=$(cat "$work/try.count")
check "overlays/try has its 13 objects" test "$objects" = 13

k apply --validate=false --dry-run=client -k "$platform/overlays/try" >"$work/client.txt" 2>&1
rc=$?
check "client dry-run accepts every object (status $rc)" bash -c "[[ $rc == 0 ]] && [[ \$(grep -c '(dry run)' '$work/client.txt') == $objects ]]"
k apply --validate=false -f "$platform/overlays/try/namespace.yaml" >/dev/null
k apply --validate=false --dry-run=server -k "$platform/overlays/try" >"$work/server.txt" 2>&1
rc=$?
check "server dry-run accepts every object (status $rc)" bash -c "[[ $rc == 0 ]] && [[ \$(grep -c '(server dry run)' '$work/server.txt') == $objects ]]"
k apply --validate=false -k "$platform/overlays/try" >"$work/apply.txt" 2>&1
rc=$?
check "apply creates them (status $rc)" bash -c "[[ $rc == 0 ]] && grep -q 'deployment.apps/infera created' '$work/apply.txt' && grep -q 'statefulset.apps/infera-postgres created' '$work/apply.txt' && grep -q 'podmonitor.monitoring.coreos.com/infera created' '$work/apply.txt' && grep -q 'poddisruptionbudget.policy/infera created' '$work/apply.txt'"
# What the server holds of every object (spec, data, labels, annotations), to compare around the
# second apply. (kubectl reports the PodDisruptionBudget "configured" against this server: without
# the server's OpenAPI for policy/v1 it re-sends the selector as a patch; what counts is that the
# object did not change.)
state() {
  k get namespace,serviceaccount,configmap,secret,service,deployment,statefulset,poddisruptionbudget,podmonitor     -n infera -o json | node -e '
    let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
      const out = JSON.parse(s).items.map((i) => [i.kind, i.metadata.name, i.spec, i.data,
        i.metadata.labels, i.metadata.annotations]);
      out.sort((a, b) => (a[0] + a[1]).localeCompare(b[0] + b[1]));
      process.stdout.write(JSON.stringify(out));
    });'
}
state >"$work/before.json"
k apply --validate=false -k "$platform/overlays/try" >"$work/apply2.txt" 2>&1
rc=$?
state >"$work/after.json"
check "a second apply creates nothing and changes no object (status $rc)" bash -c "[[ $rc == 0 ]] && [[ \$(grep -Ec ' (unchanged|configured)$' '$work/apply2.txt') == $objects ]] && ! grep -q ' created$' '$work/apply2.txt' && test -s '$work/before.json' && cmp -s '$work/before.json' '$work/after.json'"

k get deployment,service,configmap,secret,poddisruptionbudget,podmonitor,statefulset -n infera -o json >"$work/objects.json" 2>"$work/get.err"
check "the applied objects read back" test -s "$work/objects.json"
# The cross-checks, on what the server holds.
node -e '
  const fs = require("fs");
  const items = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).items;
  const of = (kind, name) => items.find((i) => i.kind === kind && (!name || i.metadata.name === name));
  const fail = (m) => { console.log("FAIL - " + m); process.exitCode = 1; };
  const ok = (m) => console.log("ok - " + m);
  const dep = of("Deployment", "infera");
  const pod = dep.spec.template;
  const labels = pod.metadata.labels;
  const selects = (sel) => Object.entries(sel || {}).every(([k, v]) => labels[k] === v) && Object.keys(sel || {}).length > 0;
  const c = pod.spec.containers[0];
  const ports = new Set(c.ports.map((p) => p.name));
  (dep.spec.replicas === 3 ? ok : fail)("the Deployment runs 3 replicas");
  (selects(dep.spec.selector.matchLabels) ? ok : fail)("the Deployment selects its own pods");
  const probes = [c.readinessProbe, c.livenessProbe, c.startupProbe];
  (probes.every((p) => p && p.httpGet && ports.has(p.httpGet.port)) ? ok : fail)("every probe names a port of the container");
  (c.readinessProbe.httpGet.path === "/readyz" && c.livenessProbe.httpGet.path === "/healthz" ? ok : fail)("readiness on /readyz, liveness on /healthz");
  (c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory ? ok : fail)("resource requests and a memory limit");
  const secret = of("Secret");
  const refs = c.env.filter((e) => e.valueFrom && e.valueFrom.secretKeyRef).map((e) => e.valueFrom.secretKeyRef);
  (refs.length === 3 && refs.every((r) => r.name === secret.metadata.name && secret.data[r.key]) ? ok : fail)("every secret the container reads is a key of the overlay Secret");
  const sts = of("StatefulSet", "infera-postgres");
  const pgref = sts.spec.template.spec.containers[0].env.find((e) => e.name === "POSTGRES_PASSWORD").valueFrom.secretKeyRef;
  (pgref.name === secret.metadata.name && pgref.key === "postgres-password" ? ok : fail)("PostgreSQL and infera read the same password");
  const vol = pod.spec.volumes.find((v) => v.configMap);
  const cm = of("ConfigMap", vol && vol.configMap.name);
  (cm && cm.data["infera.yaml"] ? ok : fail)("the mounted ConfigMap holds infera.yaml");
  fs.writeFileSync(process.argv[2], cm ? cm.data["infera.yaml"] : "");
  const args = c.args.join(" ");
  (args === "serve -c /etc/infera/infera.yaml" && pod.spec.containers[0].volumeMounts.some((m) => m.mountPath === "/etc/infera") ? ok : fail)("infera serves the mounted file");
  const svcs = items.filter((i) => i.kind === "Service" && i.metadata.name.startsWith("infera") && !i.metadata.name.includes("redis") && !i.metadata.name.includes("postgres"));
  (svcs.length === 2 && svcs.every((s) => selects(s.spec.selector) && s.spec.ports.every((p) => ports.has(p.targetPort))) ? ok : fail)("the data and admin Services select the pods on named ports");
  const pdb = of("PodDisruptionBudget", "infera");
  (selects(pdb.spec.selector.matchLabels) && pdb.spec.maxUnavailable === 1 ? ok : fail)("the PodDisruptionBudget covers the pods, one at a time");
  const pm = of("PodMonitor", "infera");
  (selects(pm.spec.selector.matchLabels) && pm.spec.podMetricsEndpoints.every((e) => ports.has(e.port) && e.path === "/metrics") ? ok : fail)("the PodMonitor scrapes /metrics on a named port of the pods");
  const yaml = cm ? cm.data["infera.yaml"] : "";
  const names = ["infera-postgres", "infera-redis"];
  (names.every((n) => yaml.includes(n + ":") && items.some((i) => i.kind === "Service" && i.metadata.name === n)) ? ok : fail)("the stores the config names are Services of the overlay");
' "$work/objects.json" "$work/try-infera.yaml" >"$work/cross.txt"
cat "$work/cross.txt"
passed=$((passed + $(grep -c '^ok - ' "$work/cross.txt")))
failed=$((failed + $(grep -c '^FAIL - ' "$work/cross.txt")))
check "the cross-checks ran (13)" bash -c "[[ \$(grep -c '^ok - \|^FAIL - ' '$work/cross.txt') == 13 ]]"
# The config as the pod reads it; paths are the pod's, so only the file is checked here.
"$infera" config validate --syntax-only "$work/try-infera.yaml" >"$work/validate.txt" 2>&1
check "overlays/try's infera.yaml is a valid config" test $? -eq 0
node -e '
  const fs = require("fs");
  const docs = fs.readFileSync(process.argv[1], "utf8");
  const m = docs.match(/  infera\.yaml: \|\n((?:    .*\n|\n)*)/);
  fs.writeFileSync(process.argv[2], m ? m[1].replace(/^    /gm, "") : "");' "$work/external.yaml" "$work/external-infera.yaml"
check "overlays/external's infera.yaml is a valid config" bash -c "test -s '$work/external-infera.yaml' && '$infera' config validate --syntax-only '$work/external-infera.yaml'"
k delete -k "$platform/overlays/try" --wait=false >/dev/null 2>&1
rc=$?
check "delete succeeds (status $rc)" test "$rc" -eq 0
check "delete removes them (NotFound)" absent deployment infera -n infera
finish
