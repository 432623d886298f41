// The web console end to end in Debian's Chromium (playwright-core, /usr/bin/chromium) against a
// real `infera serve` with two emulated deployments, access control and the registry
// (run_console_test.sh starts it). Each step drives the page as a user would and checks the
// effect through the page and through the server itself.
//   env: ADMIN_URL DATA_URL INFERA_ADMIN_TOKEN CONFIG SHOTS SIM_FGD SIM_REPLAY (report.json files)
import assert from 'node:assert/strict';
import { readFileSync, existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';

// The packages the build installed (NODE_PATH: ESM imports do not read it).
const { chromium } = createRequire(process.env.NODE_PATH + '/')('playwright-core');

const { ADMIN_URL, DATA_URL, INFERA_ADMIN_TOKEN: TOKEN, CONFIG, SHOTS, SIM_FGD, SIM_REPLAY } = process.env;
mkdirSync(SHOTS, { recursive: true });

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const adminApi = async (path, init = {}) => {
  const res = await fetch(ADMIN_URL + path, { ...init, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', ...(init.headers || {}) } });
  const body = await res.json().catch(() => null);
  return { status: res.status, body };
};
const chat = (key, model = 'chat') => fetch(`${DATA_URL}/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
}).then(async (r) => ({ status: r.status, body: await r.text() }));

async function waitFor(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: FLAGS, headless: true });
const problems = [];
// Chromium logs every 4xx answer to fetch as a console error; they are expected only while a step
// provokes one (a refused edit, a read-only key's tries), and count as problems anywhere else.
let expectRefusals = false;
const refusal = /^Failed to load resource: the server responded with a status of 4\d\d/;
async function newPage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() !== 'error' && m.type() !== 'warning') return;
    if (expectRefusals && refusal.test(m.text())) return;
    problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  return page;
}
const ready = (page, id) => page.waitForSelector(`body[data-ready="${id}"]`, { timeout: 15000 });
const go = async (page, id) => {
  await page.evaluate((h) => { location.hash = h; }, `#/${id}`);
  await ready(page, id);
};
// Every page of the console (src/console/assets/app.js, PAGES).
const PAGES = ['overview', 'keys', 'usage', 'routes', 'registry', 'stores', 'vectors', 'batches', 'scheduler', 'audit'];
const shot = (page, name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: false });
const step = (name) => console.log(`-- ${name}`);

try {
  const page = await newPage();

  step('the page and its assets: types, caching, CSP');
  const res = await fetch(`${ADMIN_URL}/ui/`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  assert.match(res.headers.get('content-security-policy'), /script-src 'self'/);
  assert.equal(res.headers.get('cache-control'), 'no-cache');
  const again = await fetch(`${ADMIN_URL}/ui/app.js`, { headers: { 'if-none-match': (await fetch(`${ADMIN_URL}/ui/app.js`)).headers.get('etag') } });
  assert.equal(again.status, 304);
  assert.equal((await fetch(`${ADMIN_URL}/ui/nope.js`)).status, 404);

  step('log in with a wrong token, then the admin token');
  await page.goto(`${ADMIN_URL}/ui`);
  await page.fill('#login-token', 'not-the-token');
  await page.click('form.login button[type=submit]');
  await page.waitForFunction(() => document.getElementById('login-error')?.textContent.includes('not the admin token'));
  await shot(page, 'login');
  await page.fill('#login-token', TOKEN);
  await page.fill('#login-actor', 'tester');
  await page.press('#login-token', 'Enter'); // the keyboard submits too
  await ready(page, 'overview');
  const nav = await page.$$eval('nav a', (as) => as.map((a) => a.textContent));
  assert.deepEqual(nav, ['Overview', 'Keys & teams', 'Usage & cost', 'Routes & config', 'Registry', 'Features', 'Vectors', 'Batches', 'Scheduler', 'Audit']);
  await page.waitForSelector('tr[data-deployment="chat|dep-a"]');
  await shot(page, 'overview');

  step('create a team and a key in the forms; the secret is shown once');
  await go(page, 'keys');
  await page.fill('#create-team [name=name]', 'web');
  await page.fill('#create-team [name=models]', 'chat*');
  await page.fill('#create-team [name=tpm]', '100000');
  await page.click('#create-team button[type=submit]');
  await page.waitForSelector('tr[data-id="web"]');
  await page.selectOption('#create-key [name=team]', 'web');
  await page.fill('#create-key [name=name]', 'browser-key');
  await page.click('#create-key button[type=submit]');
  const secret = (await (await page.waitForSelector('dialog [data-secret]')).textContent()).trim();
  assert.match(secret, /^sk-inf-/);
  await shot(page, 'key-created');
  await page.click('dialog button.primary:has-text("Done")');
  const keyId = secret.split('-')[2];
  await page.waitForSelector(`tr[data-id="${keyId}"]`);
  const listed = await page.textContent(`tr[data-id="${keyId}"]`);
  assert.ok(!listed.includes(secret.slice(20)), 'the list must not show the secret');
  await shot(page, 'keys');

  step('a bad form value gets the API error at its field');
  expectRefusals = true;
  await page.fill('#create-team [name=name]', 'bad team');
  await page.click('#create-team button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#create-team [name=name]')?.getAttribute('aria-invalid') === 'true');
  expectRefusals = false;

  step('call the gateway with the key');
  const first = await chat(secret);
  assert.equal(first.status, 200, first.body);

  step('the usage chart moves');
  await go(page, 'usage');
  const total = async () => Number(await page.getAttribute('[aria-live="off"][data-total]', 'data-total'));
  await waitFor('the first request in the chart', async () => (await total()) >= 1);
  const t0 = await total();
  for (let i = 0; i < 3; i++) assert.equal((await chat(secret)).status, 200);
  await waitFor('the chart to count 3 more requests', async () => (await total()) >= t0 + 3);
  const bars = await page.$$eval('svg.chart rect[data-series="web"]', (rs) => rs.length);
  assert.ok(bars >= 1, 'a bar for team web');
  await shot(page, 'usage');

  step('change a deployment weight in the config screen: diff, apply, traffic shifts');
  const fileBefore = readFileSync(CONFIG, 'utf8');
  await go(page, 'routes');
  const weightB = 'input[data-path="models[0].deployments[1].endpoints[0].weight"]';
  await page.fill(weightB, '60');
  await page.click('#config-review');
  const diff = await (await page.waitForSelector('dialog pre.diff')).textContent();
  assert.match(diff, /\+\s+weight: 60/);
  await shot(page, 'routes-diff');
  const genBefore = (await adminApi('/admin/config')).body.generation;
  await page.click('dialog button.primary:has-text("Apply")');
  await page.waitForSelector('.toast:has-text("Applied")');
  const cfg = (await adminApi('/admin/config')).body;
  assert.equal(cfg.generation, genBefore + 1);
  assert.equal(readFileSync(CONFIG, 'utf8'),
    fileBefore.replace('[{emulator: b, region: local, weight: 1}]', '[{emulator: b, region: local, weight: 60}]'),
    'only the value changed in the file: its comments and layout stay');
  assert.equal(readFileSync(`${CONFIG}.bak`, 'utf8'), fileBefore, 'the previous file is kept as the backup');
  const audit = (await adminApi('/admin/audit?since=1h')).body.audit;
  const applied = audit.find((a) => a.action === 'config.apply' && a.actor === 'console:tester');
  assert.ok(applied, 'the apply is audited with who');
  assert.equal(applied.detail.file_edit, 'in_place', 'the audit says the file was edited in place');
  await go(page, 'overview');
  const count = async (dep) => Number((await page.textContent(`tr[data-deployment="chat|${dep}"] td[data-col=total]`)).replace(/,/g, '')) || 0;
  const a0 = await count('dep-a');
  const b0 = await count('dep-b');
  // The apply answered once every worker serves the new routes, so all of these meet 1:60. dep-a
  // is the first draw of 1 request in 61 (3.3 of 200 expected) and takes over from dep-b only when
  // dep-b is clearly loaded (docs/gateway.md); a worker left on the old 1:1 table, or a balancer
  // whose weights a decayed estimate overrides, gives it a quarter or more. 12 or more of 200 at
  // 1 in 61 has a probability below 1e-4.
  const N = 200;
  for (let i = 0; i < N; i++) assert.equal((await chat(secret)).status, 200);
  await waitFor(`the overview to count ${N} requests`, async () => (await count('dep-a')) + (await count('dep-b')) >= a0 + b0 + N);
  const da = (await count('dep-a')) - a0;
  const db = (await count('dep-b')) - b0;
  console.log(`after weight 1:60: dep-a ${da}, dep-b ${db}`);
  assert.equal(da + db, N, 'every request counted once');
  assert.ok(da <= 11, `dep-b (weight 60) should take all but a few of ${N} requests: a=${da} b=${db}`);
  await shot(page, 'overview-after-shift');

  step('a bad edit shows the field error and changes nothing');
  expectRefusals = true;
  await go(page, 'routes');
  const fileGood = readFileSync(CONFIG, 'utf8');
  await page.fill(weightB, '0');
  await page.click('#config-review');
  await page.waitForFunction((sel) => document.querySelector(sel)?.getAttribute('aria-invalid') === 'true', weightB);
  const msg = await page.$eval(weightB, (el) => el.closest('.field').querySelector('.field-error').textContent);
  assert.match(msg, /must be in \[1, 1000\], got 0/, msg);
  assert.match(await page.textContent('#config-errors'), /models\[0\]\.deployments\[1\]\.endpoints\[0\]\.weight/);
  await page.$eval(weightB, (el) => el.scrollIntoView({ block: 'center' }));
  await shot(page, 'routes-error');
  assert.equal(readFileSync(CONFIG, 'utf8'), fileGood, 'the file is unchanged');
  assert.equal((await adminApi('/admin/config')).body.generation, genBefore + 1, 'no reload happened');
  const bad = await adminApi('/admin/config', { method: 'POST', body: JSON.stringify({ config: { ...cfg.config, workers: 'many' } }) });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.code, 'invalid_config');
  assert.equal(bad.body.errors[0].path, 'workers');
  await page.click('#config-reset');
  expectRefusals = false;

  step('registry: aliases, history, rollback with confirmation, experiment arms');
  assert.equal((await adminApi('/admin/teams', { method: 'POST', body: JSON.stringify({ name: 'risk', models: ['fraud*'] }) })).status, 201);
  const riskKey = (await adminApi('/admin/keys', { method: 'POST', body: JSON.stringify({ team: 'risk' }) })).body.key;
  for (let i = 0; i < 10; i++) assert.equal((await chat(riskKey, 'fraud')).status, 200);
  await go(page, 'registry');
  await page.waitForSelector('[data-rollback="champion"]');
  await shot(page, 'registry');
  await page.click('[data-rollback="champion"]');
  await page.waitForSelector('dialog:has-text("Roll back fraud@champion")');
  await page.click('dialog button.danger:has-text("Roll back")');
  await page.waitForSelector('.toast:has-text("rolled back")');
  const model = (await fetch(`${ADMIN_URL}/api/2.0/mlflow/registered-models/get?name=fraud`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.json())).registered_model;
  assert.equal(model.aliases.find((a) => a.alias === 'champion').version, '1');
  const armRequests = await page.$$eval('table[aria-label="Experiment arms"] tbody tr', (trs) => trs.map((tr) => Number(tr.children[3].textContent.replace(/,/g, ''))));
  assert.equal(armRequests.length, 2, 'two arms side by side');
  assert.equal(armRequests[0] + armRequests[1], 10, `the 10 requests split over the arms: ${armRequests}`);

  step('features: the repository\'s views and services, and a view\'s freshness after a write');
  const eventAt = new Date(Date.now() - 120_000).toISOString();
  const ingest = await adminApi('/admin/features/ingest', { method: 'POST', body: JSON.stringify({ feature_view_name: 'driver_hourly_stats', df: { driver_id: [1001], event_timestamp: [eventAt], conv_rate: [0.5], acc_rate: [0.9], avg_daily_trips: [3] } }) });
  assert.equal(ingest.status, 200, JSON.stringify(ingest.body));
  await go(page, 'stores');
  await page.waitForSelector('table[aria-label="Feature views"] td:has-text("driver_hourly_stats")');
  const viewRow = async (name) => page.$$eval('table[aria-label="Feature views"] tbody tr', (trs, n) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)).find((c) => c[0] === n), name);
  const hourly = await viewRow('driver_hourly_stats');
  assert.match(hourly[6], /^\d+ s ago$/, 'the last write is seconds old');
  assert.equal(hourly[7], `${eventAt.slice(0, 19).replace('T', ' ')}Z (2 min ago)`, 'the newest event is the one ingested');
  assert.deepEqual((await viewRow('driver_trips')).slice(6), ['none since start', '–']);
  assert.ok(await page.$('table[aria-label="Feature services"] tbody tr'), 'feature services listed');
  await shot(page, 'features');

  step('vectors: a collection written on the data port, with its size and recall settings');
  const qdrant = async (method, path, body) => {
    const r = await fetch(`${DATA_URL}${path}`, { method, headers: { 'api-key': riskKey, 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
    return { status: r.status, body: await r.json() };
  };
  assert.equal((await qdrant('PUT', '/collections/docs', { vectors: { size: 4, distance: 'Cosine' }, hnsw_config: { m: 8, ef_construct: 64 } })).status, 200);
  assert.equal((await qdrant('PUT', '/collections/docs/index?wait=true', { field_name: 'kind', field_schema: 'keyword' })).status, 200);
  const points = [1, 2, 3].map((i) => ({ id: i, vector: [i, 1, 0, 0], payload: { kind: i % 2 ? 'a' : 'b' } }));
  assert.equal((await qdrant('PUT', '/collections/docs/points?wait=true', { points })).status, 200);
  await go(page, 'vectors');
  const docs = await page.waitForSelector('table[aria-label="Collections"] tr[data-id="docs"]');
  const cells = await docs.$$eval('td', (tds) => tds.map((td) => td.textContent));
  assert.deepEqual(cells.slice(0, 5), ['docs', '3', '4', 'Cosine', '8 / 64'], `the collection's row: ${cells}`);
  assert.equal(cells[6], 'none', 'no quantization');
  assert.equal(cells[7], 'kind: keyword (3)', 'the payload index and the points it covers');
  await shot(page, 'vectors');
  const asTeam = await fetch(`${ADMIN_URL}/admin/vectors/collections`, { headers: { authorization: `Bearer ${riskKey}` } });
  assert.equal(asTeam.status, 403, 'the collections route is for the admin token');

  step('batches: a team\'s batches with their progress, counts and validation errors');
  const upload = async (text) => {
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([text]), 'in.jsonl');
    const r = await fetch(`${DATA_URL}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${riskKey}` }, body: form });
    assert.equal(r.status, 200);
    return (await r.json()).id;
  };
  const startBatch = async (fileId) => {
    const r = await fetch(`${DATA_URL}/v1/batches`, {
      method: 'POST', headers: { authorization: `Bearer ${riskKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_file_id: fileId, endpoint: '/v1/chat/completions', completion_window: '24h' }),
    });
    assert.equal(r.status, 200);
    return (await r.json()).id;
  };
  const line = (i) => JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'fraud', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] } });
  const goodBatch = await startBatch(await upload([0, 1, 2].map(line).join('\n') + '\n'));
  const badBatch = await startBatch(await upload('not json\n' + line(9) + '\n'));
  await go(page, 'batches');
  const rowCells = async (id, want) => waitFor(`batch ${id} ${want}`, async () => {
    const row = await page.$(`table[aria-label="Batches"] tr[data-id="${id}"]`);
    const cells = row ? await row.$$eval('td', (tds) => tds.map((td) => td.textContent)) : [];
    return cells[3] === want ? cells : null;
  });
  const goodCells = await rowCells(goodBatch, 'completed');
  assert.equal(goodCells[1], 'risk');
  assert.match(goodCells[4], /^3 \/ 3/, `progress: ${goodCells[4]}`);
  const badCells = await rowCells(badBatch, 'failed');
  assert.equal(badCells[7], 'line 1: invalid_json_line');
  await shot(page, 'batches');
  assert.equal((await fetch(`${ADMIN_URL}/admin/batches`, { headers: { authorization: `Bearer ${riskKey}` } })).status, 403, 'every team\'s batches are for the admin token');

  step('scheduler: the queue against its guarantee and max, pending time, the cluster figures');
  await go(page, 'scheduler');
  const all = await page.waitForSelector('table[aria-label="Queues"] tr[data-id="ml|*"]');
  assert.deepEqual((await all.$$eval('td', (tds) => tds.map((td) => td.textContent))).slice(0, 5), ['ml', 'all types', '2.0', '–', '8.0']);
  const a10 = await (await page.waitForSelector('table[aria-label="Queues"] tr[data-id="ml|A10"]')).$$eval('td', (tds) => tds.map((td) => td.textContent));
  assert.deepEqual(a10.slice(0, 5), ['ml', 'A10', '2.0', '2.0', '–']);
  assert.ok(await page.$('table[aria-label="Queues"] tr[data-id="ml|*"] svg.meter[aria-label="2.0 of 8.0 GPUs"]'), 'the use meter');
  const wait = await (await page.waitForSelector('table[aria-label="Pending time"] tr[data-id="ml|1"]')).$$eval('td', (tds) => tds.map((td) => td.textContent));
  assert.equal(wait[2], '1', 'one pod bound in queue ml, tier 1');
  const kpis = await page.$$eval('.kpi', (ks) => Object.fromEntries(ks.map((k) => [k.querySelector('.l').textContent, k.querySelector('.v').textContent])));
  assert.equal(kpis['GPUs allocated'], '2.0 of 8');
  assert.equal(kpis['pending pods'], '0');
  assert.equal(kpis['pods bound'], '1');
  await shot(page, 'scheduler');
  const relayed = await (await fetch(`${ADMIN_URL}/admin/scheduler/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const relayedLines = relayed.split('\n').filter((l) => l);
  assert.ok(relayedLines.some((l) => l.startsWith('infera_sched_')), `the scheduler's samples are relayed: ${relayed.slice(0, 200)}`);
  assert.ok(relayedLines.every((l) => /^(# (HELP|TYPE) )?infera_sched_/.test(l)), 'only the scheduler\'s families are relayed');
  assert.equal((await fetch(`${ADMIN_URL}/admin/scheduler/metrics`, { headers: { authorization: `Bearer ${riskKey}` } })).status, 403);

  step('scheduler: a simulator report opened from a file (FGD protocol, then a replay; a wrong file is refused)');
  await page.setInputFiles('#sim-report-file', CONFIG);
  const refused = await page.waitForSelector('#sim-report-error:has-text("not JSON")');
  assert.match(await refused.textContent(), /console\.yaml: not JSON/);
  assert.equal(await page.$('#sim-report-view table'), null, 'nothing is shown for a wrong file');
  const fgd = JSON.parse(readFileSync(SIM_FGD, 'utf8'));
  await page.setInputFiles('#sim-report-file', SIM_FGD);
  await page.waitForSelector('#sim-report-view table[aria-label="Policies"]');
  assert.equal(await page.textContent('#sim-report-error'), '', 'the error is cleared');
  assert.equal(await page.inputValue('#sim-reference'), 'fgd', 'FGD is the default reference');
  const policyCells = async (policy) => page.$$eval(`#sim-report-view table[aria-label="Policies"] tr[data-id="${policy}"] td`, (tds) => tds.map((td) => td.textContent));
  // What the page shows is recomputed here from the file: the final mean, the worst step against
  // the reference over the steps from 50%, the failed pods at the end.
  const byPolicy = Object.fromEntries(fgd.results.map((r) => [r.policy, r]));
  const worstAgainst = (r, ref) => {
    let w = null;
    r.curve.forEach((c, i) => {
      if (c.load < 0.5 - 1e-9) return;
      const d = c.unallocated_gpus - ref.curve[i].unallocated_gpus;
      if (!w || d > w.d) w = { d, load: c.load };
    });
    return w;
  };
  for (const ref of ['fgd', 'best-fit']) {
    if (ref !== 'fgd') {
      await page.selectOption('#sim-reference', ref);
      await page.waitForSelector(`#sim-report-view th:has-text("Worst step vs ${ref}")`);
    }
    const infera = await policyCells('infera');
    const r = byPolicy.infera;
    assert.equal(infera[1], String(r.runs.length), 'seeds');
    assert.equal(infera[2], `${r.mean_unallocated_gpus.toFixed(1)} ± ${r.stddev_unallocated_gpus.toFixed(1)}`);
    assert.equal(infera[6], r.curve.at(-1).failed_pods.total.toFixed(1), 'failed pods at the end');
    const w = worstAgainst(r, byPolicy[ref]);
    const at = `${Math.round(w.load * 100)}%`;
    const want = w.d > 0 ? `+${w.d.toFixed(1)} GPUs at ${at}` : w.d === 0 ? `never behind (level at ${at})` : `never behind (closest: ${(-w.d).toFixed(1)} fewer at ${at})`;
    assert.equal(infera[7], want, `worst step against ${ref}`);
    assert.equal((await policyCells(ref))[7], 'reference');
  }
  const fgdRow = await policyCells('fgd');
  const paper = byPolicy.fgd.paper_unallocated_gpus;
  assert.ok(paper > 0, 'the report carries the paper\'s figure for fgd');
  assert.equal(fgdRow[3], Math.round(paper).toLocaleString('en-US'), 'the paper\'s figure');
  const steps = byPolicy.fgd.curve.filter((c) => c.load >= 0.5 - 1e-9).length;
  assert.equal(await page.getAttribute('#sim-report-view table[aria-label="Unallocated GPUs per step"]', 'data-rows'), String(steps));
  assert.equal((await page.$$('#sim-report-view svg.chart polyline')).length, 3 * fgd.results.length - 1, 'a line per policy in each chart (but the reference against itself)');
  assert.equal((await page.$$('#sim-report-view svg.chart polygon[data-band]')).length, fgd.results.length, 'a band per policy');
  const curve = await page.$$eval('#sim-report-view svg.chart circle[data-series="infera"]', (cs) => cs.slice(0, cs.length / 2).map((c) => Number(c.getAttribute('data-y'))));
  assert.equal(curve.at(-1), byPolicy.infera.curve.at(-1).unallocated_gpus, 'the curve is the report\'s');
  const gap = await page.$$eval('#sim-report-view svg.chart circle[data-series="infera − best-fit"]', (cs) => cs.map((c) => Number(c.getAttribute('data-y'))));
  assert.equal(gap.length, steps);
  assert.ok(Math.abs(gap.at(-1) - (byPolicy.infera.curve.at(-1).unallocated_gpus - byPolicy['best-fit'].curve.at(-1).unallocated_gpus)) < 1e-9, 'the gap to the reference');
  await page.waitForFunction(() => !document.querySelector('#toasts .toast'), null, { timeout: 15000 });
  await page.locator('section[aria-label="Simulator report"]').screenshot({ path: `${SHOTS}/scheduler-simulation.png` });
  const replay = JSON.parse(readFileSync(SIM_REPLAY, 'utf8'));
  await page.setInputFiles('#sim-report-file', SIM_REPLAY);
  await page.waitForSelector('#sim-report-view section[aria-label^="Replay: infera"]');
  const rk = await page.$$eval('#sim-report-view .kpi', (ks) => Object.fromEntries(ks.map((k) => [k.querySelector('.l').textContent, k.querySelector('.v').textContent])));
  assert.equal(rk.pods, replay.pods.toLocaleString('en-US'));
  assert.equal(rk['never started'], replay.never_scheduled.toLocaleString('en-US'));
  assert.equal(rk.preemptions, replay.preemptions.toLocaleString('en-US'));
  assert.equal(rk['nodes for tier-0 guarantees'], `${(replay.nodes_for_guarantees.share * 100).toFixed(1)}%`);
  assert.equal(await page.getAttribute('#sim-report-view table[aria-label="Evictions"]', 'data-rows'), String((replay.evictions || []).length));
  assert.equal((await page.$$('#sim-report-view svg.chart circle[data-series="pending"]')).length, replay.series.length);
  await page.locator('section[aria-label="Simulator report"]').screenshot({ path: `${SHOTS}/scheduler-replay.png` });

  step('the audit page lists the changes');
  await go(page, 'audit');
  await page.waitForSelector('table[aria-label="Audit log"] td:has-text("config.apply")');
  await shot(page, 'audit');

  step('a read-only team login cannot change anything');
  const other = await adminApi('/admin/keys', { method: 'POST', body: JSON.stringify({ team: 'web', name: 'viewer' }) });
  assert.equal(other.status, 201);
  const ro = await newPage();
  await ro.goto(`${ADMIN_URL}/ui/`);
  await ro.fill('#login-token', other.body.key);
  await ro.click('form.login button[type=submit]');
  await ready(ro, 'keys');
  assert.deepEqual(await ro.$$eval('nav a', (as) => as.map((a) => a.textContent)), ['Keys & teams', 'Usage & cost']);
  assert.equal(await ro.$('#create-key'), null);
  assert.equal(await ro.$('#create-team'), null);
  assert.equal(await ro.$('[data-action="revoke"]'), null);
  assert.ok(await ro.$(`tr[data-id="${keyId}"]`), 'its team\'s keys are listed');
  await shot(ro, 'team-readonly');
  expectRefusals = true;
  const tries = await ro.evaluate(async (key) => {
    const call = (method, path, body) => fetch(path, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: body && JSON.stringify(body) }).then((r) => r.status);
    return {
      createKey: await call('POST', '/admin/keys', { team: 'web' }),
      revoke: await call('POST', `/admin/keys/${key.split('-')[2]}/revoke`),
      teams: await call('GET', '/admin/teams'),
      otherTeamUsage: await call('GET', '/admin/usage?team=other'),
      ownUsage: await call('GET', '/admin/usage?group_by=team'),
      config: await call('POST', '/admin/config', { config: {} }),
      reload: await call('POST', '/admin/reload'),
    };
  }, other.body.key);
  assert.deepEqual(tries, { createKey: 403, revoke: 403, teams: 403, otherTeamUsage: 403, ownUsage: 200, config: 403, reload: 403 });
  expectRefusals = false;
  await go(ro, 'usage');
  await shot(ro, 'team-usage');
  assert.equal((await adminApi(`/admin/keys/${other.body.id}`)).body.state, 'active', 'the team key changed nothing');

  step('revoke the key in the console; the gateway answers 401');
  await go(page, 'keys');
  await page.click(`tr[data-id="${keyId}"] [data-action="revoke"]`);
  await page.click('dialog button.danger:has-text("Revoke")');
  await page.waitForSelector(`.toast:has-text("key ${keyId} revoked")`);
  const after = await chat(secret);
  assert.equal(after.status, 401, after.body);

  step('sign out, and every page once more without console errors');
  for (const id of PAGES) await go(page, id);
  await page.click('button:has-text("Sign out")');
  await page.waitForSelector('#login-token');
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);

  assert.deepEqual(problems, [], `console errors:\n${problems.join('\n')}`);
  console.log('console end to end ok');
} finally {
  await browser.close();
}
