"""redis-py (the newest release, tests/clients/requirements.txt) with its DEFAULT settings:
transactions over keys on several engines through the recached proxy (issue 20). Run by
tests/tests/clients_proxy.rs (the venv is installed by scripts/test.sh):

    python redis_py_transactions.py <port>

The Rust test chooses the keys (redis-py knows slots, not recached's slot -> engine map) and
passes them in the environment: TX_KEYS="k0,k1,k2,k3,h,s,ca,cb" (k0…k3 on engines 0, 1, 2, 3
mod N; the hash h on engine 1, the set s on engine 0, the counters ca and cb on engines 0 and
1), TX_ACCOUNTS="a0,…" (the bank's accounts, spread over the engines), TX_DIRECT_PORT (the
port of k1's engine, for a write straight to it; against a redis-server, the server itself).

Checks, each with a clear message on failure (exit status 1):
- `pipeline()` (transactional by default: MULTI … EXEC) over keys on both engines: the
  replies, parsed as redis-py parses them (RESP3 maps, sets, nulls), in order; `with
  r.pipeline() as p`; a runtime error (raised by execute(), the other commands ran) and one
  collected with raise_on_error=False; a queueing error (unknown command): nothing ran;
- WATCH through a pipeline: `WatchError` when another client changes a watched key, through
  the proxy or directly on its engine, none when nothing changed;
- a script (`register_script`: EVALSHA, EVAL on a cache miss) moving a value between keys on
  two engines, alone and inside a transaction;
- `r.transaction(fn, *keys)` (WATCH / reads / MULTI / EXEC, retried on WatchError): 3
  threads incrementing a pair of counters on two engines 150 times each: both end at 450 (no
  lost update; the retries are counted and printed);
- the bank in miniature: 3 threads doing random transfers with `pipeline()` (DECRBY/INCRBY)
  for 2 s while a reader takes `pipeline().mget(all)`: every read sums to the total, the
  final balances match the transfers.
Prints `redis-py <version>`, `protocol: N`, one line per check and `ok` last. SIGALRM ends the
run after 60 s; every thread is bounded in time and count.
"""

import os
import random
import sys
import threading
import time

import redis
from redis.exceptions import ResponseError, WatchError

from common import check, fail, watchdog

PORT = int(sys.argv[1])
K0, K1, K2, K3, H, S, CA, CB = os.environ["TX_KEYS"].split(",")
ACCOUNTS = os.environ["TX_ACCOUNTS"].split(",")
DIRECT_PORT = int(os.environ["TX_DIRECT_PORT"])

watchdog(60)

print("redis-py", redis.__version__, flush=True)
# Default settings: no protocol, no decode_responses, no timeouts given.
r = redis.Redis(host="127.0.0.1", port=PORT)
conn = r.connection_pool.get_connection()
try:
    proto = conn.protocol
finally:
    r.connection_pool.release(conn)
print(f"protocol: {proto}", flush=True)
check(int(proto) == 3, f"redis-py {redis.__version__} negotiated protocol {proto}, expected 3 (its default)")
r.delete(K0, K1, K2, K3, H, S, CA, CB)

# --- pipeline(): MULTI/EXEC over keys on both engines ---------------------------------------------
p = r.pipeline()
check(p.transaction is True, "pipeline() is not transactional by default")
p.set(K0, "a").set(K1, "b").incr(K2).get(K0).mget(K0, K1, K2, K3)
p.hset(H, mapping={"f": "v", "g": "w"}).hgetall(H).sadd(S, "m", "n").smembers(S)
p.mset({K2: "c", K3: "d"}).exists(K0, K1, K2, K3).delete(K2, K3)
got = p.execute()
want = [True, True, 1, b"a", [b"a", b"b", b"1", None], 2, {b"f": b"v", b"g": b"w"}, 2, {b"m", b"n"}, True, 4, 2]
check(got == want, f"pipeline().execute() -> {got!r}, expected {want!r}")
with r.pipeline() as p:
    got = p.incrby(K2, 5).incrby(K3, 7).mget(K2, K3).execute()
check(got == [5, 7, [b"5", b"7"]], f"with pipeline(): {got!r}")
print("pipeline (MULTI/EXEC over several engines): ok", flush=True)

# A runtime error: raised by execute(); every other command of the transaction ran.
p = r.pipeline()
p.set(K0, "x").incr(K0).set(K1, "y")
try:
    p.execute()
    fail("execute() of a transaction with INCR of a non-number did not raise")
except ResponseError as e:
    check("not an integer" in str(e), f"runtime error: {e}")
check(r.mget(K0, K1) == [b"x", b"y"], f"after a runtime error: {r.mget(K0, K1)!r}")
got = r.pipeline().set(K1, "z").incr(K1).get(K0).execute(raise_on_error=False)
check(got[0] is True and isinstance(got[1], ResponseError) and got[2] == b"x", f"raise_on_error=False: {got!r}")
# A queueing error: EXECABORT, nothing ran on either engine.
p = r.pipeline()
p.set(K0, "new").execute_command("NOSUCHCOMMAND", K1).set(K1, "new")
try:
    p.execute()
    fail("execute() of a transaction with an unknown command did not raise")
except ResponseError as e:
    check("EXECABORT" in str(e) or "unknown command" in str(e), f"queueing error: {e}")
check(r.mget(K0, K1) == [b"x", b"z"], f"after EXECABORT: {r.mget(K0, K1)!r}")
print("pipeline errors (runtime, EXECABORT): ok", flush=True)

# --- WATCH through a pipeline -------------------------------------------------------------------
other = redis.Redis(host="127.0.0.1", port=PORT)
direct = redis.Redis(host="127.0.0.1", port=DIRECT_PORT)


def watched_update(change):
    """WATCH K0 K1, read both, let `change` run, then MULTI SET SET EXEC: True if it ran."""
    with r.pipeline() as p:
        p.watch(K0, K1)
        a, b = p.get(K0), p.get(K1)
        change()
        p.multi()
        p.set(K0, (a or b"") + b"+").set(K1, (b or b"") + b"+")
        try:
            p.execute()
            return True
        except WatchError:
            return False


check(watched_update(lambda: None) is True, "WATCH with no change: the transaction did not run")
check(watched_update(lambda: other.set(K1, "theirs")) is False, "WATCH: a change through the proxy did not abort")
check(watched_update(lambda: direct.set(K1, "direct")) is False, "WATCH: a change on the engine did not abort")
check(watched_update(lambda: other.get(K0)) is True, "WATCH: a read aborted the transaction")
check(r.mget(K0, K1) == [b"x++", b"direct+"], f"after the WATCH checks: {r.mget(K0, K1)!r}")
print("watch (through the proxy and on the engine): ok", flush=True)

# --- a script moving a value between keys on two engines (register_script: EVALSHA, EVAL) ----
move = r.register_script(
    "local v = redis.call('GET', KEYS[1]) redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[2], v) return v"
)
r.delete(K2, K3)
r.set(K2, "payload")
check(move(keys=[K2, K3]) == b"payload", "script move K2 -> K3")
check(r.mget(K2, K3) == [None, b"payload"], f"after the move: {r.mget(K2, K3)!r}")
check(move(keys=[K3, K2]) == b"payload", "script move K3 -> K2")
check(r.mget(K2, K3) == [b"payload", None], f"after the move back: {r.mget(K2, K3)!r}")
with r.pipeline() as p:
    got = p.set(K0, "in-tx").execute_command("EVALSHA", move.sha, 2, K0, K1).get(K1).execute()
check(got == [True, b"in-tx", b"in-tx"], f"EVALSHA inside a transaction: {got!r}")
print("script moving a value between engines (EVALSHA, in MULTI too): ok", flush=True)

# --- r.transaction(fn, *keys): optimistic locking from 3 threads --------------------------------
calls = [0]
calls_lock = threading.Lock()
ROUNDS = 150
errors = []


def increment_both(pipe):
    with calls_lock:
        calls[0] += 1
    a = int(pipe.get(CA) or 0)
    b = int(pipe.get(CB) or 0)
    pipe.multi()
    pipe.set(CA, a + 1)
    pipe.set(CB, b + 1)


def cas_worker():
    try:
        client = redis.Redis(host="127.0.0.1", port=PORT)
        deadline = time.monotonic() + 30
        for _ in range(ROUNDS):
            check(time.monotonic() < deadline, "CAS worker too slow")
            got = client.transaction(increment_both, CA, CB)
            check(got == [True, True], f"transaction() -> {got!r}")
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        errors.append(repr(e))


threads = [threading.Thread(target=cas_worker) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join(40)
check(not any(t.is_alive() for t in threads), "a CAS worker did not finish")
check(not errors, f"CAS workers: {errors}")
final = r.mget(CA, CB)
check(final == [str(3 * ROUNDS).encode()] * 2, f"counters {final!r}, expected {3 * ROUNDS} each (a lost update?)")
print(f"transaction() from 3 threads: ok ({calls[0] - 3 * ROUNDS} retries after WatchError)", flush=True)

# --- the bank in miniature ----------------------------------------------------------------------
INITIAL = 100
TOTAL = INITIAL * len(ACCOUNTS)
r.mset({a: INITIAL for a in ACCOUNTS})
stop = threading.Event()
ledger = []
ledger_lock = threading.Lock()
sums = []


def transfers(seed):
    try:
        rng = random.Random(seed)
        client = redis.Redis(host="127.0.0.1", port=PORT)
        mine = []
        for _ in range(100_000):
            if stop.is_set():
                break
            a, b = rng.sample(ACCOUNTS, 2)
            n = rng.randint(1, 10)
            got = client.pipeline().decrby(a, n).incrby(b, n).execute()
            check(len(got) == 2, f"transfer -> {got!r}")
            mine.append((a, b, n))
        with ledger_lock:
            ledger.extend(mine)
    except BaseException as e:  # noqa: BLE001
        errors.append(repr(e))


def reader():
    try:
        client = redis.Redis(host="127.0.0.1", port=PORT)
        for _ in range(100_000):
            if stop.is_set():
                break
            (values,) = client.pipeline().mget(ACCOUNTS).execute()
            sums.append(sum(int(v) for v in values))
    except BaseException as e:  # noqa: BLE001
        errors.append(repr(e))


threads = [threading.Thread(target=transfers, args=(i,)) for i in range(3)]
threads.append(threading.Thread(target=reader))
for t in threads:
    t.start()
time.sleep(2)
stop.set()
for t in threads:
    t.join(20)
check(not any(t.is_alive() for t in threads), "a bank thread did not stop")
check(not errors, f"bank threads: {errors}")
bad = [s for s in sums if s != TOTAL]
check(sums and not bad, f"{len(bad)} of {len(sums)} reads did not sum to {TOTAL}: {bad[:5]}")
want = {a: INITIAL for a in ACCOUNTS}
for a, b, n in ledger:
    want[a] -= n
    want[b] += n
got = dict(zip(ACCOUNTS, (int(v) for v in r.mget(ACCOUNTS))))
check(got == want, f"balances {got!r}, expected {want!r}")
check(len(ledger) > 20, f"only {len(ledger)} transfers")
print(f"bank: ok ({len(ledger)} transfers, {len(sums)} reads)", flush=True)

r.delete(*ACCOUNTS, CA, CB, K0, K1, K2, K3, H, S)
r.close()
print("ok", flush=True)
