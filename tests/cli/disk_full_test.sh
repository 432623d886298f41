#!/usr/bin/env bash
# The data directory's disk fills up under load: usage writes fail (counted and logged, the records
# kept), requests keep being served, and once there is room again the kept records are written.
# The store lives on a 2 MiB tmpfs mounted in a private mount namespace (unshare -m: nothing
# outside this test sees it; needs root, as CI runs).
# Usage: disk_full_test.sh INFERA_BINARY
set -uo pipefail
infera="$1"
if [[ "${INFERA_DISK_FULL_INNER:-}" != 1 ]]; then
  [[ "$(id -u)" == 0 ]] || { echo "needs root (a tmpfs mount in a private namespace)"; exit 1; }
  exec env INFERA_DISK_FULL_INNER=1 unshare -m --propagation private bash "$0" "$@"
fi
work=$(mktemp -d)
disk="$work/disk"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  umount "$disk" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mkdir -p "$disk"
mount -t tmpfs -o size=2m tmpfs "$disk" || { echo "cannot mount a tmpfs"; exit 1; }
export INFERA_ADMIN_TOKEN=disk-full-token
cat >"$work/gw.yaml" <<YAML
listen: {port: 0}
admin: {port: 0}
workers: 1
health_check: {enabled: false}
governance:
  store: sqlite:$disk/infera.db
  key_secret: disk-full-secret-0123456789abcdef0123
  usage_flush_ms: 100
emulators:
  e: {models: [m], token_ms: 0}
models:
  - name: m
    deployments: [{endpoints: [{emulator: e}]}]
YAML
start_serve "$infera" "$work/gw.yaml" "$work/serve.out"
check "serve starts with its store on the small disk" test -n "$port"
export INFERA_ADMIN_URL="http://127.0.0.1:$admin"
"$infera" teams create t >/dev/null
key=$("$infera" keys create --team t 2>/dev/null)
check "a key is made" test -n "$key"
chat() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
  -H "authorization: Bearer $key" -d '{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}'; }
metric() { curl -s "http://127.0.0.1:$admin/metrics" | sed -n "s/^$1 \([0-9.e+]*\)$/\1/p"; }
for _ in $(seq 1 20); do chat >/dev/null; done
# Fill the disk: only what SQLite already holds is left.
dd if=/dev/zero of="$disk/filler" bs=64k 2>/dev/null
served=0
codes=""
for _ in $(seq 1 400); do
  c=$(chat)
  [[ "$c" == 200 ]] && served=$((served + 1)) || codes="$codes $c"
  f=$(metric infera_usage_write_failures_total)
  [[ -n "$f" && "${f%%.*}" -ge 2 && "$served" -ge 50 ]] && break
done
check "requests are served while the disk is full (none failed:${codes:- none})" test -z "$codes"
check "failed usage writes are counted" awk -v f="$(metric infera_usage_write_failures_total)" 'BEGIN {exit !(f >= 1)}'
check "failed usage writes are logged" grep -q "usage write of .* failed" "$work/serve.out"
rm -f "$disk/filler"
# Room again: every request's usage reaches the store (20 before + those served while full).
want=$((20 + served))
usage_rows() {
  curl -s -H "authorization: Bearer $INFERA_ADMIN_TOKEN" \
    "http://127.0.0.1:$admin/admin/usage?team=t&granularity=total&group_by=team" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["rows"]; print(sum(x["requests"] for x in r))'
}
rows=0
for _ in $(seq 1 300); do
  rows=$(usage_rows)
  [[ "$rows" == "$want" ]] && break
  sleep 0.05
done
check "the usage kept during the outage is written once there is room ($rows of $want)" test "$rows" = "$want"
finish
