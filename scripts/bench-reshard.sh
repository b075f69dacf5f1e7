#!/usr/bin/env bash
# Moving slots between running engines (issue 21), side by side in one run:
#
#   recached   two engines in cluster mode; engine A serves every slot (CLUSTER SETSLOT … NODE
#              on both), B none
#   redis      two redis-server --cluster-enabled yes nodes; A: CLUSTER ADDSLOTSRANGE 0 16383,
#              CLUSTER MEET B
#
# Each gets the same KEYS keys (`key:<n>`, 64-byte values, every slot) on A (redis-cli --pipe),
# then `redis-cli --cluster reshard --cluster-from A --cluster-to B --cluster-slots 8192
# --cluster-yes --cluster-pipeline 100` moves half the slots (about KEYS/2 keys). Reported:
# keys moved per second for each and the ratio (target ≥ 1.0×).
#
# recached only: an open-loop GET/SET load (recached-bench run, get:90,set:10, RATE req/s,
# through a `recached proxy` in front of A and B, which follows -ASK/-MOVED) before the move
# and during it: p50/p99/p99.9 latency and the error count of each (target: p99 during ≤ 2×
# before, zero errors).
#
#   scripts/bench-reshard.sh                  (KEYS=1000000 RATE=20000)
#   BENCH_SMOKE=1 scripts/bench-reshard.sh    (tiny, for the test script)
#
# Environment: KEYS, RATE, RECACHED_BIN / RECACHED_BENCH_BIN (else built), PIN=1 SERVER_CPUS
# BENCH_CPUS (bench-lib.sh). Loopback only; every process is stopped by PID on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

KEYS=${KEYS:-1000000}
RATE=${RATE:-20000}
if [ "$SMOKE" = 1 ]; then KEYS=20000; RATE=2000; fi
SLOTS_MOVED=8192

# RESP SET commands for key:0..KEYS-1 with 64-byte values, for redis-cli --pipe.
fill() {
    python3 - "$KEYS" <<'PY' | redis-cli -p "$1" --pipe >/dev/null
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
val = b"v" * 64
buf = []
for i in range(n):
    k = b"key:%d" % i
    buf.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$64\r\n%s\r\n" % (len(k), k, val))
    if len(buf) == 10000:
        out.write(b"".join(buf)); buf = []
out.write(b"".join(buf))
PY
}

dbsize() { redis-cli -p "$1" DBSIZE; }

# reshard A B → prints seconds taken
reshard() {
    local a=$1 b=$2 ida idb t0 t1
    ida=$(redis-cli -p "$a" CLUSTER MYID)
    idb=$(redis-cli -p "$b" CLUSTER MYID)
    t0=$(date +%s.%N)
    redis-cli --cluster reshard "127.0.0.1:$a" --cluster-from "$ida" --cluster-to "$idb" \
        --cluster-slots "$SLOTS_MOVED" --cluster-yes --cluster-pipeline 100 >"$TMP/reshard-$a.log" 2>&1 \
        || { echo "$0: reshard from $a failed:" >&2; tail -20 "$TMP/reshard-$a.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

free_ports 3 22000
RA=$PORT RB=$((PORT + 1))
free_ports 3
EA=$PORT EB=$((PORT + 1)) PX=$((PORT + 2))

# --- redis
start_redis "$RA" --cluster-enabled yes --cluster-config-file "$TMP/nodes-$RA.conf"
start_redis "$RB" --cluster-enabled yes --cluster-config-file "$TMP/nodes-$RB.conf"
redis-cli -p "$RA" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
redis-cli -p "$RA" CLUSTER MEET 127.0.0.1 "$RB" >/dev/null
for _ in $(seq 100); do
    [ "$(redis-cli -p "$RB" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_state://p')" = ok ] \
        && [ "$(redis-cli -p "$RA" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')" = 2 ] && break
    sleep 0.1
done
fill "$RA"
redis_before=$(dbsize "$RA")
redis_s=$(reshard "$RA" "$RB")
redis_moved=$(dbsize "$RB")
[ $((redis_moved + $(dbsize "$RA"))) = "$redis_before" ] || { echo "$0: redis lost keys" >&2; exit 1; }

# --- recached
NODES="127.0.0.1:$EA,127.0.0.1:$EB"
start_engine "$EA" --cluster-nodes "$NODES" --cluster-index 0 --dir "$TMP/engine-$EA"
start_engine "$EB" --cluster-nodes "$NODES" --cluster-index 1 --dir "$TMP/engine-$EB"
IDA=$(redis-cli -p "$EA" CLUSTER MYID)
# Every slot to A, on both engines (B holds no key yet).
for p in "$EA" "$EB"; do
    seq 0 16383 | awk -v id="$IDA" '{print "CLUSTER SETSLOT " $1 " NODE " id}' | redis-cli -p "$p" >/dev/null
done
(exec "${SRV[@]}" "$BIN" proxy --port "$PX" --bind 127.0.0.1 --backends "$NODES") >"$TMP/proxy.log" 2>&1 &
PIDS+=($!)
wait_port "$PX"
fill "$EA"
rc_before=$(dbsize "$EA")

load() { # label seconds
    gen "$BENCH_BIN" run --target "127.0.0.1:$PX" --rate "$RATE" --duration "$2" --warmup 1 \
        --keys "$KEYS" --mix get:90,set:10 --connections 16 --out "$TMP/load-$1.json" >"$TMP/load-$1.log" 2>&1
}
# Half the slots A → B with no load: keys/s, as for redis.
rc_s=$(reshard "$EA" "$EB")
rc_moved=$(dbsize "$EB")
rc_after=$(( rc_moved + $(dbsize "$EA") ))
# Then the load: before, and during the move of the same slots back B → A, in a window of
# 80 % of the time the first move took (the move starts when the window does, after the
# load's 1 s warm-up); the table says whether the move outlasted it.
load before 5
window=$(printf '%.0f' "$(echo "$rc_s * 0.8" | bc -l)")
[ "$window" -ge 1 ] || window=1
load during "$window" & LOAD_PID=$!
PIDS+=($LOAD_PID)
sleep 1
back_s=$(reshard "$EB" "$EA")
wait "$LOAD_PID" || true
inside=$(echo "$back_s >= $window" | bc -l)
rc_final=$(( $(dbsize "$EA") + $(dbsize "$EB") ))


summary() { # file → "p50 p99 p99.9 errors"
    python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("n/a n/a n/a n/a"); sys.exit()
r = d["results"]
lat = r["latency_us"]
def q(name):
    return lat.get("p" + name, "n/a")
errs = r.get("errors", {})
total = sum(errs.values()) if isinstance(errs, dict) else errs
print(q("50"), q("99"), q("999"), total)
PY
}
read -r b50 b99 b999 berr <<<"$(summary "$TMP/load-before.json")"
read -r d50 d99 d999 derr <<<"$(summary "$TMP/load-during.json")"

rc_rate=$(echo "$rc_moved / $rc_s" | bc -l)
redis_rate=$(echo "$redis_moved / $redis_s" | bc -l)
printf '\n## Moving %d slots (%s keys of 64 bytes in all) from one node to another\n\n' "$SLOTS_MOVED" "$KEYS"
printf '%s; redis-cli --cluster reshard --cluster-pipeline 100\n\n' "$CPU_PLACEMENT"
printf '| system | keys moved | seconds | keys/s |\n|---|---:|---:|---:|\n'
printf '| recached | %d | %.2f | %.0f |\n' "$rc_moved" "$rc_s" "$rc_rate"
printf '| redis %s | %d | %.2f | %.0f |\n' "$REDIS_VERSION" "$redis_moved" "$redis_s" "$redis_rate"
printf '\nrecached / redis keys/s: %.2fx\n\n' "$(echo "$rc_rate / $redis_rate" | bc -l)"
printf 'recached under an open-loop load of %s req/s (get:90,set:10) through the proxy, µs; the\nmove measured is the same slots back (%.2f s):\n\n' "$RATE" "$back_s"
printf '| phase | p50 | p99 | p99.9 | errors |\n|---|---:|---:|---:|---:|\n'
printf '| before the move | %s | %s | %s | %s |\n' "$b50" "$b99" "$b999" "$berr"
printf '| during the move (%s s window, inside the move: %s) | %s | %s | %s | %s |\n' "$window" "$([ "$inside" = 1 ] && echo yes || echo no)" "$d50" "$d99" "$d999" "$derr"
for n in "$rc_after" "$rc_final"; do
    [ "$n" -ge "$rc_before" ] || { echo "$0: recached lost keys ($rc_before → $n)" >&2; exit 1; }
done
