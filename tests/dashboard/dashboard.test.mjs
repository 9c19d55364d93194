// dashboard.test.mjs -- the cluster dashboard (GET /) in Debian's headless
// chromium, driven by puppeteer-core, against a running `lockstep serve
// --cluster`. tests/dashboard/run.sh starts the server and runs this file
// with `node --test`; it passes:
//   LOCKSTEP_DASH_URL        the server's base URL (http://127.0.0.1:PORT)
//   LOCKSTEP_DASH_KEY        its --admin-key
//   LOCKSTEP_DASH_API_KEY    its --api-key
//   LOCKSTEP_DASH_MOVE_HOST  the host the test moves the instance to
//   LOCKSTEP_DASH_CHROMIUM   the browser (default /usr/bin/chromium)
//   LOCKSTEP_DASH_SCREENSHOT where the screenshot goes (a PNG)
// The page must: show every host and instance of GET /v1/cluster with the
// same names, models, degrees and placements; load nothing from another
// origin and log no error (a Content-Security-Policy violation is one);
// take both keys (kept in sessionStorage only), act with the admin key and
// move the instance when "move" is clicked while it chats with the API key;
// stream a chat answer equal to the same request answered whole; draw
// charts with axes, and in a new tab show at once the history the gateway
// kept; show each host's cpu load, architecture, instruction set and
// numerics; and draw a page that is not blank.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import zlib from 'node:zlib';
import puppeteer from 'puppeteer-core';

function env(name, fallback) {
  const value = process.env[name] || fallback;
  if (!value) throw new Error(`${name} is not set (run this file through tests/dashboard/run.sh)`);
  return value;
}

const BASE = env('LOCKSTEP_DASH_URL');
const KEY = env('LOCKSTEP_DASH_KEY');
const API_KEY = env('LOCKSTEP_DASH_API_KEY');
const MOVE_HOST = env('LOCKSTEP_DASH_MOVE_HOST', '127.0.0.2');
const CHROMIUM = env('LOCKSTEP_DASH_CHROMIUM', '/usr/bin/chromium');
const SCREENSHOT = env('LOCKSTEP_DASH_SCREENSHOT', 'dashboard.png');
const MOVE_DEADLINE_MS = 120_000; // a new runner loads its model, then the old one drains

async function api(path, options = {}) {
  const response = await fetch(new URL(path, BASE), {
    ...options,
    headers: {
      // inference takes the API key; the cluster's reads take either
      Authorization: `Bearer ${path.startsWith('/v1/chat') ? API_KEY : KEY}`,
      'Content-Type': 'application/json',
      ...options.headers,
    },
  });
  const text = await response.text();
  assert.ok(response.ok, `${options.method || 'GET'} ${path}: ${response.status} ${text}`);
  return JSON.parse(text);
}
const cluster = () => api('/v1/cluster');

// Calls check() until it returns without throwing, up to ms; then rethrows
// its last failure, so a timeout says what still differed.
async function eventually(ms, check) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// What the page shows of the hosts and instances.
function pageView(page) {
  return page.evaluate(() => {
    const hosts = [...document.querySelectorAll('#host-list [data-host]')].map((card) => {
      const ranks = {};
      for (const slot of card.querySelectorAll('.slot[data-instance-id]'))
        ranks[slot.dataset.instanceId] = (ranks[slot.dataset.instanceId] || 0) + 1;
      return { name: card.dataset.host, state: card.dataset.state, ranks };
    });
    const instances = [...document.querySelectorAll('#instance-rows tr[data-instance-id]')].map((row) => ({
      id: row.dataset.instanceId,
      model: row.querySelector('.model').textContent,
      tp: Number(row.querySelector('.tp').textContent),
      hosts: row.querySelector('.hosts').textContent,
      state: row.dataset.state,
    }));
    return { hosts, instances };
  });
}

// The same view computed from GET /v1/cluster.
function expectedView(c) {
  const hosts = c.hosts.map((h) => {
    const ranks = {};
    for (const i of c.instances)
      for (const p of i.placement) if (p.host === h.name) ranks[i.id] = (ranks[i.id] || 0) + p.ranks;
    return { name: h.name, state: h.state, ranks };
  });
  const instances = c.instances.map((i) => ({ id: i.id, model: i.model, tp: i.tp, hosts: i.hosts, state: i.state }));
  return { hosts, instances };
}

// The page and the API agree (the page polls, so within a few polls).
async function agree(page, ms = 15_000) {
  return eventually(ms, async () => {
    const c = await cluster();
    assert.deepEqual(await pageView(page), expectedView(c));
    return c;
  });
}

// The distinct colours of a PNG (8-bit RGB or RGBA, not interlaced), as
// chromium writes its screenshots: the IDAT data inflated and unfiltered.
function pngColours(png) {
  assert.equal(png.subarray(1, 4).toString('latin1'), 'PNG', 'not a PNG');
  let at = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat = [];
  while (at < png.length) {
    const length = png.readUInt32BE(at);
    const type = png.subarray(at + 4, at + 8).toString('latin1');
    const data = png.subarray(at + 8, at + 8 + length);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      assert.equal(data[8], 8, 'PNG bit depth');
      assert.ok(data[9] === 2 || data[9] === 6, `PNG colour type ${data[9]}`);
      assert.equal(data[12], 0, 'PNG interlace');
      channels = data[9] === 6 ? 4 : 3;
    } else if (type === 'IDAT') {
      idat.push(data);
    }
    at += 12 + length;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const previous = Buffer.alloc(stride);
  const row = Buffer.alloc(stride);
  const colours = new Map();
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? row[x - channels] : 0;
      const b = previous[x];
      const c = x >= channels ? previous[x - channels] : 0;
      let predictor = 0;
      if (filter === 1) predictor = a;
      else if (filter === 2) predictor = b;
      else if (filter === 3) predictor = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      row[x] = (line[x] + predictor) & 0xff;
    }
    for (let x = 0; x < stride; x += channels) {
      const key = (row[x] << 16) | (row[x + 1] << 8) | row[x + 2];
      colours.set(key, (colours.get(key) || 0) + 1);
    }
    row.copy(previous);
  }
  return { width, height, colours };
}

describe('dashboard', () => {
  let browser;
  let page;
  const problems = []; // console errors, page errors, failed loads
  const foreign = []; // requests to another origin

  before(async () => {
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
      defaultViewport: { width: 1280, height: 800 },
    });
    page = await browser.newPage();
    page.on('console', (m) => {
      // the browser logs every answer that is not 2xx; these are expected:
      // the cluster and its history before a key is typed (401), and the key
      // check (404)
      const url = m.location()?.url || '';
      const expected = m.text().startsWith('Failed to load resource') &&
        (url.endsWith('/v1/cluster') || url.endsWith('/v1/cluster/history') ||
          url.endsWith('/admin/instances/%20key-check'));
      if (m.type() === 'error' && !expected) problems.push(`console: ${m.text()} (${url})`);
    });
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('requestfailed', (r) => {
      // a stream the page abandons on purpose is not a failure
      if (r.failure()?.errorText !== 'net::ERR_ABORTED') problems.push(`failed: ${r.url()} ${r.failure()?.errorText}`);
    });
    page.on('request', (r) => {
      const url = r.url();
      if (!url.startsWith(BASE) && !url.startsWith('data:')) foreign.push(url);
    });
  });

  after(async () => {
    if (browser) await browser.close();
  });

  test('serves the page with a policy that forbids other origins', async () => {
    const response = await page.goto(new URL('/', BASE), { waitUntil: 'load' });
    assert.equal(response.status(), 200);
    const h = response.headers();
    assert.match(h['content-type'], /^text\/html/);
    assert.equal(h['cache-control'], 'no-cache');
    assert.match(h['content-security-policy'], /default-src 'self'/);
    assert.match(h['content-security-policy'], /script-src 'self'/);
    assert.equal(await page.title(), 'lockstep cluster');
  });

  test('asks for the key the cluster API needs, and shows the buttons once the admin API accepts it', async () => {
    const anonymous = await fetch(new URL('/v1/cluster', BASE));
    if (anonymous.status === 401) {
      await page.waitForSelector('#poll-error:not([hidden])', { timeout: 10_000 });
      assert.match(await page.$eval('#poll-error', (e) => e.textContent), /401.*enter the API or admin key/);
    }
    assert.equal(await page.$eval('th.admin-only', (e) => getComputedStyle(e).display), 'none');
    assert.equal(await page.$eval('#key-status', (e) => e.textContent), 'no admin key: read only');
    // the API key alone reads the cluster but is no admin key
    await page.type('#api-key', API_KEY);
    await page.click('#key-save');
    await page.waitForSelector('#poll-error[hidden]', { timeout: 10_000 });
    assert.equal(await page.$eval('#key-status', (e) => e.textContent), 'no admin key: read only');
    await page.type('#admin-key', KEY);
    await page.click('#key-save');
    await page.waitForFunction(() => document.body.classList.contains('admin'), { timeout: 10_000 });
    assert.equal(await page.$eval('#key-status', (e) => e.textContent), 'admin key accepted');
    assert.equal(await page.$eval('#poll-error', (e) => e.hidden), true);
    // for the tab's session only
    const stored = await page.evaluate(() => ({ local: localStorage.length, session: Object.values(sessionStorage) }));
    assert.equal(stored.local, 0);
    assert.deepEqual(stored.session.sort(), [API_KEY, KEY].sort());
  });

  test('shows the hosts and instances of GET /v1/cluster', async () => {
    await page.waitForSelector('#host-list [data-host]', { timeout: 15_000 });
    await page.waitForSelector('#instance-rows tr[data-instance-id]', { timeout: 15_000 });
    const c = await agree(page);
    assert.ok(c.hosts.length >= 2, `hosts: ${JSON.stringify(c.hosts)}`);
    assert.ok(c.instances.length >= 1, 'no instance');
    const summary = await page.$eval('#summary', (e) => e.textContent);
    assert.match(summary, new RegExp(`/${c.hosts.length} hosts up`));
    // each card names its host's architecture and instruction set, and its
    // numerics in the title
    const facts = await page.$$eval('#host-list [data-host]', (cards) => cards.map((card) => {
      const p = card.querySelector('.host-facts');
      return { name: card.dataset.host, text: p.textContent, title: p.title };
    }));
    for (const h of c.hosts) {
      const shown = facts.find((f) => f.name === h.name);
      assert.ok(h.arch && h.isa && h.numerics, `host ${h.name}: ${JSON.stringify(h)}`);
      assert.ok(shown && shown.text.includes(` · ${h.arch} · ${h.isa} · `), `${h.name}: ${shown && shown.text}`);
      assert.ok(shown.title.includes(`numerics ${h.numerics}`), `${h.name}: ${shown.title}`);
    }
  });

  test('"move" moves the instance to the host chosen', async () => {
    const initial = await cluster();
    const instance = initial.instances[0];
    assert.ok(!instance.placement.some((p) => p.host === MOVE_HOST), `${instance.id} is on ${MOVE_HOST} already`);
    const move = `button[data-action=move][data-instance-id="${instance.id}"]`;
    await page.waitForSelector(move, { visible: true, timeout: 5_000 });
    await page.click(move);
    await page.waitForSelector('#move-form:not([hidden])', { timeout: 5_000 });
    await page.select('#move-tp', '1');
    await page.select('#move-hosts', MOVE_HOST);
    await page.click('#move-submit');

    const moved = await eventually(MOVE_DEADLINE_MS, async () => {
      const c = await cluster();
      const now = c.instances.find((i) => i.id === instance.id);
      assert.ok(now, `${instance.id} is gone: ${JSON.stringify(c.instances)}`);
      assert.equal(now.state, 'ready', `${instance.id}: ${now.state} ${JSON.stringify(now.move)}`);
      assert.deepEqual(now.placement.map((p) => ({ host: p.host, ranks: p.ranks })), [{ host: MOVE_HOST, ranks: 1 }]);
      return now;
    });
    assert.equal(moved.tp, 1);
    await agree(page);
    const where = await page.$eval(`#host-list [data-host="${MOVE_HOST}"]`, (card) =>
      [...card.querySelectorAll('.slot[data-instance-id]')].map((s) => s.dataset.instanceId));
    assert.deepEqual(where, [instance.id]);
    await eventually(15_000, async () => {
      const kinds = await page.$$eval('#event-list [data-kind]', (items) => items.map((i) => i.dataset.kind));
      assert.ok(kinds.includes('move'), `events shown: ${kinds}`);
    });
  });

  test('the chat box streams the answer the API gives whole', async (t) => {
    const c = await cluster();
    const model = c.models[0].name;
    const message = 'In the beginning';
    const maxTokens = 48; // run.sh's model writes them over a few hundred ms: several reads
    await page.select('#chat-model', model);
    await page.$eval('#chat-temperature', (e) => { e.value = '0'; });
    await page.$eval('#chat-max-tokens', (e, n) => { e.value = String(n); }, maxTokens);
    await page.type('#chat-input', message);
    // every length #chat-output goes through, seen as it changes, and
    // whether the answer had ended then
    await page.evaluate(() => {
      window.chatLengths = [];
      const output = document.getElementById('chat-output');
      new MutationObserver(() => window.chatLengths.push([output.textContent.length, output.dataset.done]))
        .observe(output, { childList: true, characterData: true, subtree: true, attributes: true });
    });
    await page.click('#chat-send');
    await page.waitForFunction(() => document.getElementById('chat-output').dataset.done, { timeout: 60_000 });
    const shown = await page.$eval('#chat-output', (e) => ({ text: e.textContent, done: e.dataset.done, chunks: Number(e.dataset.chunks) }));
    const status = await page.$eval('#chat-status', (e) => e.textContent);
    assert.notEqual(shown.done, 'error', status);

    const whole = await api('/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ model, messages: [{ role: 'user', content: message }], temperature: 0, max_tokens: maxTokens }),
    });
    const expected = whole.choices[0].message.content;
    assert.ok(expected.length > 0, 'the whole answer is empty');
    assert.equal(shown.text, expected);
    assert.equal(shown.done, whole.choices[0].finish_reason);
    // Shown as it came: each event appended on its own, the text there before
    // the stream ended, and never shrinking. (How many distinct lengths the
    // page went through depends on how the tokens were packed into network
    // reads, which a busy machine may merge: reported, not asserted.)
    const seen = (await page.evaluate(() => window.chatLengths)).filter(([n]) => n > 0);
    const lengths = seen.map(([n]) => n);
    assert.ok(shown.chunks >= 2, `streamed in ${shown.chunks} chunks`);
    assert.ok(seen.some(([, done]) => !done), `no text before the end: ${JSON.stringify(seen)}`);
    for (let i = 1; i < lengths.length; i++) assert.ok(lengths[i] >= lengths[i - 1], `shrank: ${lengths}`);
    t.diagnostic(`${shown.chunks} chunks, ${new Set(lengths).size} distinct lengths shown: ${[...new Set(lengths)]}`);
  });

  test('draws charts with axes, each host\'s cpu load, and the kept history in a new tab', async () => {
    const axes = await page.$$eval('#instance-rows figure.chart', (figures) => figures.map((f) =>
      [...f.querySelectorAll('text.axis-label')].map((t) => t.textContent)));
    assert.ok(axes.length >= 3, `charts: ${axes.length}`);
    for (const labels of axes) {
      assert.equal(labels.length, 4, `axis labels: ${labels}`);
      assert.ok(labels.includes('now') && labels.includes('−15 min') && labels.includes('0'), `${labels}`);
    }
    const cpu = await page.$$eval('#host-list .host-cpu', (ps) => ps.map((p) => p.textContent));
    const c = await cluster();
    assert.equal(cpu.length, c.hosts.length);
    for (const text of cpu) assert.match(text, /^cpu: load \d+\.\d\d on \d+ cores$/);
    // the gateway samples every 5 s: wait until it kept three, then open a
    // tab, which must draw them before it could have polled three times
    const id = c.instances[0].id;
    await eventually(30_000, async () => {
      const kept = await api('/v1/cluster/history');
      assert.ok(kept.instances[id] && kept.instances[id].time.length >= 3, JSON.stringify(kept));
    });
    const tab = await browser.newPage();
    tab.on('pageerror', (err) => problems.push(`page error (new tab): ${err.message}`));
    await tab.goto(new URL('/', BASE), { waitUntil: 'load' });
    await tab.type('#api-key', API_KEY);
    await tab.click('#key-save');
    await tab.waitForSelector(`#instance-rows tr[data-instance-id="${id}"] figure.chart`, { timeout: 10_000 });
    const points = await tab.$eval(`#instance-rows tr[data-instance-id="${id}"] figure.chart`,
      (f) => Number(f.dataset.points));
    assert.ok(points >= 2, `the new tab's first chart has ${points} points`);
    await tab.close();
  });

  test('loads nothing from elsewhere, logs no error, and draws a page that is not blank', async () => {
    assert.deepEqual(foreign, []);
    assert.deepEqual(problems, []);
    await page.screenshot({ path: SCREENSHOT, type: 'png' });
    const { width, height, colours } = pngColours(fs.readFileSync(SCREENSHOT));
    assert.equal(width, 1280);
    assert.equal(height, 800);
    const commonest = Math.max(...colours.values());
    assert.ok(colours.size > 50, `${colours.size} colours`);
    assert.ok(commonest < 0.95 * width * height, `one colour covers ${commonest} of ${width * height} pixels`);
  });
});
