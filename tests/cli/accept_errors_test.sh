#!/usr/bin/env bash
# Out of file descriptors (EMFILE) on accept: the gateway counts and logs the failed accepts, keeps
# serving the connections it has, and serves new ones once descriptors are free again.
# Usage: accept_errors_test.sh INFERA_BINARY
set -uo pipefail
infera="$1"
work=$(mktemp -d)
pid=""
holder=""
cleanup() {
  [[ -n "$holder" ]] && kill "$holder" 2>/dev/null
  if [[ -n "$pid" ]]; then kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cat >"$work/gw.yaml" <<'YAML'
listen: {port: 0}
admin: {port: 0}
workers: 1
health_check: {enabled: false}
emulators:
  e: {models: [m], token_ms: 0}
models:
  - name: m
    deployments: [{endpoints: [{emulator: e}]}]
YAML
# Sanitized builds: the vptr check cannot work without descriptors (ubsan_emfile.supp says why).
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ubsan_emfile.supp"
# A small descriptor limit for the gateway alone.
(ulimit -n 96 && exec "$infera" serve -c "$work/gw.yaml") >"$work/serve.out" 2>&1 &
pid=$!
for _ in $(seq 1 500); do
  port=$(sed -n 's|.*data http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.out")
  admin=$(sed -n 's|.*admin http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.out")
  [[ -n "$port" && -n "$admin" ]] && break
  sleep 0.02
done
check "serve starts under ulimit -n 96" test -n "$port"
body='{"model":"m","max_tokens":2,"messages":[]}'
# One keep-alive connection opened first, then enough connections to use up the descriptors.
python3 - "$port" "$work/ready" "$work/release" "$work/serve.out" <<'PY' &
import socket, sys, time, os
port, ready, release, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
body = b'{"model":"m","max_tokens":2,"messages":[]}'
def req(s):
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    return data.split(b" ")[1]
first = socket.create_connection(("127.0.0.1", port))
assert req(first) == b"200"
held = []
for _ in range(200):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        break
deadline = time.time() + 10  # until the gateway has tried (and failed) to accept them
while time.time() < deadline and b"failed" not in open(log, "rb").read():
    time.sleep(0.02)
status = req(first)  # the connection it had keeps being served
open(ready, "w").write(status.decode())
while not os.path.exists(release):
    time.sleep(0.02)
for s in held:
    s.close()
PY
holder=$!
for _ in $(seq 1 500); do [[ -s "$work/ready" ]] && break; sleep 0.02; done
check "an open connection is served while accepts fail" test "$(cat "$work/ready" 2>/dev/null)" = 200
touch "$work/release"
wait "$holder"; holder=""
# Once the held connections are gone (the admin port shares the limit, so it is scraped after):
# the counter is cumulative. Polled to a deadline: the gateway closes ~90 connections and accepts
# the abandoned ones left in its backlog first.
errors=""
ok=""
deadline=$((SECONDS + 30))
while (( SECONDS < deadline )); do
  [[ -z "$errors" ]] && errors=$(curl -s -m 5 "http://127.0.0.1:$admin/metrics" | sed -n 's/^infera_net_accept_errors_total \([0-9.e+]*\)/\1/p')
  [[ "$ok" == 200 ]] || ok=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -d "$body")
  [[ -n "$errors" && "$ok" == 200 ]] && break
  sleep 0.05
done
check "failed accepts are counted" awk -v e="${errors:-0}" 'BEGIN {exit !(e > 0)}'
check "failed accepts are logged" grep -q "accept on .* failed" "$work/serve.out"
check "new connections are served once descriptors are free" test "$ok" = 200
finish
