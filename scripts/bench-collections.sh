#!/usr/bin/env bash
# Does building a big collection stay linear? Builds a 100,000-field hash (HSET) and a
# 100,000-member sorted set (ZADD), one element per command, pipelined 1,000 commands at a time,
# against one recached engine and one redis-server in the same run, and reports the rate for
# the first 1,000 and for the last 1,000 elements of each:
#
#   scripts/bench-collections.sh                          # starts both servers itself
#   scripts/bench-collections.sh PORT_RECACHED PORT_REDIS # uses servers already on 127.0.0.1
#
# A collection whose per-write cost grows with its size (e.g. recomputing a hash's memory size
# on every HSET, which made building an N-field hash O(N²)) shows up as last/first far below 1.
# The check: last/first ≥ 0.8 for recached on every command (exit status 1 otherwise); redis's
# own figures are printed beside it as the reference.
#
# Method: the requests of each 1,000-element batch are encoded before the clock starts, sent in
# one write, and the batch ends when its 1,000 replies (`:1\r\n` each) are read back, so the
# figure is the server's throughput, not the client's. Each round builds every collection
# afresh (targets alternate first). A batch takes well under a millisecond, so one scheduler
# hiccup on a shared machine can halve its rate: the table shows, for each figure, the best of
# BENCH_ROUNDS rounds (default 10; noise only ever slows a batch down), and the median of the
# whole-build rate. A command a server does not know (ZADD before sorted sets exist) is reported
# as "n/a" rather than failing the run.
#
# Environment: BENCH_ROUNDS (10), BENCH_N (100000 elements), RECACHED_BIN (default: builds
# target/release/recached). Loopback only; servers this script starts get free ports and are
# stopped by PID on exit (also on Ctrl-C).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
ROUNDS=${BENCH_ROUNDS:-10}
N=${BENCH_N:-100000}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-bench-coll.XXXXXX")
PIDS=()
cleanup() {
    local rc=$?
    set +e
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A free port below Linux's ephemeral range (where outgoing connections take ports any time).
free_port() {
    local p
    for _ in $(seq 500); do
        p=$((15000 + RANDOM % 17000))
        if [ "$p" != "${1:-}" ] && port_free "$p"; then
            echo "$p"
            return
        fi
    done
    echo "$0: no free port" >&2
    exit 1
}
wait_port() {
    for _ in $(seq 200); do
        port_free "$1" || return 0
        sleep 0.1
    done
    echo "$0: nothing listens on $1 after 20 s:" >&2
    tail -n 20 "$TMP"/*.log >&2
    exit 1
}

if [ $# -eq 2 ]; then
    PORT_RECACHED=$1
    PORT_REDIS=$2
elif [ $# -eq 0 ]; then
    command -v redis-server >/dev/null || { echo "$0: redis-server not found" >&2; exit 1; }
    if [ -z "${RECACHED_BIN:-}" ]; then
        cargo build --release -p recached >&2
        RECACHED_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/recached"
    fi
    PORT_REDIS=$(free_port)
    PORT_RECACHED=$(free_port "$PORT_REDIS")
    redis-server --port "$PORT_REDIS" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no >"$TMP/redis.log" 2>&1 &
    PIDS+=($!)
    "$RECACHED_BIN" server --port "$PORT_RECACHED" --bind 127.0.0.1 >"$TMP/recached.log" 2>&1 &
    PIDS+=($!)
    wait_port "$PORT_REDIS"
    wait_port "$PORT_RECACHED"
else
    echo "usage: $0 [PORT_RECACHED PORT_REDIS]" >&2
    exit 2
fi

python3 - "$PORT_RECACHED" "$PORT_REDIS" "$ROUNDS" "$N" <<'PY'
import socket, statistics, sys, time

port_recached, port_redis, rounds, n = (int(a) for a in sys.argv[1:5])
BATCH = 1000
TIMEOUT = 60.0

def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, *args):
        """One command; returns its (single-line or bulk) reply bytes."""
        self.s.sendall(enc(*args))
        buf = b""
        while b"\r\n" not in buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            buf += chunk
        if buf.startswith(b"$") and not buf.startswith(b"$-1"):
            need = int(buf[1:buf.index(b"\r\n")]) + buf.index(b"\r\n") + 4
            while len(buf) < need:
                buf += self.s.recv(65536)
        return buf

    def batch(self, payload, count):
        """Sends `count` pipelined commands, reads `count` `:1` replies; returns seconds."""
        want = 4 * count
        got = bytearray()
        t0 = time.perf_counter()
        self.s.sendall(payload)
        while len(got) < want:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("connection closed")
            got += chunk
            if got[:1] == b"-":
                raise RuntimeError(bytes(got).split(b"\r\n")[0].decode())
        dt = time.perf_counter() - t0
        if bytes(got) != b":1\r\n" * count:
            raise RuntimeError("unexpected replies: %r" % bytes(got[:80]))
        return dt

def requests(cmd, key, lo, hi):
    if cmd == "HSET":
        return b"".join(enc(b"HSET", key, b"field:%d" % i, b"value:%d" % i) for i in range(lo, hi))
    return b"".join(enc(b"ZADD", key, b"%d" % i, b"member:%d" % i) for i in range(lo, hi))

def build(conn, cmd, key):
    """Builds the collection; returns (first-batch rate, last-batch rate, total rate) in
    elements/s."""
    conn.call(b"DEL", key)
    times = []
    for lo in range(0, n, BATCH):
        hi = min(lo + BATCH, n)
        payload = requests(cmd, key, lo, hi)
        times.append((hi - lo) / conn.batch(payload, hi - lo))
    conn.call(b"DEL", key)
    total = n / sum(BATCH / r for r in times)
    return times[0], times[-1], total

targets = [("recached", port_recached), ("redis", port_redis)]
conns = {name: Conn(port) for name, port in targets}
results = {}  # (target, cmd) -> list of (first, last, total) or None (unsupported)
for cmd in ("HSET", "ZADD"):
    for name, _ in targets:
        probe = conns[name].call(cmd.encode(), b"bench:probe", b"1", b"1")
        conns[name].call(b"DEL", b"bench:probe")
        results[(name, cmd)] = [] if probe.startswith(b":") else None
for r in range(rounds):
    order = targets if r % 2 == 0 else targets[::-1]
    for cmd in ("HSET", "ZADD"):
        for name, _ in order:
            if results[(name, cmd)] is None:
                continue
            results[(name, cmd)].append(build(conns[name], cmd, b"bench:coll:%d" % r))

print("%-9s %-5s %16s %16s %10s %16s" % ("target", "cmd", "first 1k el/s", "last 1k el/s",
                                         "last/first", "all %dk el/s" % (n // 1000)))
failed = False
for cmd in ("HSET", "ZADD"):
    for name, _ in targets:
        runs = results[(name, cmd)]
        if runs is None:
            print("%-9s %-5s %16s %16s %10s %16s" % (name, cmd, "n/a", "n/a", "n/a", "n/a"))
            continue
        first = max(x[0] for x in runs)
        last = max(x[1] for x in runs)
        total = statistics.median(x[2] for x in runs)
        ratio = last / first
        flag = "" if ratio >= 0.8 else "  < 0.8!"
        failed |= ratio < 0.8 and name == "recached"
        print("%-9s %-5s %16.0f %16.0f %10.2f %16.0f%s" % (name, cmd, first, last, ratio, total, flag))
print("(first/last: best of %d rounds; all: median; %d-element pipelined batches)"
      % (rounds, BATCH))
sys.exit(1 if failed else 0)
PY
