// The demo dashboard: a replica of the `demo:` keys, rendered on every keychange.
import { connect } from '/recached.js';

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`;
const params = new URLSearchParams(location.search);
let changes = 0;

function render(db) {
  const board = db.zrange('demo:leaderboard', 0, 9, { rev: true, withScores: true });
  const top = board.length ? board[0][1] : 1;
  $('leaderboard').innerHTML = board.length
    ? board.map(([m, s], i) => `<li><span class="rank">${i + 1}</span><span class="name">${esc(m)}</span>
        <span class="bar"><span style="width:${Math.max(2, Math.round((100 * s) / (top || 1)))}%"></span></span>
        <span class="score">${esc(s)}</span></li>`).join('')
    : '<li class="empty">no players yet</li>';

  const counters = db.keys('demo:counter:*').sort();
  $('counters').innerHTML = counters.length
    ? counters.map((k) => `<div class="counter"><div class="value">${esc(db.get(k) ?? '—')}</div>
        <div class="label">${esc(k.slice('demo:counter:'.length))}</div></div>`).join('')
    : '<div class="empty">no counters yet</div>';

  const stats = Object.entries(db.hgetall('demo:stats')).sort(([a], [b]) => a.localeCompare(b));
  $('stats').innerHTML = `<tbody>${stats.length
    ? stats.map(([f, v]) => `<tr><th>${esc(f)}</th><td>${esc(v)}</td></tr>`).join('')
    : '<tr><td class="empty">no fields yet</td></tr>'}</tbody>`;
  $('nkeys').textContent = db.dbsize();
  $('nchanges').textContent = changes;
}

function logChange({ key, command }) {
  const li = document.createElement('li');
  li.innerHTML = `<span class="cmd">${esc(command)}</span> ${esc(key ?? '(all keys)')} <span class="muted">${new Date().toLocaleTimeString()}</span>`;
  $('log').prepend(li);
  while ($('log').children.length > 12) $('log').lastChild.remove();
}

const db = await connect(wsUrl, { prefixes: ['demo:'], token: params.get('token') ?? undefined, waitReady: false });
window.recached = db; // for the console (and the browser test)
db.on('state', (s) => {
  $('status').textContent = s;
  $('status').className = `pill pill-${s}`;
  document.body.dataset.state = s;
});
db.on('keychange', (k) => { changes++; logChange(k); render(db); });
db.on('snapshot', () => render(db));
db.on('ready', () => render(db));
db.on('error', (e) => console.warn(e.message));
$('lookup').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const key = $('lookup-key').value || 'demo:title';
  let out;
  try {
    const type = db.type(key);
    out = type === 'none' ? '(nil)'
      : type === 'string' ? JSON.stringify(db.get(key))
      : type === 'hash' ? JSON.stringify(db.hgetall(key), null, 1)
      : type === 'zset' ? JSON.stringify(db.zrange(key, 0, -1, { withScores: true }))
      : type === 'set' ? JSON.stringify(db.smembers(key))
      : type === 'list' ? JSON.stringify(db.lrange(key, 0, -1)) : type;
    const ttl = db.ttl(key);
    if (ttl >= 0) out += `\n(ttl ${ttl}s)`;
  } catch (e) { out = `error: ${e.message}`; }
  $('lookup-result').textContent = out;
});
render(db);
