// node-redis (npm `redis`, the newest release, tests/clients/package-lock.json) with its
// DEFAULT settings against the recached proxy. Run by tests/tests/clients_proxy.rs
// (node_modules installed by scripts/test.sh):
//
//   node node_redis_proxy.js <proxy port>
//
// node-redis 5 and later default to RESP3 (`RESP` option unset = 3: HELLO 3 on connect).
// Checks the protocol negotiated (HELLO without arguments reports the connection's `proto`),
// SET/GET, MGET of 100 keys, a non-transactional pipeline (execAsPipeline), HGETALL (an
// object; a RESP3 map on the wire), ZSCORE (a number; a RESP3 double), pub/sub on a duplicate
// connection, BLPOP woken by another client's RPUSH, SCAN iteration (scanIterator) collecting
// every key exactly once. Prints `protocol: N`, one line per check, `ok` last; any failure
// exits 1 with a message. Every wait is bounded (per-step timeouts, a 60 s watchdog).
'use strict';
const { createClient } = require('redis');
const { check, eq, within, sleep, watchdog, run } = require('./common');

const port = Number(process.argv[2]);
const P = 'node:';
watchdog(60000);

run(async () => {
  console.log('node-redis', require('redis/package.json').version);
  // Default settings: only where the server is.
  const client = createClient({ socket: { host: '127.0.0.1', port } });
  client.on('error', (e) => console.log(`client error event: ${e}`));
  await within(5000, 'connect', client.connect());

  // --- protocol negotiated -------------------------------------------------------------
  check(client.options?.RESP === undefined, `RESP option set: ${client.options?.RESP}`);
  const hello = await within(5000, 'HELLO', client.sendCommand(['HELLO']));
  const helloObj = hello instanceof Map ? Object.fromEntries(hello) : hello;
  console.log(`protocol: ${helloObj.proto}`);
  console.log(`hello: ${JSON.stringify(helloObj)}`);
  check(helloObj !== null && typeof helloObj === 'object' && !Array.isArray(helloObj),
    `HELLO reply is not a map (object): ${JSON.stringify(hello)}`);
  check(helloObj.proto === 3, `node-redis negotiated protocol ${helloObj.proto}, expected 3 (its default)`);

  // --- SET / GET -------------------------------------------------------------------------
  check((await client.set(P + 'k', 'v1')) === 'OK', 'SET');
  const got = await client.get(P + 'k');
  check(got === 'v1', `GET -> ${JSON.stringify(got)}, expected "v1"`);
  check((await client.get(P + 'missing')) === null, 'GET of a missing key is not null');
  console.log('set/get: ok');

  // --- MGET of 100 keys --------------------------------------------------------------------
  const keys = Array.from({ length: 100 }, (_, i) => `${P}mget:${i}`);
  check((await client.mSet(keys.map((k, i) => [k, `v${i}`]))) === 'OK', 'MSET of 100 keys');
  const vals = await client.mGet([...keys, P + 'mget:missing']);
  const expected = [...keys.map((_, i) => `v${i}`), null];
  check(eq(vals, expected), `MGET of 100 keys -> ${JSON.stringify(vals)}`);
  console.log('mget 100: ok');

  // --- non-transactional pipeline -------------------------------------------------------
  const res = await within(5000, 'pipeline', client.multi()
    .set(P + 'pipe:a', '1')
    .incr(P + 'pipe:a')
    .get(P + 'pipe:a')
    .rPush(P + 'pipe:l', ['x', 'y'])
    .lRange(P + 'pipe:l', 0, -1)
    .get(P + 'pipe:missing')
    .execAsPipeline());
  check(eq(res, ['OK', 2, '2', 2, ['x', 'y'], null]), `pipeline -> ${JSON.stringify(res)}`);
  console.log('pipeline: ok');

  // --- HGETALL: an object (RESP3 map) -------------------------------------------------------
  check((await client.hSet(P + 'h', { f1: 'a', f2: 'b', f3: '3' })) === 3, 'HSET of 3 fields');
  const h = await client.hGetAll(P + 'h');
  check(h !== null && typeof h === 'object' && !Array.isArray(h) && !(h instanceof Map),
    `HGETALL is not a plain object: ${JSON.stringify(h)}`);
  check(eq(Object.entries(h).sort(), [['f1', 'a'], ['f2', 'b'], ['f3', '3']]),
    `HGETALL -> ${JSON.stringify(h)}`);
  check(Object.keys(await client.hGetAll(P + 'nohash')).length === 0, 'HGETALL of a missing key is not empty');
  console.log('hgetall: ok');

  // --- ZSCORE: a number (RESP3 double) -------------------------------------------------------
  check((await client.zAdd(P + 'z', [{ score: 1.5, value: 'm1' }, { score: -2.25, value: 'm2' }])) === 2, 'ZADD');
  const s1 = await client.zScore(P + 'z', 'm1');
  const s2 = await client.zScore(P + 'z', 'm2');
  check(typeof s1 === 'number' && s1 === 1.5, `ZSCORE m1 -> ${JSON.stringify(s1)} (${typeof s1}), expected 1.5`);
  check(typeof s2 === 'number' && s2 === -2.25, `ZSCORE m2 -> ${JSON.stringify(s2)} (${typeof s2}), expected -2.25`);
  check((await client.zScore(P + 'z', 'none')) === null, 'ZSCORE of a missing member is not null');
  console.log('zscore: ok');

  // --- pub/sub: subscribe on another connection, publish, receive ---------------------------
  const sub = client.duplicate();
  sub.on('error', (e) => console.log(`subscriber error event: ${e}`));
  await within(5000, 'subscriber connect', sub.connect());
  let deliver;
  const received = new Promise((resolve) => { deliver = resolve; });
  await within(5000, 'SUBSCRIBE', sub.subscribe(P + 'chan', (message, channel) => deliver({ message, channel })));
  const n = await client.publish(P + 'chan', 'hello');
  check(n === 1, `PUBLISH reached ${n} subscribers, expected 1`);
  const msg = await within(5000, 'published message', received);
  check(msg.message === 'hello' && msg.channel === P + 'chan', `message ${JSON.stringify(msg)}`);
  await within(5000, 'UNSUBSCRIBE', sub.unsubscribe(P + 'chan'));
  sub.destroy();
  console.log('pubsub: ok');

  // --- BLPOP woken by another client's RPUSH ------------------------------------------------
  const blocker = client.duplicate();
  blocker.on('error', (e) => console.log(`blocker error event: ${e}`));
  await within(5000, 'blocker connect', blocker.connect());
  const t0 = Date.now();
  const pop = blocker.blPop(P + 'queue', 10);
  await sleep(500);
  check((await client.rPush(P + 'queue', 'job1')) === 1, 'RPUSH');
  const popped = await within(12000, 'BLPOP', pop);
  const waited = Date.now() - t0;
  check(popped !== null, 'BLPOP timed out (10 s) without being woken');
  check(eq(popped, { key: P + 'queue', element: 'job1' }), `BLPOP -> ${JSON.stringify(popped)}`);
  check(waited >= 400, `BLPOP returned after ${waited} ms, before the RPUSH`);
  blocker.destroy();
  console.log(`blpop: ok (woken after ${waited} ms)`);

  // --- SCAN iteration: every key exactly once --------------------------------------------------
  const scanKeys = Array.from({ length: 500 }, (_, i) => `${P}scan:${i}`);
  await client.mSet(scanKeys.map((k) => [k, '1']));
  const seen = [];
  await within(20000, 'SCAN iteration', (async () => {
    for await (const batch of client.scanIterator({ MATCH: P + 'scan:*', COUNT: 50 })) {
      if (Array.isArray(batch)) seen.push(...batch); else seen.push(batch);
    }
  })());
  const uniq = new Set(seen);
  check(uniq.size === seen.length, `SCAN returned ${seen.length - uniq.size} keys more than once`);
  const missing = scanKeys.filter((k) => !uniq.has(k));
  check(missing.length === 0 && uniq.size === scanKeys.length,
    `SCAN missed ${missing.length} keys, saw ${uniq.size} for ${scanKeys.length}`);
  console.log(`scan: ok (${seen.length} keys)`);

  // --- a database chosen by URL, kept apart from 0; FLUSHDB there touches only it ---------
  const db1 = createClient({ url: `redis://127.0.0.1:${port}/1` });
  db1.on('error', (e) => console.log(`db1 error event: ${e}`));
  await within(5000, 'db1 connect', db1.connect());
  const dbKeys = Array.from({ length: 20 }, (_, i) => `${P}db:${i}`);
  check((await db1.mSet(dbKeys.map((k) => [k, 'one']))) === 'OK', 'MSET in database 1');
  check((await client.get(dbKeys[0])) === null, 'a key set in database 1 is visible in database 0');
  check((await client.set(dbKeys[0], 'zero')) === 'OK', 'SET in database 0');
  check(eq(await db1.mGet(dbKeys), dbKeys.map(() => 'one')), 'MGET in database 1');
  check((await db1.dbSize()) === 20, 'DBSIZE of database 1');
  const before0 = await client.dbSize();
  check((await db1.flushDb()) === 'OK', 'FLUSHDB in database 1');
  check((await db1.dbSize()) === 0, 'database 1 not empty after its FLUSHDB');
  check((await client.dbSize()) === before0 && (await client.get(dbKeys[0])) === 'zero',
    'FLUSHDB of database 1 touched database 0');
  db1.destroy();
  console.log('database by url: ok');

  client.destroy();
});
