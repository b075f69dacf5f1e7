// Browser replicas across `recached resize` (issue 21; run by tests/tests/fanout_resize.rs):
// one replica in Node (the page's recached.js + recached.wasm) and one in headless Chromium
// follow every key while a writer changes keys `rz:<i>` through the proxy and the test grows
// the fleet 2→3 and shrinks it back to 2 underneath. When STOP_FILE appears the writer stops;
// then, within a bounded wait, both replicas must hold exactly the server's keys and values
// (type, value, PEXPIRETIME; the server read through the proxy).
// Env: FANOUT_PORT, PROXY_PORT, WASM, READY_FILE (written once replicas are up and writing
// has begun), STOP_FILE.
import fs from 'node:fs';
import { connect } from '../../wasm/www/recached.js';
import { env, fail, sleep, Resp, mismatches, serverKeys, launchChromium } from './lib.mjs';

const fanout = Number(env('FANOUT_PORT'));
const url = `ws://127.0.0.1:${fanout}/ws`;
const wasm = await WebAssembly.compile(fs.readFileSync(env('WASM')));

const node = await connect(url, { prefixes: ['rz:'], wasm, minDelay: 20, maxDelay: 300 });
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.goto(`http://127.0.0.1:${fanout}/healthz`);
  await page.evaluate(async ({ url }) => {
    const m = await import('/recached.js');
    window.r = await m.connect(url, { prefixes: ['rz:'], minDelay: 20, maxDelay: 300 });
  }, { url });

  const resp = await Resp.connect(Number(env('PROXY_PORT')));
  const KEYS = 300;
  let writes = 0;
  const deadline = Date.now() + 240_000;
  while (!fs.existsSync(env('STOP_FILE'))) {
    if (Date.now() > deadline) fail('STOP_FILE never appeared');
    const i = writes % KEYS;
    const k = `rz:${i}`;
    switch (writes % 5) {
      case 0: await resp.cmd('SET', k, `v${writes}`); break;
      case 1: await resp.cmd('HSET', `rz:h${i}`, 'f', `${writes}`, 'g', 'x'); break;
      case 2: await resp.cmd('INCR', `rz:n${i}`); break;
      case 3: await resp.cmd('DEL', `rz:${(i * 7) % KEYS}`); break;
      default: await resp.cmd('SET', `rz:t${i}`, `${writes}`, 'EX', 3600); break;
    }
    writes++;
    if (writes === 200) fs.writeFileSync(env('READY_FILE'), 'ready');
    if (writes % 50 === 0) await sleep(1);
  }
  console.log(`writer: ${writes} writes`);

  // Both replicas equal the server, within a bounded wait.
  let last = [];
  for (const deadline = Date.now() + 60_000; ;) {
    last = [];
    if (node.state !== 'live') last.push(`node replica is ${node.state}`);
    else last.push(...(await mismatches(resp, async (...a) => node.call(...a), ['rz:'], 'node replica')));
    const state = await page.evaluate(() => window.r.state);
    if (state !== 'live') last.push(`chromium replica is ${state}`);
    else last.push(...(await mismatches(resp, (...a) => page.evaluate((argv) => window.r.call(...argv), a), ['rz:'], 'chromium replica')));
    if (last.length === 0) break;
    if (Date.now() > deadline) fail(`not converged after 60 s:\n  ${last.slice(0, 10).join('\n  ')}`);
    await sleep(100);
  }
  console.log(`converged: ${(await serverKeys(resp, 'rz:')).length} keys in both replicas`);
  resp.close?.();
} finally {
  await browser.close();
  node.close?.();
}
process.exit(0);
