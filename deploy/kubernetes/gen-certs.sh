#!/usr/bin/env bash
# gen-certs.sh [OUT_DIR]: a CA and a serving certificate for the webhook Service
# (infera-scheduler.infera-system.svc), the Secret infera-scheduler-tls holding it, and the CA put
# into the MutatingWebhookConfiguration's caBundle. Needs openssl and kubectl (current context).
# The scheduler reloads the certificate files when the Secret changes (no restart).
# DRY_RUN=1: writes the files and prints the manifests instead of applying them.
set -euo pipefail
out="${1:-$(mktemp -d)}"
svc=infera-scheduler
ns=infera-system
mkdir -p "$out"
cd "$out"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null
openssl req -x509 -new -key ca.key -out ca.crt -days 3650 -subj "/CN=infera-scheduler-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out tls.key 2>/dev/null
openssl req -new -key tls.key -out tls.csr -subj "/CN=$svc.$ns.svc" 2>/dev/null
printf '%s\n' "subjectAltName=DNS:$svc,DNS:$svc.$ns,DNS:$svc.$ns.svc,DNS:$svc.$ns.svc.cluster.local" \
  "extendedKeyUsage=serverAuth" >tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile tls.ext \
  -out tls.crt 2>/dev/null
ca_bundle=$(base64 -w0 ca.crt)
secret=$(kubectl create secret tls infera-scheduler-tls -n "$ns" --cert=tls.crt --key=tls.key \
  --dry-run=client -o yaml)
patch="{\"webhooks\":[{\"name\":\"pods.scheduler.infera.ai\",\"clientConfig\":{\"caBundle\":\"$ca_bundle\"}}]}"
if [[ "${DRY_RUN:-}" == 1 ]]; then
  echo "$secret"
  echo "caBundle patch: $patch"
  exit 0
fi
echo "$secret" | kubectl apply -f -
kubectl patch mutatingwebhookconfiguration infera-scheduler --type=strategic -p "$patch"
echo "certificates in $out (keep ca.key offline or delete it)"
