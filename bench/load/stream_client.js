// Load client for bench/load/streams.sh (node, no packages). Two modes:
//
//   node stream_client.js streams PORT N MAX_TOKENS TIMEOUT_S
//     Opens N connections at once, each POSTs one streaming chat completion (HTTP/1.1, raw
//     sockets), timestamps every token event as it is read and prints one JSON line: completed
//     streams, failures, tokens, and percentiles of the inter-token gaps (ms) over all streams.
//
//   node stream_client.js idle PORT N
//     Opens N keep-alive connections, sends GET /v1/models on each, reads the answer, keeps the
//     connections open and prints "ready N"; closes everything and exits when stdin closes.
'use strict';
const net = require('net');

const [mode, portArg, nArg, tokArg, timeoutArg] = process.argv.slice(2);
const port = Number(portArg);
const n = Number(nArg);

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[i];
}

// Connects in batches so the listen backlog never overflows; calls onSocket(sock, i).
function connectAll(count, onSocket) {
  let next = 0;
  const batch = () => {
    const end = Math.min(count, next + 100);
    for (; next < end; next++) onSocket(net.connect({ host: '127.0.0.1', port }), next);
    if (next < count) setImmediate(batch);
  };
  batch();
}

function runStreams() {
  const maxTokens = Number(tokArg);
  const timeoutMs = Number(timeoutArg) * 1000;
  const body = JSON.stringify({
    model: 'm', stream: true, max_tokens: maxTokens,
    messages: [{ role: 'user', content: 'Tell me a long story.' }],
  });
  const request = 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n' +
      'Content-Type: application/json\r\nContent-Length: ' + Buffer.byteLength(body) + '\r\n\r\n' + body;
  const gaps = new Float64Array(n * Math.max(1, maxTokens));
  let ngaps = 0, completed = 0, failed = 0, tokens = 0, finished = 0;
  const errors = {};
  const t0 = process.hrtime.bigint();

  const done = () => {
    if (++finished < n) return;
    report();
  };
  const report = () => {
    const g = Array.from(gaps.subarray(0, ngaps)).sort((a, b) => a - b);
    const out = {
      streams: n, completed, failed, tokens, errors,
      wall_s: Number(process.hrtime.bigint() - t0) / 1e9,
      gap_ms: { n: g.length, p50: percentile(g, 0.5), p90: percentile(g, 0.9), p99: percentile(g, 0.99),
                p999: percentile(g, 0.999), max: g.length ? g[g.length - 1] : 0 },
    };
    process.stdout.write(JSON.stringify(out) + '\n');
    process.exit(0);
  };
  setTimeout(() => {
    failed += n - finished;
    errors.timeout = n - finished;
    finished = n;
    report();
  }, timeoutMs).unref();

  const TOKEN = Buffer.from('"delta":{"content":');
  const DONE = Buffer.from('data: [DONE]');
  const ERROR = Buffer.from('data: {"error"');
  const KEEP = Math.max(TOKEN.length, DONE.length, ERROR.length) - 1;
  const count = (buf, needle) => {
    let c = 0;
    for (let i = buf.indexOf(needle); i >= 0; i = buf.indexOf(needle, i + needle.length)) c++;
    return c;
  };

  connectAll(n, (sock) => {
    // Response framing: the head, then chunked transfer coding (decoded here, since a proxy may
    // cut its chunks anywhere inside an SSE event), then SSE events scanned for token markers.
    let head = Buffer.alloc(0), inBody = false, state = 'size', sizeLine = '', remaining = 0;
    let carry = Buffer.alloc(0), last = 0n, got = 0, ok = false, ended = false;
    const finish = (err) => {
      if (ended) return;
      ended = true;
      if (ok && got === maxTokens) completed++;
      else { failed++; const k = err || (ok ? 'short ' + got : 'no-done'); errors[k] = (errors[k] || 0) + 1; }
      sock.destroy();
      done();
    };
    const payload = (buf, now) => {
      const scan = carry.length ? Buffer.concat([carry, buf]) : buf;
      const t = count(scan, TOKEN);
      for (let k = 0; k < t; k++) {
        if (got > 0) gaps[ngaps++] = Number(now - last) / 1e6;
        last = now;
        got++;
        tokens++;
      }
      if (scan.indexOf(DONE) >= 0) ok = true;
      if (scan.indexOf(ERROR) >= 0) return finish('sse-error');
      // Keep a tail short enough that no marker is counted twice, long enough to join a split one.
      const tail = Math.min(KEEP, scan.length);
      carry = Buffer.from(scan.subarray(scan.length - tail));
      const lastTok = scan.lastIndexOf(TOKEN);
      if (lastTok >= 0 && lastTok + TOKEN.length > scan.length - tail) carry = Buffer.alloc(0);
    };
    sock.setNoDelay(true);
    sock.on('connect', () => sock.write(request));
    sock.on('data', (chunk) => {
      const now = process.hrtime.bigint();
      let i = 0;
      if (!inBody) {
        head = Buffer.concat([head, chunk]);
        const h = head.indexOf('\r\n\r\n');
        if (h < 0) return;
        const status = head.subarray(0, 12).toString('latin1');
        if (status !== 'HTTP/1.1 200') return finish('status ' + status.slice(9));
        inBody = true;
        chunk = head.subarray(h + 4);
      }
      while (i < chunk.length && !ended) {
        if (state === 'size') {
          const nl = chunk.indexOf(10, i);
          if (nl < 0) { sizeLine += chunk.toString('latin1', i); return; }
          sizeLine += chunk.toString('latin1', i, nl);
          i = nl + 1;
          remaining = parseInt(sizeLine.trim(), 16);
          sizeLine = '';
          if (remaining === 0) return finish();
          state = 'data';
        } else if (state === 'data') {
          const take = Math.min(remaining, chunk.length - i);
          payload(chunk.subarray(i, i + take), now);
          i += take;
          remaining -= take;
          if (remaining === 0) { state = 'crlf'; remaining = 2; }
        } else {  // the CRLF after a chunk's data
          const take = Math.min(remaining, chunk.length - i);
          i += take;
          remaining -= take;
          if (remaining === 0) state = 'size';
        }
      }
    });
    sock.on('error', (err) => finish(err.code || 'error'));
    sock.on('close', () => finish());
  });
}

function runIdle() {
  const socks = [];
  let ready = 0;
  const req = 'GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';
  connectAll(n, (sock) => {
    socks.push(sock);
    let got = '', counted = false;
    sock.setEncoding('latin1');
    sock.on('connect', () => sock.write(req));
    sock.on('data', (chunk) => {
      got += chunk;
      const h = got.indexOf('\r\n\r\n');
      const m = /content-length: *(\d+)/i.exec(got);
      if (!counted && h >= 0 && m && got.length >= h + 4 + Number(m[1])) {
        counted = true;
        if (++ready === n) process.stdout.write('ready ' + n + '\n');
      }
    });
    sock.on('error', (err) => { process.stderr.write('idle connection: ' + err.message + '\n'); process.exit(1); });
  });
  process.stdin.on('end', () => { socks.forEach((s) => s.destroy()); process.exit(0); });
  process.stdin.resume();
}

if (mode === 'streams') runStreams();
else if (mode === 'idle') runIdle();
else { process.stderr.write('usage: stream_client.js streams PORT N MAX_TOKENS TIMEOUT_S | idle PORT N\n'); process.exit(2); }
