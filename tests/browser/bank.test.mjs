// A browser replica following Jepsen's bank, in real headless Chromium (run by
// tests/tests/transactions.rs, `a_chromium_replica_converges_after_the_bank_run`).
//
// The page served by the fleet's fan-out imports /recached.js (which loads /recached.wasm) and
// subscribes to `bank:`, the accounts (spread over the engines) and the CAS counters. The Rust
// test runs the bank (cross-engine MULTI/EXEC transfers through the proxy, transfers straight
// on engine 0, WATCH/MULTI compare-and-set over two engines) while the page follows, then
// hands over what the run's ledger says each key must have received. Asserted here:
// - the page's local reads of every account and both counters end equal to the values read
//   through the proxy (bounded wait), and the accounts sum to the bank's total in the page;
// - the page applied exactly the effects the ledger predicts, per key: every committed
//   transfer changed both its accounts, every committed CAS round both counters; none was
//   lost, none applied twice. In particular the keys of every engine received keychanges (the
//   effects of cross-engine transactions reached the feed), each from its own engine's feed;
// - the page was synced once (one snapshot per engine) and never resynced: the final values
//   came from keychanges, not from a fresh snapshot.
//
// Protocol with the Rust test: prints `ready` once the page's replica is live with every
// account at its initial balance; then reads one JSON line on stdin, `{"keychanges": {key:
// count}}`; prints `bank replica: OK <json>` at the end (any failure: `FAIL: …`, exit 1).
// Env: FANOUT_PORT, PROXY_PORT, BANK (JSON: accounts, engines (each account's engine), cas,
// initial, total).
import readline from 'node:readline';
import { env, assert, fail, launchChromium, Resp, sleep } from './lib.mjs';

const fanout = Number(env('FANOUT_PORT'));
const proxy = Number(env('PROXY_PORT'));
const bank = JSON.parse(env('BANK'));
const keys = [...bank.accounts, ...bank.cas];
const engineOf = Object.fromEntries(bank.accounts.map((a, i) => [a, bank.engines[i]]));
const nEngines = Math.max(...bank.engines) + 1;

// One line from the test on stdin, bounded.
const lines = readline.createInterface({ input: process.stdin });
const nextLine = (ms) => new Promise((resolve) => {
  const timer = setTimeout(() => fail(`no line from the test within ${ms} ms`), ms);
  lines.once('line', (l) => { clearTimeout(timer); resolve(l); });
});

const browser = await launchChromium();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.goto(`http://127.0.0.1:${fanout}/healthz`);
  await page.evaluate(async (url) => {
    const m = await import('/recached.js');
    window.counts = {};      // key → keychanges applied
    window.instanceOf = {};  // key → the instances its keychanges came from
    window.snapshots = 0;    // snapshot messages (one per engine for the first sync)
    window.refetches = 0;    // must-refetch messages
    window.states = [];
    window.r = await m.connect(url, { prefixes: ['bank:'], waitReady: false });
    window.r.on('keychange', ({ key, instance }) => {
      if (key === null) return; // a flush: counted by the state checks below
      window.counts[key] = (window.counts[key] ?? 0) + 1;
      (window.instanceOf[key] ??= new Set()).add(instance);
    });
    window.r.on('message', (msg) => {
      if (msg.type === 'snapshot') window.snapshots++;
      if (msg.type === 'must-refetch') window.refetches++;
    });
    window.r.on('state', (s) => window.states.push(s));
  }, `ws://127.0.0.1:${fanout}/ws`);

  const deadline = Date.now() + 20000;
  while ((await page.evaluate(() => window.r.state)) !== 'live') {
    if (Date.now() > deadline) fail(`the page's replica is not live: ${await page.evaluate(() => window.r.state)}`);
    await sleep(25);
  }
  const initial = await page.evaluate((ks) => window.r.mget(...ks), bank.accounts);
  assert(initial.every((v) => v === String(bank.initial)), `initial balances in the page: ${initial}`);
  const synced = await page.evaluate(() => ({ snapshots: window.snapshots, refetches: window.refetches, states: window.states.slice() }));
  console.log('ready');

  const { keychanges } = JSON.parse(await nextLine(60000));

  // The engines' final values, through the proxy (the bank has stopped: they no longer change).
  const resp = await Resp.connect(proxy);
  const want = await resp.cmd('MGET', ...keys);
  resp.close();
  assert(want.every((v) => typeof v === 'string'), `MGET through the proxy: ${JSON.stringify(want)}`);
  const wantSum = want.slice(0, bank.accounts.length).reduce((s, v) => s + Number(v), 0);
  assert(wantSum === bank.total, `the engines' accounts sum to ${wantSum}, not ${bank.total}`);

  // Wait (bounded) until the page holds the final values and has applied every effect.
  const countDiffs = (counts) => keys
    .filter((k) => (counts[k] ?? 0) !== (keychanges[k] ?? 0))
    .map((k) => `${k}: applied ${counts[k] ?? 0}, ledger ${keychanges[k] ?? 0}`);
  let got;
  let counts;
  let waited = 0;
  for (const t0 = Date.now(); ; waited = Date.now() - t0) {
    ({ got, counts } = await page.evaluate((ks) => ({ got: window.r.mget(...ks), counts: window.counts }), keys));
    const same = JSON.stringify(got) === JSON.stringify(want);
    if (same && countDiffs(counts).length === 0) break;
    if (waited > 15000) {
      const diff = keys.map((k, i) => [k, got[i], want[i]]).filter(([, g, w]) => g !== w)
        .map(([k, g, w]) => `${k}: page ${g}, proxy ${w}`);
      fail(`the page did not converge within 15 s:\n  values: ${diff.slice(0, 20).join('\n  ') || 'equal'}`
        + `\n  keychanges: ${countDiffs(counts).slice(0, 20).join('\n  ') || 'as the ledger says'}`);
    }
    await sleep(50);
  }

  // The sum invariant, in the page.
  const sum = got.slice(0, bank.accounts.length).reduce((s, v) => s + Number(v), 0);
  assert(sum === bank.total, `the page's accounts sum to ${sum}, not ${bank.total}`);

  // Every engine's accounts changed through keychanges from that engine's own feed.
  const perEngine = new Array(nEngines).fill(0);
  const instances = await page.evaluate(() => Object.fromEntries(
    Object.entries(window.instanceOf).map(([k, s]) => [k, [...s]])));
  for (const a of bank.accounts) {
    perEngine[engineOf[a]] += counts[a] ?? 0;
    const from = instances[a] ?? [];
    assert(from.every((i) => i === engineOf[a]), `${a} (engine ${engineOf[a]}) got keychanges from instances ${from}`);
  }
  assert(perEngine.every((c) => c > 0), `keychanges on the accounts of each engine: ${perEngine}`);
  for (let e = 0; e < nEngines; e++) {
    const changed = bank.accounts.filter((a, i) => engineOf[a] === e && want[i] !== String(bank.initial));
    assert(changed.length > 0, `no account of engine ${e} ended away from its initial balance`);
  }

  // Synced once, never resynced: the final values came from keychanges.
  const after = await page.evaluate(() => ({ snapshots: window.snapshots, refetches: window.refetches, states: window.states.slice(), state: window.r.state }));
  assert(synced.snapshots === nEngines, `first sync: ${synced.snapshots} snapshots for ${nEngines} engines`);
  assert(after.snapshots === synced.snapshots && after.refetches === synced.refetches && after.states.length === synced.states.length && after.state === 'live',
    `the page resynced during the run: ${JSON.stringify({ synced, after })}`);

  console.log(`bank replica: OK ${JSON.stringify({ keychanges_per_engine: perEngine, sum, converged_after_ms: waited })}`);
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await browser.close();
}
process.exit(0);
