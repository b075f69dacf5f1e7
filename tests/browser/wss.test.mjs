// The demo page over HTTPS and wss:// in real headless Chromium (run by
// tests/tests/fanout_tls.rs): the page is loaded from the fan-out's TLS port (the test's
// self-made CA is not trusted by Chromium, so certificate errors are ignored), its replica
// connects with wss:// to the same port, and writes sent with redis-cli through the proxy
// appear in the page.
// Env: FANOUT_TLS_PORT, PROXY_PORT.
import { execFileSync } from 'node:child_process';
import { chromium } from 'playwright-core';
import { env, assert, fail, waitFor } from './lib.mjs';

const port = env('FANOUT_TLS_PORT');
const proxy = env('PROXY_PORT');
const cli = (...args) => execFileSync('redis-cli', ['-p', proxy, ...args], { encoding: 'utf8' }).trim();

// lib.mjs' launchChromium flags, plus --ignore-certificate-errors for the test certificate
// (ignoreHTTPSErrors on the context covers the page; the flag covers the WebSocket too).
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--ignore-certificate-errors',
  ],
});
try {
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  const page = await context.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  const sockets = [];
  cdp.on('Network.webSocketCreated', (e) => sockets.push(e.url));

  cli('DEL', 'demo:counter:visits', 'demo:title');
  cli('SET', 'demo:title', 'over tls');
  await page.goto(`https://127.0.0.1:${port}/`);
  await page.waitForSelector('body[data-state="live"]', { timeout: 15000 });
  assert(await page.evaluate(() => location.protocol) === 'https:', 'the page is served over https');
  assert(sockets.length > 0 && sockets.every((u) => u.startsWith(`wss://127.0.0.1:${port}/`)),
    `the replica's WebSocket is wss:// on the TLS port: ${sockets}`);
  await waitFor(() => page.evaluate(() => window.recached.get('demo:title') === 'over tls'), 10000,
    'the snapshot over wss');

  cli('SET', 'demo:counter:visits', '4242');
  const text = (sel) => page.$eval(sel, (el) => el.textContent);
  await waitFor(async () => (await text('#counters')).includes('4242'), 10000, 'the SET in the page');
  assert(await page.evaluate(() => window.recached.get('demo:counter:visits')) === '4242', 'replica read');
  console.log('wss demo page: OK');
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await browser.close();
}
