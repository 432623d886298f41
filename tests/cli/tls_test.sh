#!/usr/bin/env bash
# TLS end to end, against certificates the openssl CLI makes here (tests/fakes/make_test_pki.sh):
# `infera serve` with TLS on both ports (curl --cacert, TLS 1.1 refused, ALPN http/1.1, the admin
# port requiring client certificates), certificates reloaded by SIGHUP and by the file watch (the
# serial seen by openssl s_client), a bad certificate refused while the old one serves; HTTPS
# upstreams: nginx with the generated certificate (CA file, wrong CA, wrong name, the system
# store, verify off, mutual TLS, keep-alive) and the emulator serving TLS (a stream).
# Usage: tls_test.sh INFERA_BINARY SOURCE_DIR
set -uo pipefail
infera="$1"
src="$2"
work=$(mktemp -d)
pid=""
pids=()
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null; done
  [[ -n "${KEEP:-}" ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for tool in openssl curl nginx python3; do
  command -v "$tool" >/dev/null || { echo "FAIL - $tool is missing (scripts/install-deps.sh)"; exit 1; }
done
pki="$work/pki"
bash "$src/tests/fakes/make_test_pki.sh" "$pki" || { echo "FAIL - making the test PKI"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# until SECONDS CMD...: runs CMD until it succeeds or SECONDS pass.
until_ok() {
  local secs="$1" i
  shift
  for ((i = 0; i < secs * 50; i++)); do "$@" && return 0; sleep 0.02; done
  return 1
}
# serial PORT [openssl s_client args]: the serial of the certificate a new connection gets.
serial() {
  local port="$1"
  shift
  openssl s_client -connect "127.0.0.1:$port" -CAfile "$pki/ca.pem" "$@" </dev/null 2>/dev/null |
    openssl x509 -noout -serial 2>/dev/null | sed 's/serial=//'
}
serial_is() { [[ "$(serial "$@" | head -1)" == "$want" ]]; }

# --- nginx: HTTPS with the test certificate; one port plain TLS, one requiring client certificates.
ngx="$work/nginx"
mkdir -p "$ngx/logs" "$ngx/tmp"
ngx_port=$(free_port)
ngx_mtls_port=$(free_port)
ngx_tls12_port=$(free_port)
ngx_tls11_port=$(free_port)
user_line=""
[[ "$(id -u)" == "0" ]] && user_line="user root;"
answer='{"id":"chatcmpl-nginx","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"from nginx"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}'
cat >"$ngx/nginx.conf" <<EOF
$user_line
daemon off;
worker_processes 1;
pid $ngx/nginx.pid;
error_log $ngx/logs/error.log info;
events { worker_connections 256; }
http {
  log_format reuse '\$connection \$connection_requests \$ssl_protocol \$ssl_client_s_dn';
  access_log $ngx/logs/access.log reuse;
  client_body_temp_path $ngx/tmp/body;
  proxy_temp_path $ngx/tmp/proxy;
  fastcgi_temp_path $ngx/tmp/fastcgi;
  uwsgi_temp_path $ngx/tmp/uwsgi;
  scgi_temp_path $ngx/tmp/scgi;
  ssl_certificate $pki/server.pem;
  ssl_certificate_key $pki/server.key;
  default_type application/json;
  server {
    listen 127.0.0.1:$ngx_port ssl;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / { return 200 '$answer'; }
  }
  server {
    listen 127.0.0.1:$ngx_tls12_port ssl;
    ssl_protocols TLSv1.2;
    location / { return 200 '$answer'; }
  }
  server {
    listen 127.0.0.1:$ngx_tls11_port ssl;
    ssl_protocols TLSv1.1;
    ssl_ciphers DEFAULT@SECLEVEL=0;
    location / { return 200 '$answer'; }
  }
  server {
    listen 127.0.0.1:$ngx_mtls_port ssl;
    ssl_client_certificate $pki/ca.pem;
    ssl_verify_client on;
    location / { return 200 '$answer'; }
  }
}
EOF
nginx -p "$ngx" -c "$ngx/nginx.conf" -e "$ngx/logs/error.log" >"$ngx/stdout.log" 2>&1 &
pids+=($!)
until_ok 10 curl -sf -o /dev/null --cacert "$pki/ca.pem" "https://127.0.0.1:$ngx_port/"
check "nginx serves the test certificate" curl -sf -o /dev/null --cacert "$pki/ca.pem" "https://127.0.0.1:$ngx_port/"

# --- the emulator serving TLS (a backend that streams).
"$infera" emulate --port 0 --models emu-tls --token-ms 1 --tls-cert "$pki/server.pem" --tls-key "$pki/server.key" \
  >"$work/emu.out" 2>&1 &
pids+=($!)
until_ok 10 grep -q "https://127.0.0.1:" "$work/emu.out"
emu_port=$(sed -n 's|.*https://127.0.0.1:\([0-9]*\).*|\1|p' "$work/emu.out")
check "the emulator serves HTTPS" test -n "$emu_port"

# --- the gateway: TLS on both ports (data: file watch every 100 ms; admin: client certificates,
# SIGHUP only).
cp "$pki/server.pem" "$pki/live.pem"
cp "$pki/server.key" "$pki/live.key"
cp "$pki/server.pem" "$pki/admin.pem"
cp "$pki/server.key" "$pki/admin.key"
dep() {  # dep TLS_MAPPING PORT: one deployment on https://127.0.0.1:PORT
  echo "    deployments: [{tls: {$1}, endpoints: [{url: \"https://127.0.0.1:$2\"}]}]"
}
cat >"$work/gw.yaml" <<EOF
listen:
  port: 0
  tls: {cert_file: $pki/live.pem, key_file: $pki/live.key, watch_interval_ms: 100}
admin:
  port: 0
  tls: {cert_file: $pki/admin.pem, key_file: $pki/admin.key, client_ca_file: $pki/ca.pem, watch_interval_ms: 0}
workers: 2
health_check: {enabled: false}
retry: {attempts: 1}
emulators:
  e: {models: [m]}
models:
  - name: m
    deployments: [{endpoints: [{emulator: e}]}]
  - name: nginx-ca
$(dep "ca_file: $pki/ca.pem" "$ngx_port")
  - name: nginx-wrong-ca
$(dep "ca_file: $pki/other-ca.pem" "$ngx_port")
  - name: nginx-wrong-name
$(dep "ca_file: $pki/ca.pem, server_name: wrong.example" "$ngx_port")
  - name: nginx-by-name
$(dep "ca_file: $pki/ca.pem, server_name: localhost" "$ngx_port")
  - name: nginx-system-store
    deployments: [{endpoints: [{url: "https://127.0.0.1:$ngx_port"}]}]
  - name: nginx-no-verify
$(dep "verify: false" "$ngx_port")
  - name: nginx-mtls
$(dep "ca_file: $pki/ca.pem, cert_file: $pki/client.pem, key_file: $pki/client.key" "$ngx_mtls_port")
  - name: nginx-mtls-no-cert
$(dep "ca_file: $pki/ca.pem" "$ngx_mtls_port")
  - name: emu-tls
$(dep "ca_file: $pki/ca.pem" "$emu_port")
  - name: nginx-tls12
$(dep "ca_file: $pki/ca.pem" "$ngx_tls12_port")
  - name: nginx-tls11
$(dep "ca_file: $pki/ca.pem" "$ngx_tls11_port")
EOF
"$infera" config validate "$work/gw.yaml" >"$work/v.out" 2>&1
check "config validate accepts the TLS config" test $? -eq 0
"$infera" serve -c "$work/gw.yaml" >"$work/serve.out" 2>&1 &
pid=$!
port=""
admin=""
for _ in $(seq 1 500); do
  port=$(sed -n 's|.*data https://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.out")
  admin=$(sed -n 's|.*admin https://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.out")
  [[ -n "$port" && -n "$admin" ]] && break
  sleep 0.02
done
check "serve prints https:// for both ports" test -n "$port" -a -n "$admin"
[[ -n "$port" && -n "$admin" ]] || { cat "$work/serve.out"; finish; exit 1; }

body='{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}'
chat() {  # chat MODEL [curl args]: prints the status code, the body in $work/chat.out
  local model="$1"
  shift
  curl -s -o "$work/chat.out" -w '%{http_code}' --cacert "$pki/ca.pem" "$@" \
    "https://127.0.0.1:$port/v1/chat/completions" -d "${body/\"m\"/\"$model\"}"
}
check "a chat completion over TLS (curl --cacert)" test "$(chat m)" = 200
check "curl without the CA refuses the server" test "$(curl -s -o /dev/null -w '%{http_code}' "https://127.0.0.1:$port/v1/models")" = 000
# The same client settings (security level 0, so that curl itself may offer TLS 1.1) with TLS 1.2
# get in, with TLS 1.1 only do not: the server refuses it.
legacy=(--ciphers 'DEFAULT@SECLEVEL=0')
check "TLS 1.2 is accepted" test "$(chat m "${legacy[@]}" --tlsv1.2 --tls-max 1.2)" = 200
check "TLS 1.1 is refused" test "$(chat m "${legacy[@]}" --tlsv1.1 --tls-max 1.1)" = 000
openssl s_client -connect "127.0.0.1:$port" -CAfile "$pki/ca.pem" -alpn h2,http/1.1 </dev/null >"$work/alpn.out" 2>&1
check "ALPN selects http/1.1 from h2,http/1.1" grep -q "ALPN protocol: http/1.1" "$work/alpn.out"
openssl s_client -connect "127.0.0.1:$port" -CAfile "$pki/ca.pem" -alpn h2 </dev/null >"$work/alpn2.out" 2>&1
check "a client offering only h2 is refused" grep -q "no application protocol" "$work/alpn2.out"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$pki/ca.pem" "https://127.0.0.1:$admin/healthz")
check "the admin port refuses a client without a certificate" test "$code" = 000
admin_curl=(curl -s --cacert "$pki/ca.pem" --cert "$pki/client.pem" --key "$pki/client.key")
check "the admin port serves a client with one" test "$("${admin_curl[@]}" "https://127.0.0.1:$admin/healthz")" = ok
metrics() { "${admin_curl[@]}" "https://127.0.0.1:$admin/metrics"; }
metric() { metrics | sed -n "s/^$1 \([0-9.e+]*\)$/\1/p"; }
check "admin handshake failures are counted" test "$(metric 'infera_net_tls_handshake_failures_total{port="admin"}')" -eq 1
check "data handshake failures are counted (TLS 1.1, h2 only, no CA)" \
  test "$(metric 'infera_net_tls_handshake_failures_total{port="data"}')" -eq 3
check "the certificate's expiry is exported" test -n "$(metric 'infera_net_tls_certificate_expiry_timestamp_seconds{port="data"}')"

# --- HTTPS upstreams.
code=$(chat nginx-ca)
check "an https:// upstream verified with ca_file answers" test "$code" = 200
check "  with nginx's body" grep -q "from nginx" "$work/chat.out"
code=$(chat nginx-wrong-ca)
check "a server signed by another CA is refused (503)" test "$code" = 503
check "  upstream_unavailable" grep -q '"code":"upstream_unavailable"' "$work/chat.out"
check "  certificate verify failed: unable to get local issuer certificate" \
  grep -q "certificate verify failed: unable to get local issuer certificate" "$work/chat.out"
code=$(chat nginx-wrong-name)
check "a certificate for another name is refused (503 hostname mismatch)" \
  grep -q "hostname mismatch" "$work/chat.out"
check "  with 503" test "$code" = 503
check "server_name verifies (and sends SNI) another name" test "$(chat nginx-by-name)" = 200
code=$(chat nginx-system-store)
check "the system store does not know the test CA (503)" test "$code" = 503
check "verify: false accepts it" test "$(chat nginx-no-verify)" = 200
check "mutual TLS to nginx (ssl_verify_client on) with a client certificate" test "$(chat nginx-mtls)" = 200
code=$(chat nginx-mtls-no-cert)
check "without the client certificate nginx refuses (its 400 relayed)" test "$code" = 400
check "  No required SSL certificate" grep -q "No required SSL certificate" "$work/chat.out"
# One client connection (so one gateway worker and its pool): five requests, one upstream
# connection and handshake.
lines_before=$(wc -l <"$ngx/logs/access.log")
args=()
for i in 1 2 3 4 5; do
  [[ $i -gt 1 ]] && args+=(--next)
  args+=(-s -o /dev/null --cacert "$pki/ca.pem" -d "${body/\"m\"/\"nginx-ca\"}" "https://127.0.0.1:$port/v1/chat/completions")
done
curl "${args[@]}"
tail -n +$((lines_before + 1)) "$ngx/logs/access.log" >"$work/reuse.log"
check "five requests reach nginx" test "$(wc -l <"$work/reuse.log")" -eq 5
check "  on one kept-alive TLS connection" test "$(awk '{print $1}' "$work/reuse.log" | sort -u | wc -l)" -eq 1
check "  over TLS 1.3" grep -q "TLSv1.3" "$work/reuse.log"
check "a TLS 1.2 upstream" test "$(chat nginx-tls12)" = 200
code=$(chat nginx-tls11)
check "a TLS 1.1 upstream is refused (503)" test "$code" = 503
check "  for its protocol version" grep -q "TLS handshake with upstream 127.0.0.1.*protocol" "$work/chat.out"
curl -s -N --cacert "$pki/ca.pem" "https://127.0.0.1:$port/v1/chat/completions" \
  -d '{"model":"emu-tls","stream":true,"max_tokens":20,"messages":[]}' >"$work/stream.out"
check "a stream from the TLS emulator through TLS on both sides" grep -q "\[DONE\]" "$work/stream.out"
check "  with every token" test "$(grep -c '"delta"' "$work/stream.out")" -ge 20

# --- certificate reloads.
check "data port serves serial 1001" test "$(serial "$port")" = 1001
cp "$pki/server2.key" "$pki/live.key.new" && mv "$pki/live.key.new" "$pki/live.key"
cp "$pki/server2.pem" "$pki/live.pem.new" && mv "$pki/live.pem.new" "$pki/live.pem"
want=1002
check "the file watch puts the new certificate in use (serial 1002)" until_ok 10 serial_is "$port"
check "requests go on after the change" test "$(chat m)" = 200

client_args=(-cert "$pki/client.pem" -key "$pki/client.key")
cp "$pki/server2.pem" "$pki/admin.pem"
cp "$pki/server2.key" "$pki/admin.key"
check "admin port (no watch) still serves 1001 after the files changed" test "$(serial "$admin" "${client_args[@]}")" = 1001
kill -HUP "$pid"
check "SIGHUP reloads" until_ok 10 grep -q "reload: ok" "$work/serve.out"
check "the admin port serves 1002 after SIGHUP" test "$(serial "$admin" "${client_args[@]}")" = 1002
check "  counted" test "$(metric 'infera_net_tls_certificate_reloads_total{port="admin",result="ok"}')" = 1
cp "$pki/expired.pem" "$pki/admin.pem"
cp "$pki/expired.key" "$pki/admin.key"
kill -HUP "$pid"
check "SIGHUP with an expired certificate is refused" until_ok 10 grep -q "reload: admin.tls: .*has expired" "$work/serve.out"
check "  and the old one keeps serving" test "$(serial "$admin" "${client_args[@]}")" = 1002
check "  counted" test "$(metric 'infera_net_tls_certificate_reloads_total{port="admin",result="error"}')" = 1
check "  and logged" grep -q "TLS certificate for port $admin refused" "$work/serve.out"

kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
check "serve exits 0 after SIGTERM" test $rc -eq 0
finish
