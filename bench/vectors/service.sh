#!/usr/bin/env bash
# The vector index end to end, through the real binary and the `infera vectors` CLI, in one run:
#   1. vecgen writes N clustered vectors (seed 42; ann_bench's set), Q queries and their exact top-10;
#   2. `infera vectors load` ingests them over HTTP (batches of 1,000, 2 in flight, fsync on):
#      points/s, and the server's RSS growth per vector, for a plain and an int8 collection;
#   3. http_search: p50/p99 per search through HTTP (one keep-alive connection, closed loop and at
#      a fixed rate) beside the same queries on an in-process index built from the same file;
#   4. restart: a clean stop (snapshot) and a start on it; then K more points upserted (they stay in
#      the WAL), kill -9, and a start that replays them: load seconds from the server's log, and the
#      wall time until the port answers.
#
#   bench/vectors/service.sh [--n 100000] [--queries 1000] [--dim 128] [--cosine] [--ef 64]
#                            [--rate 500] [--seconds 10] [--wal-points 10000] [--wal-duplicates] [--no-int8]
#                            [--no-search]   (steps 1, 2 and 4 only: restart time at large N)
#
# Builds: build/release (cmake --preset release && cmake --build build/release -j2 --target infera
# vecgen http_search). BENCH_KEEP=1 keeps the temp dir.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../load/lib.sh"

N=100000 Q=1000 DIM=128 COSINE=0 EF=64 RATE=500 SECONDS_=10 WAL=10000 WAL_DUP=0 INT8=1 SEARCH=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --n) N="$2"; shift 2 ;;
    --queries) Q="$2"; shift 2 ;;
    --dim) DIM="$2"; shift 2 ;;
    --cosine) COSINE=1; shift ;;
    --ef) EF="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    --wal-points) WAL="$2"; shift 2 ;;
    --wal-duplicates) WAL_DUP=1; shift ;;
    --no-int8) INT8=0; shift ;;
    --no-search) SEARCH=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
VECGEN="$BUILD_DIR/bench/vectors/vecgen"
HTTP_SEARCH="$BUILD_DIR/bench/vectors/http_search"
bench_init curl
for b in "$VECGEN" "$HTTP_SEARCH"; do [[ -x "$b" ]] || { echo "missing $b" >&2; exit 2; }; done

data="$BENCH_TMP/data"
if [[ "$COSINE" == 1 ]]; then
  "$VECGEN" cosine "$N" "$Q" "$DIM" "$data" >&2
  DISTANCE=Cosine HS_FLAGS=(--cosine)
else
  [[ "$DIM" == 128 ]] || { echo "--dim needs --cosine (the L2 set is 128-d)" >&2; exit 2; }
  "$VECGEN" clustered "$N" "$Q" "$data" >&2
  DISTANCE=Euclid HS_FLAGS=()
fi
# K extra points for the WAL: the first K base vectors again under new ids, each component moved
# by a small deterministic offset (exact duplicates are a different workload: a twin at distance
# 0 makes the neighbour heuristic prune nearly every other candidate; --wal-duplicates keeps them).
python3 - "$data/base.fvecs" "$data/extra.fvecs" "$WAL" "$DIM" "$WAL_DUP" <<'PY'
import struct, sys
src, dst, k, dim, dup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
rec = 4 + 4 * dim
with open(src, "rb") as f, open(dst, "wb") as g:
    for i in range(k):
        r = f.read(rec)
        if len(r) < rec:
            break
        v = list(struct.unpack("<%df" % dim, r[4:]))
        if not dup:
            v = [x + 1e-3 * (((i * 7919 + j * 104729) % 2001) / 1000.0 - 1.0) for j, x in enumerate(v)]
        g.write(r[:4] + struct.pack("<%df" % dim, *v))
PY

cat >"$BENCH_TMP/v.yaml" <<YAML
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
workers: 1
log_level: info
vectors:
  data_dir: $BENCH_TMP/vectors
YAML
SERVE_PID=""
serve() {  # serve LOG: starts the server, sets PORT and READY_S (spawn to the port printed)
  local t0; t0=$(date +%s.%N)
  "$INFERA" serve -c "$BENCH_TMP/v.yaml" >"$1" 2>&1 &
  SERVE_PID=$!
  BENCH_PIDS+=("$SERVE_PID")
  PORT="$(wait_for_line "$1" 'data http://127\.0\.0\.1:[0-9]+' 3600 | sed 's/.*://')"
  READY_S=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.2f", a - b}')
  export INFERA_URL="http://127.0.0.1:$PORT"
}
loaded() { sed -n 's/.*collections loaded from .* in \([0-9.]*\) s (\([0-9]*\) points replayed.*/\1 s, \2 points replayed/p' "$1"; }

echo "vectors service benchmark: $N x $DIM ($DISTANCE), $Q queries, ef=$EF; one worker; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
serve "$BENCH_TMP/serve1.log"
rss0=$(rss_kb "$SERVE_PID")
"$INFERA" vectors create bench --dim "$DIM" --distance "$DISTANCE" >/dev/null
"$INFERA" vectors load bench "$data/base.fvecs" --batch 1000 --concurrency 2 --no-progress | tee "$BENCH_TMP/load.out"
rss1=$(rss_kb "$SERVE_PID")
echo "RSS growth per vector (plain): $(( (rss1 - rss0) * 1024 / N )) bytes; index_bytes_per_point: $(curl -s "$INFERA_URL/collections/bench/stats" | sed -n 's/.*"index_bytes_per_point":\([0-9.]*\).*/\1/p')"
if [[ "$INT8" == 1 ]]; then
  "$INFERA" vectors create bench8 --dim "$DIM" --distance "$DISTANCE" --quantization int8 >/dev/null
  "$INFERA" vectors load bench8 "$data/base.fvecs" --batch 1000 --concurrency 2 --no-progress
  rss2=$(rss_kb "$SERVE_PID")
  echo "RSS growth per vector (int8): $(( (rss2 - rss1) * 1024 / N )) bytes; index_bytes_per_point: $(curl -s "$INFERA_URL/collections/bench8/stats" | sed -n 's/.*"index_bytes_per_point":\([0-9.]*\).*/\1/p')"
fi
echo
if [[ "$SEARCH" == 1 ]]; then
  "$HTTP_SEARCH" "$INFERA_URL" bench "$data" --ef "$EF" --rate "$RATE" --seconds "$SECONDS_" "${HS_FLAGS[@]}"
  if [[ "$INT8" == 1 ]]; then
    "$HTTP_SEARCH" "$INFERA_URL" bench8 "$data" --ef "$EF" --rate "$RATE" --seconds "$SECONDS_" --no-inprocess "${HS_FLAGS[@]}" | tail -2 | sed 's/^| HTTP/| int8, HTTP/'
  fi
  echo
fi

t0=$(date +%s.%N)
kill -TERM "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true
echo "clean stop (drain + snapshot of every collection): $(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.2f", a - b}') s"
serve "$BENCH_TMP/serve2.log"
echo "restart from snapshots: $(loaded "$BENCH_TMP/serve2.log") (process start to port: $READY_S s)"
t0=$(date +%s.%N)
"$INFERA" vectors load bench "$data/extra.fvecs" --first-id "$N" --batch 1000 --concurrency 2 --no-progress >/dev/null
echo "the same $WAL points ingested live over HTTP first: $(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.2f", a - b}') s"
kill -9 "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true
serve "$BENCH_TMP/serve3.log"
echo "restart after kill -9 with $WAL points in the WAL: $(loaded "$BENCH_TMP/serve3.log") (process start to port: $READY_S s)"
echo "points after it: $(curl -s -X POST "$INFERA_URL/collections/bench/points/count" -d '{}' | sed -n 's/.*"count":\([0-9]*\).*/\1/p') (want $((N + WAL)))"
