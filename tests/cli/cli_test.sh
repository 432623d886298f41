#!/usr/bin/env bash
# End-to-end checks of the `infera` binary as a user runs it: config validate exit codes and
# messages, serve + SIGHUP reload (good and bad) + SIGTERM drain with a stream in flight.
# Usage: cli_test.sh INFERA_BINARY SOURCE_DIR
set -uo pipefail
infera="$1"
src="$2"
work=$(mktemp -d)
pid=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$infera" config validate "$src/examples/quickstart.yaml" >"$work/v.out" 2>&1
check "validate accepts the quickstart" test $? -eq 0
printf 'listen: {port: 80800}\nmodels:\n  - name: m\n    deployments: [{endpoints: [{url: "ftp://x"}]}]\nextra: 1\n' >"$work/bad.yaml"
"$infera" config validate "$work/bad.yaml" >"$work/v.out" 2>&1
rc=$?
check "validate rejects a bad file with exit 1" test $rc -eq 1
check "validate names path and line" grep -q "listen.port (line 1): must be in \[0, 65535\], got 80800" "$work/v.out"
check "validate reports every error" grep -q "extra (line 5): unknown key" "$work/v.out"

cat >"$work/gw.yaml" <<'YAML'
listen: {port: 0}
admin: {port: 0}
workers: 2
emulators:
  e: {models: [m], token_ms: 20}
models:
  - name: m
    deployments: [{endpoints: [{emulator: e}]}]
YAML
start_serve "$infera" "$work/gw.yaml" "$work/serve.out"
check "serve starts and prints its ports" test -n "$port"
body='{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}'
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -d "$body")
check "serve answers a chat completion" test "$code" = 200

# A second serve on the same data port refuses to start (SO_REUSEPORT would have let it take
# every other connection with its own config), and the first keeps serving.
sed "s/^listen: {port: 0}/listen: {port: $port}/" "$work/gw.yaml" >"$work/second.yaml"
timeout 20 "$infera" serve -c "$work/second.yaml" >"$work/second.out" 2>&1
rc=$?
check "a second serve on the same port exits 1" test "$rc" -eq 1
check "it says the port is taken" grep -q "127.0.0.1:$port: another process is already listening there" "$work/second.out"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -d "$body")
check "the first serve still answers" test "$code" = 200

# SIGHUP with a broken file: rejected, old config keeps serving.
cp "$work/gw.yaml" "$work/gw.good"
echo "bogus: 1" >>"$work/gw.yaml"
kill -HUP "$pid"
for _ in $(seq 1 250); do grep -q "reload:" "$work/serve.out" && break; sleep 0.02; done
check "bad SIGHUP reload is reported" grep -q "bogus (line 9): unknown key" "$work/serve.out"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -d "$body")
check "old config keeps serving after a bad reload" test "$code" = 200
cp "$work/gw.good" "$work/gw.yaml"
kill -HUP "$pid"
for _ in $(seq 1 250); do grep -q "reload: ok" "$work/serve.out" && break; sleep 0.02; done
check "good SIGHUP reload applies" grep -q "reload: ok" "$work/serve.out"
gen=$(curl -s "http://127.0.0.1:$admin/metrics" | sed -n 's/^infera_gateway_config_generation \([0-9]*\)/\1/p')
check "config generation advanced" test "$gen" = 2

# SIGTERM while a 40-token stream (20 ms/token) is in flight: it completes, then the process exits 0.
curl -s -N "http://127.0.0.1:$port/v1/chat/completions" \
  -d '{"model":"m","stream":true,"max_tokens":40,"messages":[]}' >"$work/stream.out" &
cpid=$!
for _ in $(seq 1 250); do [[ -s "$work/stream.out" ]] && break; sleep 0.02; done
kill -TERM "$pid"
wait "$cpid"
check "stream in flight finished during drain" grep -q "\[DONE\]" "$work/stream.out"
wait "$pid"
rc=$?
pid=""
check "serve exits 0 after SIGTERM" test $rc -eq 0
check "serve reports the drain" grep -q "shutdown: drained" "$work/serve.out"

finish
