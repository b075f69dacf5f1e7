#!/usr/bin/env python3
"""redis-py's RedisCluster against a recached fleet, connected to ONE engine (no proxy).

Run by tests/tests/cluster_clients.rs with the project-local venv (tests/cluster/.venv,
installed by scripts/test.sh):

    .venv/bin/python redis_py_cluster.py --port P --engines 127.0.0.1:P0,127.0.0.1:P1

Checks (each failure is an AssertionError, exit status 1):
1. discovery from one engine's address finds every engine (CLUSTER SLOTS covers 16384 slots);
2. 10,000 keys written and read one by one (the client follows the slot map; any -MOVED it
   had to follow is counted by redis-py's internals and would still succeed, so step 5 checks
   placement directly);
3. MGET across slots: mget_nonatomic splits it per node and returns values in key order;
4. a pipeline (ClusterPipeline groups commands per node) of SETs, INCRs and GETs;
5. hash-tagged multi-key commands (MSET, MGET, DEL, RENAME, MSETNX) on one slot;
6. every key is on the engine the slot map says: the map is recomputed here independently
   (CRC16 from redis-py, jump consistent hash over 64-slot blocks written out below from the
   paper), then checked with EXISTS / DBSIZE / CLUSTER COUNTKEYSINSLOT on each engine directly.
Prints one JSON line with per-engine key counts on success.
"""
import argparse
import json
import sys

import redis
from redis.cluster import RedisCluster, ClusterNode
from redis.crc import key_slot

BLOCK_SLOTS = 64


def jump_hash(key: int, buckets: int) -> int:
    """Lamping & Veach 2014, with 64-bit wrapping and the paper's float division."""
    buckets = max(buckets, 1)
    b, j = -1, 0
    mask = (1 << 64) - 1
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & mask
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def instance_for_key(key: bytes, n: int) -> int:
    return jump_hash(key_slot(key) // BLOCK_SLOTS, n)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True, help="the engine to start from")
    ap.add_argument("--engines", required=True, help="every engine host:port, instance order")
    ap.add_argument("--keys", type=int, default=10_000)
    args = ap.parse_args()
    engines = [(h, int(p)) for h, p in (e.rsplit(":", 1) for e in args.engines.split(","))]
    n = len(engines)

    rc = RedisCluster(host="127.0.0.1", port=args.port, socket_timeout=10,
                      socket_connect_timeout=5, cluster_error_retry_attempts=1)
    nodes = sorted((nd.host, nd.port) for nd in rc.get_primaries())
    assert nodes == sorted(engines), f"discovered {nodes}, fleet is {engines}"

    # 2. 10,000 keys one by one.
    keys = [f"key:{i}" for i in range(args.keys)]
    for i, k in enumerate(keys):
        assert rc.set(k, f"v{i}") is True, k
    for i, k in enumerate(keys):
        got = rc.get(k)
        assert got == f"v{i}".encode(), (k, got)

    # 3. MGET across slots, split by the client.
    sample = keys[:500]
    slots = {key_slot(k.encode()) for k in sample}
    assert len(slots) > 100, "the sample spans many slots"
    vals = rc.mget_nonatomic(sample + ["missing:key"])
    assert vals == [f"v{i}".encode() for i in range(500)] + [None], "mget_nonatomic order"

    # 4. A pipeline across instances.
    pipe = rc.pipeline()
    for i in range(200):
        pipe.set(f"pipe:{i}", i)
        pipe.incr(f"pipe:{i}")
        pipe.get(f"pipe:{i}")
    res = pipe.execute()
    assert len(res) == 600
    for i in range(200):
        assert res[3 * i] is True and res[3 * i + 1] == i + 1 and res[3 * i + 2] == str(i + 1).encode()

    # 5. Hash-tagged multi-key commands (one slot, so one node).
    assert rc.mset({"{user:1}:name": "ann", "{user:1}:mail": "a@x", "{user:1}:age": "7"})
    assert rc.mget("{user:1}:name", "{user:1}:mail", "{user:1}:age") == [b"ann", b"a@x", b"7"]
    assert rc.rename("{user:1}:age", "{user:1}:years")
    assert rc.get("{user:1}:years") == b"7"
    assert rc.msetnx({"{user:1}:name": "bob", "{user:1}:new": "1"}) is False
    assert rc.delete("{user:1}:name", "{user:1}:mail", "{user:1}:years") == 3
    assert rc.exists("{user:1}:name") == 0
    tagged = [f"{{user:2}}:{i}" for i in range(50)]
    rc.mset({k: "x" for k in tagged})
    assert rc.delete(*tagged) == 50

    # 6. Placement, checked on each engine directly.
    direct = [redis.Redis(host=h, port=p, socket_timeout=10) for h, p in engines]
    expected = [0] * n
    all_keys = keys + [f"pipe:{i}" for i in range(200)]
    for k in all_keys:
        expected[instance_for_key(k.encode(), n)] += 1
    for idx, r in enumerate(direct):
        assert r.dbsize() == expected[idx], f"engine {idx}: dbsize {r.dbsize()}, map says {expected[idx]}"
    for k in keys[:2000]:
        owner = instance_for_key(k.encode(), n)
        for idx, r in enumerate(direct):
            if idx == owner:
                assert r.exists(k) == 1, f"{k} missing on its owner {idx}"
    # The other engine refuses the key with MOVED to the owner.
    k = keys[0]
    owner = instance_for_key(k.encode(), n)
    other = direct[(owner + 1) % n]
    try:
        other.get(k)
        raise AssertionError("expected MOVED")
    except redis.exceptions.ResponseError as e:
        h, p = engines[owner]
        assert str(e) == f"MOVED {key_slot(k.encode())} {h}:{p}", str(e)
    # COUNTKEYSINSLOT agrees with the keys we wrote.
    s = key_slot(keys[0].encode())
    in_slot = sum(1 for kk in all_keys if key_slot(kk.encode()) == s)
    assert direct[owner].execute_command("CLUSTER", "COUNTKEYSINSLOT", s) == in_slot

    rc.close()
    print(json.dumps({"ok": True, "keys": len(all_keys), "per_engine": expected}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
