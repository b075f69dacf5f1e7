"""redis-py (the newest release, tests/clients/requirements.txt) with its DEFAULT settings
against the recached proxy. Run by tests/tests/clients_proxy.rs (the venv is installed by
scripts/test.sh):

    python redis_py_proxy.py <proxy port>

Checks, each with a clear message on failure (exit status 1): the protocol negotiated (redis-py
8 defaults to RESP3: HELLO 3 on every connection), SET/GET, MGET of 100 keys, a
non-transactional pipeline, HGETALL (a dict; a RESP3 map on the wire), ZSCORE (a float),
pub/sub (subscribe, publish from another connection, receive), BLPOP woken by another client's
RPUSH, SCAN iteration collecting every key exactly once, a database chosen by URL
(`redis://…/1`) kept apart from database 0 with FLUSHDB there touching only it, and redis-py's
Lock (acquire, extend, release; a non-owner's release raising LockNotOwnedError). Prints `protocol: N`, one line per
check, and `ok` last. Every wait is bounded: each blocking call has its own timeout, and
SIGALRM ends the whole run after 60 s.
"""

import sys
import threading
import time

import redis

from common import check, fail, watchdog

PORT = int(sys.argv[1])
PREFIX = "py:"


watchdog(60)

print("redis-py", redis.__version__, flush=True)
# Default settings: no protocol, no decode_responses, no timeouts given.
r = redis.Redis(host="127.0.0.1", port=PORT)

# --- protocol negotiated -----------------------------------------------------------------
check(r.ping() is True, "PING")
conn = r.connection_pool.get_connection()
try:
    proto = conn.protocol
    hello = conn.handshake_metadata
finally:
    r.connection_pool.release(conn)
print(f"protocol: {proto}", flush=True)
print(f"hello: {hello!r}", flush=True)
check(int(proto) == 3, f"redis-py {redis.__version__} negotiated protocol {proto}, expected 3 (its default)")
check(isinstance(hello, dict), f"HELLO 3 reply is not a map: {hello!r}")
hello_proto = hello.get(b"proto", hello.get("proto"))
check(hello_proto == 3, f"HELLO reply proto {hello_proto!r}, expected 3")

# --- SET / GET ---------------------------------------------------------------------------
check(r.set(PREFIX + "k", "v1") is True, "SET returned not True")
got = r.get(PREFIX + "k")
check(got == b"v1", f"GET -> {got!r}, expected b'v1'")
check(r.get(PREFIX + "missing") is None, "GET of a missing key is not None")
print("set/get: ok", flush=True)

# --- MGET of 100 keys (spread over both engines: the Rust test checks placement) -----------
keys = [f"{PREFIX}mget:{i}" for i in range(100)]
check(r.mset({k: f"v{i}" for i, k in enumerate(keys)}) is True, "MSET of 100 keys")
vals = r.mget(keys + [PREFIX + "mget:missing"])
expected = [f"v{i}".encode() for i in range(100)] + [None]
check(vals == expected, f"MGET of 100 keys -> {vals!r}")
print("mget 100: ok", flush=True)

# --- non-transactional pipeline ----------------------------------------------------------
p = r.pipeline(transaction=False)
p.set(PREFIX + "pipe:a", "1")
p.incr(PREFIX + "pipe:a")
p.get(PREFIX + "pipe:a")
p.rpush(PREFIX + "pipe:l", "x", "y")
p.lrange(PREFIX + "pipe:l", 0, -1)
p.get(PREFIX + "pipe:missing")
res = p.execute()
check(res == [True, 2, b"2", 2, [b"x", b"y"], None], f"pipeline -> {res!r}")
print("pipeline: ok", flush=True)

# --- HGETALL: a dict (RESP3 map on the wire) ------------------------------------------------
h = PREFIX + "h"
check(r.hset(h, mapping={"f1": "a", "f2": "b", "f3": "3"}) == 3, "HSET of 3 fields")
got = r.hgetall(h)
check(isinstance(got, dict), f"HGETALL is a {type(got).__name__}, expected dict: {got!r}")
check(got == {b"f1": b"a", b"f2": b"b", b"f3": b"3"}, f"HGETALL -> {got!r}")
check(r.hgetall(PREFIX + "nohash") == {}, "HGETALL of a missing key is not {}")
print("hgetall: ok", flush=True)

# --- ZSCORE: a float (RESP3 double) ---------------------------------------------------------
z = PREFIX + "z"
check(r.zadd(z, {"m1": 1.5, "m2": -2.25}) == 2, "ZADD of 2 members")
s1, s2 = r.zscore(z, "m1"), r.zscore(z, "m2")
check(isinstance(s1, float) and s1 == 1.5, f"ZSCORE m1 -> {s1!r}, expected 1.5")
check(isinstance(s2, float) and s2 == -2.25, f"ZSCORE m2 -> {s2!r}, expected -2.25")
check(r.zscore(z, "none") is None, "ZSCORE of a missing member is not None")
print("zscore: ok", flush=True)

# --- pub/sub: subscribe, publish from another connection, receive ----------------------------
ps = r.pubsub()
ps.subscribe(PREFIX + "chan")
deadline = time.monotonic() + 5
confirm = None
while confirm is None and time.monotonic() < deadline:
    confirm = ps.get_message(timeout=0.5)
check(confirm is not None, "no subscribe confirmation within 5 s")
check(confirm["type"] == "subscribe" and confirm["channel"] == b"py:chan", f"confirmation {confirm!r}")
publisher = redis.Redis(host="127.0.0.1", port=PORT)
n = publisher.publish(PREFIX + "chan", "hello")
check(n == 1, f"PUBLISH reached {n} subscribers, expected 1")
msg = None
deadline = time.monotonic() + 5
while msg is None and time.monotonic() < deadline:
    msg = ps.get_message(timeout=0.5)
check(msg is not None, "published message not received within 5 s")
check(msg["type"] == "message" and msg["channel"] == b"py:chan" and msg["data"] == b"hello", f"message {msg!r}")
ps.unsubscribe()
ps.close()
publisher.close()
print("pubsub: ok", flush=True)

# --- BLPOP woken by another client's RPUSH ---------------------------------------------------
q = PREFIX + "queue"
pusher_result = {}


def push_later():
    time.sleep(0.5)
    other = redis.Redis(host="127.0.0.1", port=PORT)
    pusher_result["n"] = other.rpush(q, "job1")
    other.close()


t = threading.Thread(target=push_later, daemon=True)
t0 = time.monotonic()
t.start()
popped = r.blpop([q], timeout=10)
waited = time.monotonic() - t0
t.join(5)
check(popped is not None, "BLPOP timed out (10 s) without being woken")
check(list(popped) == [q.encode(), b"job1"], f"BLPOP -> {popped!r}")
check(waited >= 0.3, f"BLPOP returned after {waited:.3f} s, before the RPUSH")
check(pusher_result.get("n") == 1, f"RPUSH -> {pusher_result!r}")
print(f"blpop: ok (woken after {waited:.2f} s)", flush=True)

# --- SCAN iteration: every key exactly once ---------------------------------------------------
scan_keys = {f"{PREFIX}scan:{i}".encode() for i in range(500)}
p = r.pipeline(transaction=False)
for k in scan_keys:
    p.set(k, "1")
p.execute()
seen = list(r.scan_iter(match=PREFIX + "scan:*", count=50))
dups = len(seen) - len(set(seen))
check(dups == 0, f"SCAN returned {dups} keys more than once")
check(set(seen) == scan_keys, f"SCAN missed {len(scan_keys - set(seen))} keys, extra {set(seen) - scan_keys!r}")
print(f"scan: ok ({len(seen)} keys)", flush=True)

# --- redis-py's Lock (EVALSHA of its Lua scripts, routed by the lock's key) -------------------
lock = r.lock(PREFIX + "lock", timeout=5)
check(lock.acquire(blocking=False) is True, "Lock.acquire")
check(lock.extend(10) is True, "Lock.extend")
check(5 < r.pttl(PREFIX + "lock") / 1000 <= 15, f"lock TTL after extend: {r.pttl(PREFIX + 'lock')} ms")
other = r.lock(PREFIX + "lock", timeout=5)
check(other.acquire(blocking=False) is False, "a second Lock acquired a held lock")
other.local.token = b"not-the-owner"
try:
    other.release()
    fail("a non-owner's release did not raise")
except redis.exceptions.LockNotOwnedError:
    pass
check(lock.owned() is True, "the owner lost its lock")
lock.release()
check(lock.locked() is False, "the lock is still held after release")
with r.lock(PREFIX + "lock2", timeout=2):
    check(r.exists(PREFIX + "lock2") == 1, "Lock as a context manager")
check(r.exists(PREFIX + "lock2") == 0, "the context manager's lock was not released")
print("lock: ok", flush=True)

# --- a database chosen by URL, kept apart from database 0; FLUSHDB there touches only it ----
db1 = redis.Redis.from_url(f"redis://127.0.0.1:{PORT}/1")
dbkeys = [f"{PREFIX}db:{i}" for i in range(20)]
check(db1.mset({k: "one" for k in dbkeys}) is True, "MSET in database 1")
check(r.get(dbkeys[0]) is None, "a key set in database 1 is visible in database 0")
check(r.set(dbkeys[0], "zero") is True, "SET in database 0")
check(db1.mget(dbkeys) == [b"one"] * 20, "MGET in database 1")
check(db1.dbsize() == 20, f"DBSIZE of database 1 -> {db1.dbsize()}, expected 20")
before0 = r.dbsize()
check(db1.flushdb() is True, "FLUSHDB in database 1")
check(db1.dbsize() == 0, "database 1 not empty after its FLUSHDB")
check(r.dbsize() == before0 and r.get(dbkeys[0]) == b"zero", "FLUSHDB of database 1 touched database 0")
db1.close()
print("database by url: ok", flush=True)

r.close()
print("ok", flush=True)
