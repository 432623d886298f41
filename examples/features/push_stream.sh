#!/usr/bin/env bash
# Pushes a stream of events to the feature store: one JSON object per input line (e.g. the output
# of kafka-console-consumer), sent in column-major batches of BATCH (default 500) to POST /push.
# A failed push is retried (writes are idempotent per entity and event time; the newest wins).
# Usage: push_stream.sh PUSH_SOURCE [URL]      (URL default http://127.0.0.1:8080)
set -euo pipefail
source_name="$1"
url="${2:-http://127.0.0.1:8080}"
# The program comes in -c: stdin is the event stream.
program=$(cat <<'PY'
import json, sys, time, urllib.error, urllib.request
source, url, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
def push(rows):
    cols = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    body = json.dumps({"push_source_name": source, "df": {c: [r.get(c) for r in rows] for c in cols}}).encode()
    for attempt in range(5):
        try:
            req = urllib.request.Request(url + "/push", data=body, method="POST",
                                         headers={"content-type": "application/json"})
            urllib.request.urlopen(req, timeout=10).read()
            return
        except urllib.error.HTTPError as e:
            if e.code < 500:
                sys.exit(f"push refused ({e.code}): {e.read().decode()}")
        except OSError:
            pass
        time.sleep(0.2 * 2 ** attempt)
    sys.exit("push failed after 5 attempts")
rows, sent = [], 0
for line in sys.stdin:
    if line.strip():
        rows.append(json.loads(line))
    if len(rows) >= batch:
        push(rows); sent += len(rows); rows = []
if rows:
    push(rows); sent += len(rows)
print(f"pushed {sent} events to {source}", file=sys.stderr)
PY
)
exec python3 -c "$program" "$source_name" "$url" "${BATCH:-500}"
