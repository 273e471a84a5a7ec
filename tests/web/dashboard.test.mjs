// Browser test of the admin dashboard against a live federation: the real
// fedcore-server (admin API over HTTPS) and three real fedcore-client daemons over
// mutual TLS on 127.0.0.1, driven in headless Chromium (Debian's package) through
// playwright-core. Started by ctest (tests/web/CMakeLists.txt):
//
//   node tests/web/dashboard.test.mjs --server BIN --client BIN --source DIR --build DIR
//
// It logs in, starts runs through the form, watches the run page gain chart points from
// the live event stream (no reload), checks the clients page, and fails on any console
// error, page error, failed request or unexpected HTTP error. Screenshots go to
// BUILD/tests/web/screenshots/. Every process it starts is killed and its temp folder
// removed, however it ends. Exit 77 (ctest: skipped) when Chromium or web/node_modules
// is missing; scripts/setup.sh installs both.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { after, test } from 'node:test';

const SKIP = 77;
const { values: args } = parseArgs({
  options: {
    server: { type: 'string' },
    client: { type: 'string' },
    source: { type: 'string' },
    build: { type: 'string' },
    chromium: { type: 'string', default: process.env.FEDCORE_CHROMIUM || '/usr/bin/chromium' },
    keep: { type: 'boolean', default: false },  // keep the temp folder (debugging)
  },
});
for (const key of ['server', 'client', 'source', 'build']) {
  if (!args[key]) {
    console.error(`usage: dashboard.test.mjs --server BIN --client BIN --source DIR --build DIR (missing --${key})`);
    process.exit(2);
  }
}
const source = path.resolve(args.source);
// The daemons run in the temp folder: relative binary paths would break there.
args.server = path.resolve(args.server);
args.client = path.resolve(args.client);
const webRoot = path.join(source, 'web');
const modules = path.join(webRoot, 'node_modules');
const missing = [];
if (!fs.existsSync(args.chromium)) missing.push(`Chromium (${args.chromium}; Debian package 'chromium')`);
for (const m of ['playwright-core', 'chart.js']) {
  if (!fs.existsSync(path.join(modules, m))) missing.push(`${path.join(modules, m)} (run 'npm ci' in web/)`);
}
if (missing.length) {
  console.log(`SKIP: the browser test needs ${missing.join(' and ')}; scripts/setup.sh installs both.`);
  process.exit(SKIP);
}
for (const bin of [args.server, args.client]) {
  if (!fs.existsSync(bin)) {
    console.error(`no such binary: ${bin}`);
    process.exit(2);
  }
}
const { chromium } = await import(pathToFileURL(path.join(modules, 'playwright-core', 'index.mjs')).href);

// --- processes and the temp folder: always cleaned up ---------------------------------
const temp = fs.mkdtempSync(path.join(os.tmpdir(), 'fedcore-web-'));
const shots = path.join(path.resolve(args.build), 'tests', 'web', 'screenshots');
fs.mkdirSync(shots, { recursive: true });
const children = [];  // {name, proc, log}
let browser = null;

function cleanupNow() {
  for (const c of children) {
    if (c.proc.exitCode === null && c.proc.signalCode === null) {
      try { c.proc.kill('SIGKILL'); } catch { /* already gone */ }
    }
  }
  if (args.keep) fs.rmSync(path.join(temp, 'pids'), { force: true });
  else fs.rmSync(temp, { recursive: true, force: true });
}
process.on('exit', cleanupNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => { cleanupNow(); process.exit(128 + os.constants.signals[signal]); });
}

async function stopAll() {
  if (browser) await browser.close().catch(() => {});
  browser = null;
  // Clients first (they say goodbye), then the server; SIGTERM, then SIGKILL after 10 s.
  for (const group of [children.filter((c) => c.name !== 'server'), children.filter((c) => c.name === 'server')]) {
    await Promise.all(group.map((c) => new Promise((resolve) => {
      if (c.proc.exitCode !== null || c.proc.signalCode !== null) return resolve();
      const timer = setTimeout(() => c.proc.kill('SIGKILL'), 10000);
      c.proc.once('exit', () => { clearTimeout(timer); resolve(); });
      c.proc.kill('SIGTERM');
    })));
  }
}

// If this process is killed outright (ctest's timeout sends SIGKILL, which no handler
// sees), a detached watchdog kills the daemons listed in TEMP/pids and removes TEMP.
const watchdog = spawn('/bin/sh', ['-c',
  'while kill -0 "$1" 2>/dev/null; do sleep 1; done; '
  + 'if [ -f "$2/pids" ]; then xargs -r kill -9 < "$2/pids" 2>/dev/null; ' + (args.keep ? '' : 'rm -rf "$2"; ') + 'fi',
  'watchdog', String(process.pid), temp], { detached: true, stdio: 'ignore' });
watchdog.unref();

function start(name, bin, argv) {
  const log = path.join(temp, `${name}.log`);
  const fd = fs.openSync(log, 'a');
  const proc = spawn(bin, argv, { cwd: temp, stdio: ['ignore', fd, fd] });
  fs.closeSync(fd);
  fs.appendFileSync(path.join(temp, 'pids'), `${proc.pid}\n`);
  const child = { name, proc, log };
  proc.on('exit', (code, signal) => { child.exited = { code, signal }; });
  children.push(child);
  return child;
}

function tail(file, lines = 40) {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, fn, timeoutMs = 30000, everyMs = 200) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

// --- the federation -------------------------------------------------------------------
const pkiDir = path.join(temp, 'pki');
const pki = (...a) => execFileSync(path.join(source, 'certs', 'fedcore-pki'), ['--dir', pkiDir, ...a], { stdio: 'pipe' });
const clientIds = ['hospital-a', 'hospital-b', 'hospital-c'];
let apiPort = 0;
let token = '';
let ca = null;
let base = '';

// A call to the admin API from the test itself (verifying the server certificate).
function apiCall(method, route, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? null : JSON.stringify(body);
    const req = https.request({
      host: '127.0.0.1', port: apiPort, method, path: route, ca, timeout: 10000,
      headers: {
        Authorization: `Bearer ${token}`,
        ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {}),
      },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, json, text });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${route}: timed out`)));
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

async function startFederation() {
  pki('init');
  pki('server', 'fedcore-server');
  for (const id of clientIds) pki('client', id);
  ca = fs.readFileSync(path.join(pkiDir, 'ca.pem'));
  const fedPort = await freePort();
  apiPort = await freePort();
  const serverConfig = path.join(temp, 'server.json');
  fs.writeFileSync(serverConfig, JSON.stringify({
    listen: '127.0.0.1',
    port: fedPort,
    database: path.join(temp, 'fedcore.db'),
    checkpoint_dir: path.join(temp, 'checkpoints'),
    heartbeat_seconds: 1,
    tls: {
      ca: path.join(pkiDir, 'ca.pem'),
      cert: path.join(pkiDir, 'server', 'fedcore-server.pem'),
      key: path.join(pkiDir, 'server', 'fedcore-server.key'),
      crl: path.join(pkiDir, 'crl.pem'),
    },
    api: { listen: '127.0.0.1', port: apiPort, web_root: webRoot },
  }, null, 2));
  token = execFileSync(args.server, ['token', 'create', '--config', serverConfig, '--name', 'browser-test'],
    { cwd: temp, stdio: ['ignore', 'pipe', 'pipe'] }).toString().trim();
  assert.match(token, /^\S{16,}$/, 'token create prints one token');

  const server = start('server', args.server, ['--config', serverConfig]);
  base = `https://127.0.0.1:${apiPort}`;
  await until('the admin API to answer /api/v1/health', async () => {
    if (server.exited) throw new Error(`fedcore-server exited (${JSON.stringify(server.exited)}):\n${tail(server.log)}`);
    const r = await apiCall('GET', '/api/v1/health').catch(() => null);
    return r && r.status === 200;
  }, 30000);

  clientIds.forEach((id, i) => {
    const config = path.join(temp, `${id}.json`);
    fs.writeFileSync(config, JSON.stringify({
      server: '127.0.0.1',
      port: fedPort,
      server_name: 'localhost',
      tls: {
        ca: path.join(pkiDir, 'ca.pem'),
        cert: path.join(pkiDir, 'clients', `${id}.pem`),
        key: path.join(pkiDir, 'clients', `${id}.key`),
      },
      data: {
        format: 'csv',
        path: path.join(source, 'data', 'breast_cancer_wisconsin.csv'),
        label_column: 'benign',
        partition: 'iid',
        partition_clients: clientIds.length,
        partition_index: i,
        test_fraction: 0.2,
      },
      threads: 1,
    }, null, 2));
    start(id, args.client, ['--config', config]);
  });
  await until('3 clients online', async () => {
    for (const c of children) {
      if (c.exited) throw new Error(`${c.name} exited (${JSON.stringify(c.exited)}):\n${tail(c.log)}`);
    }
    const r = await apiCall('GET', '/api/v1/info');
    return r.status === 200 && r.json.online_clients === clientIds.length;
  }, 60000);
}

// --- the browser: every console error, page error and failed request is recorded ------
const problems = [];
let expected = [];  // [{what, match(problem) -> bool, seen}] allowed during one step

function record(problem) {
  const allowance = expected.find((e) => e.match(problem));
  if (allowance) {
    allowance.seen += 1;
    return;
  }
  problems.push(problem);
}

// Runs `fn` while the listed problems (deliberately provoked) are allowed; each must occur.
async function expecting(allowances, fn) {
  expected = allowances.map((a) => ({ ...a, seen: 0 }));
  try {
    await fn();
  } finally {
    const unseen = expected.filter((e) => e.seen === 0).map((e) => e.what);
    expected = [];
    assert.deepEqual(unseen, [], 'every deliberately provoked error showed up');
  }
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

const points = (page, chart) => page.$eval(`figure[data-chart="${chart}"]`, (f) => Number(f.dataset.points));

async function waitPoints(page, chart, n, timeout = 60000) {
  await page.waitForFunction(([c, k]) => Number(document.querySelector(`figure[data-chart="${c}"]`)?.dataset.points) >= k,
    [chart, n], { timeout });
}

async function fillRunForm(page, fields) {
  for (const [name, value] of Object.entries(fields)) {
    const control = page.locator(`#f-${name}`);
    if (typeof value === 'boolean') await control.setChecked(value);
    else if (await control.evaluate((el) => el.tagName === 'SELECT')) await control.selectOption(value);
    else await control.fill(String(value));
  }
}

after(async () => {
  await stopAll();
  cleanupNow();
});

// One step of the scenario; the first failure ends it (later steps depend on earlier ones).
let stepCount = 0;
async function step(name, fn) {
  stepCount += 1;
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    e.message = `step ${stepCount} "${name}": ${e.message}`;
    throw e;
  }
  console.log(`# ok ${stepCount} - ${name} (${Date.now() - t0} ms)`);
}

async function scenario() {
  await startFederation();

  browser = await chromium.launch({ executablePath: args.chromium, headless: true });
  const context = await browser.newContext({
    ignoreHTTPSErrors: true,  // the federation CA is not in Chromium's store
    viewport: { width: 1366, height: 900 },
    colorScheme: 'light',
    reducedMotion: 'reduce',  // no chart animations: screenshots show the final drawing
  });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') record({ kind: 'console', text: m.text(), url: m.location()?.url || '' });
  });
  page.on('pageerror', (e) => record({ kind: 'pageerror', text: e.message }));
  page.on('requestfailed', (r) => {
    const text = r.failure()?.errorText || '';
    // The event stream is aborted on purpose at logout and when the page closes.
    if (r.url().endsWith('/api/v1/events') && text.includes('ERR_ABORTED')) return;
    record({ kind: 'requestfailed', text: `${r.method()} ${r.url()}: ${text}` });
  });
  page.on('response', (r) => {
    if (r.status() >= 400) record({ kind: 'http', status: r.status(), text: `${r.request().method()} ${r.url()} -> ${r.status()}` });
  });
  const runPosts = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/v1/runs') runPosts.push(r);
  });
  const error401 = [
    { what: 'the 401 of the bad token', match: (p) => p.kind === 'http' && p.status === 401 },
    { what: 'the console line of that 401', match: (p) => p.kind === 'console' && /401/.test(p.text) },
  ];

  await step('the dashboard is served with its security headers', async () => {
    const response = await page.goto(`${base}/`);
    assert.equal(response.status(), 200);
    const headers = response.headers();
    assert.match(headers['content-security-policy'] || '', /default-src 'self'/);
    assert.equal(headers['x-content-type-options'], 'nosniff');
    await page.locator('#token').waitFor();
    await shot(page, '01-login');
  });

  await step('a wrong token is refused; the right one logs in', async () => {
    await expecting(error401, async () => {
      await page.fill('#token', 'not-a-real-token');
      await page.click('form.login button[type=submit]');
      await page.locator('#token-error', { hasText: 'not accepted' }).waitFor();
    });
    await page.fill('#token', token);
    await page.click('form.login button[type=submit]');
    await page.waitForURL(/#\/overview$/);
    await page.locator('#clients-online', { hasText: '3 / 3' }).waitFor();
    await page.locator('#stat-health', { hasText: 'Healthy' }).waitFor();
    await page.locator('#live-status[data-state="live"]').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('fedcore.token')), token);
    await shot(page, '02-overview');
  });

  await step('the run form refuses bad values before sending anything', async () => {
    await page.click('a[data-nav="new-run"]');
    await page.locator('#run-form').waitFor();
    await page.locator('#online-hint', { hasText: '3 clients are online' }).waitFor();
    await fillRunForm(page, { name: '', rounds: '0', clients_per_round: '3', min_clients: '5', lr: 'fast' });
    await page.click('#start-run');
    const summary = page.locator('#form-errors');
    await summary.waitFor();
    for (const text of ['Name:', 'Rounds:', 'Minimum clients:', 'Learning rate:']) {
      await summary.getByText(text).waitFor();
    }
    assert.equal(await page.getAttribute('#f-rounds', 'aria-invalid'), 'true');
    assert.equal(runPosts.length, 0, 'nothing was sent');
    await shot(page, '03-form-errors');
  });

  let manualId = 0;
  await step('a manual logreg run starts from the form', async () => {
    await fillRunForm(page, {
      name: 'browser-manual', model: 'logreg', rounds: 3, clients_per_round: 3, min_clients: 3,
      local_epochs: 2, batch_size: 16, optimizer: 'sgd', lr: '0.00001', round_timeout_s: 30, seed: 7, manual: true,
    });
    await page.click('#start-run');
    await page.waitForURL(/#\/runs\/\d+$/);
    manualId = Number(/#\/runs\/(\d+)$/.exec(page.url())[1]);
    assert.equal((await runPosts.at(-1).response()).status(), 201);
    assert.deepEqual(JSON.parse(runPosts.at(-1).postData()), {
      name: 'browser-manual', model: { type: 'logreg' }, rounds: 3, clients_per_round: 3, min_clients: 3,
      local_epochs: 2, batch_size: 16, optimizer: { kind: 'sgd', lr: 0.00001 }, round_timeout_s: 30, seed: 7,
      federated_evaluation: true, manual: true,
    });
    await page.locator('#run-title', { hasText: 'browser-manual' }).waitFor();
    await page.locator('#run-state .badge', { hasText: 'running' }).waitFor();
    await page.locator('#next-round:enabled').waitFor({ timeout: 30000 });
    assert.equal(await points(page, 'accuracy'), 0);
  });

  await step('"Start next round" runs a round and the charts gain a point', async () => {
    await page.click('#next-round');
    await waitPoints(page, 'accuracy', 1);
    await waitPoints(page, 'participation', 1);
    await page.locator('#rounds-table tr[data-round="1"][data-state="committed"]').waitFor();
  });

  await step('a round started elsewhere reaches the open page through live events, without a reload', async () => {
    await page.locator('#next-round:enabled').waitFor({ timeout: 30000 });
    await page.evaluate(() => { window.__sameDocument = true; });
    const before = await points(page, 'loss');
    const r = await apiCall('POST', `/api/v1/runs/${manualId}/rounds`);
    assert.equal(r.status, 202, r.text);
    await waitPoints(page, 'loss', before + 1, 20000);
    await waitPoints(page, 'accuracy', 2, 20000);
    assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was not reloaded');
    await page.locator('#round-select option[value="2"]').waitFor({ state: 'attached' });
    await shot(page, '04-run-manual-live');
  });

  await step('a second run while one is active: the server\'s 409 is shown', async () => {
    await page.click('a[data-nav="new-run"]');
    await page.locator('#run-form').waitFor();
    await expecting([
      { what: 'the 409 of the second run', match: (p) => p.kind === 'http' && p.status === 409 },
      { what: 'the console line of that 409', match: (p) => p.kind === 'console' && /409/.test(p.text) },
    ], async () => {
      await fillRunForm(page, { name: 'too-early', rounds: 2 });
      await page.click('#start-run');
      await page.locator('#form-errors h2', { hasText: 'cannot start this run now' }).waitFor();
    });
    const message = await page.textContent('#server-error');
    assert.ok(message && message.length > 5, `the server's message is shown (${message})`);
    await shot(page, '05-form-conflict');
  });

  await step('the last manual round finishes the run; a round\'s clients are listed', async () => {
    await page.goto(`${base}/#/runs/${manualId}`);
    await page.locator('#next-round:enabled').waitFor({ timeout: 30000 });
    await page.click('#next-round');
    await page.locator('#run-state .badge', { hasText: 'finished' }).waitFor({ timeout: 60000 });
    await waitPoints(page, 'accuracy', 3);
    assert.equal(await page.locator('#next-round').count(), 0, 'no next round for a finished run');
    assert.equal(await page.locator('#stop-run').count(), 0, 'no stop for a finished run');
    await page.selectOption('#round-select', '2');
    await page.locator('#results-table caption', { hasText: 'round 2' }).waitFor();
    const rows = page.locator('#results-table tbody tr[data-client]');
    assert.equal(await rows.count(), 3);
    const clients = await rows.evaluateAll((trs) => trs.map((tr) => [tr.dataset.client, tr.dataset.status,
      Number(tr.children[2].textContent.replace(/[^\d]/g, ''))]));
    assert.deepEqual(clients.map((c) => c[0]).sort(), clientIds);
    for (const [id, status, samples] of clients) {
      assert.equal(status, 'ok', id);
      assert.ok(samples > 100, `${id} trained on its shard (${samples} samples)`);
    }
    const acc = await page.$eval('figure[data-chart="accuracy"] canvas', (c) => c.getAttribute('aria-label'));
    assert.match(acc, /over 3 round/);
    await shot(page, '06-run-manual-finished');
  });

  await step('the federated evaluation: a curve per round and each client\'s answer for a round', async () => {
    // Every round of the manual run was evaluated by its three participants, after its
    // aggregation; round 3's model is the final one.
    await waitPoints(page, 'federated', 3);
    const api = await apiCall('GET', `/api/v1/runs/${manualId}/evaluation`);
    assert.equal(api.status, 200, api.text);
    assert.deepEqual(api.json.items.map((e) => [e.round, e.final, e.clients.ok]), [[1, false, 3], [2, false, 3], [3, true, 3]]);
    const rounds = await apiCall('GET', `/api/v1/runs/${manualId}/rounds`);
    for (const e of api.json.items) {
      const r = rounds.json.items.find((x) => x.round === e.round && x.state === 'committed');
      assert.equal(e.accuracy, r.fed_eval_accuracy, `round ${e.round}: the curve is the round's recorded mean`);
    }
    const rows = page.locator('#evaluation-rounds tbody tr[data-round]');
    assert.equal(await rows.count(), 3);
    assert.match(await rows.nth(2).textContent(), /3 \(final\)/);
    await page.selectOption('#round-select', '3');
    await page.locator('#evaluation-table caption', { hasText: 'round 3' }).waitFor();
    await page.locator('#evaluation-meta', { hasText: 'the final model' }).waitFor();
    const clients = await page.locator('#evaluation-table tbody tr[data-client]').evaluateAll((trs) =>
      trs.map((tr) => [tr.dataset.client, tr.dataset.status, tr.children[2].textContent.trim()]));
    assert.deepEqual(clients.map((c) => c[0]).sort(), clientIds);
    for (const [id, status, accuracy] of clients) {
      assert.equal(status, 'ok', id);
      assert.match(accuracy, /\d+(\.\d+)? ?%/, `${id} shows its accuracy (${accuracy})`);
    }
    const fed = await page.$eval('figure[data-chart="federated"] canvas', (c) => c.getAttribute('aria-label'));
    assert.match(fed, /over 3 round/);
    await shot(page, '06b-run-federated-evaluation');
  });

  await step('an automatic run started from the form completes while the page watches', async () => {
    await page.click('a[data-nav="new-run"]');
    await page.locator('#run-form').waitFor();
    await fillRunForm(page, {
      name: 'browser-auto', model: 'logreg', rounds: 5, clients_per_round: 3, min_clients: 2,
      local_epochs: 2, batch_size: 32, optimizer: 'adam', lr: '0.002', round_timeout_s: 30, seed: 3, manual: false,
    });
    await page.click('#start-run');
    await page.waitForURL(/#\/runs\/\d+$/);
    await page.evaluate(() => { window.__sameDocument = true; });
    await page.locator('#run-state .badge', { hasText: 'finished' }).waitFor({ timeout: 90000 });
    await waitPoints(page, 'accuracy', 5);
    await waitPoints(page, 'participation', 5);
    assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was not reloaded');
    const progress = await page.textContent('#run-progress-text');
    assert.match(progress, /5 \/ 5/);
    await shot(page, '07-run-auto-finished');
  });

  await step('the global model of a round downloads as .npy', async () => {
    await page.selectOption('#round-select', '5');
    await page.locator('#download-model:enabled').waitFor();
    await page.selectOption('#model-format', 'npy');
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-model')]);
    assert.match(download.suggestedFilename(), /^run-\d+-round-5\.npy$/);
    const file = path.join(temp, 'model.npy');
    await download.saveAs(file);
    const bytes = fs.readFileSync(file);
    assert.equal(bytes.subarray(0, 6).toString('latin1'), '\x93NUMPY', 'a NumPy file');
    assert.ok(bytes.length > 128, `${bytes.length} bytes`);
  });

  await step('a secure-aggregated run with record-level DP shows its budget and each round\'s epsilon', async () => {
    const created = await apiCall('POST', '/api/v1/runs', {
      name: 'browser-private', model: { type: 'logreg' }, rounds: 3, clients_per_round: 3, min_clients: 3,
      local_epochs: 1, batch_size: 16, optimizer: { kind: 'sgd', lr: 0.1 }, round_timeout_s: 30, seed: 5,
      federated_evaluation: false,
      privacy: {
        secure_aggregation: { stage_timeout_s: 20 },
        dp: { mode: 'record', epsilon: 8, delta: 1e-5, clip_norm: 1 },
      },
    });
    assert.equal(created.status, 201, created.text);
    const privateId = created.json.id;
    await page.goto(`${base}/#/runs/${privateId}`);
    await page.locator('#run-state .badge', { hasText: 'finished' }).waitFor({ timeout: 90000 });
    await page.locator('#rounds-table tr[data-round="3"][data-state="committed"]').waitFor();
    const privacy = await page.textContent('#run-privacy');
    const spent = /ε (\d+\.\d+) \/ 8/.exec(privacy);
    assert.ok(spent, privacy);
    assert.ok(Number(spent[1]) > 0 && Number(spent[1]) <= 8, privacy);
    assert.match(privacy, /record DP/);
    assert.match(privacy, /secure aggregation/);
    const table = await page.textContent('#rounds-table');
    assert.match(table, /SecAgg\+/);
    await shot(page, '07b-run-private');
  });

  await step('a run is stopped from its page, after a confirmation', async () => {
    await page.click('a[data-nav="new-run"]');
    await page.locator('#run-form').waitFor();
    await fillRunForm(page, { name: 'browser-stop', rounds: 50, manual: true });
    await page.click('#start-run');
    await page.waitForURL(/#\/runs\/\d+$/);
    await page.locator('#run-state .badge', { hasText: 'running' }).waitFor();
    await page.click('#stop-run');
    await page.locator('#confirm-stop').waitFor();
    await shot(page, '08-run-stop-confirm');
    await page.click('#confirm-stop');
    await page.locator('#run-state .badge', { hasText: 'stopped' }).waitFor({ timeout: 30000 });
    await page.locator('#action-message', { hasText: 'Run stopped' }).waitFor();
    assert.equal(await page.locator('#stop-run').count(), 0);
  });

  await step('the clients page shows the three hospitals online', async () => {
    await page.click('a[data-nav="clients"]');
    await page.locator('#clients-online-count', { hasText: '3 of 3' }).waitFor();
    const rows = page.locator('#clients-list tbody tr[data-client]');
    assert.equal(await rows.count(), 3);
    const online = await rows.evaluateAll((trs) => trs.map((tr) => [tr.dataset.client, tr.dataset.online, Number(tr.dataset.rounds)]));
    assert.deepEqual(online.map(([id, on]) => [id, on]).sort(), clientIds.map((id) => [id, 'true']));
    for (const [id, , rounds] of online) {
      assert.ok(rounds >= 11, `${id} joined the 3 manual, 5 automatic and 3 private rounds (${rounds})`);
    }
    await shot(page, '09-clients');
  });

  await step('the runs list and the overview show the four runs', async () => {
    await page.click('a[data-nav="runs"]');
    await page.locator('#runs-list caption', { hasText: '4 runs' }).waitFor();
    await shot(page, '10-runs');
    await page.click('a[data-nav="overview"]');
    await page.locator('#activity li.event').first().waitFor();
    await page.locator('#recent-runs tbody tr').nth(1).waitFor();
    await shot(page, '11-overview-after');
  });

  await step('a narrow screen gets the same pages, readable', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${base}/#/runs/${manualId}`);
    await waitPoints(page, 'accuracy', 3);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `no sideways scrolling of the page (${overflow} px too wide)`);
    await page.waitForTimeout(400);
    await shot(page, '12-run-narrow');
    await page.setViewportSize({ width: 1366, height: 900 });
  });

  await step('logging out returns to the login page and forgets the token', async () => {
    await page.click('#logout');
    await page.locator('#token').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('fedcore.token')), null);
  });

  await step('no console errors, page errors, failed requests or HTTP errors', async () => {
    await page.waitForTimeout(300);
    assert.deepEqual(problems, []);
  });
  await context.close();
}

test('dashboard against a live federation', { timeout: 240000 }, async () => {
  try {
    await scenario();
  } catch (e) {
    for (const c of children) console.error(`--- ${c.name} log (last lines) ---\n${tail(c.log)}`);
    if (problems.length) console.error('browser problems so far:', JSON.stringify(problems, null, 2));
    throw e;
  }
});
