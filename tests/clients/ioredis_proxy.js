// ioredis (the newest release, tests/clients/package-lock.json) with its DEFAULT settings
// against the recached proxy. Run by tests/tests/clients_proxy.rs (node_modules installed by
// scripts/test.sh):
//
//   node ioredis_proxy.js <proxy port>
//
// ioredis 6 defaults to RESP3 (`protocol: 3`: HELLO 3 on connect, falling back to RESP2 only
// when the server refuses it) with `replyMapping: "legacy"` (RESP2-compatible shapes: a map
// becomes a flat array that HGETALL turns into an object, a double stays a string). Checks the
// protocol negotiated (the connection's `condition.protocol`, and HELLO without arguments),
// SET/GET, MGET of 100 keys, a pipeline, HGETALL (an object), ZSCORE (the double, as a string
// under the default legacy mapping), pub/sub on another connection, BLPOP woken by another
// client's RPUSH, SCAN iteration (scanStream) collecting every key exactly once. Prints
// `protocol: N`, one line per check, `ok` last; any failure exits 1 with a message. Every
// wait is bounded (per-step timeouts, a 60 s watchdog).
'use strict';
const Redis = require('ioredis');
const { check, eq, within, sleep, watchdog, run } = require('./common');

const port = Number(process.argv[2]);
const P = 'io:';
watchdog(60000);

function ready(client, what) {
  return within(5000, `${what} ready`, new Promise((resolve, reject) => {
    if (client.status === 'ready') return resolve();
    client.once('ready', resolve);
    client.once('error', reject);
  }));
}

run(async () => {
  console.log('ioredis', require('ioredis/package.json').version);
  // Default settings: only where the server is.
  const redis = new Redis(port, '127.0.0.1');
  await ready(redis, 'client');

  // --- protocol negotiated -------------------------------------------------------------
  const proto = redis.condition && redis.condition.protocol;
  console.log(`protocol: ${proto}`);
  check(proto === 3, `ioredis negotiated protocol ${proto}, expected 3 (its default; 2 means it fell back)`);
  const hello = await within(5000, 'HELLO', redis.call('HELLO'));
  console.log(`hello: ${JSON.stringify(hello)}`);
  const hi = Array.isArray(hello) ? hello.indexOf('proto') : -1;
  check(hi >= 0 && hello[hi + 1] === 3, `HELLO reply does not say proto 3: ${JSON.stringify(hello)}`);

  // --- SET / GET -------------------------------------------------------------------------
  check((await redis.set(P + 'k', 'v1')) === 'OK', 'SET');
  const got = await redis.get(P + 'k');
  check(got === 'v1', `GET -> ${JSON.stringify(got)}, expected "v1"`);
  check((await redis.get(P + 'missing')) === null, 'GET of a missing key is not null');
  console.log('set/get: ok');

  // --- MGET of 100 keys --------------------------------------------------------------------
  const keys = Array.from({ length: 100 }, (_, i) => `${P}mget:${i}`);
  check((await redis.mset(keys.flatMap((k, i) => [k, `v${i}`]))) === 'OK', 'MSET of 100 keys');
  const vals = await redis.mget([...keys, P + 'mget:missing']);
  const expected = [...keys.map((_, i) => `v${i}`), null];
  check(eq(vals, expected), `MGET of 100 keys -> ${JSON.stringify(vals)}`);
  console.log('mget 100: ok');

  // --- non-transactional pipeline -------------------------------------------------------
  const res = await within(5000, 'pipeline', redis.pipeline()
    .set(P + 'pipe:a', '1')
    .incr(P + 'pipe:a')
    .get(P + 'pipe:a')
    .rpush(P + 'pipe:l', 'x', 'y')
    .lrange(P + 'pipe:l', 0, -1)
    .get(P + 'pipe:missing')
    .exec());
  check(eq(res, [[null, 'OK'], [null, 2], [null, '2'], [null, 2], [null, ['x', 'y']], [null, null]]),
    `pipeline -> ${JSON.stringify(res)}`);
  console.log('pipeline: ok');

  // --- HGETALL: an object -----------------------------------------------------------------
  check((await redis.hset(P + 'h', { f1: 'a', f2: 'b', f3: '3' })) === 3, 'HSET of 3 fields');
  const h = await redis.hgetall(P + 'h');
  check(h !== null && typeof h === 'object' && !Array.isArray(h), `HGETALL is not an object: ${JSON.stringify(h)}`);
  check(eq(Object.entries(h).sort(), [['f1', 'a'], ['f2', 'b'], ['f3', '3']]), `HGETALL -> ${JSON.stringify(h)}`);
  check(Object.keys(await redis.hgetall(P + 'nohash')).length === 0, 'HGETALL of a missing key is not empty');
  console.log('hgetall: ok');

  // --- ZSCORE: the double, a string under the default "legacy" replyMapping ------------------
  check((await redis.zadd(P + 'z', 1.5, 'm1', -2.25, 'm2')) === 2, 'ZADD');
  const s1 = await redis.zscore(P + 'z', 'm1');
  const s2 = await redis.zscore(P + 'z', 'm2');
  check(typeof s1 === 'string' && Number(s1) === 1.5, `ZSCORE m1 -> ${JSON.stringify(s1)}, expected "1.5"`);
  check(typeof s2 === 'string' && Number(s2) === -2.25, `ZSCORE m2 -> ${JSON.stringify(s2)}, expected "-2.25"`);
  check((await redis.zscore(P + 'z', 'none')) === null, 'ZSCORE of a missing member is not null');
  console.log('zscore: ok');

  // --- pub/sub: subscribe on another connection, publish, receive ---------------------------
  const sub = new Redis(port, '127.0.0.1');
  await ready(sub, 'subscriber');
  let deliver;
  const received = new Promise((resolve) => { deliver = resolve; });
  sub.on('message', (channel, message) => deliver({ channel, message }));
  const count = await within(5000, 'SUBSCRIBE', sub.subscribe(P + 'chan'));
  check(count === 1, `SUBSCRIBE -> ${JSON.stringify(count)}, expected 1`);
  const n = await redis.publish(P + 'chan', 'hello');
  check(n === 1, `PUBLISH reached ${n} subscribers, expected 1`);
  const msg = await within(5000, 'published message', received);
  check(msg.message === 'hello' && msg.channel === P + 'chan', `message ${JSON.stringify(msg)}`);
  await within(5000, 'UNSUBSCRIBE', sub.unsubscribe(P + 'chan'));
  sub.disconnect();
  console.log('pubsub: ok');

  // --- BLPOP woken by another client's RPUSH ------------------------------------------------
  const blocker = new Redis(port, '127.0.0.1');
  await ready(blocker, 'blocker');
  const t0 = Date.now();
  const pop = blocker.blpop(P + 'queue', 10);
  await sleep(500);
  check((await redis.rpush(P + 'queue', 'job1')) === 1, 'RPUSH');
  const popped = await within(12000, 'BLPOP', pop);
  const waited = Date.now() - t0;
  check(popped !== null, 'BLPOP timed out (10 s) without being woken');
  check(eq(popped, [P + 'queue', 'job1']), `BLPOP -> ${JSON.stringify(popped)}`);
  check(waited >= 400, `BLPOP returned after ${waited} ms, before the RPUSH`);
  blocker.disconnect();
  console.log(`blpop: ok (woken after ${waited} ms)`);

  // --- SCAN iteration: every key exactly once --------------------------------------------------
  const scanKeys = Array.from({ length: 500 }, (_, i) => `${P}scan:${i}`);
  await redis.mset(scanKeys.flatMap((k) => [k, '1']));
  const seen = [];
  await within(20000, 'SCAN iteration', new Promise((resolve, reject) => {
    const stream = redis.scanStream({ match: P + 'scan:*', count: 50 });
    stream.on('data', (batch) => seen.push(...batch));
    stream.on('end', resolve);
    stream.on('error', reject);
  }));
  const uniq = new Set(seen);
  check(uniq.size === seen.length, `SCAN returned ${seen.length - uniq.size} keys more than once`);
  const missing = scanKeys.filter((k) => !uniq.has(k));
  check(missing.length === 0 && uniq.size === scanKeys.length,
    `SCAN missed ${missing.length} keys, saw ${uniq.size} for ${scanKeys.length}`);
  console.log(`scan: ok (${seen.length} keys)`);

  // --- a database chosen by URL, kept apart from 0; FLUSHDB there touches only it ---------
  const db1 = new Redis(`redis://127.0.0.1:${port}/1`);
  await ready(db1, 'db1');
  const dbKeys = Array.from({ length: 20 }, (_, i) => `${P}db:${i}`);
  check((await db1.mset(dbKeys.flatMap((k) => [k, 'one']))) === 'OK', 'MSET in database 1');
  check((await redis.get(dbKeys[0])) === null, 'a key set in database 1 is visible in database 0');
  check((await redis.set(dbKeys[0], 'zero')) === 'OK', 'SET in database 0');
  check(eq(await db1.mget(dbKeys), dbKeys.map(() => 'one')), 'MGET in database 1');
  check((await db1.dbsize()) === 20, 'DBSIZE of database 1');
  const before0 = await redis.dbsize();
  check((await db1.flushdb()) === 'OK', 'FLUSHDB in database 1');
  check((await db1.dbsize()) === 0, 'database 1 not empty after its FLUSHDB');
  check((await redis.dbsize()) === before0 && (await redis.get(dbKeys[0])) === 'zero',
    'FLUSHDB of database 1 touched database 0');
  db1.disconnect();
  console.log('database by url: ok');

  redis.disconnect();
});
