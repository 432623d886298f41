# Shared by the Kubernetes test scripts (sourced): named checks with a tally, the test API server
# (fake_apiserver.mjs over HTTPS with a throwaway CA from tests/fakes/make_test_pki.sh) on a free
# port, a kubeconfig for the real kubectl, and polling with a deadline (no sleeps as waits).
KUBE_TEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC_DIR="$(cd "$KUBE_TEST_DIR/../.." && pwd)"
FIXTURES="$SRC_DIR/tests/testdata/kube"
passed=0
failed=0
check() {  # check NAME CONDITION...
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); echo "ok - $name"; else failed=$((failed + 1)); echo "FAIL - $name"; fi
}
finish() {
  # In a sanitizer build (the asan preset) a process that ends with a report must fail the test,
  # though it did its work first (a use after free at shutdown, say).
  if [[ -n "${work:-}" ]]; then
    check "no sanitizer report in the logs" \
      bash -c "! grep -rqs -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error:' '$work'"
  fi
  echo "$passed passed, $failed failed"
  [[ "$failed" -eq 0 ]]
}
command -v kubectl >/dev/null || { echo "kubectl not on PATH (these machines ship 1.32)"; exit 1; }
command -v node >/dev/null || { echo "node not on PATH"; exit 1; }

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# wait_for SECONDS COMMAND...: polls COMMAND every 20 ms until it succeeds; false at the deadline.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  while ! "$@" >/dev/null 2>&1; do
    (( SECONDS >= deadline )) && return 1
    sleep 0.02
  done
}

# start_apiserver DIR [ARGS...]: the test API server on a free port; sets API_PORT, API_URL, KCFG,
# CA and API_PID, and defines `k` (kubectl against it with its own cache dir).
start_apiserver() {
  local dir="$1"; shift
  mkdir -p "$dir"
  [[ -f "$dir/pki/ca.pem" ]] || bash "$SRC_DIR/tests/fakes/make_test_pki.sh" "$dir/pki" >/dev/null
  rm -f "$dir/api.port"
  node "$KUBE_TEST_DIR/fake_apiserver.mjs" --port-file "$dir/api.port" --tls-cert "$dir/pki/server.pem" \
    --tls-key "$dir/pki/server.key" --log "$dir/api.log" "$@" >"$dir/api.out" 2>&1 &
  API_PID=$!
  PIDS+=("$API_PID")
  wait_for 10 test -s "$dir/api.port" || { echo "test API server did not start"; cat "$dir/api.out"; exit 1; }
  API_PORT=$(cat "$dir/api.port")
  API_URL="https://127.0.0.1:$API_PORT"
  CA="$dir/pki/ca.pem"
  KCFG="$dir/kubeconfig"
  cat >"$KCFG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: $API_URL
    certificate-authority: $CA
users:
- name: admin
  user:
    token: test-token
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
EOF
  KCACHE="$dir/kube-cache"
}
k() { kubectl --kubeconfig "$KCFG" --cache-dir "$KCACHE" "$@"; }

# api METHOD PATH [BODY]: a raw call to the test API server (curl with its CA); prints the body.
api() {
  if [[ $# -ge 3 ]]; then
    curl -sS --cacert "$CA" -X "$1" -H 'content-type: application/json' --data-binary "$3" "$API_URL$2"
  else
    curl -sS --cacert "$CA" -X "$1" "$API_URL$2"
  fi
}

# node_json NAME GPUS PRODUCT [CPU MEMORY]: tests/testdata/kube/node.json renamed and resized.
node_json() {
  node -e '
    const n = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const [name, gpus, product, cpu, mem] = process.argv.slice(2);
    n.metadata.name = name;
    n.metadata.labels["kubernetes.io/hostname"] = name;
    n.metadata.labels["nvidia.com/gpu.product"] = product;
    n.metadata.labels["nvidia.com/gpu.count"] = gpus;
    for (const r of [n.status.capacity, n.status.allocatable]) {
      r["nvidia.com/gpu"] = gpus;
      if (cpu) r.cpu = cpu;
      if (mem) r.memory = mem;
    }
    if (gpus === "0") delete n.metadata.labels["nvidia.com/gpu.product"];
    process.stdout.write(JSON.stringify(n));
  ' "$FIXTURES/node.json" "$@"
}

# gpu_pod_json NAME GPUS [ANNOTATIONS_JSON] [LABELS_JSON]: tests/testdata/kube/gpu-pod.json
# renamed, with GPUS GPUs (0: a CPU-only pod) and extra annotations/labels.
gpu_pod_json() {
  node -e '
    const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const [name, gpus, ann, labels] = process.argv.slice(2);
    p.metadata.name = name;
    if (ann) p.metadata.annotations = JSON.parse(ann);
    if (labels) Object.assign(p.metadata.labels, JSON.parse(labels));
    const c = p.spec.containers[0];
    c.name = name;
    if (gpus === "0") delete c.resources.limits; else c.resources.limits["nvidia.com/gpu"] = gpus;
    c.resources.requests.cpu = "1";
    c.resources.requests.memory = "1Gi";
    process.stdout.write(JSON.stringify(p));
  ' "$FIXTURES/gpu-pod.json" "$@"
}

# has_event POD REASON TEXT: an Event in namespace ml on POD with REASON whose message has TEXT.
has_event() {
  k get events -n ml -o json | node -e '
    let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const [pod,reason,text]=process.argv.slice(1);
    process.exit(JSON.parse(s).items.some(e=>e.involvedObject.name===pod&&e.reason===reason&&e.message.includes(text))?0:1)})' "$1" "$2" "$3"
}

# The state of pod NAME in namespace ml (the fixtures' namespace).
pod_node() { k get pod "$1" -n ml -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
pod_bound() { [[ -n "$(pod_node "$1")" ]]; }
pod_unbound() { ! pod_bound "$1"; }
pod_on() { [[ "$(pod_node "$1")" == "$2" ]]; }  # pod_on NAME NODE
pod_gone() { ! k get pod "$1" -n ml >/dev/null 2>&1; }
pod_deleting() { [[ -n "$(k get pod "$1" -n ml -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" ]]; }

# start_sched INFERA CONFIG LOG: `infera sched serve` in the background, checked started; sets
# SCHED_PID and MPORT (its metrics port).
start_sched() {
  "$1" sched serve -c "$2" >"$3" 2>&1 &
  SCHED_PID=$!
  PIDS+=("$SCHED_PID")
  check "sched serve started" wait_for 10 grep -q 'metrics http' "$3"
  MPORT=$(sed -n 's|.*metrics http://127.0.0.1:\([0-9]*\).*|\1|p' "$3" | head -1)
}
