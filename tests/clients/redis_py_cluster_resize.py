"""redis-py's RedisCluster (newest release, default settings: RESP2 protocol default, its own
-MOVED/-ASK handling) connected to one engine of a fleet while `recached resize` moves slots
and adds or retires engines (tests/tests/resize.rs).

    .venv/bin/python redis_py_cluster_resize.py --port P --stop-file F --keys N

Writes N keys `rp:<i>` at start, then loops until F exists (at most 300 s): SET a key to a new
value, GET it back, and every 50 rounds read all N keys with mget_nonatomic. Every exception
or wrong value counts as an error (the client retries redirects by itself: an error is what an
application would see). Prints one JSON line: rounds, errors, the last error, and the final
value of every key checked.
"""
import argparse
import json
import os
import time

from redis.cluster import RedisCluster

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--stop-file", required=True)
p.add_argument("--keys", type=int, default=500)
a = p.parse_args()

rc = RedisCluster(host="127.0.0.1", port=a.port)
values = {}
for i in range(a.keys):
    k = f"rp:{i}"
    rc.set(k, "0")
    values[k] = "0"

rounds = errors = 0
last = ""
deadline = time.monotonic() + 300
while not os.path.exists(a.stop_file) and time.monotonic() < deadline:
    k = f"rp:{rounds % a.keys}"
    v = str(rounds)
    try:
        rc.set(k, v)
        values[k] = v
        got = rc.get(k)
        if got != v.encode():
            errors += 1
            last = f"GET {k}: {got!r} != {v!r}"
        if rounds % 50 == 0:
            keys = list(values)
            got = rc.mget_nonatomic(keys)
            bad = [kk for kk, g in zip(keys, got) if g != values[kk].encode()]
            if bad:
                errors += 1
                last = f"mget: {len(bad)} wrong, e.g. {bad[0]}"
    except Exception as e:  # what the application would see
        errors += 1
        last = f"{type(e).__name__}: {e}"
    rounds += 1

keys = list(values)
final = rc.mget_nonatomic(keys)
wrong = sum(1 for kk, g in zip(keys, final) if g != values[kk].encode())
print(json.dumps({"rounds": rounds, "errors": errors, "last": last, "final_wrong": wrong}))
