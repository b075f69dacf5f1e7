// npm `memcached` (the newest release, a text-protocol client; tests/clients/package-lock.json)
// with its default settings against the recached proxy's memcached port. Run by
// tests/tests/memcached.rs:
//
//   node memcached_proxy.js <memcached port>
//
// set/get, getMulti over 100 keys (both engines), add/replace/append/prepend, gets + cas,
// incr/decr, touch, del, flags kept through the client's own type flags (a JSON object and a
// number round-trip), version, flush. Prints one line per check, `ok` last; any failure exits 1
// with a message (60 s watchdog; each call bounded).
'use strict';
const Memcached = require('memcached');
const { check, eq, within, watchdog, run } = require('./common');

const port = Number(process.argv[2]);
watchdog(60000);

run(async () => {
  console.log('memcached', require('memcached/package.json').version);
  const m = new Memcached(`127.0.0.1:${port}`, { retries: 0, timeout: 5000 });
  const call = (what, ...args) =>
    within(5000, what, new Promise((resolve, reject) =>
      m[what](...args, (err, data) => (err ? reject(err) : resolve(data)))));

  await call('flush');
  check((await call('set', 'js:k', 'hello', 0)) === true, 'set');
  check((await call('get', 'js:k')) === 'hello', 'get');
  check((await call('get', 'js:missing')) === undefined, 'get miss');
  await call('set', 'js:obj', { a: [1, 2] }, 0);
  check(eq(await call('get', 'js:obj'), { a: [1, 2] }), 'a JSON value (the client flags say so)');
  await call('set', 'js:num', 42, 0);
  check((await call('get', 'js:num')) === 42, 'a number (the client flags say so)');
  console.log('set/get: ok');

  const keys = Array.from({ length: 100 }, (_, i) => `js:many:${i}`);
  for (const k of keys) await call('set', k, `v-${k}`, 0);
  const many = await call('getMulti', keys);
  check(keys.every((k) => many[k] === `v-${k}`), 'getMulti');
  console.log('getMulti: ok');

  check((await call('add', 'js:k', 'x', 0).catch(() => false)) === false, 'add on an existing key');
  check((await call('add', 'js:new', 'x', 0)) === true, 'add');
  check((await call('replace', 'js:new', 'y', 0)) === true, 'replace');
  check((await call('append', 'js:k', '!')) === true, 'append');
  check((await call('prepend', 'js:k', '>')) === true, 'prepend');
  check((await call('get', 'js:k')) === '>hello!', 'after append/prepend');
  const g = await call('gets', 'js:k');
  check(g && g.cas, `gets ${JSON.stringify(g)}`);
  check((await call('cas', 'js:k', 'swapped', g.cas, 0)) === true, 'cas');
  check((await call('cas', 'js:k', 'again', g.cas, 0).catch(() => false)) === false, 'stale cas');
  check((await call('get', 'js:k')) === 'swapped', 'value after cas');
  console.log('storage/cas: ok');

  await call('set', 'js:n', '10', 0);
  check((await call('incr', 'js:n', 5)) === 15, 'incr');
  check((await call('decr', 'js:n', 100)) === 0, 'decr floors at 0');
  check((await call('incr', 'js:nokey', 1)) === false, 'incr on a missing key');
  check((await call('touch', 'js:new', 100)) === true, 'touch');
  check((await call('del', 'js:new')) === true, 'del');
  check((await call('get', 'js:new')) === undefined, 'deleted');
  const v = await call('version');
  check(Array.isArray(v) && v[0].version.startsWith('1.6'), `version ${JSON.stringify(v)}`);
  console.log('arith/touch/del/version: ok');
  m.end();
});
