// A browser replica subscribed to keys the engine evicts sees them deleted (issue 7; run by
// tests/tests/fanout_eviction.rs). One engine under allkeys-lru, the fan-out following its
// keychange feed, and a Node replica running the real recached.js + recached.wasm.
//
// 1. Without a limit, write BASE keys `ev:old:<i>` and wait until the replica holds them all.
// 2. Set maxmemory a little above used_memory and keep writing `ev:new:<i>` and `other:<i>`
//    (a prefix the replica did not subscribe to), reading a few old keys between batches so
//    LRU keeps them, until the engine has evicted at least MIN_EVICTED keys (bounded).
// 3. Wait (bounded) until the replica matches the engine, then assert: some subscribed keys
//    were evicted; every one of them is absent from the replica and reached it as a DEL
//    keychange (unless a resync replaced the replica's copy, reported); every subscribed key
//    the engine still holds has the engine's value in the replica; no `other:` key arrived.
// Env: FANOUT_PORT, ENGINE_PORT, WASM (path of recached.wasm).
import fs from 'node:fs';
import { connect } from '../../wasm/www/recached.js';
import { env, assert, fail, sleep, Resp } from './lib.mjs';

const BASE = 300;
const MIN_EVICTED = 400;
const MAX_WRITES = 5000;
const PAD = 'x'.repeat(1000);
const value = (k) => `${k}|${PAD}`;

const fanout = Number(env('FANOUT_PORT'));
const resp = await Resp.connect(Number(env('ENGINE_PORT')));
const info = async (section, field) => {
  const text = await resp.cmd('INFO', section);
  const line = text.split('\r\n').find((l) => l.startsWith(`${field}:`));
  if (!line) fail(`${field} missing in INFO ${section}`);
  return Number(line.slice(field.length + 1));
};

assert((await resp.cmd('CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru')) === 'OK', 'policy');
const wasm = await WebAssembly.compile(fs.readFileSync(env('WASM')));
const r = await connect(`ws://127.0.0.1:${fanout}/ws`, { prefixes: ['ev:'], wasm, minDelay: 20, maxDelay: 300 });
const dels = new Set();
const foreign = [];
let snapshots = 0;
r.on('keychange', ({ key, command }) => {
  if (key !== null && !key.startsWith('ev:')) foreign.push(key);
  if (command === 'DEL') dels.add(key);
});
r.on('snapshot', () => { snapshots++; });
r.on('error', (e) => console.warn(`replica: ${e.message}`));

const waitFor = async (pred, ms, what) => {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) fail(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`);
    await sleep(25);
  }
};

// ---- 1. keys the replica holds -------------------------------------------------------
const keys = [];
await Promise.all(Array.from({ length: BASE }, (_, i) => {
  keys.push(`ev:old:${i}`);
  return resp.cmd('SET', `ev:old:${i}`, value(`ev:old:${i}`));
}));
await waitFor(() => r.dbsize() === BASE, 10000, () => `the replica to hold ${BASE} keys (has ${r.dbsize()})`);
const snapshotsBefore = snapshots;

// ---- 2. writes at the limit ------------------------------------------------------------
const used = await info('memory', 'used_memory');
assert((await resp.cmd('CONFIG', 'SET', 'maxmemory', String(used + 200000))) === 'OK', 'maxmemory');
let written = 0;
let evicted = 0;
for (let batch = 0; evicted < MIN_EVICTED; batch++) {
  if (written >= MAX_WRITES) fail(`only ${evicted} evictions after ${written} writes`);
  const pending = [];
  for (let i = 0; i < 50; i++, written++) {
    const k = written % 2 === 0 ? `ev:new:${written}` : `other:${written}`;
    if (k.startsWith('ev:')) keys.push(k);
    pending.push(resp.cmd('SET', k, value(k)));
  }
  // The first 20 old keys are read after every batch: LRU should keep them.
  for (let i = 0; i < 20; i++) pending.push(resp.cmd('GET', `ev:old:${i}`));
  const replies = await Promise.all(pending);
  const refused = replies.find((x) => x instanceof Error);
  if (refused) fail(`a write was refused: ${refused.message}`);
  evicted = await info('stats', 'evicted_keys');
}

// ---- 3. compare --------------------------------------------------------------------------
const serverState = async () => {
  const ex = await Promise.all(keys.map((k) => resp.cmd('EXISTS', k)));
  return keys.map((k, i) => ({ key: k, present: ex[i] === 1 }));
};
const state = await serverState();
let last = '';
await waitFor(async () => {
  const bad = state.filter(({ key, present }) =>
    present ? r.get(key) !== value(key) : r.exists(key) !== 0);
  last = bad.slice(0, 10).map(({ key, present }) => `${key} (engine: ${present ? 'present' : 'evicted'})`).join(', ');
  return bad.length === 0;
}, 20000, () => `the replica to match the engine: ${last}`);
// Nothing is written any more, so a second reading of the engine must be the same.
const again = await serverState();
assert(JSON.stringify(again) === JSON.stringify(state), 'the engine changed after the writes stopped');

const gone = state.filter((s) => !s.present).map((s) => s.key);
const goneOld = gone.filter((k) => k.startsWith('ev:old:'));
const present = state.length - gone.length;
const hotKept = state.filter((s) => s.present && /^ev:old:(1?[0-9])$/.test(s.key)).length;
assert(evicted >= MIN_EVICTED, `evicted_keys ${evicted}`);
assert(goneOld.length >= 50, `only ${goneOld.length} keys the replica held were evicted`);
assert(present > 0, 'no subscribed key left');
assert(r.dbsize() === present, `replica holds ${r.dbsize()} keys, the engine ${present} under ev:`);
assert(foreign.length === 0, `keys outside ev: delivered: ${foreign.slice(0, 5)}`);
const resynced = snapshots - snapshotsBefore;
if (resynced === 0) {
  const silent = gone.filter((k) => !dels.has(k));
  assert(silent.length === 0, `evicted without a DEL keychange: ${silent.slice(0, 10)}`);
}
assert(hotKept >= 18, `only ${hotKept}/20 recently read keys kept (LRU)`);
console.log(`eviction: ${written} writes, evicted_keys ${evicted}; ${gone.length} subscribed keys evicted ` +
  `(${goneOld.length} the replica held), ${present} kept and equal; ${dels.size} DEL keychanges, ` +
  `${resynced} resyncs; recently read kept ${hotKept}/20`);
r.close();
resp.close();
process.exit(0);
