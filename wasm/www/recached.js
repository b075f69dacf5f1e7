// recached.js — a live, local replica of recached keys in the browser (or Node ≥ 20).
//
//   import { connect } from '/recached.js';
//   const db = await connect('ws://127.0.0.1:6480/ws', { prefixes: ['game:'] });
//   db.on('keychange', ({ key }) => render(db.zrange('game:board', 0, 9, { withScores: true })));
//   db.get('game:title');            // answered from local WebAssembly memory: no network
//
// The data lives in recached's own engine compiled to WebAssembly (recached.wasm, crate
// wasm/): snapshot entries and keychanges from the fan-out are applied by the same code the
// server runs, and reads run the server's read commands locally. Reads are synchronous.
//
// Wire protocol: docs/browser-protocol.md. Module ABI: wasm/src/abi.rs.
//
// Options of connect(url, opts):
//   prefixes   key prefixes to replicate (default ['']: everything the token allows)
//   token      access token (when the fan-out has tokens configured)
//   db         the server database to follow (SELECT index, default 0); the replica holds
//              that one database, so reads here (dbsize, keys, …) see its keys
//   wasm       WebAssembly.Module, bytes (ArrayBuffer / typed array) or URL of recached.wasm
//              (default: recached.wasm next to this module)
//   WebSocket  WebSocket constructor (default globalThis.WebSocket)
//   now        () => Unix ms, the clock for local expiry (default Date.now)
//   minDelay, maxDelay   reconnect backoff bounds in ms (default 100, 5000)
//   waitReady  resolve connect() only once every instance is up to date (default true)
//
// Events (db.on(name, cb) / db.off(name, cb)):
//   'state'      cb(state): 'connecting' | 'syncing' | 'live' | 'disconnected' | 'closed'
//   'keychange'  cb({ key, instance, seq, command, args }) after a change was applied
//   'snapshot'   cb({ instance, keys }) after a snapshot of one instance was applied
//   'ready'      cb() every time all instances become up to date
//   'error'      cb(Error)
//   'message'    cb(msg) every message from the fan-out (debugging, tests)

const enc = new TextEncoder();
const dec = new TextDecoder();

/** Instantiates the replica module. `source`: Module | bytes | URL | string URL. */
export async function loadReplica(source) {
  let module;
  if (source instanceof WebAssembly.Module) {
    module = source;
  } else if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) {
    module = await WebAssembly.compile(source);
  } else {
    const url = source ?? new URL('recached.wasm', import.meta.url);
    const resp = await fetch(url);
    if (!resp.ok) throw new Error(`recached: cannot load ${url}: HTTP ${resp.status}`);
    module = await WebAssembly.compile(await resp.arrayBuffer());
  }
  const instance = await WebAssembly.instantiate(module, {});
  return new LocalReplica(instance.exports);
}

/** Encodes argv (strings or Uint8Arrays) as one RESP multibulk command. */
function encodeCommand(args, chunks) {
  chunks.push(enc.encode(`*${args.length}\r\n`));
  for (const a of args) {
    const b = typeof a === 'string' ? enc.encode(a) : a instanceof Uint8Array ? a : enc.encode(String(a));
    chunks.push(enc.encode(`$${b.length}\r\n`), b, CRLF);
  }
}
const CRLF = new Uint8Array([13, 10]);

function concat(chunks) {
  let n = 0;
  for (const c of chunks) n += c.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

/** Parses one RESP2 reply; bulk strings become strings (or Uint8Array when raw). */
function parseReply(buf, raw) {
  let p = 0;
  const line = () => {
    let e = p;
    while (buf[e] !== 13) e++;
    const s = dec.decode(buf.subarray(p + 1, e));
    p = e + 2;
    return s;
  };
  const one = () => {
    const t = buf[p];
    const s = line();
    switch (t) {
      case 43: return s;                                  // +
      case 45: { const e = new Error(s); e.redis = true; throw e; } // -
      case 58: return Number(s);                          // :
      case 36: {                                          // $
        const n = Number(s);
        if (n < 0) return null;
        const b = buf.subarray(p, p + n);
        p += n + 2;
        return raw ? b.slice() : dec.decode(b);
      }
      case 42: {                                          // *
        const n = Number(s);
        if (n < 0) return null;
        const a = new Array(n);
        for (let i = 0; i < n; i++) a[i] = one();
        return a;
      }
      default: throw new Error('recached: bad reply from the replica');
    }
  };
  return one();
}

/** The engine in WebAssembly: apply effects, run read commands. */
export class LocalReplica {
  constructor(exports) { this.x = exports; }

  _write(bytes) {
    const ptr = this.x.rc_input(bytes.length);
    new Uint8Array(this.x.memory.buffer, ptr, bytes.length).set(bytes);
    return bytes.length;
  }

  _output() {
    return new Uint8Array(this.x.memory.buffer, this.x.rc_output(), this.x.rc_output_len());
  }

  /** Applies commands (arrays of argv) as effects; throws on the first that fails. */
  apply(...commands) {
    const chunks = [];
    for (const c of commands) encodeCommand(c, chunks);
    const n = this.x.rc_apply(this._write(concat(chunks)));
    if (n < 0) throw new Error(`recached: replica diverged: ${dec.decode(this._output())}`);
    return n;
  }

  /** Runs a read command at `nowMs`; returns the parsed reply. */
  read(args, nowMs = Date.now(), raw = false) {
    const chunks = [];
    encodeCommand(args, chunks);
    const n = this.x.rc_read(this._write(concat(chunks)), nowMs);
    return parseReply(new Uint8Array(this.x.memory.buffer, this.x.rc_output(), n), raw);
  }

  dropInstance(instance, n) { return this.x.rc_drop_instance(instance, n); }

  /** Adopts the fleet's slot table (`slots` message ranges [first, last, instance]):
   * refetches then drop by it. A module without rc_set_owners keeps the jump hash. */
  setSlots(ranges) {
    if (!this.x.rc_set_owners) return false;
    const owners = new Uint16Array(16384).fill(0xffff);
    for (const [a, b, i] of ranges) owners.fill(i, a, b + 1);
    const bytes = new Uint8Array(owners.length * 2);
    const view = new DataView(bytes.buffer);
    owners.forEach((o, s) => view.setUint16(2 * s, o, true));
    return this.x.rc_set_owners(this._write(bytes)) === 1;
  }
  clear() { this.x.rc_clear(); }
  size() { return this.x.rc_len(); }
}

/** A wire value (string or {b64}) → string | Uint8Array. */
function wireValue(v) {
  if (typeof v === 'string') return v;
  if (v && typeof v.b64 === 'string') {
    const s = atob(v.b64);
    const b = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
    return b;
  }
  throw new Error('recached: bad value on the wire');
}

const pairs = (flat) => {
  const out = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
};

/** Connects to a fan-out and returns a live replica once it is up to date. */
export async function connect(url, opts = {}) {
  const replica = await loadReplica(opts.wasm);
  const client = new RecachedClient(url, replica, opts);
  client._open();
  if (opts.waitReady !== false) await client.ready();
  return client;
}

export class RecachedClient {
  constructor(url, replica, opts) {
    this.url = url;
    this.replica = replica;
    this.opts = opts;
    this.prefixes = opts.prefixes ?? [''];
    this.token = opts.token;
    // The engine database to follow (SELECT index on the server; 0 when not given). The
    // replica holds that one database: reads here see its keys.
    this.db = opts.db ?? 0;
    if (!Number.isInteger(this.db) || this.db < 0) throw new Error('recached: db is a non-negative integer');
    this.now = opts.now ?? (() => Date.now());
    this.WS = opts.WebSocket ?? globalThis.WebSocket;
    this.minDelay = opts.minDelay ?? 100;
    this.maxDelay = opts.maxDelay ?? 5000;
    this.state = 'connecting';
    this.instances = 0;
    this.positions = [];   // per instance: { run, seq } once consistent, else null
    this.upToDate = [];    // per instance: bool (this connection)
    this.listeners = new Map();
    this.delay = this.minDelay;
    this.closed = false;
    this.ws = null;
    this.timer = null;
    this.lastHeard = 0;
    this.heartbeatMs = 15000;
  }

  // ---- events ----------------------------------------------------------------------
  on(name, cb) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(cb);
    return this;
  }
  off(name, cb) { this.listeners.get(name)?.delete(cb); return this; }
  _emit(name, arg) {
    for (const cb of this.listeners.get(name) ?? []) {
      try { cb(arg); } catch (e) { console.error(e); }
    }
  }
  _setState(s) {
    if (this.state === s) return;
    this.state = s;
    this._emit('state', s);
  }

  /** Resolves when every instance is up to date (now, if it already is). */
  ready() {
    if (this.state === 'live') return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onReady = () => { this.off('ready', onReady); this.off('state', onState); resolve(); };
      const onState = (s) => {
        if (s === 'closed') { this.off('ready', onReady); this.off('state', onState); reject(new Error('recached: closed')); }
      };
      this.on('ready', onReady).on('state', onState);
    });
  }

  // ---- connection ------------------------------------------------------------------
  _open() {
    if (this.closed) return;
    this._setState('connecting');
    let ws;
    try {
      ws = new this.WS(this.url);
    } catch (e) {
      this._emit('error', e);
      this._scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.lastHeard = Date.now();
    ws.onopen = () => {
      const resume = [];
      this.positions.forEach((p, instance) => {
        if (p) resume.push({ instance, run: p.run, seq: p.seq });
      });
      const sub = { type: 'subscribe', prefixes: this.prefixes, token: this.token, resume };
      if (this.db !== 0) sub.db = this.db;
      ws.send(JSON.stringify(sub));
      this._setState('syncing');
    };
    ws.onmessage = (ev) => {
      if (ws !== this.ws) return;
      this.lastHeard = Date.now();
      let msg;
      try {
        msg = JSON.parse(typeof ev.data === 'string' ? ev.data : dec.decode(ev.data));
      } catch (e) {
        this._emit('error', e);
        return;
      }
      try {
        this._handle(msg);
      } catch (e) {
        // The replica refused a change (it diverged): start over for every instance.
        this._emit('error', e);
        this.positions = [];
        this._drop();
      }
    };
    ws.onclose = () => {
      if (ws !== this.ws) return;
      this.ws = null;
      this._scheduleReconnect();
    };
    ws.onerror = () => {};
    clearInterval(this.watchdog);
    this.watchdog = setInterval(() => {
      // No heartbeat for three periods: the link is dead even if the socket does not know.
      if (this.ws === ws && Date.now() - this.lastHeard > 3 * this.heartbeatMs) this._drop();
    }, Math.max(50, Math.min(this.heartbeatMs, 5000)));
  }

  _drop() {
    const ws = this.ws;
    this.ws = null;
    if (ws) { try { ws.close(); } catch { /* already closing */ } }
    this._scheduleReconnect();
  }

  _scheduleReconnect() {
    clearInterval(this.watchdog);
    if (this.closed) { this._setState('closed'); return; }
    this._setState('disconnected');
    clearTimeout(this.timer);
    const wait = this.delay * (0.5 + Math.random() / 2);
    this.delay = Math.min(this.delay * 2, this.maxDelay);
    this.timer = setTimeout(() => this._open(), wait);
  }

  /** Drops the connection now (tests: a disconnect at a random moment); it reconnects. */
  disconnect() { this._drop(); }

  /** Closes for good. */
  close() {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.watchdog);
    const ws = this.ws;
    this.ws = null;
    if (ws) { try { ws.close(); } catch { /* ignore */ } }
    this._setState('closed');
  }

  _handle(msg) {
    this._emit('message', msg);
    const i = msg.instance;
    switch (msg.type) {
      case 'hello':
        this.instances = msg.instances;
        this.heartbeatMs = msg.heartbeat_ms || this.heartbeatMs;
        this.upToDate = new Array(msg.instances).fill(false);
        this.positions.length = msg.instances;
        break;
      case 'subscribed':
        this.delay = this.minDelay;
        break;
      case 'slots':
        // The slot table (sent after hello and whenever slots move or engines join):
        // refetches drop by it. A new instance is not up to date until its snapshot.
        this.replica.setSlots(msg.slots);
        for (let j = this.instances; j < msg.instances; j++) this.upToDate[j] = false;
        this.instances = Math.max(this.instances, msg.instances);
        this.positions.length = this.instances;
        break;
      case 'must-refetch':
        this.positions[i] = null;
        this.upToDate[i] = false;
        this.replica.dropInstance(i, this.instances);
        this._setState('syncing');
        break;
      case 'snapshot':
        this._snap = { instance: i, run: msg.run, keys: 0 };
        break;
      case 'entry':
        this.replica.apply(msg.args.map(wireValue));
        if (this._snap) this._snap.keys++;
        break;
      case 'snapshot-end':
        if (this._snap && this._snap.instance === i) {
          this.positions[i] = { run: this._snap.run, seq: msg.seq };
          this._emit('snapshot', { instance: i, keys: this._snap.keys });
        }
        this._snap = null;
        break;
      case 'keychange': {
        const args = msg.args.map(wireValue);
        this.replica.apply(args);
        if (this.positions[i]) this.positions[i].seq = msg.seq;
        this._emit('keychange', {
          key: wireValue(msg.key), instance: i, seq: msg.seq,
          command: String(args[0]).toUpperCase(), args,
        });
        break;
      }
      case 'flush':
        this.replica.dropInstance(i, this.instances);
        if (this.positions[i]) this.positions[i].seq = msg.seq;
        this._emit('keychange', { key: null, instance: i, seq: msg.seq, command: 'FLUSHALL', args: ['FLUSHALL'] });
        break;
      case 'up-to-date':
        this.positions[i] = { run: msg.run, seq: msg.seq };
        this.upToDate[i] = true;
        if (this.upToDate.every(Boolean)) {
          this._setState('live');
          this._emit('ready');
        }
        break;
      case 'heartbeat':
        (msg.seqs || []).forEach((s, j) => {
          if (s !== null && this.positions[j] && this.upToDate[j]) this.positions[j].seq = s;
        });
        break;
      case 'error':
        this._emit('error', Object.assign(new Error(`recached: ${msg.code}: ${msg.message}`), { code: msg.code }));
        break;
      default:
        break; // newer servers may send more; ignore
    }
  }

  // ---- reads (local; Redis names and reply shapes, JavaScript values) --------------
  /** Runs any read-only command locally; returns its reply (strings, numbers, arrays). */
  call(...args) { return this.replica.read(args, this.now()); }
  /** Like call, but bulk strings come back as Uint8Array. */
  callBuffer(...args) { return this.replica.read(args, this.now(), true); }

  get(key) { return this.call('GET', key); }
  mget(...keys) { return this.call('MGET', ...keys.flat()); }
  strlen(key) { return this.call('STRLEN', key); }
  getrange(key, start, end) { return this.call('GETRANGE', key, start, end); }
  exists(...keys) { return this.call('EXISTS', ...keys.flat()); }
  type(key) { return this.call('TYPE', key); }
  ttl(key) { return this.call('TTL', key); }
  pttl(key) { return this.call('PTTL', key); }
  dbsize() { return this.call('DBSIZE'); }
  keys(pattern = '*') { return this.call('KEYS', pattern); }
  scan(cursor = 0, { match, count, type } = {}) {
    const args = ['SCAN', cursor];
    if (match !== undefined) args.push('MATCH', match);
    if (count !== undefined) args.push('COUNT', count);
    if (type !== undefined) args.push('TYPE', type);
    const [next, keys] = this.call(...args);
    return [Number(next), keys];
  }
  hget(key, field) { return this.call('HGET', key, field); }
  hmget(key, ...fields) { return this.call('HMGET', key, ...fields.flat()); }
  hgetall(key) { return Object.fromEntries(pairs(this.call('HGETALL', key))); }
  hkeys(key) { return this.call('HKEYS', key); }
  hvals(key) { return this.call('HVALS', key); }
  hlen(key) { return this.call('HLEN', key); }
  hexists(key, field) { return this.call('HEXISTS', key, field); }
  smembers(key) { return this.call('SMEMBERS', key); }
  sismember(key, member) { return this.call('SISMEMBER', key, member); }
  scard(key) { return this.call('SCARD', key); }
  zscore(key, member) { const s = this.call('ZSCORE', key, member); return s === null ? null : Number(s); }
  zcard(key) { return this.call('ZCARD', key); }
  zrank(key, member) { return this.call('ZRANK', key, member); }
  /** zrange(key, start, stop, { withScores, rev, byScore }) → members, or [member, score] pairs. */
  zrange(key, start, stop, { withScores = false, rev = false, byScore = false } = {}) {
    const args = ['ZRANGE', key, start, stop];
    if (byScore) args.push('BYSCORE');
    if (rev) args.push('REV');
    if (withScores) args.push('WITHSCORES');
    const r = this.call(...args);
    return withScores ? pairs(r).map(([m, s]) => [m, Number(s)]) : r;
  }
  lrange(key, start, stop) { return this.call('LRANGE', key, start, stop); }
  llen(key) { return this.call('LLEN', key); }
  lindex(key, index) { return this.call('LINDEX', key, index); }
}
