"""redis-py's client-side caching (`cache_config=CacheConfig()`, RESP3) against the recached
proxy. Run by tests/tests/clients_proxy.rs (the venv is installed by scripts/test.sh):

    python redis_py_cache_proxy.py <proxy port>

redis-py turns `CLIENT TRACKING ON` on for its connections and keeps GET replies in a local
cache, dropping an entry when the server's `invalidate` push names its key. Checks, each with a
clear message on failure (exit status 1): a GET is answered from the cache the second time
(the cache holds it); a write by another client reaches the cache as an invalidation, so the
next GET reads the new value, for keys on every engine of the fleet; a FLUSHALL empties the
cache; a client's own write is seen at once. Prints one line per check and `ok` last;
SIGALRM ends the run after 60 s.
"""

import sys
import time

import redis
from redis.cache import CacheConfig

from common import check, fail, watchdog

PORT = int(sys.argv[1])
KEYS = [f"csc:{i}" for i in range(16)]  # no hash tags: spread over the engines

watchdog(60)
print("redis-py", redis.__version__, flush=True)

# redis-py 8 refuses client-side caching with a server whose HELLO reports a version below
# 7.4 (`CacheProxyConnection.MIN_ALLOWED_VERSION`), redis-server 7.0.15 included, though what
# it uses (CLIENT TRACKING ON, RESP3 `invalidate` pushes) is Redis 6's and 7.0's. recached
# reports 7.0.15 like the server it copies, so the floor is lowered here to exercise it.
redis.connection.CacheProxyConnection.MIN_ALLOWED_VERSION = "7.0.0"

w = redis.Redis(host="127.0.0.1", port=PORT)
r = redis.Redis(host="127.0.0.1", port=PORT, protocol=3, cache_config=CacheConfig())
cache = r.get_cache()
check(cache is not None, "redis-py made no cache")
conn = r.connection_pool.get_connection()
try:
    proto = int(conn.get_protocol())
finally:
    r.connection_pool.release(conn)
print(f"protocol: {proto}", flush=True)
check(proto == 3, f"client-side caching needs RESP3, got {proto}")

for k in KEYS:
    w.set(k, "1")
for k in KEYS:
    check(r.get(k) == b"1", f"GET {k}")
check(cache.size == len(KEYS), f"cache holds {cache.size} entries, not {len(KEYS)}")
for k in KEYS:
    check(r.get(k) == b"1", f"cached GET {k}")
print("cached: ok", flush=True)


def eventually(cond, what):
    """The invalidation is a push read before the next command: give it a moment to arrive."""
    for _ in range(100):
        if cond():
            return
        time.sleep(0.02)
    fail(what)


for k in KEYS:
    w.set(k, "2")
for k in KEYS:
    eventually(lambda k=k: r.get(k) == b"2", f"GET {k} after another client's SET: stale")
print("invalidated by another client: ok", flush=True)

w.flushall()
for k in KEYS:
    eventually(lambda k=k: r.get(k) is None, f"GET {k} after FLUSHALL: stale")
print("flushall: ok", flush=True)

r.set(KEYS[0], "mine")
check(r.get(KEYS[0]) == b"mine", "own write not seen")
print("own write: ok", flush=True)
print("ok", flush=True)
