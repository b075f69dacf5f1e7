"""Django's own cache backend, django.core.cache.backends.redis.RedisCache (the newest Django
release, tests/clients/requirements.txt), with its DEFAULT settings against the recached proxy.
Run by tests/tests/clients_proxy.rs (the venv is installed by scripts/test.sh):

    python django_cache_proxy.py <port> [--all]

Settings are configured here: one cache, LOCATION redis://127.0.0.1:<port>, nothing else (so
redis-py's defaults: RESP3, no timeouts; Django's: KEY_PREFIX '', VERSION 1, TIMEOUT 300).
Checks set/get (str, int, dict, bytes), add, has_key, delete, incr/decr (and incr of a missing
key), touch (TTL read back), get_or_set, get_many/delete_many over 64 keys (they land on every
engine), set_many over keys of one engine (a hash tag) and over keys of every engine (Django's
set_many is redis-py's default pipeline(), i.e. MULTI / MSET / EXPIRE... / EXEC: a
transaction spanning engines, issue 20), clear (FLUSHDB), and last leaves
`dj:spread:<i>` = i (i < 64) for the Rust test to find on the engines the slot map gives.

Parts that need a feature of a later issue are DEFERRED: without --all each one is still run
and must fail with exactly the error it fails with today (printed as `DEFERRED (issue N): …`),
so the day it passes this script fails and says to move it out of DEFERRED; with --all every
part must pass (that is what a real redis-server does; the Rust test runs --all against one).
Deferred today: nothing (set_many over keys on several engines was, until issue 20 made
transactions spanning engines work through the proxy).

Prints `django <version>`, `redis-py <version>`, `protocol: N`, one line per check and `ok`
last; any failure prints `FAIL: …` and exits 1. SIGALRM ends the run after 60 s.
"""

import sys

import django
import redis
from django.conf import settings

from common import check, fail, watchdog

PORT = int(sys.argv[1])
ALL = "--all" in sys.argv[2:]
# -CROSSSLOT, as redis-py raises it (the error code becomes the exception class).
CROSSSLOT = ("ClusterCrossSlotError", "Keys in request don't hash to the same slot")


watchdog(60)


def deferred(name, issue, expected_error, part):
    """Runs `part`. With --all it must pass. Without, it must fail with an exception whose
    `Class: message` text contains every string of `expected_error` (what recached answers
    today): a pass means the issue landed and the part belongs among the checks now; any
    other failure is a failure."""
    if ALL:
        part()
        print(f"{name}: ok", flush=True)
        return
    try:
        part()
    except Exception as e:  # noqa: BLE001 - the exact text is checked below
        text = f"{type(e).__name__}: {e}".encode("ascii", "backslashreplace").decode()
        check(all(s in text for s in expected_error), f"{name} (deferred to issue {issue}) failed differently than expected "
              f"({expected_error!r}): {text}")
        print(f"DEFERRED (issue {issue}): {name}: fails today with {text}", flush=True)
        return
    fail(f"{name} now passes through the proxy: issue {issue} landed? Move it out of DEFERRED "
         f"(tests/clients/django_cache_proxy.py) and un-ignore its --all test in tests/tests/clients_proxy.rs")


settings.configure(
    CACHES={
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{PORT}",
        }
    },
)
django.setup()

from django.core.cache import cache  # noqa: E402 - needs settings first

print("django", django.__version__, flush=True)
print("redis-py", redis.__version__, flush=True)

# --- protocol negotiated (Django builds the pool; redis-py's default is RESP3) -------------------
raw = cache._cache.get_client(write=True)
conn = raw.connection_pool.get_connection()
try:
    proto = conn.protocol
finally:
    raw.connection_pool.release(conn)
print(f"protocol: {proto}", flush=True)
check(int(proto) == 3, f"protocol {proto}, expected 3 (redis-py's default)")
check(cache.make_key("x") == ":1:x", f"make_key('x') = {cache.make_key('x')!r}")

# --- clear first, so the checks start from an empty keyspace (FLUSHDB on every engine) -----------
check(cache.clear() is True, "clear() is not True")
check(raw.dbsize() == 0, f"DBSIZE after clear() = {raw.dbsize()}")

# --- set / get: str, int (stored as a plain integer), dict and bytes (pickled) -------------------
cache.set("dj:s", "hello")
cache.set("dj:i", 42)
cache.set("dj:d", {"a": [1, 2.5, None], "b": "x"})
cache.set("dj:b", b"\x00\xffbin")
check(cache.get("dj:s") == "hello", f"get dj:s -> {cache.get('dj:s')!r}")
check(cache.get("dj:i") == 42, f"get dj:i -> {cache.get('dj:i')!r}")
check(raw.get(":1:dj:i") == b"42", f"raw GET :1:dj:i -> {raw.get(':1:dj:i')!r} (ints are stored as text)")
check(cache.get("dj:d") == {"a": [1, 2.5, None], "b": "x"}, f"get dj:d -> {cache.get('dj:d')!r}")
check(cache.get("dj:b") == b"\x00\xffbin", f"get dj:b -> {cache.get('dj:b')!r}")
check(cache.get("dj:missing") is None, "get of a missing key is not None")
check(cache.get("dj:missing", "dflt") == "dflt", "get default")
ttl = raw.ttl(":1:dj:s")
check(0 < ttl <= 300, f"TTL of a key set with the default timeout = {ttl}, expected (0, 300]")
cache.set("dj:forever", "v", timeout=None)
check(raw.ttl(":1:dj:forever") == -1, f"TTL of a key set with timeout=None = {raw.ttl(':1:dj:forever')}")
cache.set("dj:gone", "v", timeout=0)
check(cache.get("dj:gone") is None, "set with timeout=0 stored the key")
print("set/get: ok", flush=True)

# --- add / has_key / delete ---------------------------------------------------------------------
check(cache.add("dj:add", "first") is True, "add of a new key is not True")
check(cache.add("dj:add", "second") is False, "add of an existing key is not False")
check(cache.get("dj:add") == "first", f"add overwrote: {cache.get('dj:add')!r}")
check(cache.has_key("dj:add") is True, "has_key of an existing key")
check(cache.has_key("dj:nope") is False, "has_key of a missing key")
check(cache.delete("dj:add") is True, "delete of an existing key is not True")
check(cache.delete("dj:add") is False, "delete of a missing key is not False")
check(cache.has_key("dj:add") is False, "has_key after delete")
print("add/has_key/delete: ok", flush=True)

# --- incr / decr --------------------------------------------------------------------------------
cache.set("dj:n", 10)
check(cache.incr("dj:n") == 11, "incr")
check(cache.incr("dj:n", 5) == 16, "incr by 5")
check(cache.decr("dj:n") == 15, "decr")
check(cache.decr("dj:n", 20) == -5, "decr by 20")
check(cache.get("dj:n") == -5, f"get after incr/decr -> {cache.get('dj:n')!r}")
try:
    cache.incr("dj:n-missing")
    fail("incr of a missing key did not raise")
except ValueError as e:
    check("not found" in str(e), f"incr of a missing key: {e}")
print("incr/decr: ok", flush=True)

# --- touch --------------------------------------------------------------------------------------
cache.set("dj:t", "v")
check(cache.touch("dj:t", 10) is True, "touch of an existing key is not True")
ttl = raw.ttl(":1:dj:t")
check(0 < ttl <= 10, f"TTL after touch(10) = {ttl}")
check(cache.touch("dj:t", None) is True, "touch(None) (PERSIST) is not True")
check(raw.ttl(":1:dj:t") == -1, f"TTL after touch(None) = {raw.ttl(':1:dj:t')}")
check(cache.touch("dj:t-missing", 10) is False, "touch of a missing key is not False")
print("touch: ok", flush=True)

# --- get_or_set ---------------------------------------------------------------------------------
check(cache.get_or_set("dj:gos", lambda: "computed") == "computed", "get_or_set of a missing key")
check(cache.get_or_set("dj:gos", "other") == "computed", "get_or_set of an existing key")
print("get_or_set: ok", flush=True)

# --- get_many / delete_many over 64 keys (MGET and DEL, split by the proxy over every engine) -----
many = [f"dj:many:{i}" for i in range(64)]
for i, k in enumerate(many):
    cache.set(k, {"i": i} if i % 2 else i)
got = cache.get_many(many + ["dj:many:missing"])
want = {k: ({"i": i} if i % 2 else i) for i, k in enumerate(many)}
check(got == want, f"get_many of 64 keys -> {len(got)} keys, differing: "
      f"{ {k: got.get(k) for k in want if got.get(k) != want[k]} !r}")
check(cache.delete_many(many[::2]) is None, "delete_many")
got = cache.get_many(many)
check(got == {k: v for k, v in want.items() if k not in many[::2]}, f"get_many after delete_many -> {got!r}")
check(raw.exists(*[cache.make_key(k) for k in many]) == 32, "EXISTS after delete_many")
print("get_many/delete_many (64 keys): ok", flush=True)

# --- set_many: keys of one engine (a hash tag) run today ---------------------------------------
tagged = {f"{{dj}}:sm:{i}": (f"v{i}" if i % 2 else i) for i in range(20)}
check(cache.set_many(tagged) == [], "set_many of one engine's keys returned failures")
check(cache.get_many(list(tagged)) == tagged, f"get_many after set_many -> {cache.get_many(list(tagged))!r}")
ttl = raw.ttl(":1:{dj}:sm:7")
check(0 < ttl <= 300, f"TTL after set_many with the default timeout = {ttl}")
print("set_many (one engine, hash tag): ok", flush=True)


# --- set_many over keys on several engines: MULTI/EXEC across engines (issue 20) ---------------
def set_many_across_engines():
    data = {f"dj:sm:{i}": (i if i % 2 else {"i": i}) for i in range(64)}
    check(cache.set_many(data) == [], "set_many returned failures")
    check(cache.get_many(list(data)) == data, "get_many after set_many")
    ttl = raw.ttl(":1:dj:sm:3")
    check(0 < ttl <= 300, f"TTL after set_many = {ttl}")
    data = {f"dj:sm2:{i}": i for i in range(64)}
    check(cache.set_many(data, timeout=None) == [], "set_many(timeout=None) returned failures")
    check(cache.get_many(list(data)) == data, "get_many after set_many(timeout=None)")
    check(raw.ttl(":1:dj:sm2:5") == -1, "TTL after set_many(timeout=None)")


set_many_across_engines()
print("set_many over keys on several engines (64 keys): ok", flush=True)

# --- clear --------------------------------------------------------------------------------------
check(raw.dbsize() > 0, "nothing stored before clear()")
check(cache.clear() is True, "clear() is not True")
check(raw.dbsize() == 0, f"DBSIZE after clear() = {raw.dbsize()}")
check(cache.get_many(many + list(tagged) + ["dj:s", "dj:n"]) == {}, "keys left after clear()")
print("clear: ok", flush=True)

# --- left for the Rust test: dj:spread:<i> = i on the engines the slot map gives ---------------
for i in range(64):
    cache.set(f"dj:spread:{i}", i, timeout=None)
check(cache.get_many([f"dj:spread:{i}" for i in range(64)]) == {f"dj:spread:{i}": i for i in range(64)},
      "get_many of dj:spread:*")
print("spread keys: ok", flush=True)

cache.close()
print("ok", flush=True)
