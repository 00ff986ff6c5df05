// tandem's dashboard (GET /ui): plain JavaScript, nothing fetched from outside this daemon.
// Sources: GET /v1/status (the truth, refetched after every event that changes a model),
// GET /v1/events (read with fetch() so that the API key can be sent; polling /v1/status
// every 2 s when the stream is refused), /v1/models and /v1/pipelines for the tester,
// GET /v1/quality every 15 s for the quality panel.
'use strict';

const WINDOW_MS = 10 * 60 * 1000;
const KEY_STORE = 'tandem.apiKey';
const SVGNS = 'http://www.w3.org/2000/svg';
const LIVE = new Set(['resident', 'loading', 'stopping']);
const COLORS = ['#5b8def', '#49b39a', '#b07ad8', '#e4875a', '#8aa13f', '#d0689a'];

const S = {
  key: sessionStorage.getItem(KEY_STORE) || '',
  needKey: false,
  status: null, statusAt: 0, prevLoads: {},
  local: {},          // model -> state seen in an event after the last status
  progress: {},       // model -> the last `loading` event's data
  memory: null, memoryAt: 0,
  queue: null,
  lanes: new Map(),   // lane key -> {label, model, segs, marks, reqs}
  lat: {},            // model -> last 50 total_ms
  verdicts: [],
  lastId: null, skew: 0, lastByte: 0,
  mode: 'connecting', streaming: false, abort: null, pollTimer: null, statusTimer: null,
  synced: false,      // lanes may be filled from /v1/status (after the event replay)
  testerItems: [],
  timelineAt: 0, verdictsDirty: false,
  quality: null, qualityError: '', qualityPick: 0,
};

// ---- small helpers ---------------------------------------------------------------------------
function el(tag, attrs, ...kids) { return build(document.createElement(tag), attrs, kids); }
function sv(tag, attrs, ...kids) { return build(document.createElementNS(SVGNS, tag), attrs, kids); }
function build(e, attrs, kids) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat(Infinity)) if (k !== null && k !== undefined && k !== false)
    e.append(typeof k === 'string' || typeof k === 'number' ? String(k) : k);
  return e;
}
const $ = (sel) => document.querySelector(sel);
function fmtBytes(n) {
  if (n === null || n === undefined) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, v = Math.abs(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (n < 0 ? '-' : '') + (i === 0 ? v : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + u[i];
}
function fmtMs(ms) {
  if (ms === null || ms === undefined || !isFinite(ms)) return '–';
  ms = Math.max(0, ms);
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  const s = Math.round(ms / 1000);
  return Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0') + ' min';
}
const p3 = (p) => Number(p).toFixed(3);
const now = () => Date.now() + S.skew;        // the daemon's clock, as its events tell it
function median(xs) {
  if (!xs || !xs.length) return null;
  const a = [...xs].sort((x, y) => x - y), m = a.length >> 1;
  return a.length % 2 ? a[m] : (a[m - 1] + a[m]) / 2;
}

// ---- HTTP with the API key -------------------------------------------------------------------
class AuthError extends Error {}
async function call(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  if (S.key) headers.set('Authorization', 'Bearer ' + S.key);
  const r = await fetch(path, { ...opts, headers, cache: 'no-store' });
  if (r.status === 401) { askKey(); throw new AuthError('401 from ' + path); }
  return r;
}
async function getJSON(path) {
  const r = await call(path);
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.json();
}
function errorText(status, body) {
  const e = body && (body.error || body.detail);
  return 'HTTP ' + status + (e && e.message ? ': ' + e.message : '');
}

function askKey() {
  S.needKey = true;
  if (S.abort) S.abort.abort();
  stopPolling();
  setMode('key');
  const form = $('#key-form');
  $('#key-error').textContent = S.key ? 'the daemon refused this key' : '';
  if (form.hidden) { form.hidden = false; $('#key-input').focus(); }
}
function onKeySubmit(ev) {
  ev.preventDefault();
  const v = $('#key-input').value.trim();
  if (!v) return;
  S.key = v;
  sessionStorage.setItem(KEY_STORE, v);
  $('#key-form').hidden = true;
  $('#key-input').value = '';
  S.needKey = false;
  start();
}

// ---- connection: the event stream, or polling ------------------------------------------------
function setMode(mode) {
  S.mode = mode;
  const c = $('#conn-state');
  c.dataset.mode = mode;
  c.textContent = { connecting: 'connecting…', events: 'live', polling: 'polling every 2 s',
                    offline: 'daemon unreachable', key: 'API key needed' }[mode] || mode;
  c.title = mode === 'polling' ? 'the event stream is not available; trying it again every 30 s' : '';
}

async function eventsLoop() {
  if (S.streaming || S.needKey) return;
  S.streaming = true;
  const ctrl = new AbortController();
  S.abort = ctrl;
  let opened = false;
  try {
    // Last-Event-ID 0 on the first connection replays what the daemon still holds
    const headers = { Accept: 'text/event-stream', 'Last-Event-ID': String(S.lastId ?? 0) };
    const r = await call('/v1/events', { headers, signal: ctrl.signal });
    if (!r.ok || !r.body) { r.body && r.body.cancel().catch(() => {}); throw new Error('HTTP ' + r.status); }
    opened = true;
    S.skew = -Infinity;
    S.lastByte = Date.now();
    stopPolling();
    setMode('events');
    scheduleStatus(700);          // after the replay: the truth, and lanes filled from it
    await readStream(r.body);
  } catch (e) {
    if (e instanceof AuthError) { S.streaming = false; return; }
  }
  if (!isFinite(S.skew)) S.skew = 0;
  S.streaming = false;
  S.abort = null;
  if (S.needKey) return;
  if (opened) setTimeout(eventsLoop, 1500);                 // dropped: resume from lastId
  else { startPolling(); setTimeout(eventsLoop, 30000); }   // refused: poll, retry later
}

async function readStream(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '', ev = { type: '', data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    S.lastByte = Date.now();
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {                                     // a blank line ends the event
        if (ev.data.length) dispatch(ev.type || 'message', ev.data.join('\n'), ev.id);
        ev = { type: '', data: [], id: null };
        continue;
      }
      if (line.startsWith(':')) continue;                    // a comment: the heartbeat
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let val = c < 0 ? '' : line.slice(c + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'data') ev.data.push(val);
      else if (field === 'event') ev.type = val;
      else if (field === 'id') ev.id = val;
    }
  }
}

function dispatch(type, text, id) {
  let d;
  try { d = JSON.parse(text); } catch (e) { console.warn('tandem: unreadable event', type, text); return; }
  if (id !== null && id !== '') S.lastId = id;
  if (d && typeof d.time_ms === 'number') S.skew = Math.max(S.skew, d.time_ms - Date.now());
  handle(type, d || {});
}

function startPolling() {
  if (S.needKey) return;
  setMode('polling');
  if (S.pollTimer) return;
  S.pollTimer = setInterval(refreshStatus, 2000);
  refreshStatus();
}
function stopPolling() {
  if (S.pollTimer) clearInterval(S.pollTimer);
  S.pollTimer = null;
}
function scheduleStatus(ms) {
  clearTimeout(S.statusTimer);
  S.statusTimer = setTimeout(() => { S.synced = true; refreshStatus(); }, ms);
}

async function refreshStatus() {
  if (S.needKey) return;
  try {
    const st = await getJSON('/v1/status');
    S.status = st;
    S.statusAt = Date.now();
    S.local = {};
    for (const m of st.models) if (m.progress) S.progress[m.name] = m.progress;
    if (S.mode === 'polling' || S.synced) syncLanes(st);
    if (S.mode === 'offline') setMode(S.streaming ? 'events' : 'polling');
    render();
  } catch (e) {
    if (e instanceof AuthError) return;
    if (S.mode === 'polling' || S.mode === 'connecting') setMode('offline');
  }
}

// ---- events -> state and timeline ------------------------------------------------------------
function lane(key, label, model) {
  if (!S.lanes.has(key)) S.lanes.set(key, { label: label || key, model, segs: [], marks: [], reqs: [] });
  return S.lanes.get(key);
}
const modelLane = (name) => lane(name, name, name);
function closeOpen(l, t) { for (const s of l.segs) if (s.end === null) s.end = Math.max(t, s.start); }
function openSeg(l, kind, start) {
  const last = l.segs.find((s) => s.kind === kind && s.end === null);
  if (last) return last;
  const s = { kind, start, end: null };
  l.segs.push(s);
  return s;
}

function handle(type, d) {
  const t = d.time_ms || now();
  const m = d.model;
  switch (type) {
  case 'loading': {
    const l = modelLane(m);
    for (const s of l.segs) if (s.kind === 'resident' && s.end === null) s.end = t;
    openSeg(l, 'load', t - (d.elapsed_ms || 0));
    S.progress[m] = d;
    S.local[m] = 'loading';
    scheduleStatus(300);
    break;
  }
  case 'ready': {
    const l = modelLane(m);
    const s = l.segs.find((x) => x.kind === 'load' && x.end === null);
    if (s) s.end = t; else l.segs.push({ kind: 'load', start: t - (d.load_ms || 0), end: t });
    openSeg(l, 'resident', t);
    S.progress[m] = { phase: 'ready', fraction: 1, elapsed_ms: d.load_ms };
    S.local[m] = 'resident';
    scheduleStatus(300);
    break;
  }
  case 'evicted': case 'crashed': {
    const l = modelLane(m);
    closeOpen(l, t);
    l.marks.push({ kind: type, t, text: type === 'evicted' ? 'evicted (' + d.reason + ')'
      : 'crashed' + (d.while_loading ? ' while loading' : '') + ': ' + (d.message || '') });
    S.local[m] = type === 'crashed' && d.failed ? 'failed' : 'unloaded';
    delete S.progress[m];
    scheduleStatus(300);
    break;
  }
  case 'restarted':
    modelLane(m).marks.push({ kind: 'restarted', t, text: 'restarted after ' + d.crashes + ' crash(es)' });
    break;
  case 'queue': S.queue = d; break;
  case 'memory': S.memory = d; S.memoryAt = Date.now(); break;
  case 'request': {
    const l = d.model ? modelLane(d.model) : d.pipeline ? lane('pipeline:' + d.pipeline, 'pipeline ' + d.pipeline, null)
      : lane('other', 'other routes', null);
    l.reqs.push({ id: d.request_id, route: d.route, status: d.status, t1: t, t0: t - (d.total_ms || 0),
                  queued: d.queued_ms || 0, loading: d.loading_ms || 0, running: d.running_ms || 0 });
    if (d.model && d.status >= 200 && d.status < 300) {
      const xs = (S.lat[d.model] = S.lat[d.model] || []);
      xs.push(d.total_ms);
      if (xs.length > 50) xs.shift();
    }
    scheduleStatus(300);
    break;
  }
  case 'verdict':
    S.verdicts.unshift(d);
    S.verdicts.length = Math.min(S.verdicts.length, 10);
    S.verdictsDirty = true;
    break;
  case 'reset': scheduleStatus(0); break;
  default: return;
  }
  render();
}

// What /v1/status says that no event told us (polling, or a model resident before the replay).
function syncLanes(st) {
  const t = now();
  for (const m of st.models) {
    const l = modelLane(m.name);
    const loadedSince = m.name in S.prevLoads && m.loads > S.prevLoads[m.name];
    S.prevLoads[m.name] = m.loads;
    if (S.mode === 'events' && l.segs.length) continue;     // the events said it already
    const open = l.segs.filter((s) => s.end === null);
    if (m.state === 'resident' && !open.some((s) => s.kind === 'resident')) {
      const loading = open.find((s) => s.kind === 'load');
      closeOpen(l, t);
      if (!loading && loadedSince) l.segs.push({ kind: 'load', start: t - ((m.swap && m.swap.ready_ms) || 0), end: t });
      if (loading || loadedSince) openSeg(l, 'resident', t);
      else openSeg(l, 'resident', t - WINDOW_MS).before = true;
    } else if (m.state === 'loading' && !open.some((s) => s.kind === 'load')) {
      closeOpen(l, t);
      openSeg(l, 'load', t - ((m.progress && m.progress.elapsed_ms) || 0));
    } else if ((m.state === 'unloaded' || m.state === 'failed') && open.length) {
      closeOpen(l, t);
      l.marks.push({ kind: m.state === 'failed' ? 'crashed' : 'evicted', t, text: m.state + ' (seen by polling)' });
    }
  }
}

// ---- rendering -------------------------------------------------------------------------------
let renderQueued = false;
function render() {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    renderModels(); renderMemory(); renderQueue(); renderVerdicts(); fillTester();
    if (Date.now() - S.timelineAt >= 1000) renderTimeline();   // else the next tick draws it
  }, 0);
}
function stateOf(m) { return S.local[m.name] || m.state; }

function renderMemory() {
  const box = $('#memory');
  const st = S.status;
  if (!st) return;
  const memFresh = S.memory && Date.now() - S.memoryAt < 10000 ? S.memory : null;
  const W = Math.max(300, box.clientWidth || 600), H = 34, BH = 22;
  box.replaceChildren();
  for (const d of st.budget.devices) {
    const budget = d.budget_bytes || 1;
    const x = (b) => Math.max(0, Math.min(W, (b / budget) * W));
    const svg = sv('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
                            'aria-label': 'memory of ' + d.device, 'data-device': d.device });
    svg.append(sv('rect', { x: 0, y: 2, width: W, height: BH, fill: '#eceff3', rx: 3 }));
    let at = 0;
    st.models.forEach((m, i) => {
      if (!LIVE.has(stateOf(m))) return;
      const bytes = d.device === 'host' ? m.planned.host_bytes : m.device === d.device ? m.planned.gpu_bytes : 0;
      if (!bytes) return;
      const x0 = x(at), w = Math.max(1, x(at + bytes) - x0);
      const mm = memFresh && memFresh.models.find((q) => q.model === m.name);
      const meas = mm ? (d.device === 'host' ? mm.rss_bytes : mm.measured_gpu_bytes)
        : m.measured ? (d.device === 'host' ? m.measured.host_bytes : m.measured.gpu_bytes) : null;
      const g = sv('g', { 'data-model': m.name, 'data-kind': 'planned' },
        sv('title', { text: `${m.name} (${stateOf(m)}): planned ${fmtBytes(bytes)}` +
                            (meas !== null ? `, measured ${fmtBytes(meas)}` : '') }),
        sv('rect', { x: x0, y: 2, width: w, height: BH, fill: COLORS[i % COLORS.length],
                     opacity: stateOf(m) === 'resident' ? 0.85 : 0.5 }));
      if (meas !== null) g.append(sv('rect', { x: x0, y: BH - 3, width: Math.max(1, x(at + meas) - x0), height: 4,
                                               fill: '#1d232b', opacity: 0.55, 'data-kind': 'measured' }));
      if (w > 50) g.append(sv('text', { x: x0 + 5, y: 17, fill: '#fff' }, clip(m.name, w / 6.5)));
      svg.append(g);
      at += bytes;
    });
    const md = memFresh && memFresh.devices.find((q) => q.device === d.device);
    if (md && md.measured_bytes !== null && md.measured_bytes !== undefined) {
      const mx = x(md.measured_bytes);
      svg.append(sv('line', { x1: mx, x2: mx, y1: 0, y2: H, stroke: '#1d232b', 'stroke-width': 2,
                              'stroke-dasharray': '3 2' }, sv('title', { text: 'measured ' + fmtBytes(md.measured_bytes) })));
    }
    const used = d.used_bytes ?? at;
    const measured = md && md.measured_bytes !== null ? `, measured ${fmtBytes(md.measured_bytes)}` : '';
    box.append(el('div', { class: 'device' },
      el('div', { class: 'title' }, el('strong', { text: d.device + (d.simulated ? ' (simulated)' : '') }),
         el('span', { class: 'free', text: `${fmtBytes(d.budget_bytes - used)} free of ${fmtBytes(d.budget_bytes)}` +
                                           ` (planned ${fmtBytes(used)}${measured})` })),
      svg));
  }
}
const clip = (s, n) => (s.length <= n ? s : s.slice(0, Math.max(1, n - 1)) + '…');

function renderModels() {
  const st = S.status;
  if (!st) return;
  const body = $('#models-table tbody');
  for (const m of st.models) {
    let tr = body.querySelector(`tr[data-model="${CSS.escape(m.name)}"]`);
    if (!tr) { tr = modelRow(m.name); body.append(tr); }
    const state = stateOf(m);
    const c = tr.cells;
    tr.dataset.state = state;
    const prog = S.progress[m.name];
    c[1].replaceChildren(...[el('span', { class: 'state ' + state, text: state }),
      state === 'loading' && prog ? el('span', { class: 'progress', 'data-phase': prog.phase },
        prog.phase, prog.fraction !== null && prog.fraction !== undefined
          ? el('span', { class: 'bar', role: 'progressbar', 'aria-valuenow': Math.round(prog.fraction * 100),
                         'aria-valuemin': 0, 'aria-valuemax': 100 }, el('i', { style: `width:${prog.fraction * 100}%` }))
          : null) : null,
      state === 'failed' && m.last_error ? el('div', { class: 'error', text: m.last_error }) : null].filter(Boolean));
    c[2].textContent = m.device;
    const planned = m.planned.gpu_bytes + m.planned.host_bytes;
    const measured = m.measured ? m.measured.gpu_bytes + m.measured.host_bytes : null;
    c[3].textContent = fmtBytes(planned) + ' / ' + fmtBytes(measured);
    c[4].textContent = keepAlive(m, state);
    c[5].textContent = m.answered;
    c[6].textContent = fmtMs(median(S.lat[m.name]));
    c[7].textContent = m.loads;
    c[8].textContent = m.crashes;
    c[9].textContent = !m.cache ? '–' : m.cache.enabled ? m.cache.hits : 'off';
  }
}
function cacheText(c) {
  if (!c) return null;
  if (!c.max_bytes) return 'decision cache: off';
  return `decision cache: ${c.entries} entries, ${fmtBytes(c.bytes)} of ${fmtBytes(c.max_bytes)}; ` +
    `${c.hits} hits, ${c.misses} misses, ${c.coalesced} coalesced`;
}
function keepAlive(m, state) {
  if (state !== 'resident') return '–';
  if (m.until_ms !== null && m.until_ms !== undefined) return fmtMs(m.until_ms - (Date.now() - S.statusAt));
  if (m.pinned) return 'pinned';
  if (m.running || m.queued) return 'busy';
  return m.keep_alive_ms === null ? 'forever' : '–';
}
function modelRow(name) {
  const err = el('span', { class: 'error', role: 'alert' });
  const btn = (what) => el('button', { type: 'button', class: 'ghost', 'data-action': what,
                                       'aria-label': `${what} ${name}`, text: what[0].toUpperCase() + what.slice(1) });
  const load = btn('load'), unload = btn('unload');
  const act = async (what) => {
    load.disabled = unload.disabled = true;
    err.textContent = '';
    try {
      const r = await call(`/admin/models/${encodeURIComponent(name)}/${what}`, { method: 'POST' });
      if (!r.ok) err.textContent = errorText(r.status, await r.json().catch(() => null));
    } catch (e) {
      if (!(e instanceof AuthError)) err.textContent = String(e.message || e);
    } finally {
      load.disabled = unload.disabled = false;
      refreshStatus();
    }
  };
  load.addEventListener('click', () => act('load'));
  unload.addEventListener('click', () => act('unload'));
  const tr = el('tr', { 'data-model': name }, el('th', { scope: 'row', text: name }),
    el('td'), el('td'), el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }),
    el('td', { class: 'num' }), el('td', { class: 'num' }), el('td', { class: 'num' }),
    el('td', { class: 'num' }), el('td', { class: 'actions' }, load, unload, err));
  return tr;
}

function renderQueue() {
  const st = S.status;
  if (!st) return;
  const q = S.queue;
  const rows = st.models.map((m) => {
    const e = q && q.models && q.models[m.name];
    const waiting = e ? e.waiting : m.queued, running = e ? e.running : m.running;
    const oldest = e && e.oldest_wait_ms !== null && e.waiting ? e.oldest_wait_ms + Math.max(0, now() - q.time_ms) : null;
    return el('tr', { 'data-model': m.name }, el('td', { text: m.name }), el('td', { class: 'num', text: waiting }),
      el('td', { class: 'num', text: running }), el('td', { class: 'num', text: oldest === null ? '–' : fmtMs(oldest) }));
  });
  const waiting = q ? q.waiting : st.queue.waiting;
  const cache = cacheText(st.cache);
  $('#queue').replaceChildren(
    el('p', { class: 'sub', text: `${waiting} waiting; the queue holds ${st.queue.depth}` }),
    ...(cache ? [el('p', { class: 'sub', id: 'cache', text: cache })] : []),
    el('table', null, el('thead', null, el('tr', null, el('th', { text: 'model' }), el('th', { class: 'num', text: 'waiting' }),
      el('th', { class: 'num', text: 'running' }), el('th', { class: 'num', text: 'oldest wait' }))), el('tbody', null, rows)));
}

function renderTimeline() {
  S.timelineAt = Date.now();
  const box = $('#timeline');
  const t1 = now(), t0 = t1 - WINDOW_MS;
  const names = S.status ? S.status.models.map((m) => m.name) : [];
  for (const n of names) modelLane(n);
  const keys = [...names, ...[...S.lanes.keys()].filter((k) => !names.includes(k))];
  const LW = 150, LH = 34, W = Math.max(500, box.clientWidth || 900), CW = W - LW - 10;
  const H = keys.length * LH + 22;
  const x = (t) => LW + Math.max(0, Math.min(CW, ((t - t0) / WINDOW_MS) * CW));
  const svg = sv('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
                          'aria-label': 'loads, residency and requests over the last 10 minutes' });
  keys.forEach((k, i) => {
    const l = S.lanes.get(k), y = i * LH;
    l.segs = l.segs.filter((s) => s.end === null || s.end >= t0);
    l.marks = l.marks.filter((m) => m.t >= t0);
    l.reqs = l.reqs.filter((r) => r.t1 >= t0);
    const g = sv('g', { 'data-lane': k, 'data-model': l.model || null });
    g.append(sv('rect', { x: LW, y: y + 2, width: CW, height: LH - 4, fill: i % 2 ? '#fafbfc' : '#f3f5f8' }),
             sv('text', { class: 'lane-label', x: 4, y: y + LH / 2 + 4 }, clip(l.label, 22)));
    for (const s of l.segs) {
      const end = s.end === null ? t1 : s.end, xa = x(s.start), w = Math.max(2, x(end) - xa);
      const what = s.kind === 'load' ? 'loading' : 'resident';
      g.append(sv('rect', { x: xa, y: y + 5, width: w, height: 12, rx: 2, 'data-model': l.model, 'data-kind': s.kind,
                            fill: s.kind === 'load' ? 'var(--load)' : '#cfe8d7' },
        sv('title', { text: `${l.label} ${what}${s.before ? ' (since before this page)' : ''}: ` +
                            `${s.before ? '' : new Date(s.start - S.skew).toLocaleTimeString() + ', '}${fmtMs(end - s.start)}` +
                            (s.end === null ? ' so far' : '') })));
    }
    for (const r of l.reqs) {
      const xa = x(r.t0), w = Math.max(2, x(r.t1) - xa), bad = r.status >= 400;
      const rg = sv('g', { 'data-kind': 'request', 'data-model': l.model, 'data-request-id': r.id, 'data-status': r.status },
        sv('title', { text: `${r.id} (${r.route}) HTTP ${r.status}: queued ${r.queued} ms, loading ${r.loading} ms, running ${r.running} ms` }),
        sv('rect', { x: xa, y: y + 20, width: w, height: 8, fill: bad ? 'var(--bad)' : 'var(--accent)', opacity: 0.8 }));
      if (r.loading > 0) {
        const la = x(r.t0 + r.queued);
        rg.append(sv('rect', { x: la, y: y + 20, width: Math.max(1, x(r.t0 + r.queued + r.loading) - la), height: 8,
                               fill: 'var(--load)', 'data-kind': 'request-loading' }));
      }
      g.append(rg);
    }
    for (const m of l.marks) {
      const mx = x(m.t), crash = m.kind === 'crashed';
      g.append(sv('text', { x: mx - 4, y: y + 14, 'data-kind': m.kind, 'data-model': l.model,
                            fill: crash ? 'var(--bad)' : m.kind === 'restarted' ? 'var(--accent)' : '#555' },
        crash ? '✕' : m.kind === 'restarted' ? '↻' : '▼', sv('title', { text: m.text })));
    }
    svg.append(g);
  });
  for (let m = 10; m >= 0; m -= 2) {
    const tx = x(t1 - m * 60000);
    svg.append(sv('line', { x1: tx, x2: tx, y1: 0, y2: H - 18, stroke: '#dde2e8' }),
               sv('text', { class: 'axis', x: tx, y: H - 6, 'text-anchor': m === 0 ? 'end' : 'middle' },
                  m === 0 ? 'now' : `−${m} min`));
  }
  box.replaceChildren(svg);
}

function bars(rows) {
  // rows: [{label, value, cls, thr, key}] -> a labelled bar per row, values with 3 decimals
  return el('div', { class: 'bars' }, rows.map((r) => [
    el('span', { class: 'label', text: r.label }),
    el('span', { class: 'track' }, el('span', { class: 'fill ' + (r.cls || ''), style: `display:block;width:${Math.max(0, Math.min(1, r.value)) * 100}%` }),
       r.thr !== undefined ? el('span', { class: 'thr', style: `left:${r.thr * 100}%`, title: 'threshold' }) : null),
    el('span', { class: 'value', 'data-label': r.key ?? r.label, 'data-question': r.q || null, text: p3(r.value) })]));
}
function answerRows(q, a) {
  if (a.type === 'noul') return [{ label: 'true', value: a.noul, q, key: 'true' }];
  const legend = a.legend || {};
  return Object.entries(a.probabilities || {}).map(([k, p]) => ({
    label: legend[k] !== undefined ? `${k} ${legend[k]}` : k, key: k, value: p, q,
    cls: k === String(a.choice) ? 'chosen' : '' }));
}
function answersView(answers) {
  return Object.entries(answers || {}).map(([q, a]) => el('div', { class: 'answer', 'data-question': q },
    el('h3', null, q, el('span', { class: 'muted', text: ` ${a.type}` +
      (a.choice !== undefined ? ` → ${a.choice}` : '') + (a.score !== undefined ? ` score ${p3(a.score)}` : '') +
      (a.confidence !== undefined ? `, confidence ${p3(a.confidence)}` : '') })),
    bars(answerRows(q, a))));
}
function thresholdOf(s) {
  const m = /^\s*(>=|<=|>|<)\s*([0-9.]+)\s*$/.exec(s || '');
  return m ? Number(m[2]) : undefined;
}
function scoreOf(a) {
  if (!a) return 0;
  if (a.type === 'noul') return a.noul;
  if (a.type === 'score') return a.score;
  return (a.probabilities || {})[a.choice] ?? a.confidence ?? 0;
}
function timeSplit(t) {
  if (!t) return null;
  const total = Math.max(1, t.total_ms);
  const part = (cls, ms) => el('i', { class: cls, style: `width:${(ms / total) * 100}%`, title: `${cls} ${ms} ms` });
  return el('div', null, el('div', { class: 'split' }, part('q', t.queued_ms), part('l', t.loading_ms), part('r', t.running_ms)),
    el('div', { class: 'sub', text: `${fmtMs(t.total_ms)}: queued ${fmtMs(t.queued_ms)}, loading ${fmtMs(t.loading_ms)}, running ${fmtMs(t.running_ms)}` }));
}
function verdictView(v) {
  const dec = v.decide || {};
  return el('div', { class: 'verdict', 'data-request-id': v.request_id, 'data-verdict': v.verdict },
    el('div', { class: 'head' }, el('strong', { text: v.pipeline }),
       el('span', { class: 'v-' + v.verdict, text: v.verdict + (v.choice ? ': ' + v.choice : '') }),
       el('span', { class: 'reason', text: v.reason || '' }),
       el('span', { class: 'muted', text: v.time_ms ? new Date(v.time_ms - S.skew).toLocaleTimeString() : '' })),
    el('div', { class: 'cols' },
      el('div', { class: 'decide' }, el('div', { class: 'sub', text: 'decide (' + (dec.model || '?') + ')' }), answersView(dec.answers)),
      el('div', { class: 'verify' }, (v.attempts || []).map((at) => [
        el('div', { class: 'sub', text: `attempt ${at.attempt}: ${at.candidate} ${at.passed ? 'passed' : 'failed'}` }),
        (at.verify || []).map((st) => bars(Object.entries(st.questions || {}).map(([q, x]) => ({
          label: `${st.model}: ${q}${x.threshold ? ' ' + x.threshold : ''}`, key: q, q,
          value: scoreOf(x.answer), thr: thresholdOf(x.threshold),
          cls: x.passed === false ? 'fail' : x.passed ? 'chosen' : '' }))))]))),
    timeSplit(v.timing));
}
function renderVerdicts() {
  if (!S.verdictsDirty) return;
  S.verdictsDirty = false;
  $('#verdicts').replaceChildren(...S.verdicts.map(verdictView));
}

// ---- tester ----------------------------------------------------------------------------------
const EXAMPLE_STATE = 'The build server is at 97% memory and swapping. Eight compile jobs run in parallel; ' +
                      'two are nightly documentation builds nobody waits for.';
function example(item) {
  if (item.kind === 'pipeline') return {
    state: EXAMPLE_STATE,
    candidates: { reduce: 'Reduce build concurrency from eight jobs to four.',
                  stop: 'Stop the non-critical documentation builds.', nothing: 'Change nothing and wait.' } };
  return { state: EXAMPLE_STATE,
           questions: { choice: { type: 'choice', instructions: 'What should the operator do now?',
                                  criteria: { reduce: 'reduce concurrency', stop: 'stop non-critical jobs',
                                              nothing: 'change nothing' } } } };
}
function fillTester() {
  const sel = $('#tester-model');
  const items = S.testerItems;
  if (!items.length || sel.options.length) return;
  const group = (label, kind) => el('optgroup', { label }, items.filter((i) => i.kind === kind)
    .map((i) => el('option', { value: i.kind + ':' + i.name, text: i.name })));
  sel.append(group('models', 'model'));
  if (items.some((i) => i.kind === 'pipeline')) sel.append(group('pipelines', 'pipeline'));
  onTesterSelect();
}
function testerItem() {
  const v = $('#tester-model').value, c = v.indexOf(':');
  return { kind: v.slice(0, c), name: v.slice(c + 1) };
}
function onTesterSelect() {
  $('#tester-body').value = JSON.stringify(example(testerItem()), null, 2);
  $('#tester-result').replaceChildren();
  $('#tester-meta').textContent = '';
}
async function loadTesterItems() {
  const [models, pipes] = await Promise.all([getJSON('/v1/models'), getJSON('/v1/pipelines').catch(() => ({ pipelines: [] }))]);
  const data = models.data || [];
  const decision = data.filter((m) => m.decision_type || (m.architecture?.output_modalities || []).includes('decisions'));
  S.testerItems = [...(decision.length ? decision : data).map((m) => ({ kind: 'model', name: m.id })),
                   ...(pipes.pipelines || []).map((p) => ({ kind: 'pipeline', name: p.name }))];
  render();
}
async function onTesterSend() {
  const item = testerItem(), out = $('#tester-result'), send = $('#tester-send');
  if (!item.name) return;
  let body;
  try { body = JSON.parse($('#tester-body').value); } catch (e) {
    out.replaceChildren(el('p', { class: 'error', text: 'not JSON: ' + e.message }));
    return;
  }
  const path = item.kind === 'pipeline' ? '/v1/pipelines/' + encodeURIComponent(item.name) : '/v1/systemone';
  if (item.kind === 'model' && body && typeof body === 'object' && !Array.isArray(body)) { const { model: _m, ...rest } = body; body = { model: item.name, ...rest }; }
  send.disabled = true;
  out.dataset.state = 'pending';
  $('#tester-meta').textContent = 'waiting…';
  const t0 = performance.now();
  try {
    const r = await call(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const answer = await r.json().catch(() => null);
    $('#tester-meta').textContent = `HTTP ${r.status} in ${fmtMs(performance.now() - t0)}` +
      (r.headers.get('X-Tandem-Model') ? ` from ${r.headers.get('X-Tandem-Model')}` : '');
    if (!r.ok || !answer) out.replaceChildren(el('p', { class: 'error', text: errorText(r.status, answer) }));
    else if (answer.verdict) out.replaceChildren(verdictView(answer));
    else out.replaceChildren(...answersView(answer.answers));
    out.dataset.state = r.ok ? 'ok' : 'error';
  } catch (e) {
    out.replaceChildren(el('p', { class: 'error', text: e instanceof AuthError ? 'the API key is needed' : String(e.message || e) }));
    out.dataset.state = 'error';
    $('#tester-meta').textContent = '';
  } finally {
    send.disabled = false;
  }
}

// ---- decision quality (GET /v1/quality) -------------------------------------------------------
async function refreshQuality() {
  if (S.needKey) return;
  try {
    S.quality = await getJSON('/v1/quality?since=' + encodeURIComponent($('#quality-window').value));
    S.qualityError = '';
  } catch (e) {
    if (e instanceof AuthError) return;
    S.quality = null;
    S.qualityError = e.message || String(e);
  }
  renderQuality();
}

const num = (x) => (x === null || x === undefined ? '–' : p3(x));

// The reliability diagram: per confidence bin, the accuracy (bar) against the diagonal.
function reliabilitySvg(bins) {
  const W = 260, H = 180, P = 24, w = (W - P) / bins.length;
  const y = (v) => H - P - v * (H - 2 * P);
  const svg = sv('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', id: 'quality-reliability',
                          'aria-label': 'reliability diagram: accuracy per confidence bin' });
  svg.append(sv('line', { x1: P, y1: y(0), x2: W, y2: y(1), stroke: '#bbb', 'stroke-dasharray': '3 3' }));
  bins.forEach((b, i) => {
    if (!b.count) return;
    const x = P + i * w, top = y(b.accuracy);
    svg.append(sv('rect', { x: x + 1, y: top, width: w - 2, height: y(0) - top, fill: 'var(--accent)', 'data-bin': i },
      sv('title', { text: `confidence ${p3(b.lo)}–${p3(b.hi)}: ${b.count} answers, accuracy ${p3(b.accuracy)}, mean confidence ${p3(b.confidence)}` })));
  });
  svg.append(sv('text', { class: 'axis', x: P, y: H - 6 }, 'confidence 0'),
             sv('text', { class: 'axis', x: W, y: H - 6, 'text-anchor': 'end' }, '1'),
             sv('text', { class: 'axis', x: 2, y: y(1) + 4 }, '1'));
  return svg;
}

// Accuracy over the window: one point per span that holds labelled answers.
function overTimeSvg(points) {
  const W = 360, H = 180, P = 24, pts = points.map((p, i) => ({ ...p, i })).filter((p) => p.count);
  const x = (i) => P + (i / Math.max(1, points.length - 1)) * (W - 2 * P), y = (v) => H - P - v * (H - 2 * P);
  const svg = sv('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', id: 'quality-over-time',
                          'aria-label': 'accuracy over the window' });
  svg.append(sv('line', { x1: P, y1: y(0), x2: W - P, y2: y(0), stroke: '#dde2e8' }),
             sv('line', { x1: P, y1: y(1), x2: W - P, y2: y(1), stroke: '#dde2e8' }));
  if (pts.length > 1)
    svg.append(sv('polyline', { points: pts.map((p) => `${x(p.i)},${y(p.accuracy)}`).join(' '), fill: 'none', stroke: 'var(--accent)' }));
  for (const p of pts)
    svg.append(sv('circle', { cx: x(p.i), cy: y(p.accuracy), r: 3, fill: 'var(--accent)', 'data-count': p.count },
      sv('title', { text: `from ${new Date(p.from_ms).toLocaleString()}: ${p.count} labelled, accuracy ${p3(p.accuracy)}` })));
  svg.append(sv('text', { class: 'axis', x: P, y: H - 6 }, 'window start'),
             sv('text', { class: 'axis', x: W - P, y: H - 6, 'text-anchor': 'end' }, 'now'));
  return svg;
}

function renderQuality() {
  const box = $('#quality'), q = S.quality;
  if (!q) { box.replaceChildren(el('p', { class: 'muted', text: S.qualityError || 'no quality report yet' })); return; }
  const groups = [...q.models.map((g) => ({ ...g, name: `${g.model} · ${g.question}`, kind: g.type })),
                  ...q.pipelines.map((p) => ({ ...p.decide, name: `pipelines/${p.pipeline} · decide`, kind: 'pipeline', pl: p }))];
  if (!groups.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'no labelled request in this window: send outcomes to POST /v1/feedback' }));
    return;
  }
  S.qualityPick = Math.min(S.qualityPick, groups.length - 1);
  const rows = groups.map((g, i) => el('tr', { 'data-group': g.name, class: i === S.qualityPick ? 'picked' : null },
    el('td', { text: g.name }), el('td', { text: g.kind }), el('td', { class: 'num', text: String(g.count) }),
    el('td', { class: 'num', 'data-metric': 'accuracy', text: num(g.accuracy) }),
    el('td', { class: 'num', 'data-metric': 'nll', text: num(g.nll) }),
    el('td', { class: 'num', 'data-metric': 'ece', text: num(g.ece) }),
    el('td', { text: g.pl ? `precision ${num(g.pl.precision)} (${g.pl.accepted_right}/${g.pl.accepted}), ` +
                            `${g.pl.rejected_would_be_right} of ${g.pl.rejected} rejected would have been right, ` +
                            `${g.pl.escalated} escalated` : '' })));
  rows.forEach((r, i) => r.addEventListener('click', () => { S.qualityPick = i; renderQuality(); }));
  const table = el('table', { id: 'quality-table' },
    el('thead', {}, el('tr', {}, ['group', 'type', 'labelled', 'accuracy', 'NLL', 'ECE', 'verdicts'].map((h) => el('th', { text: h })))),
    el('tbody', {}, rows));
  const pick = groups[S.qualityPick];
  box.replaceChildren(table, el('div', { class: 'quality-charts' },
    el('figure', {}, reliabilitySvg(pick.reliability), el('figcaption', { text: `reliability: ${pick.name}` })),
    el('figure', {}, overTimeSvg(pick.over_time), el('figcaption', { text: `accuracy over time: ${pick.name}` }))));
}

// ---- start -----------------------------------------------------------------------------------
async function start() {
  setMode('connecting');
  await refreshStatus();
  if (S.needKey) return;
  loadTesterItems().catch((e) => { if (!(e instanceof AuthError)) console.warn('tandem: tester', e); });
  refreshQuality();
  setInterval(refreshQuality, 15000);
  eventsLoop();
}
function init() {
  $('#key-form').addEventListener('submit', onKeySubmit);
  $('#tester-model').addEventListener('change', onTesterSelect);
  $('#tester-send').addEventListener('click', onTesterSend);
  $('#quality-window').addEventListener('change', refreshQuality);
  setInterval(() => {                        // once a second: the timeline, countdowns, ages
    renderTimeline();
    if (S.status) { renderModels(); renderQueue(); }
    if (S.mode === 'events' && Date.now() - S.lastByte > 45000 && S.abort) S.abort.abort(); // 3 heartbeats missed
  }, 1000);
  setInterval(() => { if (S.mode === 'events') refreshStatus(); }, 10000);
  window.addEventListener('resize', () => { renderTimeline(); renderMemory(); });
  renderTimeline();
  start();
}
document.addEventListener('DOMContentLoaded', init);
