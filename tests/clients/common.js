// Shared by node_redis_proxy.js and ioredis_proxy.js: assertions that exit non-zero with a
// clear message, bounded waits, and the whole-run watchdog.
'use strict';

function fail(msg) {
  console.log(`FAIL: ${msg}`);
  process.exit(1);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

function eq(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// Resolves with `promise`, or fails the run after `ms` with `what` in the message.
function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The whole run is bounded: after `ms` the process exits with status 1.
function watchdog(ms) {
  setTimeout(() => fail(`timeout: the whole run took more than ${ms} ms`), ms).unref();
}

// Runs `main`, prints `ok` last on success, exits 1 with the error otherwise.
function run(main) {
  main().then(
    () => {
      console.log('ok');
      process.exit(0);
    },
    (e) => fail(e && e.stack ? e.stack : String(e)),
  );
}

module.exports = { fail, check, eq, within, sleep, watchdog, run };
