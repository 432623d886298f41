# Shared by the Kubernetes test scripts (sourced): named checks with a tally, the test API server
# (fake_apiserver.mjs over HTTPS with a throwaway CA from tests/fakes/make_test_pki.sh) on a free
# port, a kubeconfig for the real kubectl, and polling with a deadline (no sleeps as waits).
KUBE_TEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC_DIR="$(cd "$KUBE_TEST_DIR/../.." && pwd)"
FIXTURES="$SRC_DIR/tests/testdata/kube"
source "$SRC_DIR/tests/fakes/sanitizer.sh"
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
    check "no sanitizer report in the logs" no_sanitizer_report "$work"
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

# Negative checks ("absent", "unbound", "no such Event") hold only when the tool answered: a
# kubectl that fails (API server down, bad kubeconfig) or output that does not parse fails them too,
# where a bare `!` would turn the error into a pass.

# events_match NS POD REASON TEXT: 0 when namespace NS has an Event on POD with REASON whose
# message has TEXT, 1 when the Event list was read and has none, 2 when kubectl failed or printed
# no Event list.
events_match() {
  local json
  json=$(k get events -n "$1" -o json) || return 2
  node -e '
    try {
      const [pod, reason, text] = process.argv.slice(1);
      const l = JSON.parse(require("fs").readFileSync(0, "utf8"));
      if (!["List", "EventList"].includes(l.kind) || !Array.isArray(l.items)) process.exit(2);
      process.exit(l.items.some(e => e.involvedObject && e.involvedObject.name === pod &&
        e.reason === reason && String(e.message).includes(text)) ? 0 : 1);
    } catch (e) { process.exit(2); }' "$2" "$3" "$4" <<<"$json"
}
# has_event POD REASON TEXT / not_has_event POD REASON TEXT: as events_match, in namespace ml.
has_event() { events_match ml "$@"; }
not_has_event() { events_match ml "$@"; [[ $? -eq 1 ]]; }

# absent KIND NAME [ARGS...]: the API server answers NotFound for the object (any other failure
# of kubectl is not absence).
absent() {
  local out
  out=$(k get "$@" -o name 2>&1) && return 1
  [[ "$out" == "Error from server (NotFound): "* ]]
}
# file_lacks FILE PATTERN: FILE is readable and no line matches PATTERN (grep's status 1, not 2).
file_lacks() {
  grep -q -- "$2" "$1"
  [[ $? -eq 1 ]]
}

# exited_ok PID: PID, a child of this shell, has exited with status 0 (a crash, or death by the
# signal it was meant to handle, is not a clean stop; one still running fails at once).
exited_ok() {
  kill -0 "$1" 2>/dev/null && { echo "pid $1 still runs"; return 1; }
  local rc
  wait "$1"
  rc=$?
  [[ $rc -eq 0 ]] || { echo "pid $1 exited with status $rc"; return 1; }
}

# The state of pod NAME in namespace ml (the fixtures' namespace). pod_node fails when kubectl does.
pod_node() { k get pod "$1" -n ml -o jsonpath='{.spec.nodeName}'; }
pod_bound() { local n; n=$(pod_node "$1") && [[ -n "$n" ]]; }
pod_unbound() { local n; n=$(pod_node "$1") && [[ -z "$n" ]]; }
pod_on() { local n; n=$(pod_node "$1") && [[ "$n" == "$2" ]]; }      # pod_on NAME NODE
pod_not_on() { local n; n=$(pod_node "$1") && [[ "$n" != "$2" ]]; }  # bound elsewhere or unbound
pod_gone() { absent pod "$1" -n ml; }
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
