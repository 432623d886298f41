#!/usr/bin/env bash
# make_test_pki.sh DIR: a throwaway PKI for the TLS tests, made with the openssl CLI at test time
# (no key is ever committed). EC P-256 keys, valid for two days.
#
#   ca.pem/.key            the test CA
#   server.pem/.key        serial 1001, SAN DNS:localhost + IP:127.0.0.1, signed by ca
#   server2.pem/.key       serial 1002, same names (the certificate a reload switches to)
#   client.pem/.key        serial 2001, clientAuth, signed by ca
#   other-ca.pem/.key      an unrelated CA; other-server.pem/.key (serial 3001) signed by it
#   expired.pem/.key       serial 4001, signed by ca, expired
#   nameless.pem/.key      serial 5001, signed by ca, SAN DNS:elsewhere.example only
# Also: `make_test_pki.sh DIR issue NAME SERIAL` adds NAME.pem/.key signed by DIR's ca.
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

ca() {  # ca NAME CN
  newkey "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

issue() {  # issue NAME CA SERIAL DAYS EXTENSIONS...
  local name="$1" ca="$2" serial="$3" days="$4"
  shift 4
  newkey "$name"
  openssl req -new -key "$name.key" -out "$name.csr" -subj "/CN=$name" 2>/dev/null
  printf '%s\n' "$@" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -set_serial "0x$serial" -days "$days" \
    -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
  chmod 600 "$name.key"
}

server_ext=("subjectAltName=DNS:localhost,IP:127.0.0.1" "extendedKeyUsage=serverAuth")
if [[ "${2:-}" == issue ]]; then
  issue "$3" ca "$4" 2 "${server_ext[@]}"
  exit 0
fi
ca ca "Infera Test CA"
ca other-ca "Another Test CA"
issue server ca 1001 2 "${server_ext[@]}"
issue server2 ca 1002 2 "${server_ext[@]}"
issue client ca 2001 2 "extendedKeyUsage=clientAuth"
issue other-server other-ca 3001 2 "${server_ext[@]}"
issue expired ca 4001 -1 "${server_ext[@]}"
issue nameless ca 5001 2 "subjectAltName=DNS:elsewhere.example" "extendedKeyUsage=serverAuth"
