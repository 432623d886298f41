#!/usr/bin/env bash
# Installs every Debian package Infera needs to build, test and benchmark. Idempotent: when
# everything is present it touches nothing (no apt-get update, no root needed).
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache lld make pkg-config git
  # libFuzzer targets (make fuzz): clang 14 and its fuzzer/sanitizer runtimes
  clang libclang-rt-14-dev
  # STYLE.md formatting (.clang-format; the Style.ClangFormat test)
  clang-format
  # libraries
  libboost-dev libssl-dev libsimdjson-dev nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libfmt-dev libcli11-dev libsqlite3-dev libpq-dev libhiredis-dev
  libgtest-dev libgmock-dev libbenchmark-dev libgoogle-perftools-dev
  # the feature store's embedded online store
  librocksdb-dev
  # ANN baselines for bench/vectors (hnswlib and FAISS HNSW beside Infera's own)
  libhnswlib-dev libfaiss-dev
  # real servers and load tools for tests and benchmarks
  redis-server postgresql nginx wrk nghttp2-client curl procps
  # the TLS tests make their certificates with the openssl CLI; the system CA store (upstreams
  # verified against it, and the in-cluster reload test's stand-in CA bundle)
  openssl ca-certificates
  # the official openai SDK test runs on node
  nodejs npm
  # the scheduler's idle-reclaim test queries a real Prometheus (its promtool checks /metrics)
  prometheus
  # the web console's browser tests (playwright-core from npm drives /usr/bin/chromium)
  chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # node/npm may come from elsewhere on a developer machine; accept a working binary.
    if [[ "$p" == nodejs && -x "$(command -v node)" ]] || [[ "$p" == npm && -x "$(command -v npm)" ]]; then
      continue
    fi
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts the packaged services on install; tests start their own on free ports.
for svc in nginx redis-server postgresql prometheus; do
  $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
done
echo "install-deps: done"
