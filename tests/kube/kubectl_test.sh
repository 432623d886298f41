#!/usr/bin/env bash
# The test API server against the real kubectl (1.32 on PATH): discovery, create, get (tables,
# JSON, jsonpath, selectors), apply (create, then a strategic-merge patch), get --watch, label,
# delete, binding, eviction with a PodDisruptionBudget (429), a 410 Gone watch, leases. If the
# server drifted into a private dialect, kubectl would refuse it here.
#   kubectl_test.sh WORK_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
work="$1"
rm -rf "$work"
mkdir -p "$work"
start_apiserver "$work" --fake-kubelet --bookmark-ms 100

# Discovery.
k api-resources >"$work/api-resources.txt" 2>&1
check "api-resources lists pods in v1" grep -Eq '^pods +po +v1 +true +Pod' "$work/api-resources.txt"
check "api-resources lists leases in coordination.k8s.io/v1" \
  grep -Eq '^leases +coordination.k8s.io/v1 +true +Lease' "$work/api-resources.txt"
check "api-resources lists poddisruptionbudgets with short name pdb" \
  grep -Eq '^poddisruptionbudgets +pdb +policy/v1 +true +PodDisruptionBudget' "$work/api-resources.txt"
k get --raw /api >"$work/api.json"
check "get --raw /api is an APIVersions with v1" \
  node -e 'const a=JSON.parse(require("fs").readFileSync(process.argv[1]));process.exit(a.kind==="APIVersions"&&a.versions[0]==="v1"?0:1)' "$work/api.json"
k get --raw /api/v1 >"$work/v1.json"
check "/api/v1 lists pods/binding and pods/eviction (policy/v1)" \
  node -e 'const l=JSON.parse(require("fs").readFileSync(process.argv[1]));const e=l.resources.find(r=>r.name==="pods/eviction");process.exit(l.kind==="APIResourceList"&&l.resources.some(r=>r.name==="pods/binding")&&e&&e.group==="policy"&&e.version==="v1"?0:1)' "$work/v1.json"
check "kubectl version sees the server" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' version 2>&1 | grep -q 'Server Version: v1.32'"

# create / get.
check "create namespace from kubectl's own JSON" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' create --validate=false -f '$FIXTURES/namespace.json' | grep -qx 'namespace/ml created'"
k create --validate=false -f "$FIXTURES/namespace.json" >"$work/again.out" 2>&1
again_rc=$?
check "create again is AlreadyExists (status $again_rc)" \
  bash -c "[[ $again_rc -ne 0 ]] && grep -qx 'Error from server (AlreadyExists): .*namespaces \"ml\" already exists' '$work/again.out'"
node_json gpu-a10-0 4 A10 >"$work/node0.json"
node_json gpu-a100-0 8 A100 >"$work/node1.json"
k create --validate=false -f "$work/node0.json" >/dev/null
k create --validate=false -f "$work/node1.json" >/dev/null
k get nodes >"$work/nodes.txt"
check "get nodes prints a table with both nodes" bash -c "grep -Eq '^gpu-a10-0 +4 ' '$work/nodes.txt' && grep -Eq '^gpu-a100-0 +8 ' '$work/nodes.txt'"
check "get nodes -l selects by label" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get nodes -l nvidia.com/gpu.product=A100 -o name) == node/gpu-a100-0 ]]"
check "get node -o jsonpath reads allocatable" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get node gpu-a10-0 -o jsonpath='{.status.allocatable.nvidia\.com/gpu}') == 4 ]]"
check "get missing pod is NotFound" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod nope -n ml 2>&1 | grep -q 'pods \"nope\" not found'"

# apply: create, then configure (a strategic-merge patch computed by kubectl).
check "apply creates the pod" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' apply --validate=false -f '$FIXTURES/pod.json' | grep -qx 'pod/nb created'"
# kubectl's three-way patch asks to remove the file's "creationTimestamp": null; the server keeps
# its own (as kube-apiserver does), so the object's identity survives a re-apply.
check "apply again sends a patch and keeps creationTimestamp" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' apply --validate=false -f '$FIXTURES/pod.json' | grep -qx 'pod/nb configured' && [[ -n \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod nb -n ml -o jsonpath='{.metadata.creationTimestamp}') ]]"
node -e 'const p=JSON.parse(require("fs").readFileSync(process.argv[1]));p.metadata.labels.team="search";process.stdout.write(JSON.stringify(p))' \
  "$FIXTURES/pod.json" >"$work/pod-labelled.json"
check "apply a changed label configures it" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' apply --validate=false -f '$work/pod-labelled.json' | grep -qx 'pod/nb configured'"
check "the label is on the server" bash -c "[[ \$(kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod nb -n ml -o jsonpath='{.metadata.labels.team}') == search ]]"
check "last-applied annotation kept by the server" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pod nb -n ml -o json | grep -q 'kubectl.kubernetes.io/last-applied-configuration'"
check "label (JSON merge patch)" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' label pod nb -n ml tier=2 | grep -qx 'pod/nb labeled'"
check "get pods -n ml shows it pending" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get pods -n ml | grep -Eq '^nb +Pending +<none>'"

# get --watch: the first events, then a binding and a delete seen live.
k get pods -n ml --watch --output-watch-events --request-timeout=20s >"$work/watch.txt" 2>&1 &
watch_pid=$!
PIDS+=("$watch_pid")
check "watch prints ADDED for the existing pod" wait_for 10 grep -Eq '^ADDED +nb +Pending' "$work/watch.txt"
api POST /api/v1/namespaces/ml/pods/nb/binding \
  '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"nb","namespace":"ml"},"target":{"apiVersion":"v1","kind":"Node","name":"gpu-a10-0"}}' >"$work/bind.json"
check "binding answers a 201 Status" grep -q '"code":201' "$work/bind.json"
check "watch prints MODIFIED with the node" wait_for 10 grep -Eq '^MODIFIED +nb +Running +gpu-a10-0' "$work/watch.txt"
check "a second binding is a 409 Conflict" bash -c "curl -s --cacert '$CA' -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' -d '{\"kind\":\"Binding\",\"target\":{\"name\":\"gpu-a100-0\"}}' '$API_URL/api/v1/namespaces/ml/pods/nb/binding' | grep -qx 409"
check "delete the pod" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' delete pod nb -n ml --wait=false | grep -qx 'pod \"nb\" deleted'"
check "watch prints DELETED" wait_for 10 grep -Eq '^DELETED +nb' "$work/watch.txt"
kill "$watch_pid" 2>/dev/null

# Raw watch protocol: resourceVersion, bookmarks, 410 Gone after compaction.
rv=$(api GET /api/v1/pods | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).metadata.resourceVersion))')
curl -sN --cacert "$CA" --max-time 1 "$API_URL/api/v1/pods?watch=true&resourceVersion=$rv&allowWatchBookmarks=true" >"$work/bookmarks.txt"
check "a watch with allowWatchBookmarks gets BOOKMARK events" grep -q '"type":"BOOKMARK"' "$work/bookmarks.txt"
api POST /_test/compact '' >/dev/null
curl -sN --cacert "$CA" --max-time 5 "$API_URL/api/v1/pods?watch=true&resourceVersion=$rv" >"$work/gone.txt"
check "a watch from a compacted resourceVersion ends with a 410 Expired Status" \
  grep -q '"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version' "$work/gone.txt"
check "... with code 410 and reason Expired" grep -q '"reason":"Expired","code":410' "$work/gone.txt"

# Eviction honours a PodDisruptionBudget.
k create --validate=false -f "$FIXTURES/pdb.json" >/dev/null
gpu_pod_json train-0 1 >"$work/train-0.json"
k create --validate=false -f "$work/train-0.json" >/dev/null
api POST /api/v1/namespaces/ml/pods/train-0/binding '{"kind":"Binding","target":{"name":"gpu-a10-0"}}' >/dev/null
code=$(curl -s --cacert "$CA" -o "$work/evict.json" -w '%{http_code}' -X POST -H 'content-type: application/json' \
  -d '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"train-0","namespace":"ml"}}' \
  "$API_URL/api/v1/namespaces/ml/pods/train-0/eviction")
check "eviction refused by the PDB is a 429" test "$code" = 429
check "... naming the disruption budget" grep -q 'The disruption budget pdb needs 1 healthy pods and has 1 currently' "$work/evict.json"
k delete pdb pdb -n ml >/dev/null
code=$(curl -s --cacert "$CA" -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' \
  -d '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"train-0","namespace":"ml"}}' \
  "$API_URL/api/v1/namespaces/ml/pods/train-0/eviction")
check "eviction without a PDB is a 201" test "$code" = 201
check "... and the pod is gone (NotFound)" pod_gone train-0

# Leases: create, optimistic concurrency on update.
api POST /apis/coordination.k8s.io/v1/namespaces/ml/leases \
  '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"sched"},"spec":{"holderIdentity":"a","leaseDurationSeconds":15}}' >"$work/lease.json"
lease_rv=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).metadata.resourceVersion)' "$work/lease.json")
check "kubectl get lease shows it" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' get lease sched -n ml -o jsonpath='{.spec.holderIdentity}' | grep -qx a"
code=$(curl -s --cacert "$CA" -o /dev/null -w '%{http_code}' -X PUT -H 'content-type: application/json' \
  -d "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"sched\",\"namespace\":\"ml\",\"resourceVersion\":\"$lease_rv\"},\"spec\":{\"holderIdentity\":\"b\"}}" \
  "$API_URL/apis/coordination.k8s.io/v1/namespaces/ml/leases/sched")
code2=$(curl -s --cacert "$CA" -o /dev/null -w '%{http_code}' -X PUT -H 'content-type: application/json' \
  -d "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"sched\",\"namespace\":\"ml\",\"resourceVersion\":\"$lease_rv\"},\"spec\":{\"holderIdentity\":\"c\"}}" \
  "$API_URL/apis/coordination.k8s.io/v1/namespaces/ml/leases/sched")
check "lease update with the current resourceVersion is 200, a stale one 409" bash -c "[[ $code == 200 && $code2 == 409 ]]"
check "delete namespace" bash -c "kubectl --kubeconfig '$KCFG' --cache-dir '$KCACHE' delete namespace ml --wait=false | grep -qx 'namespace \"ml\" deleted'"
finish
