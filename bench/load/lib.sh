# Shared helpers for the end-to-end load scripts (sourced, not run). Everything binds 127.0.0.1;
# every process started here is recorded and killed by the EXIT trap that `bench_init` installs.
#
# Environment knobs (all optional):
#   INFERA        path to the infera binary (default: $BUILD_DIR/src/cli/infera, BUILD_DIR=build/release)
#   BENCH_PIN     "1" pins processes with taskset (see docs/benchmarks.md); default off
#   BENCH_PRIO    "nice" runs every benchmark process (servers and load generator alike) at nice -10,
#                 "rt" at SCHED_FIFO priority 10 (chrt -f 10), to keep other work on a shared box
#                 from sitting between a wake-up and the benchmark; default: normal priority
#   BENCH_KEEP    "1" keeps the temp dir (configs, logs) for inspection

set -euo pipefail

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$BENCH_ROOT/build/release}"
INFERA="${INFERA:-$BUILD_DIR/src/cli/infera}"
BENCH_PIDS=()
BENCH_TMP=""

bench_cleanup() {
  local pid
  for pid in "${BENCH_PIDS[@]:-}"; do
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  done
  for pid in "${BENCH_PIDS[@]:-}"; do
    [[ -n "$pid" ]] && wait "$pid" 2>/dev/null || true
  done
  if [[ -n "$BENCH_TMP" && "${BENCH_KEEP:-0}" != "1" ]]; then
    rm -rf "$BENCH_TMP"
  elif [[ -n "$BENCH_TMP" ]]; then
    echo "kept $BENCH_TMP" >&2
  fi
}

bench_init() {
  [[ -x "$INFERA" ]] || { echo "missing $INFERA (cmake --preset release && cmake --build build/release --target infera)" >&2; exit 2; }
  bench_start "$@"
}

# bench_start TOOLS...: what bench_init does but the infera binary (for scripts that run none):
# checks the tools, makes BENCH_TMP and sets the cleanup traps.
bench_start() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "missing $tool (scripts/install-deps.sh)" >&2; exit 2; }
  done
  BENCH_TMP="$(mktemp -d /tmp/infera-bench.XXXXXX)"
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

# pin_prefix CPUS: sets the array PIN to the taskset/priority prefix that BENCH_PIN/BENCH_PRIO ask
# for (empty by default). Used as "${PIN[@]}" cmd ... & so that $! is the server's own pid (a
# backgrounded function would be a subshell, and killing it would leave the server running).
pin_prefix() {
  PIN=()
  case "${BENCH_PRIO:-}" in
    "") ;;
    nice) PIN+=(nice -n -10) ;;
    rt) PIN+=(chrt -f 10) ;;
    *) echo "BENCH_PRIO must be nice or rt" >&2; exit 2 ;;
  esac
  if [[ "${BENCH_PIN:-0}" == "1" && -n "$1" ]]; then PIN+=(taskset -c "$1"); fi
}

# median: the median of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# CPU time (clock ticks, user + system) a process has used so far; with the request counts this
# gives CPU per request, a steadier figure than req/s on a shared box. us_per TICKS REQUESTS: the
# microseconds of CPU per request.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ="$(getconf CLK_TCK)"
us_per() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN {printf "%.1f", (n > 0) ? (t / hz * 1e6 / n) : 0}'; }

# Over the associative array RESULTS (per variant, each round's figure, space-separated): med
# VARIANT is the median of its rounds; ratio VARIANT [BASE] the median of its per-round ratios to
# BASE's (default "off"; each round measures every variant), rounds VARIANT [BASE] those ratios.
med() { tr ' ' '\n' <<<"${RESULTS[$1]}" | grep . | median; }
round_ratios() { paste -d' ' <(tr ' ' '\n' <<<"${RESULTS[$1]}" | grep .) <(tr ' ' '\n' <<<"${RESULTS[${2:-off}]}" | grep .) \
  | awk '{print $1 / $2}'; }
ratio() { round_ratios "$@" | median; }
rounds() { round_ratios "$@" | awk '{printf "%.3f ", $1}'; }

# run_wrk LABEL PORT SECONDS LUA: wrk (THREADS threads, default 1; CONNS connections) POSTing to
# /v1/chat/completions with the Lua script LUA, on LOAD_CPUS; prints req/s and fails on socket
# errors or non-2xx answers. SCHEME=https speaks TLS (wrk does not verify the certificate).
run_wrk() {
  local label="$1" port="$2" secs="$3" lua="$4" out="$BENCH_TMP/wrk-$1.txt"
  pin_prefix "${LOAD_CPUS:-}"
  "${PIN[@]}" timeout $((secs + 30)) wrk -t "${THREADS:-1}" -c "$CONNS" -d "${secs}s" \
    -s "$lua" "${SCHEME:-http}://127.0.0.1:$port/v1/chat/completions" >"$out" 2>&1
  if grep -q 'Non-2xx\|Socket errors' "$out"; then
    echo "wrk against $label reported errors:" >&2
    cat "$out" >&2
    return 1
  fi
  awk '/^Requests\/sec:/ {print $2}' "$out"
}

bench_env_note() { echo "pinning ${BENCH_PIN:-0}, priority ${BENCH_PRIO:-normal}"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_for_line FILE REGEX [SECONDS]: waits until FILE has a line matching REGEX, prints the match.
wait_for_line() {
  local file="$1" re="$2" secs="${3:-10}" i
  for ((i = 0; i < secs * 20; i++)); do
    if grep -Eo "$re" "$file" 2>/dev/null | head -1 | grep .; then return 0; fi
    sleep 0.05
  done
  echo "timed out waiting for /$re/ in $file:" >&2
  cat "$file" >&2
  return 1
}

# start_emulator NAME CPUS ARGS...: sets EMU_PORT and EMU_PID.
start_emulator() {
  local name="$1" cpus="$2"; shift 2
  local log="$BENCH_TMP/$name.log"
  pin_prefix "$cpus"
  "${PIN[@]}" "$INFERA" emulate --host 127.0.0.1 --port 0 "$@" >"$log" 2>&1 &
  EMU_PID=$!
  BENCH_PIDS+=("$EMU_PID")
  EMU_PORT="$(wait_for_line "$log" 'https?://127\.0\.0\.1:[0-9]+' | sed 's/.*://')"
}

# start_gateway NAME CPUS WORKERS UPSTREAM_PORT [EXTRA_YAML]: sets GW_PORT, GW_ADMIN, GW_PID.
start_gateway() {
  local name="$1" cpus="$2" workers="$3" up="$4" extra="${5:-}" model_extra="${6:-}"
  local cfg="$BENCH_TMP/$name.yaml"
  cat >"$cfg" <<EOF
region: local
workers: $workers
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
access_log: ""
log_level: warn
$extra
models:
  - name: m
    $model_extra
    deployments:
      - name: emu
        endpoints:
          - {url: "http://127.0.0.1:$up", region: local, max_concurrent: 100000}
EOF
  serve_gateway "$name" "$cpus"
}

# start_redis_cluster N: a Redis Cluster of N masters (no replicas) on free ports, pinned like the
# load generator (LOAD_CPUS); sets CLUSTER_PORTS and CLUSTER_URL (redis-cluster://, every node a
# seed).
start_redis_cluster() {
  CLUSTER_PORTS=()
  local i p
  pin_prefix "${LOAD_CPUS:-0}"
  for ((i = 0; i < $1; i++)); do
    p="$(free_port)"
    CLUSTER_PORTS+=("$p")
    mkdir -p "$BENCH_TMP/cluster-$i"
    "${PIN[@]}" redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-port "$(free_port)" \
      --dir "$BENCH_TMP/cluster-$i" >"$BENCH_TMP/cluster-$i.log" 2>&1 &
    BENCH_PIDS+=("$!")
    wait_for_line "$BENCH_TMP/cluster-$i.log" "Ready to accept connections" >/dev/null
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER_PORTS[@]}") --cluster-replicas 0 \
    --cluster-yes >"$BENCH_TMP/cluster-create.log" 2>&1 || { cat "$BENCH_TMP/cluster-create.log" >&2; exit 1; }
  for _ in $(seq 1 200); do
    redis-cli -p "${CLUSTER_PORTS[0]}" cluster info | grep -q 'cluster_state:ok' && break
    sleep 0.05
  done
  CLUSTER_URL="redis-cluster://$(printf '127.0.0.1:%s,' "${CLUSTER_PORTS[@]}" | sed 's/,$//')"
}

# serve_gateway NAME CPUS: runs `infera serve` on $BENCH_TMP/NAME.yaml (log NAME.log) and waits
# for its ports: sets GW_PORT, GW_ADMIN, GW_PID.
serve_gateway() {
  local cfg="$BENCH_TMP/$1.yaml" log="$BENCH_TMP/$1.log"
  pin_prefix "$2"
  "${PIN[@]}" "$INFERA" serve -c "$cfg" >"$log" 2>&1 &
  GW_PID=$!
  BENCH_PIDS+=("$GW_PID")
  local line
  line="$(wait_for_line "$log" 'data http://127\.0\.0\.1:[0-9]+ +admin http://127\.0\.0\.1:[0-9]+')"
  GW_PORT="$(sed -E 's/data http:\/\/127\.0\.0\.1:([0-9]+).*/\1/' <<<"$line")"
  GW_ADMIN="$(sed -E 's/.*admin http:\/\/127\.0\.0\.1:([0-9]+)/\1/' <<<"$line")"
}

# start_nginx NAME CPUS WORKERS UPSTREAM_PORT: nginx proxy_pass with upstream keepalive (HTTP/1.1),
# foreground (daemon off), pid/logs/temp paths in the temp dir. Sets NGX_PORT and NGX_PID.
start_nginx() {
  local name="$1" cpus="$2" workers="$3" up="$4"
  local dir="$BENCH_TMP/$name"
  mkdir -p "$dir/logs" "$dir/tmp"
  NGX_PORT="$(free_port)"
  local user_line=""
  [[ "$(id -u)" == "0" ]] && user_line="user root;"
  cat >"$dir/nginx.conf" <<EOF
$user_line
daemon off;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 8192; multi_accept on; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_requests 1000000;
  upstream emulator {
    server 127.0.0.1:$up;
    keepalive 256;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$NGX_PORT;
    location / {
      proxy_pass http://emulator;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
  pin_prefix "$cpus"
  "${PIN[@]}" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" >"$dir/stdout.log" 2>&1 &
  NGX_PID=$!
  BENCH_PIDS+=("$NGX_PID")
  local i
  for ((i = 0; i < 100; i++)); do
    curl -s -o /dev/null "http://127.0.0.1:$NGX_PORT/v1/models" && return 0
    sleep 0.05
  done
  echo "nginx did not come up:" >&2
  cat "$dir/logs/error.log" "$dir/stdout.log" >&2
  return 1
}

# check_chat PORT: one small chat completion must answer 200 (sanity before measuring).
check_chat() {
  local code
  code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}')"
  [[ "$code" == "200" ]] || { echo "chat completion via port $1 answered $code" >&2; return 1; }
}

# rss_kb PID: resident set size in kB (VmRSS).
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# Processes of one measurement (a script appends their pids to RUN_PIDS); stop_run kills and reaps
# them, so the next measurement starts fresh.
RUN_PIDS=()
stop_run() {
  local pid
  for pid in "${RUN_PIDS[@]:-}"; do [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true; done
  for pid in "${RUN_PIDS[@]:-}"; do [[ -n "$pid" ]] && wait "$pid" 2>/dev/null || true; done
  RUN_PIDS=()
}
