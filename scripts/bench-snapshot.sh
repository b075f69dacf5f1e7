#!/usr/bin/env bash
# Snapshot benchmark (issue 6): recached vs redis-server 7, same data, one run.
#
#   scripts/bench-snapshot.sh [KEYS]        (default 1000000; needs redis-server,
#                                            redis-cli, redis-benchmark, python3)
#
# 1. Fills one recached engine and one redis-server with the same KEYS keys (80 % strings of
#    16–64 bytes, 5 % each lists, hashes, sets and sorted sets of 8 elements; a third with TTLs)
#    through `redis-cli --pipe`.
# 2. Write speed: a foreground SAVE of each (serialize + fsync + rename), timed by the client;
#    snapshot size (dump-<port>.rcs vs dump.rdb); MB/s and keys/s.
# 3. Load speed: each restarts over its file; the load time is taken from its own log
#    (recached "loaded snapshot … in Xs", redis "DB loaded from disk: X seconds").
# 4. Latency: redis-benchmark (GET/SET, 50 clients, 200k requests, random keys) without a
#    save, then again while a loop starts a BGSAVE every second; p50/p99/max from
#    redis-benchmark's CSV. The target: p99 during BGSAVE ≤ 2× p99 without.
#
# Everything runs on 127.0.0.1 on free ports in a temp dir; servers are stopped by PID.
set -euo pipefail
[ -n "${TRACE:-}" ] && set -x
KEYS=${1:-1000000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p recached --manifest-path "$ROOT/Cargo.toml"
BIN="$ROOT/target/release/recached"
TMP=$(mktemp -d /tmp/bench-snapshot.XXXXXX)
RC_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RD_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

mkdir -p "$TMP/rc" "$TMP/rd"
printf '[engine]\nsave_interval = 0\n' > "$TMP/rc.toml"

start_rc() {
  RUST_LOG=info "$BIN" server --port "$RC_PORT" --config "$TMP/rc.toml" --dir "$TMP/rc" \
    >> "$TMP/rc.log" 2>&1 &
  RC_PID=$!; PIDS+=("$RC_PID")
}
start_rd() {
  redis-server --port "$RD_PORT" --bind 127.0.0.1 --dir "$TMP/rd" --save "" --appendonly no \
    --logfile "$TMP/rd.log" --daemonize no &
  RD_PID=$!; PIDS+=("$RD_PID")
}
wait_up() { for _ in $(seq 1 600); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
stop_pid() { kill "$1"; while kill -0 "$1" 2>/dev/null; do sleep 0.05; done; }
now() { python3 -c 'import time; print(time.time())'; }

echo "generating $KEYS keys..."
python3 - "$KEYS" > "$TMP/data.resp" <<'EOF'
import sys, random
n = int(sys.argv[1]); r = random.Random(1); out = sys.stdout.buffer
def cmd(*a):
    b = [b"*%d\r\n" % len(a)]
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        b.append(b"$%d\r\n%s\r\n" % (len(x), x))
    out.write(b"".join(b))
for i in range(n):
    k = b"k:%d" % i; t = i % 20
    if t < 16: cmd(b"SET", k, b"v" * r.randint(16, 64))
    elif t == 16: cmd(b"RPUSH", k, *[b"e%d" % j for j in range(8)])
    elif t == 17: cmd(b"HSET", k, *[x for j in range(8) for x in (b"f%d" % j, b"val%d" % j)])
    elif t == 18: cmd(b"SADD", k, *[b"m%d" % j for j in range(8)])
    else: cmd(b"ZADD", k, *[x for j in range(8) for x in (str(j * 1.5).encode(), b"z%d" % j)])
    if i % 3 == 0: cmd(b"PEXPIRE", k, 3_600_000 + i)
EOF

start_rc; start_rd; wait_up "$RC_PORT"; wait_up "$RD_PORT"
for p in "$RC_PORT" "$RD_PORT"; do redis-cli -p "$p" --pipe < "$TMP/data.resp" > /dev/null; done
echo "dbsize: recached $(redis-cli -p "$RC_PORT" dbsize), redis $(redis-cli -p "$RD_PORT" dbsize)"

save_time() { local t0 t1; t0=$(now); redis-cli -p "$1" save > /dev/null; t1=$(now); python3 -c "print($t1-$t0)"; }
RC_SAVE=$(save_time "$RC_PORT"); RD_SAVE=$(save_time "$RD_PORT")
RC_SIZE=$(stat -c %s "$TMP/rc/dump-$RC_PORT.rcs"); RD_SIZE=$(stat -c %s "$TMP/rd/dump.rdb")

# Latency without and with a BGSAVE running all the time.
bench() { redis-benchmark -h 127.0.0.1 -p "$1" -t get,set -n 200000 -r 1000000 -c 50 --csv 2>/dev/null | tail -n +2; }
bg_loop() {  # a BGSAVE every second (or when the last one ends) until $TMP/stop exists,
  # so both servers fork at the same cadence whatever their save speed
  while [ ! -e "$TMP/stop" ]; do
    redis-cli -p "$1" bgsave > /dev/null 2>&1 || true
    sleep 1
  done
}
latency() {  # port label
  local base during
  base=$(bench "$1")
  rm -f "$TMP/stop"; bg_loop "$1" & local loop=$!
  sleep 0.2
  during=$(bench "$1")
  touch "$TMP/stop"; wait "$loop"
  local saves; saves=$(redis-cli -p "$1" info persistence | tr -d '\r' | awk -F: '/^rdb_saves/{print $2}')
  python3 - "$2" "$base" "$during" "${saves:-?}" <<'EOF'
import sys, csv, io
label, base, during, saves = sys.argv[1:]
def rows(t): return {r[0]: r for r in csv.reader(io.StringIO(t))}
b, d = rows(base), rows(during)
for test in ("SET", "GET"):
    rb, rd = b.get(test), d.get(test)
    if not rb or not rd: continue
    # test, rps, avg, min, p50, p95, p99, max
    print(f"  {label:9} {test}: without save p50 {rb[4]} p99 {rb[6]} max {rb[7]} ms ({float(rb[1]):.0f} ops/s) | "
          f"during BGSAVE p50 {rd[4]} p99 {rd[6]} max {rd[7]} ms ({float(rd[1]):.0f} ops/s); p99 ratio {float(rd[6])/max(float(rb[6]),1e-9):.2f}")
print(f"  {label:9} saves completed (rdb_saves / since start): {saves}")
EOF
}
echo "latency (redis-benchmark GET/SET, 50 clients, 200k requests each):"
latency "$RC_PORT" recached
latency "$RD_PORT" redis

# Load: restart both over their files (a final foreground save first, so both files hold
# the same dataset) and read the load time from the logs.
wait_bg() { until redis-cli -p "$1" info persistence | grep -q 'rdb_bgsave_in_progress:0'; do sleep 0.1; done; }
wait_bg "$RC_PORT"; wait_bg "$RD_PORT"
redis-cli -p "$RC_PORT" save > /dev/null; redis-cli -p "$RD_PORT" save > /dev/null
RC_SIZE=$(stat -c %s "$TMP/rc/dump-$RC_PORT.rcs"); RD_SIZE=$(stat -c %s "$TMP/rd/dump.rdb")
RC_KEYS=$(redis-cli -p "$RC_PORT" dbsize); RD_KEYS=$(redis-cli -p "$RD_PORT" dbsize)
stop_pid "$RC_PID"; stop_pid "$RD_PID"
: > "$TMP/rc.log"; : > "$TMP/rd.log"
start_rc; start_rd; wait_up "$RC_PORT"; wait_up "$RD_PORT"
# redis-server answers PING while it is still loading (-LOADING comes only for data commands),
# so wait for its log line rather than reading a log that does not have it yet (≤ 60 s).
for _ in $(seq 600); do grep -q 'DB loaded from disk' "$TMP/rd.log" && break; sleep 0.1; done
RC_LOAD=$(grep -o 'in [0-9.]*s (' "$TMP/rc.log" | head -1 | tr -dc '0-9.')
RD_LOAD=$(grep -o 'DB loaded from disk: [0-9.]* seconds' "$TMP/rd.log" | head -1 | tr -dc '0-9.')
echo "after restart: recached $(redis-cli -p "$RC_PORT" dbsize) keys, redis $(redis-cli -p "$RD_PORT" dbsize) keys"

python3 - "$RC_KEYS" "$RD_KEYS" "$RC_SAVE" "$RD_SAVE" "$RC_SIZE" "$RD_SIZE" "$RC_LOAD" "$RD_LOAD" <<'EOF'
import sys
rk, dk, rs, ds, rz, dz, rl, dl = sys.argv[1:]
rk, dk, rs, ds, rz, dz, rl, dl = int(rk), int(dk), float(rs), float(ds), int(rz), int(dz), float(rl or 0), float(dl or 0)
print(f"{'':10} {'keys':>9} {'file MB':>8} {'SAVE s':>7} {'write MB/s':>10} {'write keys/s':>12} {'load s':>7} {'load MB/s':>9} {'load keys/s':>12}")
for name, k, s, z, l in (("recached", rk, rs, rz, rl), ("redis", dk, ds, dz, dl)):
    print(f"{name:10} {k:>9} {z/1e6:>8.1f} {s:>7.3f} {z/1e6/s:>10.1f} {k/s:>12.0f} {l:>7.3f} {z/1e6/max(l,1e-9):>9.1f} {k/max(l,1e-9):>12.0f}")
print(f"snapshot size: recached {rz} bytes = {rz/dz:.2f} x redis dump.rdb ({dz} bytes)")
EOF
