// ioredis' Cluster client against a recached fleet, started from ONE engine (no proxy).
// Run by tests/tests/cluster_clients.rs (node_modules installed by scripts/test.sh):
//
//   node ioredis_cluster.js <engine port> <number of engines>
//
// Connects (CLUSTER SLOTS + CLUSTER INFO), writes and reads 300 keys spread over every
// instance, checks that the client's slot table names every engine, and prints one JSON line.
// Any failure exits with status 1; the whole run is bounded by a 30 s timer.
'use strict';
const { Cluster } = require('ioredis');

const port = Number(process.argv[2]);
const engines = Number(process.argv[3]);
const timer = setTimeout(() => { console.error('timeout'); process.exit(1); }, 30000);

async function main() {
  const cluster = new Cluster([{ host: '127.0.0.1', port }], {
    clusterRetryStrategy: () => null,
    redisOptions: { connectTimeout: 5000, maxRetriesPerRequest: 2 },
  });
  await new Promise((resolve, reject) => {
    cluster.once('ready', resolve);
    cluster.once('error', reject);
  });
  const nodes = cluster.nodes('master').map((n) => `${n.options.host}:${n.options.port}`);
  if (nodes.length !== engines) throw new Error(`ioredis sees ${nodes} for ${engines} engines`);
  for (let i = 0; i < 300; i++) {
    const r = await cluster.set(`io:${i}`, `v${i}`);
    if (r !== 'OK') throw new Error(`SET io:${i} -> ${r}`);
  }
  for (let i = 0; i < 300; i++) {
    const v = await cluster.get(`io:${i}`);
    if (v !== `v${i}`) throw new Error(`GET io:${i} -> ${v}`);
  }
  // Which node serves each key, as the client computed it: both instances are used.
  const used = new Set();
  for (let i = 0; i < 300; i++) {
    const slot = require('cluster-key-slot')(`io:${i}`);
    used.add(cluster.slots[slot][0]);
  }
  if (used.size !== engines) throw new Error(`keys went to ${[...used]}`);
  await cluster.quit();
  console.log(JSON.stringify({ ok: true, nodes, used: [...used] }));
}

main().then(() => { clearTimeout(timer); process.exit(0); })
  .catch((e) => { console.error(e && e.stack || e); process.exit(1); });
