// dashboard.js -- the cluster dashboard's behaviour (index.html).
//
// Every POLL_MS it reads GET /v1/cluster and redraws the hosts (slots
// coloured by the instance whose ranks sit there, memory bars), the
// instances (with small charts computed here from successive polls of their
// cumulative counters; the 15 minutes before the page opened come from GET
// /v1/cluster/history, which the gateway keeps) and the latest events. Two
// keys, kept for the tab's session only (sessionStorage): the API key goes
// with the chat box's requests, the admin key with the admin API's; GET
// /v1/cluster takes either. When the admin API accepts its key, the page
// shows start, stop and move. The chat box streams POST
// /v1/chat/completions with fetch and a stream reader.
// Nothing here is loaded from elsewhere (the gateway's Content-Security-Policy
// forbids it), and styles are set through the CSSOM, which that policy allows.
'use strict';

const POLL_MS = 1500;
const HISTORY_SECONDS = 900; // what the charts show: all the gateway keeps
const API_KEY_STORAGE = 'lockstep-dashboard-api-key';
const ADMIN_KEY_STORAGE = 'lockstep-dashboard-admin-key';

const state = {
  apiKey: sessionStorage.getItem(API_KEY_STORAGE) || '',
  adminKey: sessionStorage.getItem(ADMIN_KEY_STORAGE) || '',
  admin: false, // the admin API accepts the key
  cluster: null, // the latest GET /v1/cluster
  history: new Map(), // instance id -> [{t, generated, ttftSum, ttftCount, itlSum, itlCount}]
  moving: null, // the instance the move form is for
  timer: 0, // the next poll's
  polling: false, // a poll is in flight
  pollAgain: false, // another was asked for meanwhile
};

const $ = (id) => document.getElementById(id);

// el('td', {class: 'x', dataset: {instanceId: 'a'}}, 'text', child...)
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'dataset') {
      for (const [key, v] of Object.entries(value)) if (v !== undefined && v !== null) node.dataset[key] = v;
    } else if (name === 'text') {
      node.textContent = value;
    } else {
      node.setAttribute(name, value === true ? '' : String(value));
    }
  }
  for (const child of children) node.append(child);
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

// The headers of a request for the admin API ('admin'), the inference API
// ('api'), or one that takes either ('any': the admin key when there is one).
function headers(json, which) {
  const h = {};
  const key = which === 'admin' ? state.adminKey
    : which === 'api' ? state.apiKey
      : state.adminKey || state.apiKey;
  if (key) h.Authorization = `Bearer ${key}`;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

// The message of an OpenAI-shaped error body, or the status line.
async function errorText(response) {
  const text = await response.text();
  try {
    const message = JSON.parse(text).error.message;
    if (message) return `${response.status}: ${message}`;
  } catch (err) {
    // not JSON: the status says enough
  }
  return `${response.status} ${response.statusText}`;
}

// ---------- formatting ----------

function bytes(n) {
  if (!Number.isFinite(n) || n <= 0) return '0 B';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n.toFixed(n < 10 && i > 0 ? 1 : 0)} ${units[i]}`;
}

function seconds(s) {
  if (s === null || !Number.isFinite(s)) return '–';
  return s < 1 ? `${(s * 1000).toFixed(s < 0.01 ? 1 : 0)} ms` : `${s.toFixed(2)} s`;
}

function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour12: false });
}

// A colour per instance, the same on every poll: a hue from its id.
function colour(id) {
  let hash = 0;
  for (const c of id) hash = (hash * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${hash % 360} 65% 45%)`;
}

// ---------- history and charts ----------

function sample(instance, now) {
  return {
    t: now,
    generated: instance.generated_tokens,
    ttftSum: instance.ttft_seconds_sum,
    ttftCount: instance.ttft_count,
    itlSum: instance.itl_seconds_sum,
    itlCount: instance.itl_count,
  };
}

// Records a poll; counters that went back (a new gateway) start over.
function record(instances, now) {
  const seen = new Set();
  for (const instance of instances) {
    seen.add(instance.id);
    const s = sample(instance, now);
    let list = state.history.get(instance.id) || [];
    const last = list[list.length - 1];
    if (last && (s.generated < last.generated || s.ttftCount < last.ttftCount)) list = [];
    list.push(s);
    while (list.length > 2 && list[0].t < now - HISTORY_SECONDS) list.shift();
    state.history.set(instance.id, list);
  }
  for (const id of [...state.history.keys()]) if (!seen.has(id)) state.history.delete(id);
}

// The per-interval series of one instance: tokens/s, mean TTFT, mean ITL.
function series(id) {
  const list = state.history.get(id) || [];
  const out = { rate: [], ttft: [], itl: [] };
  for (let i = 1; i < list.length; i++) {
    const a = list[i - 1];
    const b = list[i];
    const dt = b.t - a.t;
    if (dt <= 0) continue;
    out.rate.push([b.t, (b.generated - a.generated) / dt]);
    const ttftN = b.ttftCount - a.ttftCount;
    out.ttft.push([b.t, ttftN > 0 ? (b.ttftSum - a.ttftSum) / ttftN : null]);
    const itlN = b.itlCount - a.itlCount;
    out.itl.push([b.t, itlN > 0 ? (b.itlSum - a.itlSum) / itlN : null]);
  }
  return out;
}

// A line chart of points [t, value|null] over the last HISTORY_SECONDS,
// with its axes: time along the bottom (15 minutes ago to now), the value
// up the left (0 to the peak, in the chart's unit).
function chart(points, label, format, now) {
  const width = 168;
  const height = 56;
  const left = 34; // room for the value axis's labels
  const bottom = 11; // and the time axis's
  const plotWidth = width - left;
  const plotHeight = height - bottom;
  const values = points.map((p) => p[1]).filter((v) => v !== null);
  const latest = values.length ? values[values.length - 1] : null;
  const top = Math.max(...values, 1e-9);
  const box = el('figure', { class: 'chart', dataset: { points: values.length } });
  const drawing = svg('svg', {
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img',
    'aria-label': `${label}, last 15 minutes: latest ${format(latest)}, peak ${format(values.length ? top : null)}`,
  });
  drawing.append(svg('rect', { x: left, y: 0, width: plotWidth, height: plotHeight, class: 'chart-bg' }));
  const axes = `M${left},0 L${left},${plotHeight} L${width},${plotHeight}`;
  drawing.append(svg('path', { d: axes, class: 'chart-axis' }));
  const text = (x, y, anchor, content) => {
    const node = svg('text', { x, y, 'text-anchor': anchor, class: 'axis-label' });
    node.textContent = content;
    return node;
  };
  drawing.append(
    text(left - 2, 8, 'end', values.length ? format(top) : '–'),
    text(left - 2, plotHeight, 'end', '0'),
    text(left + 1, height - 1, 'start', '−15 min'),
    text(width, height - 1, 'end', 'now'));
  const at = (t, v) => [left + plotWidth - ((now - t) / HISTORY_SECONDS) * plotWidth,
    plotHeight - 1 - (v / top) * (plotHeight - 3)];
  let path = '';
  let pen = 'M';
  for (const [t, v] of points) {
    if (v === null || now - t > HISTORY_SECONDS) {
      pen = 'M';
      continue;
    }
    const [x, y] = at(t, v);
    path += `${pen}${x.toFixed(1)},${y.toFixed(1)} `;
    pen = 'L';
  }
  if (path) drawing.append(svg('path', { d: path, class: 'chart-line' }));
  const last = points.filter((p) => p[1] !== null).pop();
  if (last) {
    // the latest value as a dot, so that a single interval shows too
    const [x, y] = at(last[0], last[1]);
    drawing.append(svg('circle', { cx: x.toFixed(1), cy: y.toFixed(1), r: 1.8, class: 'chart-dot' }));
  }
  box.append(drawing, el('figcaption', { text: `${label} ${format(latest)}` }));
  return box;
}

// The samples the gateway kept before this page opened (GET
// /v1/cluster/history, columns per instance) become the start of each
// instance's history.
async function loadHistory() {
  try {
    const response = await fetch('/v1/cluster/history', { headers: headers(false, 'any'), cache: 'no-store' });
    if (!response.ok) return;
    const kept = (await response.json()).instances || {};
    for (const [id, c] of Object.entries(kept)) {
      const list = c.time.map((t, i) => ({
        t,
        generated: c.generated[i],
        ttftSum: c.ttft_seconds_sum[i],
        ttftCount: c.ttft_count[i],
        itlSum: c.itl_seconds_sum[i],
        itlCount: c.itl_count[i],
      }));
      const polled = (state.history.get(id) || []).filter((s) => !list.length || s.t > list[list.length - 1].t);
      state.history.set(id, list.concat(polled));
    }
  } catch (err) {
    // the charts start from the polls alone
  }
}

// ---------- hosts ----------

// The slots of a host: each instance's ranks there, then the free ones.
function slots(host, instances) {
  const row = el('div', { class: 'slots', 'aria-label': `slots of ${host.name}` });
  let used = 0;
  for (const instance of instances) {
    let rank = 0; // ranks are numbered through the placement in its order
    for (const place of instance.placement || []) {
      for (let r = 0; r < place.ranks; r++, rank++) {
        if (place.host !== host.name) continue;
        const slot = el('span', {
          class: 'slot',
          title: `${instance.id} rank ${rank} (${instance.model}, ${degrees(instance)})`,
          dataset: { instanceId: instance.id, rank },
          text: `${instance.id} r${rank}`,
        });
        slot.style.background = colour(instance.id);
        row.append(slot);
        used++;
      }
    }
  }
  for (let i = used; i < host.slots; i++) row.append(el('span', { class: 'slot free', text: 'free' }));
  return row;
}

function memoryBar(host) {
  const total = host.memory_limit > 0 ? Math.min(host.memory_limit, host.memory_total) : host.memory_total;
  const others = Math.max(0, host.memory_total - host.memory_available - host.memory_used);
  const bar = el('div', {
    class: 'bar',
    role: 'meter',
    'aria-label': `memory of ${host.name}`,
    'aria-valuemin': 0,
    'aria-valuemax': total,
    'aria-valuenow': host.memory_total - host.memory_available,
  });
  const ours = el('span', { class: 'bar-ours', title: `lockstep ${bytes(host.memory_used)}` });
  const theirs = el('span', { class: 'bar-others', title: `other processes ${bytes(others)}` });
  const share = (n) => `${total > 0 ? Math.min(100, (100 * n) / total).toFixed(1) : 0}%`;
  ours.style.width = share(host.memory_used);
  theirs.style.width = share(others);
  bar.append(ours, theirs);
  return bar;
}

// The host's load average against its cores, as its probes read it.
function loadBar(host) {
  const bar = el('div', {
    class: 'bar',
    role: 'meter',
    'aria-label': `cpu load of ${host.name}`,
    'aria-valuemin': 0,
    'aria-valuemax': host.cores,
    'aria-valuenow': host.load || 0,
  });
  const used = el('span', { class: 'bar-load', title: `load ${(host.load || 0).toFixed(2)}` });
  used.style.width = `${host.cores > 0 ? Math.min(100, (100 * (host.load || 0)) / host.cores).toFixed(1) : 0}%`;
  bar.append(used);
  return bar;
}

function hostCard(host, instances) {
  const card = el('article', { class: `host host-${host.state}`, dataset: { host: host.name, state: host.state } });
  card.append(
    el('h3', {}, el('span', { class: 'host-name', text: host.name }), ' ',
      el('span', { class: `badge state-${host.state}`, text: host.state })),
    // arch and isa side by side: one instance may span x86_64 and aarch64
    // hosts when their numerics (in the title) are the same
    el('p', {
      class: 'host-facts',
      title: `numerics ${host.numerics || '?'}: only hosts of one numerics share an instance`,
      text: `${host.local ? 'local' : 'remote'} · ${host.cores} cores · ` +
        `${host.arch || '?'} · ${host.isa || '?'} · ${host.slots_used}/${host.slots} slots`,
    }),
    loadBar(host),
    el('p', { class: 'host-cpu', text: `cpu: load ${(host.load || 0).toFixed(2)} on ${host.cores} cores` }),
    memoryBar(host),
    el('p', {
      class: 'host-memory',
      text: `${bytes(host.memory_available)} free of ${bytes(host.memory_total)}` +
        (host.memory_limit > 0 ? ` (limit ${bytes(host.memory_limit)})` : '') +
        ` · lockstep ${bytes(host.memory_used)}`,
    }),
    slots(host, instances),
  );
  return card;
}

function drawHosts(cluster) {
  $('host-list').replaceChildren(...cluster.hosts.map((h) => hostCard(h, cluster.instances)));
}

// ---------- instances ----------

function actionButton(action, instance, label) {
  return el('button', {
    type: 'button',
    class: `action action-${action}`,
    dataset: { action, instanceId: instance.id },
    'aria-label': `${label} ${instance.id}`,
    text: label,
  });
}

function stateCell(instance) {
  const cell = [el('span', { class: `badge state-${instance.state}`, text: instance.state })];
  const move = instance.move;
  if (move) {
    const text = move.state === 'failed'
      ? `move to ${move.to} failed: ${move.reason}`
      : `moving to ${move.to} (${move.state})`;
    cell.push(el('div', { class: `move move-${move.state}`, text }));
  }
  if (instance.status) cell.push(el('div', { class: 'status', text: instance.status }));
  return cell;
}

// The cells of a row, in the table's order; the action buttons are made
// once per row and kept, so a poll never takes a click or the focus away.
const CELLS = ['id', 'model', 'tp', 'hosts', 'state', 'restarts', 'requests', 'queue', 'running', 'kv', 'charts'];

function newRow(instance) {
  const row = el('tr', { dataset: { instanceId: instance.id } });
  for (const name of CELLS) {
    const numeric = ['restarts', 'requests', 'queue', 'running', 'kv'].includes(name);
    row.append(name === 'id' ? el('th', { scope: 'row', class: 'id' })
      : el('td', { class: numeric ? `num ${name}` : name }));
  }
  row.append(el('td', { class: 'admin-only actions' },
    actionButton('move', instance, 'move'), ' ', actionButton('stop', instance, 'stop')));
  return row;
}

// What a cell shows: text, or nodes.
function cellContents(instance, now) {
  const s = series(instance.id);
  const swatch = el('span', { class: 'swatch', 'aria-hidden': 'true' });
  swatch.style.background = colour(instance.id);
  const kv = instance.kv_total > 0 ? `${instance.kv_used}/${instance.kv_total}` : `${instance.kv_used}`;
  return {
    id: [swatch, instance.id],
    model: instance.model,
    tp: instance.pp > 1 ? `${instance.tp} × pp ${instance.pp}` : String(instance.tp),
    hosts: instance.hosts,
    state: stateCell(instance),
    restarts: String(instance.restarts),
    requests: String(instance.requests),
    queue: String(instance.queue_depth),
    running: String(instance.running),
    kv,
    charts: [el('div', { class: 'chart-row' },
      chart(s.rate, 'tok/s', (v) => (v === null ? '–' : v.toFixed(1)), now),
      chart(s.ttft, 'TTFT', seconds, now),
      chart(s.itl, 'ITL', seconds, now))],
  };
}

function updateRow(row, instance, now) {
  row.dataset.state = instance.state;
  const contents = cellContents(instance, now);
  CELLS.forEach((name, i) => {
    const cell = row.cells[i];
    const value = contents[name];
    if (typeof value === 'string') {
      if (cell.textContent !== value) cell.textContent = value;
    } else {
      cell.replaceChildren(...value);
    }
  });
}

function drawInstances(cluster, now) {
  const body = $('instance-rows');
  const rows = new Map([...body.querySelectorAll('tr[data-instance-id]')].map((r) => [r.dataset.instanceId, r]));
  const empty = body.querySelector('tr.empty');
  if (empty && cluster.instances.length) empty.remove();
  let previous = null;
  for (const instance of cluster.instances) {
    const row = rows.get(instance.id) || newRow(instance);
    rows.delete(instance.id);
    updateRow(row, instance, now);
    const place = previous ? previous.nextSibling : body.firstChild;
    if (row !== place) body.insertBefore(row, place);
    previous = row;
  }
  for (const gone of rows.values()) gone.remove();
  if (!cluster.instances.length && !body.querySelector('tr.empty'))
    body.append(el('tr', { class: 'empty' }, el('td', { colspan: 12, text: 'no instances' })));
}

// ---------- events ----------

function drawEvents(cluster) {
  const items = [...(cluster.events || [])].reverse().map((e) =>
    el('li', { class: `event event-${e.kind}`, dataset: { kind: e.kind, instanceId: e.instance || undefined } },
      el('time', { text: clock(e.time) }), ' ',
      el('span', { class: `badge kind-${e.kind}`, text: e.kind }), ' ',
      el('span', { class: 'event-text', text: e.text })));
  if (!items.length) items.push(el('li', { class: 'empty', text: 'nothing yet' }));
  $('event-list').replaceChildren(...items);
}

// ---------- forms that follow the cluster ----------

// Refills a select with options, keeping what was selected when it remains.
function fill(select, values, labels = values) {
  const chosen = new Set([...select.selectedOptions].map((o) => o.value));
  const same = select.options.length === values.length &&
    values.every((v, i) => select.options[i].value === String(v));
  if (same) return;
  select.replaceChildren(...values.map((v, i) =>
    el('option', { value: v, text: labels[i], selected: chosen.has(String(v)) })));
}

// "tp 2", or "tp 1, pp 2 (layers 6+10)" for an instance in pipeline stages.
function degrees(instance) {
  if (!(instance.pp > 1)) return `tp ${instance.tp}`;
  const layers = instance.layers ? ` (layers ${instance.layers.join('+')})` : '';
  return `tp ${instance.tp}, pp ${instance.pp}${layers}`;
}

// Pipeline stages a form offers.
const STAGES = [1, 2, 3, 4];

function degreesOf(cluster, modelName) {
  const model = cluster.models.find((m) => m.name === modelName);
  return model && model.tp_degrees.length ? model.tp_degrees : [1];
}

function drawForms(cluster) {
  const models = cluster.models.map((m) => m.name);
  const hosts = cluster.hosts.filter((h) => h.state !== 'lost').map((h) => h.name);
  fill($('chat-model'), models);
  fill($('start-model'), models);
  fill($('start-tp'), degreesOf(cluster, $('start-model').value));
  fill($('start-pp'), STAGES);
  fill($('start-hosts'), hosts);
  fill($('move-hosts'), hosts);
  const moving = state.moving && cluster.instances.find((i) => i.id === state.moving);
  if (state.moving && !moving) closeMove();
  if (moving) fill($('move-tp'), degreesOf(cluster, moving.model));
}

function drawSummary(cluster) {
  const up = cluster.hosts.filter((h) => h.state === 'up').length;
  const ready = cluster.instances.filter((i) => i.state === 'ready').length;
  $('summary').textContent = `${up}/${cluster.hosts.length} hosts up · ` +
    `${ready}/${cluster.instances.length} instances ready · ${cluster.models.length} models`;
}

function draw(cluster) {
  const now = Date.now() / 1000;
  record(cluster.instances, now);
  drawSummary(cluster);
  drawHosts(cluster);
  drawInstances(cluster, now);
  drawEvents(cluster);
  drawForms(cluster);
}

// ---------- polling ----------

function showPollError(text) {
  const box = $('poll-error');
  box.hidden = !text;
  box.textContent = text || '';
}

// One poll at a time: asked for during one (after an admin action, a new
// key), the next starts as soon as it ends, so there is only ever one timer.
async function poll() {
  if (state.polling) {
    state.pollAgain = true;
    return;
  }
  state.polling = true;
  clearTimeout(state.timer);
  try {
    const response = await fetch('/v1/cluster', { headers: headers(false, 'any'), cache: 'no-store' });
    if (response.ok) {
      state.cluster = await response.json();
      draw(state.cluster);
      showPollError('');
    } else {
      const hint = response.status === 401 ? ' (enter the API or admin key above)' : '';
      showPollError(`GET /v1/cluster: ${await errorText(response)}${hint}`);
    }
  } catch (err) {
    showPollError(`GET /v1/cluster: ${err.message}`);
  }
  state.polling = false;
  if (state.pollAgain) {
    state.pollAgain = false;
    poll();
  } else {
    state.timer = setTimeout(poll, POLL_MS);
  }
}

// ---------- the key and the admin API ----------

function showAdmin(admin, text) {
  state.admin = admin;
  document.body.classList.toggle('admin', admin);
  $('key-status').textContent = text;
  $('start-form').hidden = !admin;
  if (!admin) closeMove();
}

// Asks the admin API about an id that cannot exist: 404 means the key got
// through (the API checks the key before it looks the id up).
async function checkKey() {
  if (!state.adminKey) {
    showAdmin(false, 'no admin key: read only');
    return;
  }
  try {
    const response = await fetch('/admin/instances/%20key-check', { method: 'DELETE', headers: headers(false, 'admin') });
    if (response.status === 401) showAdmin(false, 'the admin API refused this key: read only');
    else if (response.status === 403) showAdmin(false, 'no admin API with this key: read only');
    else showAdmin(true, 'admin key accepted');
  } catch (err) {
    showAdmin(false, `cannot reach the admin API: ${err.message}`);
  }
}

async function admin(method, path, body, done) {
  const status = $('admin-status');
  status.textContent = `${method} ${path}…`;
  try {
    const response = await fetch(path, {
      method,
      headers: headers(body !== undefined, 'admin'),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    status.textContent = response.ok ? `${method} ${path}: ${response.status} ${done}`
      : `${method} ${path}: ${await errorText(response)}`;
    status.classList.toggle('error', !response.ok);
  } catch (err) {
    status.textContent = `${method} ${path}: ${err.message}`;
    status.classList.add('error');
  }
  poll();
}

const chosenHosts = (select) => [...select.selectedOptions].map((o) => o.value);

function openMove(id) {
  const instance = state.cluster && state.cluster.instances.find((i) => i.id === id);
  if (!instance) return;
  state.moving = id;
  $('move-instance').textContent = id;
  $('move-tp').replaceChildren();
  fill($('move-tp'), degreesOf(state.cluster, instance.model));
  $('move-tp').value = String(instance.tp);
  fill($('move-pp'), STAGES);
  $('move-pp').value = String(instance.pp > 1 ? instance.pp : 1);
  for (const option of $('move-hosts').options) option.selected = false;
  $('move-form').hidden = false;
  $('move-tp').focus();
}

function closeMove() {
  state.moving = null;
  $('move-form').hidden = true;
}

// The stop button asks once more before it stops anything.
function stopClicked(button) {
  if (button.dataset.armed) {
    const id = button.dataset.instanceId;
    admin('DELETE', `/admin/instances/${encodeURIComponent(id)}`, undefined, `stopping ${id}`);
    return;
  }
  button.dataset.armed = '1';
  button.textContent = 'really stop?';
  setTimeout(() => {
    delete button.dataset.armed;
    button.textContent = 'stop';
  }, 3000);
}

// ---------- chat ----------

// Reads a server-sent event stream to its end, calling onData with each
// data field (comments, such as keep-alives, have none).
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart());
      if (data.length) onData(data.join('\n'));
    }
  }
}

async function chat(event) {
  event.preventDefault();
  const output = $('chat-output');
  const status = $('chat-status');
  const text = $('chat-input').value.trim();
  if (!text) {
    status.textContent = 'type a message first';
    return;
  }
  const body = {
    model: $('chat-model').value,
    messages: [{ role: 'user', content: text }],
    stream: true,
    temperature: Number($('chat-temperature').value),
    max_tokens: Number($('chat-max-tokens').value),
  };
  output.textContent = '';
  output.dataset.chunks = '0';
  output.dataset.done = '';
  status.textContent = `asking ${body.model}…`;
  $('chat-send').disabled = true;
  try {
    const response = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(true, 'api'), body: JSON.stringify(body) });
    if (!response.ok) throw new Error(await errorText(response));
    let finish = null;
    await readEvents(response, (data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      const choice = chunk.choices && chunk.choices[0];
      if (choice && choice.delta && choice.delta.content) {
        output.textContent += choice.delta.content;
        output.dataset.chunks = String(Number(output.dataset.chunks) + 1);
      }
      if (choice && choice.finish_reason) finish = choice.finish_reason;
    });
    status.textContent = `done (${finish || 'stream ended'}, ${output.dataset.chunks} chunks)`;
    output.dataset.done = finish || 'ended';
  } catch (err) {
    status.textContent = `chat: ${err.message}`;
    output.dataset.done = 'error';
  } finally {
    $('chat-send').disabled = false;
  }
}

// ---------- start ----------

function start() {
  $('api-key').value = state.apiKey;
  $('admin-key').value = state.adminKey;
  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    state.apiKey = $('api-key').value.trim();
    state.adminKey = $('admin-key').value.trim();
    for (const [name, key] of [[API_KEY_STORAGE, state.apiKey], [ADMIN_KEY_STORAGE, state.adminKey]]) {
      if (key) sessionStorage.setItem(name, key);
      else sessionStorage.removeItem(name);
    }
    checkKey();
    loadHistory().then(poll);
  });
  $('instance-rows').addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action]');
    if (!button || !state.admin) return;
    if (button.dataset.action === 'move') openMove(button.dataset.instanceId);
    else if (button.dataset.action === 'stop') stopClicked(button);
  });
  $('move-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const id = state.moving;
    if (!id) return;
    const body = { tp: Number($('move-tp').value), pp: Number($('move-pp').value) };
    const hosts = chosenHosts($('move-hosts'));
    if (hosts.length) body.hosts = hosts;
    closeMove();
    admin('POST', `/admin/instances/${encodeURIComponent(id)}/move`, body, `moving ${id}`);
  });
  $('move-cancel').addEventListener('click', closeMove);
  $('start-model').addEventListener('change', () => {
    if (state.cluster) fill($('start-tp'), degreesOf(state.cluster, $('start-model').value));
  });
  $('start-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const body = {
      model: $('start-model').value,
      tp: Number($('start-tp').value),
      pp: Number($('start-pp').value),
    };
    const hosts = chosenHosts($('start-hosts'));
    if (hosts.length) body.hosts = hosts;
    admin('POST', '/admin/instances', body, `starting ${body.model}`);
  });
  $('chat-form').addEventListener('submit', chat);
  // Enter sends, Shift+Enter starts a new line
  $('chat-input').addEventListener('keydown', (event) => {
    if (event.key !== 'Enter' || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    if (!$('chat-send').disabled) $('chat-form').requestSubmit();
  });
  checkKey();
  loadHistory().then(poll);
}

start();
