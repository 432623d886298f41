#!/usr/bin/env bash
# Runs every benchmark against a Release build: the Google Benchmark binaries that exist under
# BUILD_DIR/bench, then the end-to-end load scripts in bench/load/. `make bench` calls this.
#
#   bench/run_all.sh [BUILD_DIR]        (default build/release)
#
# Extra environment: BENCH_QUICK=1 shortens every load script (for a smoke run; the figures in
# docs/benchmarks.md come from the defaults). BENCH_PIN / BENCH_PRIO: see bench/load/lib.sh.
# Exits non-zero if a benchmark fails to run; a missed target is reported, not an error.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build/release}" && pwd)"
export BUILD_DIR INFERA="$BUILD_DIR/src/cli/infera"

status=0
section() { printf '\n========== %s ==========\n' "$1"; }

build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null)"
[[ "$build_type" == "Release" ]] || echo "warning: $BUILD_DIR is a '$build_type' build; figures want Release" >&2

for bin in scheduler/scheduler_bench gateway/gateway_bench access/access_bench features/features_bench; do
  path="$BUILD_DIR/bench/$bin"
  if [[ -x "$path" ]]; then
    section "$(basename "$bin")"
    "$path" --benchmark_min_time=1 || { echo "$bin failed" >&2; status=1; }
  else
    echo "skipping $bin (not built in $BUILD_DIR)"
  fi
done

quick=()
declare -A QUICK_ARGS=(
  [throughput]="--duration 3 --rounds 1"
  [latency]="--duration 3 --rounds 1"
  [streams]="--streams 200 --rounds 1 --idle-connections 200"
  [governance]="--duration 3 --rounds 1"
  [redis_script]="--calls 2000 --rounds 1"
  [features]="2"
  [engine_routing]="--engines 8 --rates 4 --duration 5 --policies least_queue,prefix_load --parts prefix"
  [batch]="2000 8"
  [batch_interactive]="--duration 8 --share 0.125 --idle-window 3"
)
for script in throughput latency streams governance redis_script features engine_routing batch batch_interactive; do
  section "bench/load/$script.sh"
  quick=()
  [[ "${BENCH_QUICK:-0}" == "1" ]] && read -ra quick <<<"${QUICK_ARGS[$script]}"
  bash "$ROOT/bench/load/$script.sh" "${quick[@]}" || { echo "$script.sh failed" >&2; status=1; }
done
exit "$status"
