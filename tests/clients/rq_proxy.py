"""rq (the newest release, tests/clients/requirements.txt): a job enqueued and run by a burst
worker, everything at DEFAULT settings (`Queue(connection=Redis(...))`, the `default` queue,
rq's forking `Worker`), against the recached proxy. Run by tests/tests/clients_proxy.rs (the
venv is installed by scripts/test.sh; the job functions are in rq_jobs.py beside this file):

    python rq_proxy.py <port> [--all | --one-engine]

Checks: the protocol (RESP3, redis-py's default), the server version rq reads from INFO, an
empty queue, no workers; then

- enqueue (`Queue.enqueue`): rq writes the job hash, the queue list and the queue set in one
  MULTI/EXEC (redis-py's default pipeline()); those keys lie on several engines (issue 20:
  MULTI/EXEC over keys on several engines);
- burst worker (`Worker([queue]).work(burst=True)`): runs rq_jobs.add(2, 3) and
  rq_jobs.fail_on_purpose(); besides more such transactions (issue 20) rq stores every job
  result in a stream (XADD rq:results:<id>, read back with XREVRANGE): issue 17 (streams).
  Lua is not needed by this path (rq uses EVALSHA only for unique jobs, the scheduler and locks).

Every part must pass in every mode (none: a fleet of several engines; --one-engine: the proxy
in front of ONE engine; --all: a real redis-server); the modes are kept for the callers and for
parts deferred to a later issue (`deferred(…, expected_error, …)`: must fail with exactly that
error, so the day the issue lands the part is moved out of DEFERRED). Prints `rq <version>`,
`redis-py <version>`, `protocol: N`, one line per check or `DEFERRED (issue N): …` line, and
`ok` last; any failure prints `FAIL: …` and exits 1. SIGALRM ends the run after 60 s.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import redis  # noqa: E402
import rq  # noqa: E402
from redis import Redis  # noqa: E402
from rq import Queue, Worker  # noqa: E402
from rq.job import JobStatus  # noqa: E402
from rq.utils import get_version  # noqa: E402

import rq_jobs  # noqa: E402
from common import check, fail, watchdog  # noqa: E402

PORT = int(sys.argv[1])
MODE = sys.argv[2] if len(sys.argv) > 2 else "--several-engines"
if MODE not in ("--several-engines", "--one-engine", "--all"):
    sys.exit(f"unknown mode {MODE!r}: --one-engine or --all")
# -CROSSSLOT, as redis-py raises it (the error code becomes the exception class).
CROSSSLOT = ("ClusterCrossSlotError", "Keys in request don't hash to the same slot")


watchdog(60)


def deferred(name, issue, expected_error, part):
    """Runs `part`. `expected_error` None: it must pass. Else it must fail with an exception
    whose `Class: message` text (or, for the worker, the failure rq recorded) contains every
    string of `expected_error`; a pass means the issue landed and the part belongs among the
    checks now. Returns whether it passed."""
    if expected_error is None:
        part()
        print(f"{name}: ok", flush=True)
        return True
    try:
        part()
    except Exception as e:  # noqa: BLE001 - the exact text is checked below
        text = f"{type(e).__name__}: {e}".encode("ascii", "backslashreplace").decode()
        check(all(s in text for s in expected_error), f"{name} (deferred to issue {issue}) failed differently "
              f"than expected ({expected_error!r}): {text}")
        print(f"DEFERRED (issue {issue}): {name}: fails today with {text}", flush=True)
        return False
    fail(f"{name} now passes through the proxy: issue {issue} landed? Move it out of DEFERRED "
         f"(tests/clients/rq_proxy.py) and un-ignore its --all test in tests/tests/clients_proxy.rs")


print("rq", rq.__version__ if hasattr(rq, "__version__") else rq.VERSION, flush=True)
print("redis-py", redis.__version__, flush=True)
# Default settings, as rq's docs have it: Queue(connection=Redis()) (here on 127.0.0.1:PORT).
r = Redis(host="127.0.0.1", port=PORT)
conn = r.connection_pool.get_connection()
try:
    proto = conn.protocol
finally:
    r.connection_pool.release(conn)
print(f"protocol: {proto}", flush=True)
check(int(proto) == 3, f"protocol {proto}, expected 3 (redis-py's default)")

# --- what rq reads before any job: the server version (INFO server), the empty queue ------------
version = get_version(r)
check(version >= (7, 0, 0), f"rq read redis_version {version} from INFO server, expected >= 7.0")
q = Queue(connection=r)
check(q.name == "default", f"queue name {q.name!r}")
check(q.count == 0 and q.is_empty(), f"a new queue has {q.count} jobs")
check(Queue.all(connection=r) == [], f"Queue.all() = {Queue.all(connection=r)!r}")
check(Worker.all(connection=r) == [], f"Worker.all() = {Worker.all(connection=r)!r}")
print(f"server version {version}, empty queue, no workers: ok", flush=True)

jobs = {}


# RQ_JOB_IDS="a,b": the two jobs' ids (the Rust test picks ids whose `rq:job:<id>` key lives
# on another engine than the queue's, so enqueue's MULTI spans engines whatever rq's random
# ids would have been); unset: rq's own.
JOB_IDS = (os.environ.get("RQ_JOB_IDS") or ",").split(",")


def enqueue():
    ok = q.enqueue(rq_jobs.add, 2, 3, job_id=JOB_IDS[0] or None)
    bad = q.enqueue(rq_jobs.fail_on_purpose, "on purpose", job_id=JOB_IDS[1] or None)
    jobs["ok"], jobs["bad"] = ok, bad
    check(ok.get_status(refresh=True) == JobStatus.QUEUED, f"status after enqueue: {ok.get_status()}")
    check(q.count == 2, f"queue length {q.count} after 2 enqueues")
    check(q.job_ids == [ok.id, bad.id], f"queue job ids {q.job_ids!r}")
    check([x.name for x in Queue.all(connection=r)] == ["default"], "Queue.all() after enqueue")


def burst_worker():
    ok, bad = jobs["ok"], jobs["bad"]
    worked = Worker([q], connection=r).work(burst=True)
    check(worked is True, f"work(burst=True) -> {worked!r}, expected True (it ran jobs)")
    # The worker logs and swallows Redis errors while it stores a job's outcome; the result
    # it stored (or the error reading it) comes first, then the job's status.
    res = ok.latest_result()
    check(res is not None and res.type.name == "SUCCESSFUL", f"latest result of add(2, 3): {res!r}")
    check(ok.get_status(refresh=True) == JobStatus.FINISHED, f"job add(2, 3) is {ok.get_status()}")
    check(ok.return_value() == 5, f"return_value() = {ok.return_value()!r}, expected 5")
    check(bad.get_status(refresh=True) == JobStatus.FAILED, f"failing job is {bad.get_status()}")
    exc = bad.latest_result().exc_string
    check("RuntimeError: on purpose" in exc, f"failing job's exc_string: {exc!r}")
    check(q.count == 0, f"{q.count} jobs left in the queue")
    check(ok.id in q.finished_job_registry.get_job_ids(), "job not in the finished registry")
    check(bad.id in q.failed_job_registry.get_job_ids(), "failing job not in the failed registry")
    check(Worker.all(connection=r) == [], "a burst worker is still registered after it quit")


# Streams (issue 17) and transactions spanning engines (issue 20) landed: every part passes in
# every mode.
deferred("enqueue", 20, None, enqueue)
deferred("burst worker ran add(2, 3) = 5 and a failing job", 17, None, burst_worker)

r.close()
print("ok", flush=True)
