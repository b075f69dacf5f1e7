"""pymemcache (the newest release, tests/clients/requirements.txt) with its default settings
against the recached proxy's memcached port. Run by tests/tests/memcached.rs:

    python pymemcache_proxy.py <memcached port> <RESP proxy port>

Storage (set/add/replace/append/prepend/cas), get/gets/get_many over 200 keys (both engines),
touch, gat (raw_command), incr/decr (with memcached's wrap and floor), delete, flush_all, version, stats,
client flags kept with the key (a serde that returns them), expiry, the 1 MB item limit; and
a value set over memcached read over RESP (redis-py) and the other way round. Prints one line
per check, `ok` last; any failure exits 1 with a message (60 s watchdog)."""

import sys
import time

import pymemcache
import redis
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheServerError

from common import check, watchdog

watchdog(60)
mport, rport = int(sys.argv[1]), int(sys.argv[2])
print("pymemcache", pymemcache.__version__, flush=True)


class KeepFlags:
    """Values as bytes, with the flags they were stored with."""

    def serialize(self, key, value):
        return value[0], value[1]

    def deserialize(self, key, value, flags):
        return (value, flags)


c = Client(("127.0.0.1", mport))
fc = Client(("127.0.0.1", mport), serde=KeepFlags())
r = redis.Redis(host="127.0.0.1", port=rport)

c.flush_all()
check(c.version().startswith(b"1.6"), f"version {c.version()!r}")

check(c.set("pm:k", b"hello") is True, "set")
check(c.get("pm:k") == b"hello", "get")
check(c.get("pm:missing") is None, "get miss")
check(c.add("pm:k", b"x", noreply=False) is False, "add on an existing key")
check(c.add("pm:new", b"x", noreply=False) is True, "add")
check(c.replace("pm:nokey", b"x", noreply=False) is False, "replace a missing key")
check(c.replace("pm:new", b"y", noreply=False) is True, "replace")
check(c.append("pm:k", b" world", noreply=False) is True, "append")
check(c.prepend("pm:k", b">> ", noreply=False) is True, "prepend")
check(c.get("pm:k") == b">> hello world", f"after append/prepend {c.get('pm:k')!r}")
print("storage: ok", flush=True)

value, cas = c.gets("pm:k")
check(value == b">> hello world" and cas, f"gets {value!r} {cas!r}")
check(c.cas("pm:k", b"swapped", cas, noreply=False) is True, "cas with the current unique")
check(c.cas("pm:k", b"again", cas, noreply=False) is False, "cas with a stale unique")
check(c.cas("pm:none", b"v", cas, noreply=False) is None, "cas on a missing key")
print("cas: ok", flush=True)

fc.set("pm:flags", (b"v", 42))
check(fc.get("pm:flags") == (b"v", 42), f"flags {fc.get('pm:flags')!r}")
check(r.get("pm:flags") == b"v", "the RESP value is exactly the bytes")
print("flags: ok", flush=True)

keys = [f"pm:many:{i}" for i in range(200)]
c.set_many({k: f"v{i}".encode() for i, k in enumerate(keys)})
got = c.get_many(keys + ["pm:many:missing"])
check(len(got) == 200 and all(got[k] == f"v{i}".encode() for i, k in enumerate(keys)), "get_many")
print("get_many: ok", flush=True)

c.set("pm:n", b"10")
check(c.incr("pm:n", 5) == 15, "incr")
check(c.decr("pm:n", 100) == 0, "decr floors at 0")
c.set("pm:n", b"18446744073709551615")
check(c.incr("pm:n", 2) == 1, "incr wraps at 2^64")
check(c.incr("pm:nokey", 1) is None, "incr on a missing key")
print("incr/decr: ok", flush=True)

check(c.touch("pm:new", 100, noreply=False) is True, "touch")
check(c.touch("pm:nokey", 100, noreply=False) is False, "touch a missing key")
gat = c.raw_command(b"gat 100 pm:new", b"END\r\n")
check(gat == b"VALUE pm:new 0 1\r\ny\r\n", f"gat (raw_command) {gat!r}")
check(r.ttl("pm:new") > 90, f"gat's TTL on the engine: {r.ttl('pm:new')}")
c.set("pm:short", b"v", expire=1)
time.sleep(1.6)
check(c.get("pm:short") is None, "expired after 1 s")
print("expiry: ok", flush=True)

check(c.delete("pm:new", noreply=False) is True, "delete")
check(c.delete("pm:new", noreply=False) is False, "delete a missing key")

big = b"x" * (1024 * 1024 - 100)
check(c.set("pm:big", big) is True, "a value under item_size_max")
check(c.get("pm:big") == big, "the big value back")
try:
    c.set("pm:big", b"x" * (2 * 1024 * 1024), noreply=False)
    check(False, "a 2 MB value was stored")
except MemcacheServerError as e:
    check("object too large for cache" in str(e), f"too large: {e}")
check(c.get("pm:big") is None, "a too-large set removes the old item, as memcached")
print("limits: ok", flush=True)

r.set("pm:from-resp", "set over RESP")
check(c.get("pm:from-resp") == b"set over RESP", "RESP → memcached")
check(r.get("pm:k") == b"swapped", "memcached → RESP")
print("interop: ok", flush=True)

stats = c.stats()
check(stats[b"cmd_get"] > 0 and stats[b"get_hits"] > 0, f"stats {stats}")
check(b"curr_items" in stats and b"curr_connections" in stats, "stats fields")
c.flush_all()
check(c.get("pm:k") is None, "flush_all")
print("ok", flush=True)
