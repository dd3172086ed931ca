// FlexiQ dashboard (docs/dashboard.md). Plain JavaScript, no build step:
// it reads and writes through the admin door's API only, with the token
// pasted at sign-in (kept in sessionStorage: this tab, this session).
// Every value from the API is written as text (textContent), never as
// markup, so a payload or a namespace name cannot inject anything.
'use strict';

const TOKEN_KEY = 'flexiq.token';
const POLL_MS = 2000; // the live views refresh this often
const ROOT_POLL_MS = 5000; // the ranking counts every namespace's jobs: less often

// The limits of the quota document, in its field order, with the usage
// each is measured against (GET /v1/usage), and what a person calls it.
const LIMITS = [
  {field: 'max_pending', usage: 'pending', label: 'pending jobs'},
  {field: 'enqueue_rate', usage: null, label: 'enqueue rate'},
  {field: 'max_running', usage: 'running', label: 'running jobs'},
  {field: 'max_archived_rows', usage: 'archived', label: 'completed jobs kept'},
  {field: 'max_dead_rows', usage: 'dead', label: 'dead letters kept'},
];
const QUOTA_FIELDS = ['max_pending', 'on_excess', 'enqueue_rate', 'max_running', 'max_archived_rows', 'max_dead_rows'];
const SERIES = [
  {key: 'pending', label: 'pending', help: 'jobs waiting, at each sample'},
  {key: 'running', label: 'running', help: 'jobs running, at each sample'},
  {key: 'enqueued', label: 'enqueued', help: 'jobs enqueued per interval'},
  {key: 'refused', label: 'refused', help: 'calls refused or shed per interval'},
  {key: 'shed', label: 'shed', help: 'jobs shed per interval'},
  {key: 'completed', label: 'completed', help: 'jobs acked per interval'},
  {key: 'failed', label: 'failed', help: 'jobs that failed for good (dead) per interval'},
  {key: 'busy', label: 'actor busy', percent: true, help: '% of each interval; near 100, calls wait for it'},
];

const state = {
  token: '',
  root: false,
  ns: '',
  view: 'namespace',
  quotaRev: null, // the revision the editor shows
  ownRev: null, // the revision of this tab's own last write
  timer: null,
  lastRoot: 0,
  selected: new Set(),
  jobs: [],
  revokeArmed: '',
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function fmtNum(n) {
  if (n === null || n === undefined) return '';
  return Number(n).toLocaleString('en-US', {maximumFractionDigits: 1});
}

function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  const today = new Date();
  const time = d.toLocaleTimeString('en-GB');
  return d.toDateString() === today.toDateString() ? time : d.toISOString().slice(0, 10) + ' ' + time;
}

// api calls the admin door with the token; a refusal throws an Error
// carrying the API's message, code and status.
async function api(method, path, body, token) {
  const headers = {Authorization: 'Bearer ' + (token || state.token)};
  const init = {method, headers, cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    const err = new Error('cannot reach the node: ' + e.message);
    err.status = 0;
    throw err;
  }
  let data = null;
  try {
    data = await resp.json();
  } catch (e) {
    data = null;
  }
  if (!resp.ok) {
    const apiErr = data && data.error;
    const err = new Error(apiErr ? apiErr.message : resp.status + ' ' + resp.statusText);
    err.status = resp.status;
    err.code = apiErr ? apiErr.code : '';
    err.reason = apiErr ? apiErr.reason : '';
    throw err;
  }
  return data;
}

// ---------------------------------------------------------------------------
// Sign-in

async function signIn(token, quiet) {
  const msg = $('signin-msg');
  msg.textContent = '';
  msg.className = 'msg';
  if (!token) {
    msg.textContent = 'Paste a token first.';
    msg.className = 'msg error';
    return;
  }
  let usage;
  try {
    usage = await api('GET', '/v1/usage', undefined, token);
  } catch (e) {
    if (!quiet || e.status !== 401) {
      msg.textContent = e.message;
      msg.className = 'msg error';
    }
    sessionStorage.removeItem(TOKEN_KEY);
    return;
  }
  state.token = token;
  state.ns = usage.namespace;
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    await api('GET', '/v1/cluster');
    state.root = true;
  } catch (e) {
    state.root = false;
  }
  $('token').value = '';
  $('signin').hidden = true;
  $('nav').hidden = false;
  $('signout').hidden = false;
  $('nav-root').hidden = !state.root;
  $('who').textContent = (state.root ? 'root · ' : 'admin · ') + 'namespace ' + state.ns;
  document.body.dataset.signedIn = 'true';
  route();
}

function signOut(reason) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = '';
  state.root = false;
  if (state.timer) clearTimeout(state.timer);
  state.timer = null;
  for (const v of document.querySelectorAll('.view')) v.hidden = true;
  clear($('banners'));
  $('nav').hidden = true;
  $('signout').hidden = true;
  $('who').textContent = '';
  $('live').textContent = '';
  $('signin').hidden = false;
  delete document.body.dataset.signedIn;
  const msg = $('signin-msg');
  msg.textContent = reason || '';
  msg.className = reason ? 'msg error' : 'msg';
}

// ---------------------------------------------------------------------------
// Views and polling

function route() {
  if (!state.token) return;
  let view = location.hash.replace(/^#/, '') || 'namespace';
  if (!['namespace', 'quota', 'jobs', 'root'].includes(view) || (view === 'root' && !state.root)) view = 'namespace';
  state.view = view;
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== 'view-' + view;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === view);
  state.lastRoot = 0;
  refresh();
}

async function refresh() {
  if (state.timer) clearTimeout(state.timer);
  state.timer = null;
  if (!state.token) return;
  const work = [loadAlarms()];
  if (state.view === 'namespace') work.push(loadNamespace());
  if (state.view === 'quota') work.push(loadQuota());
  if (state.view === 'root' && Date.now() - state.lastRoot >= ROOT_POLL_MS - 100) {
    state.lastRoot = Date.now();
    work.push(loadRoot());
  }
  const results = await Promise.allSettled(work);
  for (const r of results) {
    if (r.status === 'rejected' && r.reason && r.reason.status === 401) {
      signOut('The token is no longer valid (revoked?): ' + r.reason.message);
      return;
    }
  }
  const failed = results.find((r) => r.status === 'rejected');
  const live = $('live');
  if (failed) {
    live.textContent = 'refresh failed: ' + failed.reason.message;
    live.className = 'stale';
  } else {
    live.textContent = 'live · ' + new Date().toLocaleTimeString('en-GB');
    live.className = '';
  }
  if (state.token) state.timer = setTimeout(refresh, POLL_MS);
}

// ---------------------------------------------------------------------------
// Banners: alarms and a stopped namespace

async function loadAlarms() {
  const data = await api('GET', '/v1/alarms');
  const raised = data.alarms.filter((a) => a.state === 'raised');
  const box = $('banners');
  for (const b of box.querySelectorAll('.alarm')) b.remove();
  for (const a of raised.slice(0, 5)) {
    const what = a.limit === 'enqueue_rate'
      ? fmtNum(a.usage) + ' of ' + a.rate
      : fmtNum(a.usage) + ' of ' + fmtNum(a.max);
    box.append(el('div', {'class': 'banner alarm', 'data-namespace': a.namespace, 'data-limit': a.limit},
      el('b', {text: 'Alarm'}),
      ` namespace '${a.namespace}' reached ${fmtNum(a.percent)} % of ${a.limit} (${what}) at ${fmtTime(a.raised_at)}; it clears below 70 %.`));
  }
  if (raised.length > 5) {
    box.append(el('div', {'class': 'banner alarm more', text: `… and ${raised.length - 5} more alarms` + (state.root ? ' (see Root)' : '')}));
  }
}

function setStopped(err) {
  const box = $('banners');
  for (const b of box.querySelectorAll('.stopped')) b.remove();
  if (err) {
    box.prepend(el('div', {'class': 'banner stopped'}, el('b', {text: 'Stopped'}),
      ' ' + err.message + ' — replace the quota (PUT) or clear it to resume.'));
  }
}

// ---------------------------------------------------------------------------
// Namespace view

function barClass(pct) {
  if (pct >= 100) return 'full';
  if (pct >= 80) return 'warn';
  return 'ok';
}

function bar(pct) {
  const outer = el('div', {'class': 'bar ' + barClass(pct)});
  const inner = el('div', {'class': 'fill'});
  inner.style.width = Math.min(100, Math.max(0, pct)) + '%';
  outer.append(inner);
  return outer;
}

function percentOf(usage, max) {
  if (max <= 0) return usage > 0 ? 100 : 0;
  return Math.round((usage * 1000) / max) / 10;
}

async function loadNamespace() {
  const [usage, history, queues, tasks, audit] = await Promise.all([
    api('GET', '/v1/usage'),
    api('GET', '/v1/usage/history'),
    api('GET', '/v1/queues'),
    api('GET', '/v1/tasks'),
    api('GET', '/v1/audit?limit=20'),
  ]);
  setStopped(usage.error);
  $('ns-rev').textContent = `namespace ${usage.namespace} · quota revision ${usage.revision}`;
  const q = usage.error ? {} : (usage.quota || {});
  const body = $('limits').tBodies[0];
  clear(body);
  for (const l of LIMITS) {
    const row = el('tr', {'data-field': l.field});
    let used, max, text;
    if (l.field === 'enqueue_rate') {
      const r = history.enqueue_rate;
      used = r ? r.usage : 0;
      max = r ? r.max : null;
      text = q.enqueue_rate ? `${fmtNum(used)} per ${q.enqueue_rate.split('/')[1]} of ${q.enqueue_rate}` : 'unlimited';
    } else {
      used = usage.usage[l.usage];
      max = q[l.field];
      text = max === undefined || max === null ? `${fmtNum(used)} · unlimited` : `${fmtNum(used)} of ${fmtNum(max)}`;
    }
    const limited = q[l.field] !== undefined && q[l.field] !== null;
    const pct = limited ? (l.field === 'enqueue_rate' ? (history.enqueue_rate ? history.enqueue_rate.percent : 0) : percentOf(used, max)) : null;
    row.dataset.usage = String(used);
    if (pct !== null) row.dataset.percent = String(pct);
    row.append(el('td', {}, el('b', {text: l.field}), el('br'), el('small', {text: l.label})),
      el('td', {'class': 'usage', text}),
      el('td', {'class': 'barcol'}, pct === null ? el('span', {'class': 'muted', text: 'no limit'}) : bar(pct)),
      el('td', {'class': 'pct', text: pct === null ? '' : fmtNum(pct) + ' %'}));
    body.append(row);
  }
  $('on-excess').textContent = 'Over a limit: ' + (q.on_excess === 'drop'
    ? 'drop — the call succeeds and its jobs are shed to the dead letters.'
    : 'reject — the call fails and nothing is written.');
  drawCharts(history);
  renderQueues(queues.queues, tasks.tasks);
  renderAudit(audit.entries);
}

function drawCharts(h) {
  const box = $('charts');
  const note = $('history-note');
  const secs = Math.round(h.interval_ms / 1000);
  const span = chartSpan(h) / 1000;
  const last = span >= 3600 ? 'hour' : span >= 120 ? Math.round(span / 60) + ' min' : Math.round(span) + ' s';
  note.textContent = (last === 'hour' ? '' : `${last} of samples so far, `) + `one sample every ${secs} s, kept by node ${h.node || '?'}`;
  if (h.owner && h.node && h.owner !== h.node) {
    note.textContent += ` — the namespace is owned by node ${h.owner}, which keeps its history; open that node's dashboard for it`;
  }
  if (!box.children.length) {
    for (const s of SERIES) {
      const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      svg.setAttribute('viewBox', '0 0 300 60');
      svg.setAttribute('preserveAspectRatio', 'none');
      svg.id = 'chart-' + s.key;
      const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
      line.setAttribute('class', 'line');
      svg.append(line);
      box.append(el('figure', {'class': 'chart', 'data-series': s.key},
        el('figcaption', {}, el('b', {text: s.label}), ' ', el('span', {'class': 'now'}), el('br'), el('small', {text: s.help})),
        svg));
    }
  }
  for (const s of SERIES) {
    const fig = box.querySelector(`figure[data-series="${s.key}"]`);
    const svg = fig.querySelector('svg');
    const values = h[s.key] || [];
    const n = values.length;
    const max = s.percent ? 100 : Math.max(1, ...values);
    const span = chartSpan(h);
    const end = n ? h.at[n - 1] : Date.now();
    const pts = values.map((v, i) => {
      const x = 300 - ((end - h.at[i]) / span) * 300;
      const y = 58 - (v / max) * 54;
      return x.toFixed(1) + ',' + y.toFixed(1);
    });
    svg.querySelector('polyline').setAttribute('points', pts.join(' '));
    const last = n ? values[n - 1] : 0;
    const sum = values.reduce((a, b) => a + b, 0);
    fig.dataset.points = String(n);
    fig.dataset.last = String(last);
    fig.dataset.max = String(n ? Math.max(...values) : 0);
    fig.dataset.sum = String(sum);
    const now = fig.querySelector('.now');
    if (s.percent) {
      now.textContent = `last ${fmtNum(last)} % · peak ${fmtNum(fig.dataset.max)} %`;
    } else if (s.key === 'pending' || s.key === 'running') {
      now.textContent = `now ${fmtNum(last)} · peak ${fmtNum(fig.dataset.max)}`;
    } else {
      now.textContent = `last hour ${fmtNum(sum)} · peak ${fmtNum(fig.dataset.max)}/sample`;
    }
  }
}

// chartSpan is the time the charts cover: the last hour, or less while
// there is less history (at least ten samples wide), so that a node
// started a minute ago does not draw a sliver at the right edge.
function chartSpan(h) {
  const n = h.at.length;
  const data = n > 1 ? h.at[n - 1] - h.at[0] : 0;
  return Math.min(3600000, Math.max(data, 10 * h.interval_ms));
}

function renderQueues(queues, tasks) {
  const body = $('queues').tBodies[0];
  clear(body);
  const rows = [];
  for (const [name, qs] of Object.entries(queues || {})) rows.push(['queue ' + name, qs]);
  for (const [name, ts] of Object.entries(tasks || {})) rows.push(['task ' + name, ts]);
  if (!rows.length) {
    body.append(el('tr', {}, el('td', {colSpan: 4, 'class': 'muted', text: 'no queue or task caps set (fq queue set, fq task set)'})));
    return;
  }
  for (const [name, s] of rows) {
    const retry = s.dead_retry_after ? `after ${s.dead_retry_after}` + (s.dead_retry_max !== undefined ? `, at most ${s.dead_retry_max}` : '') : '';
    body.append(el('tr', {},
      el('td', {text: name}),
      el('td', {text: s.max_concurrent !== undefined ? fmtNum(s.max_concurrent) : 'no cap'}),
      el('td', {text: s.max_attempts !== undefined ? fmtNum(s.max_attempts) : ''}),
      el('td', {text: retry})));
  }
}

function compact(v) {
  if (v === null || v === undefined) return '—';
  const s = JSON.stringify(v);
  return s === '{}' ? '{} (unlimited)' : s;
}

function renderAudit(entries) {
  const body = $('audit').tBodies[0];
  clear(body);
  if (!entries.length) {
    body.append(el('tr', {}, el('td', {colSpan: 4, 'class': 'muted', text: 'no quota change yet'})));
    return;
  }
  for (const e of entries) {
    body.append(el('tr', {},
      el('td', {text: fmtTime(e.at)}),
      el('td', {text: e.actor}),
      el('td', {text: e.action}),
      el('td', {'class': 'mono', text: compact(e.after)})));
  }
}

// ---------------------------------------------------------------------------
// Quota editor

function buildQuotaForm() {
  const body = $('quota-form').tBodies[0];
  if (body.children.length) return;
  for (const f of QUOTA_FIELDS) {
    let input;
    if (f === 'on_excess') {
      input = el('select', {'class': 'value'}, el('option', {value: 'reject', text: 'reject'}), el('option', {value: 'drop', text: 'drop'}));
    } else {
      input = el('input', {'class': 'value', placeholder: f === 'enqueue_rate' ? '500/s' : 'integer ≥ 0', spellcheck: false});
    }
    input.setAttribute('aria-label', f);
    const set = el('button', {type: 'button', 'class': 'set', text: 'Set'});
    const unset = el('button', {type: 'button', 'class': 'unset', text: 'Unset'});
    set.addEventListener('click', () => patchField(f, input));
    unset.addEventListener('click', () => writeQuota('PATCH', `{${JSON.stringify(f)}:null}`, `${f} unset`));
    input.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') {
        ev.preventDefault();
        patchField(f, input);
      }
    });
    body.append(el('tr', {'data-field': f}, el('td', {}, el('b', {text: f})), el('td', {'class': 'current'}), el('td', {}, input), el('td', {}, set, ' ', unset)));
  }
}

// patchField sends what was typed as it was typed: a number stays a JSON
// number (so -1, 1.5 or 1e3 get the API's own refusal), anything else
// becomes a JSON string (the API then says what it wants).
function patchField(f, input) {
  const raw = input.value.trim();
  let value;
  if (f === 'on_excess' || f === 'enqueue_rate') value = JSON.stringify(raw);
  else if (/^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(raw)) value = raw;
  else value = JSON.stringify(raw);
  writeQuota('PATCH', `{${JSON.stringify(f)}:${value}}`, `${f} set`, input);
}

async function writeQuota(method, body, what, input) {
  const msg = $('quota-msg');
  msg.className = 'msg';
  msg.textContent = 'saving…';
  try {
    const out = await api(method, '/v1/quota', method === 'DELETE' ? undefined : body);
    state.ownRev = out.revision;
    msg.className = 'msg ok';
    msg.textContent = `${what}: revision ${out.revision}.`;
    if (input && input.tagName === 'INPUT') input.value = '';
    showQuota(out);
  } catch (e) {
    msg.className = 'msg error';
    msg.textContent = e.message;
  }
}

function showQuota(q) {
  const body = $('quota-form').tBodies[0];
  const doc = q.error ? {} : (q.quota || {});
  for (const row of body.rows) {
    const f = row.dataset.field;
    const v = doc[f];
    const cur = row.querySelector('.current');
    cur.textContent = v === undefined || v === null ? (f === 'on_excess' ? 'reject (default)' : 'unlimited') : String(v);
    cur.dataset.value = v === undefined || v === null ? '' : String(v);
  }
  if (state.quotaRev !== null && q.revision !== state.quotaRev && q.revision !== state.ownRev) {
    const note = $('quota-elsewhere');
    note.hidden = false;
    note.textContent = `Changed elsewhere at ${new Date().toLocaleTimeString('en-GB')}: now revision ${q.revision}.`;
  }
  state.quotaRev = q.revision;
  $('quota-rev').textContent = `namespace ${q.namespace} · revision ${q.revision}`;
  $('quota-rev').dataset.revision = String(q.revision);
  setStopped(q.error);
}

async function loadQuota() {
  buildQuotaForm();
  showQuota(await api('GET', '/v1/quota'));
}

// ---------------------------------------------------------------------------
// Jobs and dead letters

async function searchJobs() {
  const msg = $('jobs-msg');
  msg.className = 'msg';
  msg.textContent = 'searching…';
  const id = $('q-id').value.trim();
  try {
    let jobs;
    if (id) {
      jobs = [await api('GET', '/v1/jobs/' + encodeURIComponent(id))];
    } else {
      const p = new URLSearchParams();
      for (const [k, elId] of [['status', 'q-status'], ['queue', 'q-queue'], ['shed', 'q-shed'], ['limit', 'q-limit']]) {
        const v = $(elId).value.trim();
        if (v) p.set(k, v);
      }
      jobs = (await api('GET', '/v1/jobs?' + p.toString())).jobs;
    }
    state.jobs = jobs;
    msg.textContent = jobs.length === 1 ? '1 job' : `${jobs.length} jobs, newest first`;
    renderJobs();
    if (id && jobs.length) showJob(jobs[0].id);
  } catch (e) {
    if (e.status === 401) return signOut('The token is no longer valid: ' + e.message);
    msg.className = 'msg error';
    msg.textContent = e.message;
  }
}

function renderJobs() {
  const body = $('jobs').tBodies[0];
  clear(body);
  const ids = new Set(state.jobs.map((j) => j.id));
  for (const id of [...state.selected]) if (!ids.has(id)) state.selected.delete(id);
  for (const j of state.jobs) {
    const box = el('input', {type: 'checkbox', disabled: j.status !== 'dead', checked: state.selected.has(j.id)});
    box.setAttribute('aria-label', 'select ' + j.id);
    box.addEventListener('click', (ev) => {
      ev.stopPropagation();
      if (box.checked) state.selected.add(j.id);
      else state.selected.delete(j.id);
      updateReplayButton();
    });
    const shed = j.dead_meta && j.dead_meta.shed ? ' (shed)' : '';
    const row = el('tr', {'data-id': j.id, 'data-status': j.status, 'class': 'clickable'},
      el('td', {}, box),
      el('td', {'class': 'mono', text: j.id}),
      el('td', {text: j.queue}),
      el('td', {text: j.task}),
      el('td', {'class': 'status ' + j.status, text: j.status + shed}),
      el('td', {text: `${j.attempt}/${j.max_attempts}`}),
      el('td', {text: fmtTime(j.created_at)}),
      el('td', {'class': 'err', text: j.error || ''}));
    row.addEventListener('click', () => showJob(j.id));
    body.append(row);
  }
  updateReplayButton();
}

function updateReplayButton() {
  const n = state.selected.size;
  const b = $('replay');
  b.disabled = n === 0;
  b.textContent = n ? `Replay ${n} selected dead letter${n === 1 ? '' : 's'}` : 'Replay selected dead letters';
}

function pretty(v) {
  if (v === null || v === undefined) return '—';
  try {
    return JSON.stringify(v, null, 2);
  } catch (e) {
    return String(v);
  }
}

async function showJob(id) {
  const box = $('job-detail');
  box.hidden = false;
  clear(box);
  box.append(el('p', {'class': 'muted', text: 'loading ' + id + '…'}));
  let j;
  try {
    j = await api('GET', '/v1/jobs/' + encodeURIComponent(id));
  } catch (e) {
    clear(box);
    box.append(el('p', {'class': 'msg error', text: e.message}));
    return;
  }
  clear(box);
  box.dataset.id = j.id;
  const dl = el('dl');
  const add = (k, v, cls) => dl.append(el('dt', {text: k}), el('dd', {'class': cls || '', text: v === null || v === undefined || v === '' ? '—' : String(v)}));
  add('id', j.id, 'mono');
  add('status', j.status);
  add('queue / task', `${j.queue} / ${j.task}`);
  add('attempts', `${j.attempt} of ${j.max_attempts}`);
  add('priority', j.priority);
  add('run at', fmtTime(j.run_at));
  add('created', fmtTime(j.created_at));
  add('finished', fmtTime(j.finished_at));
  add('lease until', j.lease_until ? fmtTime(j.lease_until) : '');
  add('unique key', j.unique_key);
  add('error', j.error, 'err');
  add('dead meta', j.dead_meta ? JSON.stringify(j.dead_meta) : '', 'mono');
  box.append(el('h3', {text: 'Job'}), dl,
    el('h3', {text: 'Payload'}), el('pre', {id: 'job-payload', text: pretty(j.payload)}));
  if (j.result !== undefined) box.append(el('h3', {text: 'Result'}), el('pre', {text: pretty(j.result)}));
}

async function replaySelected() {
  const ids = [...state.selected];
  if (!ids.length) return;
  const list = $('replay-results');
  clear(list);
  $('replay').disabled = true;
  try {
    const out = await api('POST', '/v1/dead/replay', {ids});
    for (const r of out.results) {
      const what = r.outcome === 'enqueued' ? 'admitted: pending again'
        : r.outcome === 'shed' ? 'shed: over quota in drop mode, still a dead letter'
        : r.outcome === 'deduplicated' ? 'admitted: a live job already holds its unique key (' + r.id + ')'
        : r.outcome;
      list.append(el('li', {'class': 'outcome ' + r.outcome, 'data-id': r.id, 'data-outcome': r.outcome}, el('span', {'class': 'mono', text: r.id}), ' — ' + what));
    }
  } catch (e) {
    if (e.status === 401) return signOut('The token is no longer valid: ' + e.message);
    // A refusal is the whole call's: none of them was replayed.
    for (const id of ids) {
      list.append(el('li', {'class': 'outcome refused', 'data-id': id, 'data-outcome': 'refused'}, el('span', {'class': 'mono', text: id}), ' — refused: ' + e.message));
    }
  }
  // Start the next selection afresh, whatever came of this one.
  state.selected.clear();
  $('select-all').checked = false;
  await searchJobs();
}

// ---------------------------------------------------------------------------
// Root view: ranking, cluster, tokens

async function loadRoot() {
  const [ranking, cluster, tokens] = await Promise.all([
    api('GET', '/v1/namespaces'),
    api('GET', '/v1/cluster'),
    api('GET', '/v1/tokens'),
  ]);
  renderRanking(ranking);
  renderCluster(cluster);
  renderTokens(tokens.tokens);
}

function renderRanking(r) {
  const body = $('ranking').tBodies[0];
  clear(body);
  $('ranking-note').textContent = r.truncated ? '(the first 1000 namespaces with a quota)' : `(${r.namespaces.length} with a quota)`;
  if (!r.namespaces.length) {
    body.append(el('tr', {}, el('td', {colSpan: 6, 'class': 'muted', text: 'no namespace has a quota: none has a limit to come near'})));
    return;
  }
  for (const n of r.namespaces) {
    const row = el('tr', {'data-namespace': n.namespace, 'data-percent': String(n.percent)});
    let nearest;
    if (n.error) {
      nearest = el('span', {'class': 'err', text: 'stopped: ' + n.error.message});
    } else if (n.closest) {
      const c = n.limits.find((l) => l.limit === n.closest);
      nearest = n.closest + ': ' + (c.rate ? `${fmtNum(c.usage)} of ${c.rate}` : `${fmtNum(c.usage)} of ${fmtNum(c.max)}`);
    } else {
      nearest = el('span', {'class': 'muted', text: 'no limit set'});
    }
    row.append(el('td', {'class': 'mono', text: n.namespace}),
      el('td', {}, nearest),
      el('td', {'class': 'barcol'}, n.error ? bar(100) : bar(n.percent)),
      el('td', {'class': 'pct', text: n.error ? '' : fmtNum(n.percent) + ' %'}),
      el('td', {'class': n.alarms.length ? 'alarmtext' : '', text: n.alarms.join(', ')}),
      el('td', {text: n.owner || ''}));
    body.append(row);
  }
}

function renderCluster(c) {
  // Members this node has no route to on the bus: a call it forwards
  // there is lost (see docs/cluster.md).
  const unreachable = c.unreachable || [];
  let summary = `this node ${c.node} · maintenance leader ${c.leader || 'none'} · ${c.members.length} member${c.members.length === 1 ? '' : 's'}`;
  if (unreachable.length) summary += ` · no route to ${unreachable.join(', ')}`;
  $('cluster-summary').textContent = summary;
  $('cluster-summary').className = unreachable.length ? 'alarmtext' : '';
  const body = $('members').tBodies[0];
  clear(body);
  for (const m of c.members) {
    const lost = unreachable.includes(m.id);
    body.append(el('tr', {'data-node': m.id, 'class': lost ? 'unreachable' : ''},
      el('td', {'class': lost ? 'mono alarmtext' : 'mono', text: m.id + (m.id === c.leader ? ' (leader)' : '') + (lost ? ' · no route' : '')}),
      el('td', {text: m.ready ? 'yes' : 'no'}),
      el('td', {text: fmtNum(m.owned)}),
      el('td', {text: fmtNum(m.partitions)}),
      el('td', {text: m.maintenance ? 'on' : 'off'})));
  }
}

function renderTokens(tokens) {
  const body = $('tokens').tBodies[0];
  clear(body);
  if (!tokens.length) {
    body.append(el('tr', {}, el('td', {colSpan: 5, 'class': 'muted', text: 'no token listed (tokens made before the list existed are not on it)'})));
  }
  for (const t of tokens) {
    const btn = el('button', {type: 'button', 'class': 'danger revoke', text: state.revokeArmed === t.id ? 'Confirm revoke' : 'Revoke'});
    btn.addEventListener('click', () => revoke(t.id));
    body.append(el('tr', {'data-id': t.id},
      el('td', {'class': 'mono', text: t.id}),
      el('td', {text: t.namespace}),
      el('td', {text: t.role}),
      el('td', {text: fmtTime(t.created_at)}),
      el('td', {}, btn)));
  }
}

async function createToken() {
  const msg = $('tokens-msg');
  msg.className = 'msg';
  msg.textContent = '';
  try {
    const t = await api('POST', '/v1/tokens', {namespace: $('t-ns').value, role: $('t-role').value});
    $('new-token-value').textContent = t.token;
    $('new-token').hidden = false;
    msg.className = 'msg ok';
    msg.textContent = `Token ${t.id} created: ${t.role} of namespace ${t.namespace}.`;
    state.lastRoot = 0;
    await loadRoot();
  } catch (e) {
    msg.className = 'msg error';
    msg.textContent = e.message;
  }
}

// revoke asks twice: the first click arms the button, the second revokes.
async function revoke(id) {
  const msg = $('tokens-msg');
  if (state.revokeArmed !== id) {
    state.revokeArmed = id;
    const row = document.querySelector(`#tokens tr[data-id="${CSS.escape(id)}"] button.revoke`);
    if (row) row.textContent = 'Confirm revoke';
    return;
  }
  state.revokeArmed = '';
  try {
    await api('DELETE', '/v1/tokens/' + encodeURIComponent(id));
    msg.className = 'msg ok';
    msg.textContent = `Token ${id} revoked.`;
    await loadRoot();
  } catch (e) {
    msg.className = 'msg error';
    msg.textContent = e.message;
  }
}

// ---------------------------------------------------------------------------

function init() {
  $('signin-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    signIn($('token').value.trim(), false);
  });
  $('signout').addEventListener('click', () => signOut(''));
  $('job-search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    searchJobs();
  });
  $('replay').addEventListener('click', replaySelected);
  $('select-all').addEventListener('change', (ev) => {
    for (const j of state.jobs) {
      if (j.status !== 'dead') continue;
      if (ev.target.checked) state.selected.add(j.id);
      else state.selected.delete(j.id);
    }
    renderJobs();
  });
  $('quota-clear').addEventListener('click', () => writeQuota('DELETE', undefined, 'every limit cleared'));
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    createToken();
  });
  $('new-token-dismiss').addEventListener('click', () => {
    $('new-token').hidden = true;
    $('new-token-value').textContent = '';
  });
  window.addEventListener('hashchange', route);
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved, true);
}

init();
