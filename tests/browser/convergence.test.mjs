// Convergence of browser replicas under a seeded random writer (run by
// tests/tests/fanout_browser.rs). Two engines behind the proxy; a fan-out with tokens.
//
// - The writer issues WRITES commands over every data type (strings, counters, hashes, sets,
//   sorted sets, lists, streams with a consumer group, bitmaps and BITFIELD, HyperLogLogs,
//   BITOP, PFMERGE, SORT … STORE, geo), with short and long expiries,
//   DEL/EXPIRE/PERSIST, RENAME and MSET,
//   EVAL and FCALL (their writes reach replicas as the commands they ran), and one FLUSHALL,
//   through the proxy.
// - Replicas in Node (the same recached.js + recached.wasm the page uses) and one in Chromium
//   connect with different tokens and prefixes, disconnect at random moments (reconnecting
//   with resume) and are replaced by fresh ones at random.
// - At the end every key of every replica's prefixes equals the server's (type, value,
//   PEXPIRETIME; read through the proxy), and no key outside a replica's allowed prefixes was
//   ever delivered to it (every entry and keychange is checked as it arrives).
// Env: FANOUT_PORT, PROXY_PORT, WASM (path of recached.wasm), SEED (optional), WRITES (optional).
import fs from 'node:fs';
import { connect } from '../../wasm/www/recached.js';
import { env, assert, fail, prng, sleep, Resp, mismatches, serverKeys, launchChromium } from './lib.mjs';

const fanout = Number(env('FANOUT_PORT'));
const seed = Number(process.env.SEED ?? Date.now() % 100000);
const WRITES = Number(process.env.WRITES ?? 4000);
const rnd = prng(seed);
console.log(`convergence: seed ${seed}, ${WRITES} writes`);

const url = `ws://127.0.0.1:${fanout}/ws`;
const wasm = await WebAssembly.compile(fs.readFileSync(env('WASM')));
// Tokens (tests/tests/fanout_browser.rs writes the same file).
const TOKENS = { 'tok-a': ['a:'], 'tok-ab': ['a:', 'b:'], 'tok-all': [''] };
const SPECS = [
  { token: 'tok-a', prefixes: [''], sees: ['a:'] },
  { token: 'tok-ab', prefixes: ['*'], sees: ['a:', 'b:'] },
  { token: 'tok-all', prefixes: ['b:', 'c:'], sees: ['b:', 'c:'] },
  { token: 'tok-a', prefixes: ['b:'], sees: [] },
];
const violations = [];

function wireKey(v) {
  return typeof v === 'string' ? v : Buffer.from(v.b64, 'base64').toString('latin1');
}
// The key an effect names: after the subcommand for a container command (XGROUP CREATE k …).
const keyArg = (args) => (String(args[0]).toUpperCase() === 'XGROUP' ? args[2] : args[1]);

async function newReplica(spec) {
  const r = await connect(url, {
    token: spec.token, prefixes: spec.prefixes, wasm, waitReady: false, minDelay: 20, maxDelay: 300,
  });
  const allowed = TOKENS[spec.token];
  r.on('message', (m) => {
    if ((m.type === 'entry' || m.type === 'keychange') && m.args.length > 1) {
      const key = wireKey(keyArg(m.args));
      if (!allowed.some((p) => key.startsWith(p))) violations.push(`${spec.token}: ${key}`);
    }
  });
  r.on('error', (e) => { if (!/closing|snapshot/.test(e.message)) console.warn(`replica ${spec.token}: ${e.message}`); });
  return r;
}

// ---- replicas ----------------------------------------------------------------------
const replicas = await Promise.all(SPECS.map(newReplica));
const browser = await launchChromium();
const page = await browser.newPage();
page.on('pageerror', (e) => console.error('page error:', e.message));
await page.goto(`http://127.0.0.1:${fanout}/healthz`);
const chromeSpec = { token: 'tok-ab', prefixes: ['a:', 'b:', 'c:'], sees: ['a:', 'b:'] };
await page.evaluate(async ({ url, spec, allowed }) => {
  const m = await import('/recached.js');
  window.violations = [];
  window.r = await m.connect(url, { token: spec.token, prefixes: spec.prefixes, waitReady: false, minDelay: 20, maxDelay: 300 });
  window.r.on('message', (msg) => {
    if ((msg.type === 'entry' || msg.type === 'keychange') && msg.args.length > 1) {
      const a = String(msg.args[0]).toUpperCase() === 'XGROUP' ? msg.args[2] : msg.args[1];
      const k = typeof a === 'string' ? a : atob(a.b64);
      if (!allowed.some((p) => k.startsWith(p))) window.violations.push(k);
    }
  });
}, { url, spec: chromeSpec, allowed: TOKENS[chromeSpec.token] });

// ---- writer ------------------------------------------------------------------------
const resp = await Resp.connect(Number(env('PROXY_PORT')));
await resp.cmd('FLUSHALL');
const P = ['a:', 'b:', 'c:'];
const n = () => rnd.int(6);
const key = (type) => `${rnd.pick(P)}${type}:${n()}`;
const anyKey = () => key(rnd.pick(['str', 'cnt', 'hash', 'set', 'zset', 'list', 'stream']));
const ttl = () => (rnd.chance(0.5) ? ['PX', 100 + rnd.int(600)] : ['EX', 1000 + rnd.int(1000)]);
const OPS = [
  () => ['SET', key('str'), `v${rnd.int(1000)}`, ...(rnd.chance(0.3) ? ttl() : [])],
  () => ['APPEND', key('str'), 'x'],
  () => ['INCRBY', key('cnt'), rnd.int(10)],
  () => ['INCRBYFLOAT', key('cnt') + 'f', '0.5'],
  () => ['HSET', key('hash'), `f${rnd.int(5)}`, `v${rnd.int(100)}`, `g${rnd.int(5)}`, 'w'],
  () => ['HDEL', key('hash'), `f${rnd.int(5)}`],
  () => ['HINCRBY', key('hash'), 'n', 1],
  () => ['SADD', key('set'), `m${rnd.int(8)}`, `m${rnd.int(8)}`],
  () => ['SREM', key('set'), `m${rnd.int(8)}`],
  () => ['SPOP', key('set')],
  () => ['ZADD', key('zset'), rnd.int(100), `m${rnd.int(8)}`],
  () => ['ZINCRBY', key('zset'), 1.5, `m${rnd.int(8)}`],
  () => ['ZREM', key('zset'), `m${rnd.int(8)}`],
  () => ['ZPOPMIN', key('zset')],
  () => ['RPUSH', key('list'), `e${rnd.int(100)}`, `e${rnd.int(100)}`],
  // Geo: GEOADD reaches replicas as ZADD of concrete scores, GEOSEARCHSTORE as the zset it wrote.
  () => ['GEOADD', `${rnd.pick(P)}{g${n()}}src`, (13 + rnd.int(100) / 100).toFixed(2),
    (38 + rnd.int(100) / 100).toFixed(2), `m${rnd.int(8)}`],
  () => { const p = rnd.pick(P); const t = `{g${n()}}`; return ['GEOSEARCHSTORE', `${p}${t}dst`, `${p}${t}src`,
    'FROMLONLAT', '13.5', '38.5', 'BYRADIUS', 60 + rnd.int(60), 'km', ...(rnd.chance(0.5) ? ['STOREDIST'] : [])]; },
  // Bitmaps, BITFIELD, HyperLogLog, BITOP, SORT … STORE, RESTORE: replicas end byte-identical.
  () => ['SETBIT', `${rnd.pick(P)}{b${n()}}bits`, rnd.int(200), rnd.int(2)],
  () => ['BITFIELD', `${rnd.pick(P)}{b${n()}}bits`, 'INCRBY', 'u8', 8 * rnd.int(4), 1 + rnd.int(50),
    'OVERFLOW', 'SAT', 'INCRBY', 'i5', 40, 7],
  () => { const p = rnd.pick(P); const t = `{b${n()}}`; return ['BITOP', rnd.pick(['AND', 'OR', 'XOR']), `${p}${t}op`, `${p}${t}bits`, `${p}${t}bits2`]; },
  () => ['SETBIT', `${rnd.pick(P)}{b${n()}}bits2`, rnd.int(200), 1],
  () => ['PFADD', `${rnd.pick(P)}{h${n()}}hll`, `e${rnd.int(50)}`, `e${rnd.int(5000)}`],
  () => { const p = rnd.pick(P); const t = `{h${n()}}`; return ['PFMERGE', `${p}${t}all`, `${p}${t}hll`, `${p}${t}hll2`]; },
  () => ['PFADD', `${rnd.pick(P)}{h${n()}}hll2`, `f${rnd.int(3000)}`],
  () => { const p = rnd.pick(P); const t = `{s${n()}}`; return ['SORT', `${p}${t}l`, 'ALPHA', 'DESC', 'LIMIT', 0, 3, 'STORE', `${p}${t}sorted`]; },
  () => ['RPUSH', `${rnd.pick(P)}{s${n()}}l`, `v${rnd.int(30)}`],
  () => ['LPUSH', key('list'), `e${rnd.int(100)}`],
  () => ['LPOP', key('list')],
  () => ['LTRIM', key('list'), 0, 4],
  () => ['DEL', anyKey()],
  () => ['PEXPIRE', anyKey(), 100 + rnd.int(600)],
  () => ['EXPIRE', anyKey(), 1000 + rnd.int(1000)],
  () => ['PERSIST', anyKey()],
  () => { const p = rnd.pick(P); return ['RENAME', `${p}{r}${n()}`, `${p}{r}${n()}`]; },
  () => ['SET', `${rnd.pick(P)}{r}${n()}`, `r${rnd.int(100)}`],
  () => ['MSET', key('str'), 'm1', key('str'), 'm2', key('str'), 'm3'],
  // A script and a function: replicas get the commands they ran (effects), never run Lua.
  () => {
    const p = rnd.pick(P);
    const t = `{s${n()}}`;
    return ['EVAL', "redis.call('hincrby', KEYS[1], 'n', 1); redis.call('sadd', KEYS[2], ARGV[1]); "
      + "redis.call('set', KEYS[3], ARGV[1], 'PX', 150 + #ARGV[1]); "
      + "return redis.pcall('incr', KEYS[2])['err'] and 1 or 0",
    3, `${p}${t}h`, `${p}${t}s`, `${p}${t}t`, `m${rnd.int(8)}`];
  },
  () => ['FCALL', 'bump', 1, key('cnt'), 1 + rnd.int(5)],
  // Streams: `*` IDs, exact and approximate trims, deletions, a consumer group read and acked.
  () => ['XADD', key('stream'), ...(rnd.chance(0.3) ? ['MAXLEN', rnd.pick(['=', '~']), 3 + rnd.int(4)] : []),
    '*', 'f', `v${rnd.int(100)}`, 'g', `${rnd.int(10)}`],
  () => ['XTRIM', key('stream'), 'MAXLEN', rnd.pick(['=', '~']), 2 + rnd.int(5)],
  () => ['XDEL', key('stream'), `${Date.now() - rnd.int(50)}-0`],
  () => ['XGROUP', 'CREATE', key('stream'), 'g', rnd.pick(['0', '$']), 'MKSTREAM'],
  () => ['XREADGROUP', 'GROUP', 'g', `c${rnd.int(3)}`, 'COUNT', 1 + rnd.int(3), 'STREAMS', key('stream'), '>'],
  () => ['XACK', key('stream'), 'g', `${Date.now() - rnd.int(50)}-0`],
];
const loaded = await resp.cmd('FUNCTION', 'LOAD', 'REPLACE', "#!lua name=conv\n"
  + "redis.register_function('bump', function(keys, args) redis.call('incrby', keys[1], args[1]) "
  + "return redis.call('expire', keys[1], 1000 + tonumber(args[1])) end)");
assert(loaded === 'conv', `FUNCTION LOAD through the proxy: ${loaded}`);

const t0 = Date.now();
let scripts = 0;
const scriptErrors = [];
let replaced = 0;
let dropped = 0;
for (let done = 0; done < WRITES;) {
  const batch = [];
  for (let i = 0; i < 25 && done < WRITES; i++, done++) {
    const c = done === Math.floor(WRITES / 2) ? ['FLUSHALL'] : rnd.pick(OPS)();
    const sent = resp.cmd(...c);
    if (c[0] === 'EVAL' || c[0] === 'FCALL') {
      scripts++;
      sent.then((r) => { if (r !== 1) scriptErrors.push(`${c[0]}: ${r}`); });
    }
    batch.push(sent);
  }
  await Promise.all(batch);
  for (let i = 0; i < replicas.length; i++) {
    if (rnd.chance(0.04)) { replicas[i].disconnect(); dropped++; }
    if (rnd.chance(0.01)) {
      replicas[i].close();
      replicas[i] = await newReplica(SPECS[i]);
      replaced++;
    }
  }
  if (rnd.chance(0.04)) { await page.evaluate(() => window.r.disconnect()); dropped++; }
  if (rnd.chance(0.3)) await sleep(rnd.int(15));
}
console.log(`writer done in ${Date.now() - t0} ms; ${dropped} disconnects, ${replaced} fresh replicas; ${scripts} scripts`);
assert(scripts > 0 && scriptErrors.length === 0, `scripts through the proxy: ${scriptErrors.slice(0, 5)}`);

// ---- compare -----------------------------------------------------------------------
await sleep(900); // short expiries (≤ 700 ms) have passed; long ones (≥ 1000 s) cannot
let last = [];
for (const deadline = Date.now() + 20000; ;) {
  last = [];
  for (let i = 0; i < replicas.length; i++) {
    if (replicas[i].state !== 'live') { last.push(`replica ${i} is ${replicas[i].state}`); continue; }
    last.push(...(await mismatches(resp, (...a) => replicas[i].call(...a), SPECS[i].sees, `node replica ${i} (${SPECS[i].token})`)));
  }
  const state = await page.evaluate(() => window.r.state);
  if (state !== 'live') last.push(`chromium replica is ${state}`);
  else last.push(...(await mismatches(resp, (...a) => page.evaluate((argv) => window.r.call(...argv), a), chromeSpec.sees, 'chromium replica')));
  if (last.length === 0) break;
  if (Date.now() > deadline) fail(`not converged (seed ${seed}):\n  ${last.slice(0, 20).join('\n  ')}`);
  await sleep(200);
}

// Streams (with groups) were among what converged.
let streams = 0;
for (const p of P) {
  for (const k of await serverKeys(resp, p)) if ((await resp.cmd('TYPE', k)) === 'stream') streams++;
}
assert(streams > 0, 'no stream was left to compare');
console.log(`${streams} streams compared`);

const pageViolations = await page.evaluate(() => window.violations);
assert(violations.length === 0, `keys outside the allowed prefixes were delivered: ${violations.slice(0, 10)}`);
assert(pageViolations.length === 0, `chromium got keys outside its prefixes: ${pageViolations.slice(0, 10)}`);
const sizes = await Promise.all(replicas.map((r) => r.dbsize()));
assert(sizes[3] === 0, `a token with no visible prefix holds keys: ${sizes[3]}`);
console.log(`converged: node replicas hold ${sizes.join(', ')} keys; chromium ${await page.evaluate(() => window.r.dbsize())}`);
for (const r of replicas) r.close();
await browser.close();
resp.close();
process.exit(0);
