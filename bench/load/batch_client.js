// The client-side loop a batch replaces (bench/load/batch.sh's baseline): reads a batch input
// JSONL file and sends each line's body to the gateway with CONCURRENCY requests in flight, as a
// script would without the Batch API. Node, no packages.
//
//   node batch_client.js PORT FILE CONCURRENCY
//
// Prints one JSON line: {"lines", "ok", "failed", "seconds", "lines_per_s"}.
'use strict';
const http = require('http');
const fs = require('fs');

const [port, file, concurrency] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4])];
const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0);
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
let next = 0, ok = 0, failed = 0;

function send(line) {
  const { url, body } = JSON.parse(line);
  const data = JSON.stringify(body);
  return new Promise((resolve) => {
    const req = http.request({
      host: '127.0.0.1', port, path: url, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      res.on('data', () => {});
      res.on('end', () => { if (res.statusCode === 200) ok += 1; else failed += 1; resolve(); });
    });
    req.on('error', () => { failed += 1; resolve(); });
    req.end(data);
  });
}

async function worker() {
  while (next < lines.length) await send(lines[next++]);
}

const t0 = process.hrtime.bigint();
Promise.all(Array.from({ length: concurrency }, worker)).then(() => {
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ lines: lines.length, ok, failed, seconds: Number(s.toFixed(3)),
    lines_per_s: Number((lines.length / s).toFixed(1)) }));
  agent.destroy();
});
