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
# recached only: an open-loop GET/SET load (recached-bench run, get:90,set:10, LOAD_CONNS
# connections, default 64, through a `recached proxy` in front of A and B, which follows
# -ASK/-MOVED) at half the mix's peak through the proxy (redis-benchmark, unpipelined, as many
# clients as the load has connections), DURING_S seconds with no move and
# DURING_S seconds while the slots move back and forth back to back: p50/p99/p99.9 latency
# and the error count of each (target: p99 during ≤ 2× before, zero errors), with the p99 of
# `service` (written → reply) and `lag` (intended start → written) beside them. The load's
# connections must not be its own bottleneck: each carries one request at a time, so at 16
# connections and half the peak each one is busy half the time, and a pause of a few ms
# leaves it a backlog that it drains one round trip at a time while new arrivals keep coming
# (measured during `resize 2`: lag p99 38 ms and max 72 ms while no reply took over 10 ms;
# at 64 connections lag p99 2 ms). The control: the
# same load for DURING_S seconds while the same moves run between the two redis-server nodes
# instead, which the load never touches: what moving slots costs the host's cores, whoever
# moves them.
#
# Every load naps instead of spinning between arrivals (`recached-bench run --nap-us`,
# NAP_US=20): a spinning generator takes one of this host's two cores from the servers. Each
# load also writes a timeline (p99 of every 250 ms); reported beside each p99 is the median of
# those windows' p99s, which the host's own stalls move less than a whole run's p99. The host
# is probed first (`stall_probe`): one thread per CPU reads the clock in a loop for
# PROBE_S seconds with nothing else of the bench running, and every gap over 1 ms is a time
# the thread was not running (the hypervisor, or the kernel, took the CPU).
#
#   scripts/bench-reshard.sh                  (KEYS=1000000, DURING_S=5, RATE=half the peak)
#   BENCH_SMOKE=1 scripts/bench-reshard.sh    (tiny, for the test script)
#
# Environment: KEYS, RATE, DURING_S, NAP_US, PROBE_S, LOAD_CONNS, RESIZE_PACE (the loaded resize's --pace; else its default), RECACHED_BIN / RECACHED_BENCH_BIN (else built), PIN=1 SERVER_CPUS
# BENCH_CPUS (bench-lib.sh). Loopback only; every process is stopped by PID on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

KEYS=${KEYS:-1000000}
DURING_S=${DURING_S:-5}
NAP_US=${NAP_US:-20}
PROBE_S=${PROBE_S:-10}
LOAD_CONNS=${LOAD_CONNS:-64}
if [ "$SMOKE" = 1 ]; then KEYS=20000; RATE=2000; DURING_S=1; PROBE_S=1; fi
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

# reshard A B [SLOTS] → prints seconds taken
reshard() {
    local a=$1 b=$2 n=${3:-$SLOTS_MOVED} ida idb t0 t1
    ida=$(redis-cli -p "$a" CLUSTER MYID)
    idb=$(redis-cli -p "$b" CLUSTER MYID)
    t0=$(date +%s.%N)
    srv redis-cli --cluster reshard "127.0.0.1:$a" --cluster-from "$ida" --cluster-to "$idb" \
        --cluster-slots "$n" --cluster-yes --cluster-pipeline 100 >"$TMP/reshard-$a.log" 2>&1 \
        || { echo "$0: reshard from $a failed:" >&2; tail -20 "$TMP/reshard-$a.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

# stall_probe SECONDS → per CPU "cpuN gaps G max M ms" (gaps > 1 ms while spinning).
stall_probe() {
    local cpu
    for cpu in $(seq 0 $(($(nproc) - 1))); do
        taskset -c "$cpu" python3 - "$1" "$cpu" <<'PY' &
import sys, time
secs, cpu = float(sys.argv[1]), sys.argv[2]
last = t0 = time.perf_counter()
gaps = []
while last - t0 < secs:
    now = time.perf_counter()
    if now - last > 0.001:
        gaps.append(now - last)
    last = now
print("cpu%s gaps %d max %.1f ms" % (cpu, len(gaps), max(gaps, default=0) * 1000))
PY
    done
    wait
}
PROBE=$(stall_probe "$PROBE_S" | sort | paste -sd ';' | sed 's/;/; /g')

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

load() { # label seconds [port rate extra…]
    local label=$1 secs=$2 port=${3:-$PX} rate=${4:-$RATE}
    shift 4 2>/dev/null || shift $#
    gen "$BENCH_BIN" run --target "127.0.0.1:$port" --rate "$rate" --duration "$secs" --warmup 1 \
        --keys "$KEYS" --mix get:90,set:10 --connections "$LOAD_CONNS" --nap-us "$NAP_US" \
        --timeline "$TMP/timeline-$label.csv" --out "$TMP/load-$label.json" "$@" \
        >"$TMP/load-$label.log" 2>&1
}
# Half the slots A → B with no load: keys/s, as for redis.
rc_s=$(reshard "$EA" "$EB")
rc_moved=$(dbsize "$EB")
rc_after=$(( rc_moved + $(dbsize "$EA") ))
# The peak of the same mix through the proxy: redis-benchmark GET and SET, LOAD_CONNS clients, one
# request in flight each, the keys shared between A and B as during the load; the mix's peak
# is the weighted harmonic mean (90 % GET, 10 % SET). The load runs at half of it unless RATE
# is given.
peak_of() { # TEST [port] → requests/s
    gen redis-benchmark -h 127.0.0.1 -p "${2:-$PX}" -c "$LOAD_CONNS" -n "$PEAK_N" -r "$KEYS" -d 64 -t "$1" --csv 2>/dev/null \
        | awk -F'"' -v t="${1^^}" '$2 == t { print $4; exit }'
}
PEAK_N=200000
[ "$SMOKE" = 1 ] && PEAK_N=5000
mix_peak() { # [port] → the get:90,set:10 mix's peak, requests/s
    local g s
    g=$(peak_of get "${1:-$PX}")
    s=$(peak_of set "${1:-$PX}")
    [ -n "$g" ] && [ -n "$s" ] || { echo "$0: redis-benchmark through the proxy failed" >&2; exit 1; }
    echo "1 / (0.9 / $g + 0.1 / $s)" | bc -l
}
peak=$(mix_peak)
RATE_GIVEN=${RATE:-}
RATE=${RATE:-$(printf '%.0f' "$(echo "$peak / 2" | bc -l)")}
# Then the load: before, and during moves. During: the same 8192 slots go B → A, then A → B,
# and so on, back to back, from before the load's warm-up starts until its last request, so
# every measured request meets a move in progress (between two moves only redis-cli's start
# and cluster check, tens of ms). The moves stop at a file's appearance, after the current one.
load before "$DURING_S"
# under_moves LABEL FROM TO [SLOTS]: the load LABEL while SLOTS slots go FROM → TO, back and
# forth, back to back; each move's seconds in $TMP/moves-LABEL.txt.
under_moves() {
    local label=$1 from=$2 to=$3 n=${4:-$SLOTS_MOVED} stop="$TMP/stop-moves-$1" mover t
    (
        while [ ! -e "$stop" ]; do
            reshard "$from" "$to" "$n" >>"$TMP/moves-$label.txt"
            t=$from; from=$to; to=$t
        done
    ) & mover=$!
    PIDS+=("$mover")
    sleep 0.2
    load "$label" "$DURING_S"
    touch "$stop"
    wait "$mover" || { echo "$0: a move under the load '$label' failed" >&2; exit 1; }
}
under_moves during "$EB" "$EA"
nmoves=$(wc -l <"$TMP/moves-during.txt")
move_s=$(awk '{ s += $1 } END { printf "%.2f", s / NR }' "$TMP/moves-during.txt")
# The control: the same load while the same moves run between the two redis-server nodes
# instead (their keys, not the fleet's): what moving slots costs this host's cores, whoever
# moves them (the generator, the proxy and the engines already share them). One slot fewer
# each way: a redis-server 7.0 master that gives its last slot to one node becomes that node's
# replica (even with cluster-allow-replica-migration no), and the next move to it fails.
under_moves control "$RB" "$RA" $((SLOTS_MOVED - 1))
rc_final=$(( $(dbsize "$EA") + $(dbsize "$EB") ))


# --- recached resize: one engine → two under the same kind of load, at its default pace
# (`recached resize --pace`), measured over exactly the resize (the load stops when it
# returns); then back to one at full speed (--pace 1) with no load, for keys/s.
default_pace() {
    "$BIN" resize --help | awk '/--pace/ { f = 1 } f && /default:/ { match($0, /default: [0-9.]+/); print substr($0, RSTART + 9, RLENGTH - 9); exit }'
}
kill_pids() { for p in "$@"; do kill "$p" 2>/dev/null || true; done; }
kill_pids "${PIDS[@]}" # the engines, proxy and redis-servers above: their cores and memory back
free_ports 1; FP=$PORT
free_ports 3; FB=$PORT
FLEET="$TMP/fleet"
start_fleet 1 "$FLEET" "$FP" "$FB"
fill "$FB"
rs_peak=$(mix_peak "$FP")
rs_keys=$(dbsize "$FP") # after redis-benchmark's own keys (key:000000012345)
RS_RATE=${RATE_GIVEN:-$(printf '%.0f' "$(echo "$rs_peak / 2" | bc -l)")}
load resize-before "$DURING_S" "$FP" "$RS_RATE"
rstop="$TMP/stop-resize-load"
load resize-during 600 "$FP" "$RS_RATE" --stop-file "$rstop" & RLOAD=$!
PIDS+=($RLOAD)
sleep 1.1 # the load's warm-up
srv "$BIN" resize 2 ${RESIZE_PACE:+--pace "$RESIZE_PACE"} --dir "$FLEET" >"$TMP/resize-grow.log" 2>&1 \
    || { echo "$0: resize 2 failed:" >&2; cat "$TMP/resize-grow.log" >&2; exit 1; }
touch "$rstop"
wait "$RLOAD" || true
srv "$BIN" resize 1 --pace 1 --dir "$FLEET" >"$TMP/resize-shrink.log" 2>&1 \
    || { echo "$0: resize 1 failed:" >&2; cat "$TMP/resize-shrink.log" >&2; exit 1; }
rs_final=$(dbsize "$FP")
# "… 8192 slot(s) and 500002 key(s) moved in 12.34s (40519 keys/s while moving; …"
moved_of() { sed -n 's/.* and \([0-9]*\) key(s) moved in \([0-9.]*\)s (\([0-9]*\) keys\/s.*/\1 \2 \3/p' "$1"; }
read -r g_keys g_s g_rate <<<"$(moved_of "$TMP/resize-grow.log")"
read -r s_keys s_s s_rate <<<"$(moved_of "$TMP/resize-shrink.log")"

summary() { # label → "p50 p99 p99.9 errors window-median-p99 service-p99 lag-p99"
    python3 - "$TMP/load-$1.json" "$TMP/timeline-$1.csv" <<'PY'
import csv, json, statistics, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("n/a n/a n/a n/a n/a n/a n/a"); sys.exit()
r = d["results"]
lat = r["latency_us"]
def q(name):
    return lat.get("p" + name, "n/a")
errs = r.get("errors", {})
total = sum(errs.values()) if isinstance(errs, dict) else errs
try:
    w = [int(row["p99_us"]) for row in csv.DictReader(open(sys.argv[2])) if int(row["requests"]) > 0]
    wm = "%.0f" % statistics.median(w)
except Exception:
    wm = "n/a"
print(q("50"), q("99"), q("999"), total, wm,
      r.get("service_us", {}).get("p99", "n/a"), r.get("lag_us", {}).get("p99", "n/a"))
PY
}
read -r b50 b99 b999 berr bwm bsv blag <<<"$(summary before)"
read -r d50 d99 d999 derr dwm dsv dlag <<<"$(summary during)"
read -r c50 c99 c999 cerr cwm csv clag <<<"$(summary control)"

rc_rate=$(echo "$rc_moved / $rc_s" | bc -l)
redis_rate=$(echo "$redis_moved / $redis_s" | bc -l)
printf '\n## Moving %d slots (%s keys of 64 bytes in all) from one node to another\n\n' "$SLOTS_MOVED" "$KEYS"
printf '%s; redis-cli --cluster reshard --cluster-pipeline 100; loads nap %s µs\n\n' "$CPU_PLACEMENT" "$NAP_US"
printf '| system | keys moved | seconds | keys/s |\n|---|---:|---:|---:|\n'
printf '| recached | %d | %.2f | %.0f |\n' "$rc_moved" "$rc_s" "$rc_rate"
printf '| redis %s | %d | %.2f | %.0f |\n' "$REDIS_VERSION" "$redis_moved" "$redis_s" "$redis_rate"
printf '\nrecached / redis keys/s: %.2fx\n\n' "$(echo "$rc_rate / $redis_rate" | bc -l)"
printf 'recached under an open-loop load of %s req/s (get:90,set:10; the mix'"'"'s peak through the proxy,\n%s clients unpipelined: %.0f req/s) through the proxy, %s connections, µs, %s s each; during: %d moves\nof the %d slots back and forth, back to back, %s s each on average:\n\n' "$RATE" "$LOAD_CONNS" "$peak" "$LOAD_CONNS" "$DURING_S" "$nmoves" "$SLOTS_MOVED" "$move_s"
printf '| phase | p50 | p99 | p99.9 | errors | median of the 250 ms windows'"'"' p99 | service p99 | lag p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n'
printf '| before the move | %s | %s | %s | %s | %s | %s | %s |\n' "$b50" "$b99" "$b999" "$berr" "$bwm" "$bsv" "$blag"
printf '| during the moves | %s | %s | %s | %s | %s | %s | %s |\n' "$d50" "$d99" "$d999" "$derr" "$dwm" "$dsv" "$dlag"
printf '| control: the same moves between the two redis-server nodes | %s | %s | %s | %s | %s | %s | %s |\n' "$c50" "$c99" "$c999" "$cerr" "$cwm" "$csv" "$clag"
printf '\np99 during / before: %.2fx; control / before: %.2fx (the host'"'"'s share); during / control: %.2fx\n' \
    "$(echo "$d99 / $b99" | bc -l)" "$(echo "$c99 / $b99" | bc -l)" "$(echo "$d99 / $c99" | bc -l)"
read -r r50 r99 r999 rerr rwm rsv rlag <<<"$(summary resize-before)"
read -r q50 q99 q999 qerr qwm qsv qlag <<<"$(summary resize-during)"
printf '\n## recached resize: 1 → 2 engines (half the slots move), then 2 → 1\n\n'
printf '| resize | pace | keys moved | seconds moving | keys/s |\n|---|---:|---:|---:|---:|\n'
printf '| 1 → 2, under the load below | %s | %s | %s | %s |\n' "${RESIZE_PACE:-$(default_pace)}" "$g_keys" "$g_s" "$g_rate"
printf '| 2 → 1, no load | 1 | %s | %s | %s |\n' "$s_keys" "$s_s" "$s_rate"
printf '\nrecached resize --pace 1 / redis-cli reshard on redis keys/s: %.2fx\n\n' "$(echo "$s_rate / $redis_rate" | bc -l)"
printf 'Open-loop load of %s req/s (get:90,set:10, %s connections; half the 1-engine fleet'"'"'s peak\nthrough its proxy, %.0f req/s), µs; during: from the resize'"'"'s start to its return:\n\n' "$RS_RATE" "$LOAD_CONNS" "$rs_peak"
printf '| phase | p50 | p99 | p99.9 | errors | median of the 250 ms windows'"'"' p99 | service p99 | lag p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n'
printf '| before the resize | %s | %s | %s | %s | %s | %s | %s |\n' "$r50" "$r99" "$r999" "$rerr" "$rwm" "$rsv" "$rlag"
printf '| during the resize | %s | %s | %s | %s | %s | %s | %s |\n' "$q50" "$q99" "$q999" "$qerr" "$qwm" "$qsv" "$qlag"
printf '\np99 during / before: %.2fx (target ≤ 2x); the windows'"'"' medians: %.2fx\n' "$(echo "$q99 / $r99" | bc -l)" "$(echo "$qwm / $rwm" | bc -l)"
printf '\nThe host, before the bench started anything (%s s per CPU, a thread reading the clock): %s\n' "$PROBE_S" "$PROBE"
[ "$rs_final" = "$rs_keys" ] || { echo "$0: recached resize: $rs_keys keys before, $rs_final after" >&2; exit 1; }
for n in "$rc_after" "$rc_final"; do
    [ "$n" -ge "$rc_before" ] || { echo "$0: recached lost keys ($rc_before → $n)" >&2; exit 1; }
done
