#!/usr/bin/env bash
# deploy/kubernetes/ checked with the real kubectl against the test API server: client dry-run,
# server dry-run, a real apply (Deployment with 2 replicas, Service, RBAC, webhook config), the
# ConfigMap's sched.yaml validated by `infera sched validate-serve`, and gen-certs.sh (DRY_RUN).
#   deploy_test.sh INFERA WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
infera="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work"
manifests="$SRC_DIR/deploy/kubernetes"

# Each apply's exit status is checked with its output: a failed apply prints no "created" either.
k apply --validate=false --dry-run=client -f "$manifests" >"$work/client.txt" 2>&1
rc=$?
check "client dry-run accepts every manifest (status $rc)" bash -c "[[ $rc == 0 ]] && grep -c '(dry run)' '$work/client.txt' | grep -qx 10"
k apply --validate=false -f "$manifests/00-namespace.yaml" >/dev/null
k apply --validate=false --dry-run=server -f "$manifests" >"$work/server.txt" 2>&1
rc=$?
check "server dry-run accepts every manifest (status $rc)" bash -c "[[ $rc == 0 ]] && grep -c '(server dry run)' '$work/server.txt' | grep -qx 10"
check "server dry-run created nothing (NotFound)" absent deployment infera-scheduler -n infera-system
k apply --validate=false -f "$manifests" >"$work/apply.txt" 2>&1
rc=$?
check "apply creates them (status $rc)" bash -c "[[ $rc == 0 ]] && grep -q 'deployment.apps/infera-scheduler created' '$work/apply.txt' && grep -q 'mutatingwebhookconfiguration.admissionregistration.k8s.io/infera-scheduler created' '$work/apply.txt'"
check "the Deployment has 2 replicas" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get deployment infera-scheduler -n infera-system -o jsonpath='{.spec.replicas}') == 2 ]]"
check "the ClusterRole grants pods/binding and pods/eviction create only" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get clusterrole infera-scheduler -o json | node -e '
  let s=\"\";process.stdin.on(\"data\",d=>s+=d).on(\"end\",()=>{const r=JSON.parse(s).rules;
  const b=r.find(x=>x.resources.includes(\"pods/binding\"));
  const wild=r.some(x=>x.verbs.includes(\"*\")||x.resources.includes(\"*\")||x.resources.includes(\"secrets\"));
  process.exit(b&&b.verbs.join()==\"create\"&&b.resources.includes(\"pods/eviction\")&&!wild?0:1)})'"
k apply --validate=false -f "$manifests" >"$work/apply2.txt" 2>&1
rc=$?
# Succeeded, and every one of the ten objects reported unchanged: none created or configured
# again (an error line, or an apply that never reached the server, matches neither).
second_apply_idempotent() {
  [[ $rc == 0 ]] && [[ $(grep -c . "$work/apply2.txt") == 10 ]] &&
    file_lacks "$work/apply2.txt" ' created$' &&
    [[ $(grep -Ec '^[a-z0-9.]+/[a-z0-9.-]+ unchanged$' "$work/apply2.txt") == 10 ]]
}
check "a second apply changes nothing it should not (status $rc)" second_apply_idempotent
k get configmap infera-scheduler -n infera-system -o jsonpath='{.data.sched\.yaml}' >"$work/sched.yaml"
# The ConfigMap's paths are the pod's; validation checks the files exist, so point TLS at test ones.
sed -i "s|/etc/infera/tls/tls.crt|$work/pki/server.pem|; s|/etc/infera/tls/tls.key|$work/pki/server.key|" "$work/sched.yaml"
check "the shipped sched.yaml validates" "$infera" sched validate-serve "$work/sched.yaml"
DRY_RUN=1 KUBECONFIG="$KCFG" bash "$manifests/gen-certs.sh" "$work/certs" >"$work/certs.txt" 2>&1
rc=$?
check "gen-certs.sh succeeds (status $rc)" test "$rc" -eq 0
check "gen-certs.sh makes a serving cert for the Service" bash -c "openssl x509 -in '$work/certs/tls.crt' -noout -ext subjectAltName | grep -q 'infera-scheduler.infera-system.svc'"
check "... signed by its CA" bash -c "openssl verify -CAfile '$work/certs/ca.crt' '$work/certs/tls.crt' >/dev/null"
check "... and a TLS Secret manifest" grep -q 'kind: Secret' "$work/certs.txt"
k delete -f "$manifests" --wait=false >/dev/null 2>&1
rc=$?
check "delete succeeds (status $rc)" test "$rc" -eq 0
check "delete removes them (NotFound)" absent deployment infera-scheduler -n infera-system
finish
