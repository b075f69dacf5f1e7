// Helpers for the browser-replica tests: a tiny RESP client, a seeded PRNG, Chromium launch,
// and the canonical dump used to compare a replica's key with the server's.
import net from 'node:net';
import { chromium } from 'playwright-core';

export const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`missing env ${name}`);
  return v;
};

/** Fails the process with a message (and a non-zero status the Rust harness reports). */
export function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

export function assert(cond, msg) {
  if (!cond) fail(msg);
}

/** mulberry32: a small seeded PRNG, so a failing run can be replayed with its seed. */
export function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (arr) => arr[Math.floor(next() * arr.length)],
    chance: (p) => next() < p,
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A RESP2 client: `await c.cmd('SET', 'k', 'v')` → reply (strings, numbers, arrays, null). */
export class Resp {
  static connect(port) {
    return new Promise((resolve, reject) => {
      const c = new Resp(net.createConnection({ host: '127.0.0.1', port }, () => resolve(c)));
      c.sock.once('error', reject);
    });
  }
  constructor(sock) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    sock.on('data', (d) => { this.buf = Buffer.concat([this.buf, d]); this._drain(); });
    sock.on('error', (e) => { for (const w of this.waiting.splice(0)) w.reject(e); });
  }
  cmd(...args) {
    const parts = [`*${args.length}\r\n`];
    for (const a of args) {
      const s = String(a);
      parts.push(`$${Buffer.byteLength(s)}\r\n${s}\r\n`);
    }
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.sock.write(parts.join(''));
    });
  }
  _drain() {
    for (;;) {
      const r = parse(this.buf, 0);
      if (!r) return;
      this.buf = this.buf.subarray(r.end);
      const w = this.waiting.shift();
      if (r.value instanceof Error) w.resolve(r.value); else w.resolve(r.value);
    }
  }
  close() { this.sock.destroy(); }
}

function parse(buf, at) {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return null;
  const t = String.fromCharCode(buf[at]);
  const line = buf.toString('utf8', at + 1, eol);
  const next = eol + 2;
  switch (t) {
    case '+': return { value: line, end: next };
    case '-': return { value: new Error(line), end: next };
    case ':': return { value: Number(line), end: next };
    case '$': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      if (buf.length < next + n + 2) return null;
      return { value: buf.toString('utf8', next, next + n), end: next + n + 2 };
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      const arr = [];
      let p = next;
      for (let i = 0; i < n; i++) {
        const r = parse(buf, p);
        if (!r) return null;
        arr.push(r.value);
        p = r.end;
      }
      return { value: arr, end: p };
    }
    default: throw new Error(`bad RESP from server: ${JSON.stringify(line)}`);
  }
}

/** A canonical text of `key`; `get(...argv)` runs a command (server or replica). */
export async function dump(get, key) {
  const type = await get('TYPE', key);
  let value;
  switch (type) {
    case 'string': value = await get('GET', key); break;
    case 'hash': {
      const flat = await get('HGETALL', key);
      const pairs = [];
      for (let i = 0; i < flat.length; i += 2) pairs.push(`${flat[i]}=${flat[i + 1]}`);
      value = pairs.sort().join(',');
      break;
    }
    case 'set': value = (await get('SMEMBERS', key)).sort().join(','); break;
    case 'zset': value = (await get('ZRANGE', key, 0, -1, 'WITHSCORES')).join(','); break;
    case 'list': value = (await get('LRANGE', key, 0, -1)).join(','); break;
    case 'stream': value = await dumpStream(get, key); break;
    default: value = '';
  }
  return `${type}|${value}|${await get('PEXPIRETIME', key)}`;
}

/** A stream's entries, counters and groups (pending entries whose stream entry still
 * exists: a recreated stream cannot hold the others, docs/feed.md). The node layout
 * (radix-tree-keys/-nodes) and idle times are left out: they may differ and mean nothing. */
async function dumpStream(get, key) {
  const entries = (await get('XRANGE', key, '-', '+')).flat(Infinity);
  const info = await get('XINFO', 'STREAM', key);
  const fields = ['length', 'last-generated-id', 'max-deleted-entry-id', 'entries-added', 'recorded-first-entry-id'];
  const kept = [];
  for (let i = 0; i + 1 < info.length; i += 2) if (fields.includes(info[i])) kept.push(`${info[i]}=${info[i + 1]}`);
  const ids = new Set((await get('XRANGE', key, '-', '+')).map((e) => e[0]));
  const groups = [];
  for (const g of await get('XINFO', 'GROUPS', key)) {
    const m = {};
    for (let i = 0; i + 1 < g.length; i += 2) m[g[i]] = g[i + 1];
    const pel = (await get('XPENDING', key, m.name, '-', '+', 1000))
      .filter((e) => ids.has(e[0])).map((e) => `${e[0]}@${e[1]}x${e[3]}`);
    groups.push(`${m.name}:${m.consumers}:${m['last-delivered-id']}:${m['entries-read']}:${m.lag}:${pel.join(' ')}`);
  }
  return `${entries.join(',')}|${kept.join(',')}|${groups.join(';')}`;
}

/** Every key under `prefix` on the server, through the proxy (SCAN), sorted. */
export async function serverKeys(resp, prefix) {
  const keys = new Set();
  let cursor = '0';
  let rounds = 0;
  do {
    const [next, batch] = await resp.cmd('SCAN', cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    batch.forEach((k) => keys.add(k));
    cursor = next;
    if (++rounds > 100000) throw new Error('SCAN did not finish');
  } while (cursor !== '0');
  return [...keys].sort();
}

/** How a replica (`get(...argv)` runs a command on it) differs from the server (`resp`,
 * through the proxy) on the keys under `prefixes`: its key set (KEYS *), then each key's
 * canonical text ([`dump`]). Empty when they agree. */
export async function mismatches(resp, get, prefixes, label) {
  const local = (await get('KEYS', '*')).map(String).sort();
  const expected = [];
  for (const p of prefixes) expected.push(...(await serverKeys(resp, p)));
  expected.sort();
  if (JSON.stringify(local) !== JSON.stringify(expected)) {
    return [`${label}: keys differ: replica-only ${local.filter((k) => !expected.includes(k)).slice(0, 10)}, server-only ${expected.filter((k) => !local.includes(k)).slice(0, 10)}`];
  }
  const out = [];
  for (const k of expected) {
    const s = await dump((...a) => resp.cmd(...a), k);
    const r = await dump(get, k);
    if (s !== r) out.push(`${label}: ${k}: server ${s} replica ${r}`);
  }
  return out;
}

/** Debian's Chromium, headless, with the flags this machine needs (no background network). */
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
}

/** Resolves when `pred()` is truthy, polling; rejects after `ms`. */
export async function waitFor(pred, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) fail(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}
