// Times the console's pages with 200 models and 1,000 keys (run_console_scale_test.sh) against the
// same pages of a small console (2 models, 10 keys) in the same run: each page loaded fresh (a new
// tab, the token already in sessionStorage) 5 times on each, interleaved, from navigation start to
// the page's first data on screen (the `ready:<page>` mark the console sets); prints the medians
// and the worst. Judged as a ratio, which holds on a busy box (both sides see the same load): at
// scale each page's median is within CONSOLE_RATIO (2.5) times the small one's (measured 0.7-1.4),
// so a page that draws every row instead of a page of them fails (keys: 2.7). Then checks what the pages show at
// that scale (paging, the key search, no console errors). The absolute target (300 ms) is the
// benchmark's (bench/load/console.sh sets CONSOLE_BUDGET_MS=300: up to 3 rounds, failing when in
// each some median reaches it, unless the box ran more processes than it has cores at the end:
// then the timing is reported and skipped, exit 77).
//   env: ADMIN_URL SMALL_ADMIN_URL DATA_URL INFERA_ADMIN_TOKEN SHOTS [CONSOLE_RATIO CONSOLE_BUDGET_MS]
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';

// The packages the build installed (NODE_PATH: ESM imports do not read it).
const { chromium } = createRequire(process.env.NODE_PATH + '/')('playwright-core');

const { ADMIN_URL, SMALL_ADMIN_URL, INFERA_ADMIN_TOKEN: TOKEN, SHOTS } = process.env;
// The absolute budget in ms, or 0 (the test suite: the ratio is judged).
const BUDGET = Number(process.env.CONSOLE_BUDGET_MS || 0);
const RATIO = Number(process.env.CONSOLE_RATIO || 2.5);
mkdirSync(SHOTS, { recursive: true });
const adminOf = (base) => (path, body) => fetch(base + path, {
  method: body ? 'POST' : 'GET',
  headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
  body: body && JSON.stringify(body),
}).then((r) => r.json());
const admin = adminOf(ADMIN_URL);

const populate = async (base, teams, n) => {
  const call = adminOf(base);
  for (let t = 0; t < teams; t++) await call('/admin/teams', { name: `team-${t}`, rpm: 1000, tpm: 1000000 });
  for (let i = 0; i < n; i++) {
    const k = await call('/admin/keys', { team: `team-${i % teams}`, name: `key-${i}`, rpm: 100 });
    assert.ok(k.key, JSON.stringify(k));
  }
  const { keys } = await call('/admin/keys');
  assert.equal(keys.length, n);
};
const t0 = Date.now();
await populate(ADMIN_URL, 20, 1000);
console.log(`20 teams and 1000 keys created in ${Date.now() - t0} ms`);
await populate(SMALL_ADMIN_URL, 2, 10);

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: FLAGS, headless: true });
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await context.addInitScript((token) => sessionStorage.setItem('infera.token', token), TOKEN);
  // A round: each page loaded 5 times on each console, interleaved (the order alternating); the
  // medians and worst. Up to 3 rounds with an absolute budget, until one has every median under
  // it (this box is shared: a round during another build's burst says more about the build than
  // about the console). Every round is printed.
  const loadOnce = async (base, id, shot) => {
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
    page.on('pageerror', (e) => problems.push(e.message));
    await page.goto(`${base}/ui/#/${id}`);
    await page.waitForSelector(`body[data-ready="${id}"]`, { timeout: 30000 });
    const t = await page.evaluate((m) => performance.getEntriesByName(m)[0].startTime, `ready:${id}`);
    if (shot) await page.screenshot({ path: `${SHOTS}/scale-${id}.png` });
    await page.close();
    return t;
  };
  const round = async (n) => {
    const results = {};
    for (const id of ['overview', 'keys', 'usage', 'routes', 'audit']) {
      const times = [], small = [];
      for (let run = 0; run < 5; run++) {
        const shot = n === 0 && run === 4 && (id === 'overview' || id === 'keys');
        if (run % 2 === 0) small.push(await loadOnce(SMALL_ADMIN_URL, id, false));
        times.push(await loadOnce(ADMIN_URL, id, shot));
        if (run % 2 === 1) small.push(await loadOnce(SMALL_ADMIN_URL, id, false));
      }
      times.sort((a, b) => a - b);
      small.sort((a, b) => a - b);
      results[id] = { median: times[2], worst: times[4], small: small[2] };
    }
    const load = readFileSync('/proc/loadavg', 'utf8').split(' ')[0];
    for (const [id, r] of Object.entries(results)) {
      console.log(`round ${n + 1}: page ${id}: median ${r.median.toFixed(0)} ms, worst ${r.worst.toFixed(0)} ms; small console median ${r.small.toFixed(0)} ms, ratio ${(r.median / r.small).toFixed(2)} (navigation start to data on screen; load average ${load})`);
    }
    return results;
  };
  // The round judged: the first with every median under the budget, else the one whose slowest
  // page was fastest.
  const slowest = (res) => Math.max(...Object.values(res).map((r) => r.median));
  let results;
  for (let n = 0; n < (BUDGET ? 3 : 1); n++) {
    const res = await round(n);
    if (!results || slowest(res) < slowest(results)) results = res;
    if (slowest(res) < BUDGET) break;
  }
  for (const [id, r] of Object.entries(results)) {
    assert.ok(r.median < RATIO * r.small,
      `${id}: median ${r.median.toFixed(0)} ms at scale, ${r.small.toFixed(0)} ms on the small console: more than ${RATIO}x`);
  }
  // What each page rendered: the first 40 models (of 200) with their deployments and the first
  // 100 keys (of 1,000), more on demand, and a search that finds any key.
  const page = await context.newPage();
  await page.goto(`${ADMIN_URL}/ui/#/overview`);
  await page.waitForSelector('body[data-ready="overview"]');
  assert.equal(await page.$$eval('tr[data-deployment]', (r) => r.length), 80);
  assert.match(await page.textContent('tfoot'), /40 of 200 models shown/);
  await page.click('[data-more]');
  assert.equal(await page.$$eval('tr[data-deployment]', (r) => r.length), 160);
  await page.fill('input[aria-label="Filter models"]', 'model-199');
  await page.waitForFunction(() => document.querySelectorAll('tr[data-deployment]').length === 2);
  await page.goto(`${ADMIN_URL}/ui/#/keys`);
  await page.waitForSelector('body[data-ready="keys"]');
  assert.equal(await page.getAttribute('table[aria-label="Keys"]', 'data-rows'), '1000');
  assert.equal(await page.$$eval('table[aria-label="Keys"] tbody tr', (r) => r.length), 100);
  await page.click('table[aria-label="Keys"] [data-more]');
  assert.equal(await page.$$eval('table[aria-label="Keys"] tbody tr', (r) => r.length), 200);
  await page.fill('#key-search', 'key-999');
  await page.waitForFunction(() => document.querySelectorAll('table[aria-label="Keys"] tbody tr').length === 1);
  assert.match(await page.textContent('table[aria-label="Keys"] tbody'), /key-999/);
  assert.deepEqual(problems, []);
  const over = BUDGET ? Object.entries(results).filter(([, r]) => r.median >= BUDGET) : [];
  const load = Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  if (over.length && load > availableParallelism()) {
    // Wall-clock times on a box running more than a process per core measure the other
    // processes: say so and skip (ctest SKIP_RETURN_CODE 77) rather than pass or fail on them.
    console.log(`timing skipped: load average ${load} > ${availableParallelism()} cores; over ${BUDGET} ms: ${over.map(([id, r]) => `${id} ${r.median.toFixed(0)} ms`).join(', ')}`);
    await browser.close();
    process.exit(77);
  }
  for (const [id, r] of over) assert.fail(`${id}: median ${r.median.toFixed(0)} ms >= ${BUDGET} ms`);
  console.log('console scale ok');
} finally {
  await browser.close();
}
