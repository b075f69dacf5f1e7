// ioredis's Cluster (newest release, default options: it follows -MOVED/-ASK/-TRYAGAIN and
// refreshes its slot table by itself) connected to one engine of a fleet while
// `recached resize` moves slots and adds or retires engines (tests/tests/resize.rs).
//
//   node ioredis_cluster_resize.js PORT STOP_FILE KEYS
//
// Writes KEYS keys `io:<i>`, then loops until STOP_FILE exists (at most 300 s): SET a key to
// a new value, GET it back, every 50 rounds MGET-free reads of all keys. Every rejected call
// or wrong value is an error (what an application would see). Prints one JSON line.
const fs = require('node:fs');
const { Cluster } = require('ioredis');

const [port, stopFile, n] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4] || 300)];

(async () => {
  const c = new Cluster([{ host: '127.0.0.1', port }]);
  const values = new Map();
  for (let i = 0; i < n; i++) {
    await c.set(`io:${i}`, '0');
    values.set(`io:${i}`, '0');
  }
  let rounds = 0;
  let errors = 0;
  let last = '';
  const deadline = Date.now() + 300_000;
  while (!fs.existsSync(stopFile) && Date.now() < deadline) {
    const k = `io:${rounds % n}`;
    const v = String(rounds);
    try {
      await c.set(k, v);
      values.set(k, v);
      const got = await c.get(k);
      if (got !== v) { errors++; last = `GET ${k}: ${got} != ${v}`; }
      if (rounds % 50 === 0) {
        const all = await Promise.all([...values.keys()].map((key) => c.get(key)));
        const bad = [...values.entries()].filter(([, want], i) => all[i] !== want);
        if (bad.length) { errors++; last = `reads: ${bad.length} wrong, e.g. ${bad[0][0]}`; }
      }
    } catch (e) {
      errors++;
      last = `${e.name}: ${e.message}`;
    }
    rounds++;
  }
  const keys = [...values.keys()];
  const final = await Promise.all(keys.map((key) => c.get(key)));
  const wrong = keys.filter((key, i) => final[i] !== values.get(key)).length;
  console.log(JSON.stringify({ rounds, errors, last, final_wrong: wrong }));
  c.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
