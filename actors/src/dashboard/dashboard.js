'use strict';
// gangway's dashboard: reads the daemon's API (the same one every client reads) and refreshes when the
// event stream says something moved, at most every REFRESH_MS, and every IDLE_MS regardless (for
// progress). The GPU grid is built once and then only recoloured, so that thousands of GPUs update
// without rebuilding the page.

const REFRESH_MS = 300;
const IDLE_MS = 5000;
const HISTORY_MS = 5000;
const ROWS = 100;
const QUEUE_ROWS = 200;
const ORDER = { policy: "in the policy's order", arrival: 'oldest first (the policy keeps no queue order)' };
const ACTIVE = 'pending,placing,starting,running,checkpointing,preempted,resizing,migrating';
const CHANGE_HEADERS = { 'content-type': 'application/json', 'x-gangway-csrf': '1' };
const SVG = 'http://www.w3.org/2000/svg';

const state = {
  nodes: [], jobs: [], byId: new Map(), stats: null, history: [], queue: { by: 'arrival', jobs: [] },
  gpuHistory: {},
  cells: [], gpuType: [], reasonBoxes: new Map(), selected: new Set(), page: 0, filter: '',
  dirty: true, inFlight: false, lastRefresh: 0, lastHistory: 0, updates: 0,
};

const $ = (id) => document.getElementById(id);

function colour(job) {
  return `hsl(${(job * 137.508) % 360}, 62%, 52%)`;
}

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  for (const child of children) node.append(child);
  return node;
}

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function problem(text) {
  const p = $('problem');
  p.hidden = !text;
  p.textContent = text || '';
}

async function get(path) {
  const answer = await fetch(path, { cache: 'no-store' });
  if (answer.status === 401) {
    location.replace('/');
    throw new Error('logged out');
  }
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    throw new Error(`${path}: ${body.error || answer.status}`);
  }
  return answer.json();
}

// Every active job, following the pages (`Link: <...>; rel="next"`).
async function activeJobs() {
  let path = `/jobs?phase=${ACTIVE}&limit=10000`;
  const jobs = [];
  while (path) {
    const answer = await fetch(path, { cache: 'no-store' });
    if (!answer.ok) throw new Error(`${path}: ${answer.status}`);
    jobs.push(...(await answer.json()));
    const next = /<([^>]+)>;\s*rel="next"/.exec(answer.headers.get('link') || '');
    path = next ? next[1] : null;
  }
  return jobs;
}

async function change(method, path, body) {
  const answer = await fetch(path, {
    method, headers: CHANGE_HEADERS, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!answer.ok) {
    const refused = await answer.json().catch(() => ({}));
    problem(`${method} ${path}: ${refused.error || answer.status}`);
    return false;
  }
  problem('');
  state.dirty = true;
  return true;
}

async function refresh() {
  state.inFlight = true;
  state.dirty = false;
  try {
    const [nodes, stats, queue, jobs] = await Promise.all([get('/nodes'), get('/stats'), get('/queue'), activeJobs()]);
    state.nodes = nodes;
    state.stats = stats;
    state.queue = queue;
    state.jobs = jobs;
    state.byId = new Map(jobs.map((j) => [j.id, j]));
    // Only the shown rows' GPU histories: a list of every job's would be several times larger.
    const shown = page(filteredJobs()).shown.map((j) => j.id);
    state.gpuHistory = shown.length ? await get(`/gpu-history?jobs=${shown.join(',')}`) : {};
    if (Date.now() - state.lastHistory >= HISTORY_MS) {
      state.lastHistory = Date.now();
      state.history = await get('/history');
      drawHistory();
    }
    render();
    problem('');
  } catch (e) {
    if (e.message !== 'logged out') problem(`The daemon did not answer: ${e.message}`);
  } finally {
    state.inFlight = false;
    state.lastRefresh = Date.now();
  }
}

function tick() {
  const since = Date.now() - state.lastRefresh;
  if (!state.inFlight && ((state.dirty && since >= REFRESH_MS) || since >= IDLE_MS)) refresh();
}

function render() {
  const s = state.stats;
  $('busy').textContent = `${s.busy_gpus} / ${s.gpus}`;
  $('running').textContent = s.running_jobs;
  $('queued').textContent = s.queued_jobs;
  $('latency').textContent = `${(s.round_latency_p50 * 1e3).toFixed(1)} / ${(s.round_latency_p99 * 1e3).toFixed(1)} ms`;
  $('rounds').textContent = s.round_failures ? `${s.rounds} (${s.round_failures} failed)` : s.rounds;
  renderServers();
  renderQueue();
  renderJobs();
  state.updates += 1;
  document.body.dataset.updates = state.updates;
  if (state.updates === 1) {
    performance.mark('gangway-first-paint');
    document.body.dataset.ready = '1';
  }
}

// The grid: built when the servers change, recoloured otherwise.
function renderServers() {
  const total = state.nodes.reduce((n, node) => n + node.gpus.length, 0);
  if (state.cells.length !== total) buildServers();
  const holder = new Map();
  for (const job of state.jobs) for (const g of job.placement) holder.set(g, job);
  const reasons = new Map();
  for (const node of state.nodes) for (const [g, why] of node.out_of_service || []) reasons.set(g, why);
  const unwatched = new Map();
  for (const node of state.nodes) for (const [g, why] of node.unwatched || []) unwatched.set(g, why);
  for (const [g, cell] of state.cells.entries()) {
    if (!cell) continue;
    const job = holder.get(g);
    const why = reasons.get(g);
    const blind = unwatched.get(g);
    const key = `${job ? job.id : ''}|${why || ''}|${blind || ''}`;
    if (cell.dataset.key === key) continue;
    cell.dataset.key = key;
    cell.classList.toggle('out', !!why);
    cell.style.background = job && !why ? colour(job.id) : '';
    if (job) cell.dataset.job = job.id; else delete cell.dataset.job;
    if (why) cell.dataset.out = why; else delete cell.dataset.out;
    cell.title = `GPU ${g} (${state.gpuType[g]})` + (job ? `: job ${job.id}, ${job.tenant}, ${job.job_type}` : ': free') + (why ? ` — out of service: ${why}` : '') + (blind ? ` — health not checked: ${blind}` : '');
  }
  for (const node of state.nodes) {
    const list = [...(node.out_of_service || []), ...(node.unwatched || [])];
    const box = state.reasonBoxes.get(node.name);
    const text = list.map(([g, why]) => `GPU ${g}: ${why}`).join('; ');
    if (box && box.textContent !== text) box.textContent = text;
  }
  const out = state.nodes.reduce((n, node) => n + (node.out_of_service || []).length, 0);
  $('cluster-note').textContent = `${state.nodes.length} servers, ${total} GPUs${out ? `, ${out} out of service` : ''}${unwatched.size ? `, ${unwatched.size} unwatched` : ''}`;
}

function buildServers() {
  const servers = $('servers');
  servers.replaceChildren();
  state.cells = [];
  state.reasonBoxes = new Map();
  for (const node of state.nodes) {
    const gpus = el('div', { className: 'gpus' });
    for (const g of node.gpus) {
      const cell = el('div', { className: 'gpu' });
      cell.dataset.gpu = g;
      state.cells[g] = cell;
      state.gpuType[g] = node.gpu_type;
      gpus.append(cell);
    }
    const reasons = el('div', { className: 'reasons' });
    state.reasonBoxes.set(node.name, reasons);
    const box = el('div', { className: 'server', title: `${node.name}: ${node.gpus.length} × ${node.gpu_type}` }, [
      el('div', { className: 'name', textContent: `${node.name} · ${node.gpu_type}` }), gpus, reasons,
    ]);
    box.dataset.server = node.name;
    servers.append(box);
  }
}

function select(event) {
  const cell = event.target.closest('.gpu');
  if (!cell) return;
  const g = Number(cell.dataset.gpu);
  if (state.selected.has(g)) state.selected.delete(g); else state.selected.add(g);
  cell.classList.toggle('selected', state.selected.has(g));
  const n = state.selected.size;
  $('selection').textContent = n ? `${n} GPU${n > 1 ? 's' : ''} selected` : 'click GPUs to select them';
  for (const id of ['cordon', 'uncordon', 'clear']) $(id).disabled = n === 0;
}

function clearSelection() {
  for (const g of state.selected) state.cells[g]?.classList.remove('selected');
  state.selected.clear();
  $('selection').textContent = 'click GPUs to select them';
  for (const id of ['cordon', 'uncordon', 'clear']) $(id).disabled = true;
}

async function cordon(cordoned) {
  const gpus = [...state.selected].sort((a, b) => a - b);
  if (await change('POST', cordoned ? '/gpus/cordon' : '/gpus/uncordon', { gpus })) clearSelection();
}

async function cancel(job) {
  if (confirm(`Cancel job ${job}?`)) await change('DELETE', `/jobs/${job}`);
}

function hours(seconds) {
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(0)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function cancelButton(id) {
  const button = el('button', { type: 'button', textContent: 'cancel', title: `cancel job ${id}` });
  button.dataset.cancel = id;
  return button;
}

function jobCell(job) {
  return el('td', {}, [el('span', { className: 'swatch', style: `background:${colour(job.id)}` }), `${job.id}`]);
}

function renderQueue() {
  const now = state.history.length ? state.history[state.history.length - 1].at : null;
  const waiting = state.queue.jobs.map((id) => state.byId.get(id)).filter((j) => j !== undefined);
  const rows = waiting.slice(0, QUEUE_ROWS).map((job) => {
    const row = el('tr', {}, [
      jobCell(job),
      el('td', { textContent: job.tenant }),
      el('td', { textContent: job.job_type }),
      el('td', { textContent: job.gpus }),
      el('td', { textContent: now === null ? '' : hours(Math.max(0, now - job.submitted)) }),
      el('td', { className: 'why', textContent: job.waiting || (job.phase === 'preempted' ? 'preempted; waiting for GPUs' : 'not looked at yet') }),
      el('td', {}, [cancelButton(job.id)]),
    ]);
    row.dataset.job = job.id;
    return row;
  });
  $('queue').tBodies[0].replaceChildren(...rows);
  const shown = Math.min(waiting.length, QUEUE_ROWS);
  $('queue-note').textContent = `${state.stats.queued_jobs} jobs, ${ORDER[state.queue.by] || ''}${shown < state.stats.queued_jobs ? ` (the first ${shown} shown)` : ''}`;
}

function spark(history, asked) {
  const svg = svgEl('svg', { class: 'spark', viewBox: '0 0 120 22' });
  if (!history || history.length === 0) return svg;
  const t0 = history[0].at;
  const t1 = Math.max(state.history.length ? state.history[state.history.length - 1].at : t0, history[history.length - 1].at + 1);
  const top = Math.max(asked, ...history.map((p) => p.gpus), 1);
  const x = (t) => (((t - t0) / (t1 - t0)) * 118 + 1).toFixed(1);
  const y = (g) => (21 - (g / top) * 19).toFixed(1);
  const points = [];
  history.forEach((p, k) => {
    if (k > 0) points.push(`${x(p.at)},${y(history[k - 1].gpus)}`);
    points.push(`${x(p.at)},${y(p.gpus)}`);
  });
  points.push(`${x(t1)},${y(history[history.length - 1].gpus)}`);
  svg.append(svgEl('polyline', { points: points.join(' '), stroke: '#2563eb' }));
  const title = svgEl('title');
  title.textContent = history.map((p) => `${p.gpus} GPUs from ${hours(p.at)}`).join('\n');
  svg.append(title);
  return svg;
}

// The jobs the filter keeps, and the page of them shown.
function filteredJobs() {
  const filter = state.filter.trim().toLowerCase();
  return filter
    ? state.jobs.filter((j) => `${j.id} ${j.tenant} ${j.job_type} ${j.phase}`.toLowerCase().includes(filter))
    : state.jobs;
}

function page(jobs) {
  const pages = Math.max(1, Math.ceil(jobs.length / ROWS));
  state.page = Math.min(state.page, pages - 1);
  return { shown: jobs.slice(state.page * ROWS, (state.page + 1) * ROWS), pages };
}

function renderJobs() {
  const jobs = filteredJobs();
  const { shown, pages } = page(jobs);
  const rows = shown.map((job) => {
    const types = [...new Set(job.placement.map((g) => state.gpuType[g]))].join(', ');
    const restarts = job.preemptions + job.migrations;
    const row = el('tr', {}, [
      jobCell(job),
      el('td', { textContent: job.phase }),
      el('td', { textContent: job.tenant }),
      el('td', { textContent: job.job_type }),
      el('td', { textContent: `${job.placement.length} / ${job.gpus}` }),
      el('td', { textContent: types || '–' }),
      el('td', {}, [el('progress', { max: 1, value: job.progress, title: `${(job.progress * 100).toFixed(1)} %` })]),
      el('td', { textContent: restarts, title: `${job.preemptions} preemptions, ${job.migrations} moves` }),
      el('td', { textContent: job.resizes, title: job.last_resize ? `last: ${job.last_resize.from} → ${job.last_resize.to} GPUs, ${job.last_resize.why}` : '' }),
      el('td', {}, [spark(state.gpuHistory[job.id], job.gpus)]),
      el('td', {}, [cancelButton(job.id)]),
    ]);
    row.dataset.job = job.id;
    return row;
  });
  $('jobs').tBodies[0].replaceChildren(...rows);
  $('page').textContent = ` ${state.page + 1} / ${pages} `;
  $('jobs-note').textContent = `${jobs.length} active${state.filter.trim() ? ' (filtered)' : ''}`;
}

// Lines over the samples' time: one per series, on a shared axis from 0 to the largest value.
function lines(svg, samples, series) {
  svg.replaceChildren();
  const w = 400, h = 140, left = 30, bottom = 16;
  if (samples.length < 2) {
    const note = svgEl('text', { x: left, y: h / 2 });
    note.textContent = 'collecting samples (one every 5 s)…';
    svg.append(note);
    return;
  }
  const t0 = samples[0].at, t1 = samples[samples.length - 1].at;
  const top = Math.max(1e-9, ...series.flatMap((s) => samples.map(s.value)));
  const x = (t) => left + ((t - t0) / Math.max(t1 - t0, 1e-9)) * (w - left - 4);
  const y = (v) => h - bottom - (v / top) * (h - bottom - 6);
  svg.append(svgEl('line', { class: 'axis', x1: left, y1: h - bottom, x2: w, y2: h - bottom }));
  const label = (text, xAt, yAt, anchor) => {
    const t = svgEl('text', { x: xAt, y: yAt, 'text-anchor': anchor });
    t.textContent = text;
    svg.append(t);
  };
  label(top < 10 ? top.toFixed(1) : top.toFixed(0), left - 4, 12, 'end');
  label('0', left - 4, h - bottom, 'end');
  label(`${hours(t1 - t0)} ago`, left, h - 4, 'start');
  label('now', w - 4, h - 4, 'end');
  for (const s of series) {
    const points = samples.map((p) => `${x(p.at).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join(' ');
    svg.append(svgEl('polyline', { points, stroke: s.colour }));
  }
}

function drawHistory() {
  const samples = state.history;
  const tenants = [...new Set(samples.flatMap((p) => Object.keys(p.tenants)))].sort();
  const palette = (k) => `hsl(${(k * 67) % 360}, 60%, 45%)`;
  lines($('shares'), samples, tenants.map((t, k) => ({ value: (p) => p.tenants[t] || 0, colour: palette(k) })));
  $('shares-legend').replaceChildren(...tenants.map((t, k) =>
    el('span', {}, [el('i', { style: `background:${palette(k)}` }), t])));
  lines($('latency-chart'), samples, [
    { value: (p) => p.round_latency_p50 * 1e3, colour: '#16a34a' },
    { value: (p) => p.round_latency_p99 * 1e3, colour: '#dc2626' },
  ]);
}

function listen() {
  const live = $('live');
  const events = new EventSource('/events');
  events.onopen = () => { live.textContent = 'live'; live.className = 'live on'; };
  events.onmessage = () => { state.dirty = true; };
  events.onerror = () => { live.textContent = 'reconnecting'; live.className = 'live off'; };
}

async function start() {
  $('servers').addEventListener('click', select);
  $('cordon').addEventListener('click', () => cordon(true));
  $('uncordon').addEventListener('click', () => cordon(false));
  $('clear').addEventListener('click', clearSelection);
  // A new page or filter shows other rows: drawn now, their GPU histories at the next refresh.
  const turn = () => { renderJobs(); state.dirty = true; };
  $('filter').addEventListener('input', (e) => { state.filter = e.target.value; state.page = 0; turn(); });
  $('prev').addEventListener('click', () => { state.page = Math.max(0, state.page - 1); turn(); });
  $('next').addEventListener('click', () => { state.page += 1; turn(); });
  document.addEventListener('click', (e) => {
    const id = e.target.dataset && e.target.dataset.cancel;
    if (id !== undefined) cancel(id);
  });
  $('logout').addEventListener('click', async () => {
    await fetch('/logout', { method: 'POST', headers: CHANGE_HEADERS });
    location.replace('/');
  });
  try {
    const about = await get('/about');
    $('policy').textContent = about.policy || 'policy unknown';
    document.title = `gangway · ${about.policy || ''}`;
  } catch (e) { /* the refresh says what is wrong */ }
  listen();
  await refresh();
  setInterval(tick, 100);
}

start();
