// The demo page in real headless Chromium (run by tests/tests/fanout_browser.rs):
// - the page served by the fan-out goes live (a replica of `demo:` keys in WebAssembly);
// - SET, HSET and ZADD sent with redis-cli through the proxy appear in the page;
// - the page's replica answers GET with no network request: no HTTP request and no
//   WebSocket frame sent (the browser's own network log, via the Chrome DevTools Protocol).
// Env: FANOUT_PORT, PROXY_PORT, TOKEN (optional), SCREENSHOT (optional PNG path).
import { execFileSync } from 'node:child_process';
import { env, assert, fail, launchChromium, waitFor, sleep } from './lib.mjs';

const fanout = env('FANOUT_PORT');
const proxy = env('PROXY_PORT');
const token = process.env.TOKEN;
const cli = (...args) => execFileSync('redis-cli', ['-p', proxy, ...args], { encoding: 'utf8' }).trim();

const browser = await launchChromium();
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  const requests = [];
  let wsSent = 0;
  cdp.on('Network.requestWillBeSent', (e) => requests.push(e.request.url));
  cdp.on('Network.webSocketFrameSent', () => { wsSent++; });

  cli('DEL', 'demo:counter:visits', 'demo:stats', 'demo:leaderboard', 'demo:title');
  cli('SET', 'demo:title', 'before the page');
  const url = `http://127.0.0.1:${fanout}/${token ? `?token=${encodeURIComponent(token)}` : ''}`;
  await page.goto(url);
  await page.waitForSelector('body[data-state="live"]', { timeout: 15000 });
  assert(requests.some((u) => u.endsWith('/recached.wasm')), `the page loaded the module: ${requests}`);

  // Writes through the proxy show up in the page.
  cli('SET', 'demo:counter:visits', '42');
  cli('HSET', 'demo:stats', 'cpu', '42%', 'region', 'eu-west');
  cli('ZADD', 'demo:leaderboard', '100', 'alice', '50', 'bob', '75', 'carol');
  const text = (sel) => page.$eval(sel, (el) => el.textContent);
  await waitFor(async () => (await text('#counters')).includes('42'), 10000, 'the counter in the page');
  await waitFor(async () => (await text('#stats')).includes('42%'), 10000, 'the hash in the page');
  await waitFor(async () => (await text('#leaderboard')).includes('alice'), 10000, 'the leaderboard');
  const board = await page.$$eval('#leaderboard .name', (els) => els.map((e) => e.textContent));
  assert(JSON.stringify(board) === JSON.stringify(['alice', 'carol', 'bob']), `leaderboard order ${board}`);
  cli('ZINCRBY', 'demo:leaderboard', '60', 'bob');
  await waitFor(async () => (await page.$eval('#leaderboard .name', (e) => e.textContent)) === 'bob', 10000, 'bob on top');

  // GET from the replica: no HTTP request, no WebSocket frame.
  await sleep(300);
  const before = { http: requests.length, ws: wsSent };
  const got = await page.evaluate(() => [
    window.recached.get('demo:counter:visits'),
    window.recached.hget('demo:stats', 'cpu'),
    window.recached.zscore('demo:leaderboard', 'bob'),
    window.recached.get('demo:title'),
    window.recached.get('demo:missing'),
  ]);
  assert(JSON.stringify(got) === JSON.stringify(['42', '42%', 110, 'before the page', null]), `replica reads ${JSON.stringify(got)}`);
  await page.fill('#lookup-key', 'demo:counter:visits');
  await page.click('#lookup button');
  await waitFor(async () => (await text('#lookup-result')).includes('42'), 5000, 'the lookup result');
  await sleep(300);
  assert(requests.length === before.http, `GET made HTTP requests: ${requests.slice(before.http)}`);
  assert(wsSent === before.ws, `GET sent ${wsSent - before.ws} WebSocket frame(s)`);

  // Expiry is local: a key with a short TTL disappears from the page's reads on time.
  cli('SET', 'demo:title', 'short-lived', 'PX', '400');
  await waitFor(() => page.evaluate(() => window.recached.get('demo:title') === 'short-lived'), 5000, 'the TTL key');
  await waitFor(() => page.evaluate(() => window.recached.get('demo:title') === null), 5000, 'local expiry');

  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  console.log('demo page: OK');
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await browser.close();
}
