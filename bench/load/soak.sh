#!/usr/bin/env bash
# Soak: a fixed mixed rate for a long time against one gateway with access control on and its
# limits in Redis, sampling the gateway's RSS. The mix: non-streaming chats (some cacheable),
# streams with and without usage, embeddings, and streams the client drops halfway (aborts), over
# several keys and users. Passes when, after the warm-up, RSS grows by no more than 5% and no
# request got an unexpected status (200, and 429 from the limits, are expected).
#
#   bench/load/soak.sh [--minutes M] [--rate R] [--warmup-minutes W] [--kinds chat,stream,...]
#
# Defaults: 10 minutes at 200 requests/s, 2 minutes of warm-up, the whole mix (--kinds narrows it to
# some of chat, cached, stream, stream_usage, embed, abort: to find which kind grows). Prints RSS and
# open file descriptors every 10 s and a verdict.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MINUTES=10 RATE=200 WARMUP=2 KINDS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    --minutes) MINUTES="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --warmup-minutes) WARMUP="$2"; shift 2 ;;
    --kinds) KINDS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bench_init curl python3 redis-server

REDIS_PORT="$(free_port)"
mkdir -p "$BENCH_TMP/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$BENCH_TMP/redis" --save "" --appendonly no \
  >"$BENCH_TMP/redis.log" 2>&1 &
BENCH_PIDS+=("$!")
for _ in $(seq 1 200); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
export INFERA_ADMIN_TOKEN="soak-admin-token"
cfg="$BENCH_TMP/soak.yaml"
cat >"$cfg" <<EOF
workers: 2
listen: {host: 127.0.0.1, port: 0}
admin: {host: 127.0.0.1, port: 0}
log_level: warn
governance:
  store: "sqlite:$BENCH_TMP/soak.db"
  key_secret: soak-secret-0123456789abcdef0123456789
  redis: "redis://127.0.0.1:$REDIS_PORT"
  usage_flush_ms: 500
  cache: {ttl_ms: 30000, max_bytes: 4194304}
emulators:
  e: {models: [chat, embed], ttft_ms: 5, token_ms: 2, default_max_tokens: 16}
models:
  - name: chat
    deployments: [{endpoints: [{emulator: e}]}]
  - name: embed
    deployments: [{endpoints: [{emulator: e}]}]
EOF
"$INFERA" serve -c "$cfg" >"$BENCH_TMP/gw.log" 2>&1 &
GW_PID=$!
BENCH_PIDS+=("$GW_PID")
line="$(wait_for_line "$BENCH_TMP/gw.log" 'data http://127\.0\.0\.1:[0-9]+ +admin http://127\.0\.0\.1:[0-9]+')"
GW_PORT="$(sed -E 's/data http:\/\/127\.0\.0\.1:([0-9]+).*/\1/' <<<"$line")"
GW_ADMIN="$(sed -E 's/.*admin http:\/\/127\.0\.0\.1:([0-9]+)/\1/' <<<"$line")"
auth="authorization: Bearer $INFERA_ADMIN_TOKEN"
curl -sf -H "$auth" -d '{"name":"soak","rpm":600000,"tpm":100000000,"user_rpm":3000}' \
  "http://127.0.0.1:$GW_ADMIN/admin/teams" >/dev/null
KEYS=()
for _ in 1 2 3 4; do
  KEYS+=("$(curl -sf -H "$auth" -d '{"team":"soak","allow_user":true}' "http://127.0.0.1:$GW_ADMIN/admin/keys" |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')")
done

echo "soak: ${MINUTES} min at ${RATE} req/s (warm-up ${WARMUP} min), gateway pid $GW_PID"
SOAK_KINDS="$KINDS" python3 - "$GW_PORT" "$GW_PID" "$RATE" "$MINUTES" "$WARMUP" "${KEYS[@]}" <<'PY'
import asyncio, json, os, random, sys, time
port, pid, rate, minutes, warmup = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
keys = sys.argv[6:]
rng = random.Random(7)
stats = {}
def fds():
    return len(os.listdir(f"/proc/{pid}/fd"))
def rss_kb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0

async def one(kind):
    key = rng.choice(keys)
    user = f"u{rng.randrange(50)}"
    if kind == "embed":
        path, body = "/v1/embeddings", {"model": "embed", "input": f"text {rng.randrange(1000)}"}
    else:
        body = {"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": f"hi {rng.randrange(200)}"}]}
        path = "/v1/chat/completions"
        if kind == "cached":
            body["temperature"] = 0
        if kind in ("stream", "stream_usage", "abort"):
            body["stream"] = True
        if kind == "stream_usage":
            body["stream_options"] = {"include_usage": True}
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\nx-infera-user: {user}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(data)}\r\nconnection: close\r\n\r\n").encode()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        w.write(head + data)
        await w.drain()
        status_line = await asyncio.wait_for(r.readline(), 30)
        status = int(status_line.split()[1]) if status_line else 0
        if kind == "abort":
            await asyncio.wait_for(r.read(300), 30)  # a few events, then the client leaves
        else:
            while await asyncio.wait_for(r.read(65536), 30):
                pass
        w.close()
    except Exception as e:
        status = type(e).__name__
    k = (kind, status)
    stats[k] = stats.get(k, 0) + 1

async def main():
    kinds = ["chat"] * 4 + ["cached"] * 2 + ["stream"] * 2 + ["stream_usage", "embed", "embed", "abort"]
    if os.environ.get("SOAK_KINDS"):
        kinds = os.environ["SOAK_KINDS"].split(",")
    start = time.time()
    end = start + minutes * 60
    tasks = set()
    samples = []
    next_sample = start
    n = 0
    while time.time() < end:
        now = time.time()
        if now >= next_sample:
            samples.append((now - start, rss_kb()))
            print(f"  t={now - start:6.0f}s  rss={samples[-1][1] / 1024:7.1f} MiB  fds={fds():4d}  sent={n}", flush=True)
            next_sample += 10
        t = asyncio.ensure_future(one(rng.choice(kinds)))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        n += 1
        await asyncio.sleep(max(0, start + n / rate - time.time()))
    await asyncio.gather(*tasks)
    samples.append((time.time() - start, rss_kb()))
    after = [s for t, s in samples if t >= warmup * 60]
    base, peak, last = after[0], max(after), after[-1]
    growth = (last - base) / base * 100
    print(f"requests sent {n}; by kind and status: {json.dumps({f'{k}:{s}': c for (k, s), c in sorted(stats.items(), key=str)})}")
    print(f"RSS after warm-up: {base / 1024:.1f} MiB -> {last / 1024:.1f} MiB at the end (peak {peak / 1024:.1f}); growth {growth:+.1f}%")
    bad = {f"{k}:{s}": c for (k, s), c in stats.items() if s not in (200, 429)}
    ok = growth <= 5 and not bad
    print("verdict:", "PASS" if ok else f"FAIL (unexpected: {bad})")
    sys.exit(0 if ok else 1)

asyncio.run(main())
PY
