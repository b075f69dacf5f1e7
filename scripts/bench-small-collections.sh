#!/usr/bin/env bash
# Issue 16's throughput clause: writes and reads on many SMALL collections (the compact
# encodings: listpack hashes and sorted sets, intset sets, quicklist nodes), one recached engine
# vs one redis-server (--save '' --appendonly no), side by side, interleaved rounds, pipelined.
# (redis-benchmark's own LPUSH/SADD/HSET/ZADD tests write ONE key each, which grows into a large
# collection; these spread the writes over BENCH_KEYS keys instead.)
#
#   scripts/bench-small-collections.sh
#   BENCH_ROUNDS=5 PIN=1 SERVER_CPUS=0 BENCH_CPUS=1 scripts/bench-small-collections.sh
#
# Workloads (redis-benchmark, BENCH_CLIENTS clients, -P 16, -r BENCH_KEYS; each __rand_int__ is
# drawn on its own, so with the defaults a collection gets ~N/KEYS elements, far below every
# listpack/intset limit; threshold recached ÷ redis-server ≥ 1.0×):
#   HSET    `HSET sh:<r> f<r> v<r>`          HGET   `HGET sh:<r> f<r>` (after HSET filled them)
#   SADD    `SADD ss:<r> 1<r>` (integers without the zero padding of <r>: an intset)
#   ZADD    `ZADD sz:<r> <r> m<r>`           ZSCORE `ZSCORE sz:<r> m<r>`
#   LPUSH   `LPUSH sl:<r> v<r>`              LRANGE `LRANGE sl:<r> 0 9`
# Each round starts from empty servers (FLUSHALL), the order of the two alternates. The table
# shows median requests/s over the rounds and the ratio, PASS or BELOW; a ratio below its
# threshold does not fail the script (a noisy shared machine); an error does. After the last
# round OBJECT ENCODING of one key per type is printed for both (they must agree).
#
# Writes one JSON file per redis-benchmark run (labels suite=small-collections, system,
# workload, round) and small-collections-RUN-medians.csv to bench/results. Environment:
# BENCH_ROUNDS (3), BENCH_N (300,000 requests per test), BENCH_KEYS (20,000), BENCH_CLIENTS
# (50), BENCH_SMOKE=1 (one round, tiny -n), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN,
# RECACHED_BENCH_BIN. Loopback only; servers stopped by PID on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-300000}
KEYS=${BENCH_KEYS:-20000}
CLIENTS=${BENCH_CLIENTS:-50}
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 N=2000 KEYS=200
fi
mapfile -t LABELS < <(common_labels)

free_ports 1; EP=$PORT
start_engine "$EP"
free_ports 1; RP=$PORT
start_redis "$RP"
declare -A PORT_OF=([recached]=$EP [redis]=$RP)
declare -A PID_OF=([recached]=${PIDS[0]} [redis]=${PIDS[1]})
# Server CPU time in clock ticks (utime + stime, /proc/PID/stat fields 14 and 15).
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# run SYSTEM WORKLOAD ROUND REQUESTS COMMAND…: rb_run, and the server's CPU ns per request
# appended to $TMP/cpu.csv as "SYSTEM,WORKLOAD,cpu,ns" (integers: median_rows rounds).
run() {
    local s=$1 w=$2 round=$3 n=$4 t0 t1
    shift 4
    t0=$(ticks "${PID_OF[$s]}")
    rb_run small-collections "$s" "$w" "$round" "$w" 16 "$n" -r "$KEYS" "$@"
    t1=$(ticks "${PID_OF[$s]}")
    echo "$s,$w,cpu,$(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN { printf "%.0f", d * 1e9 / hz / n }')" >>"$TMP/cpu.csv"
}
echo "small collections: $ROUNDS rounds, $N requests per test over $KEYS keys, recached $RECACHED_VERSION, redis $REDIS_VERSION, $CPU_PLACEMENT" >&2

: >"$TMP/rows.csv"
: >"$TMP/cpu.csv"
WORKLOADS="HSET HGET SADD ZADD ZSCORE LPUSH LRANGE"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(recached redis); else order=(redis recached); fi
    for s in "${order[@]}"; do
        echo "round $round/$ROUNDS: $s" >&2
        flush "${PORT_OF[$s]}"
        run "$s" HSET "$round" "$N" HSET sh:__rand_int__ f__rand_int__ v__rand_int__
        run "$s" HGET "$round" "$N" HGET sh:__rand_int__ f__rand_int__
        run "$s" SADD "$round" "$N" SADD ss:__rand_int__ 1__rand_int__
        run "$s" ZADD "$round" "$N" ZADD sz:__rand_int__ __rand_int__ m__rand_int__
        run "$s" ZSCORE "$round" "$N" ZSCORE sz:__rand_int__ m__rand_int__
        run "$s" LPUSH "$round" "$N" LPUSH sl:__rand_int__ v__rand_int__
        run "$s" LRANGE "$round" $((N / 2)) LRANGE sl:__rand_int__ 0 9
    done
done

# Both servers hold their collections in the same encodings (the point of the exercise).
for t in "sh hash" "ss set" "sz zset" "sl list"; do
    read -r prefix _ <<<"$t"
    key=$(redis-cli -p "$RP" --scan --pattern "$prefix:*" | awk 'NR == 1')
    a=$(redis-cli -p "$EP" OBJECT ENCODING "$key") b=$(redis-cli -p "$RP" OBJECT ENCODING "$key")
    echo "OBJECT ENCODING $key: recached $a, redis $b" >&2
    [ "$a" = "$b" ] || { echo "$0: encodings differ for $key" >&2; exit 1; }
done

MEDIANS="$RESULTS/small-collections-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, -v W="$WORKLOADS" 'NR > 1 { med[$1 "," $2] = $4 }
    END {
        printf "%-9s %12s %12s %8s  %s\n", "workload", "recached", "redis", "ratio", "threshold"
        n = split(W, w, " ")
        for (i = 1; i <= n; i++) {
            a = med["recached," w[i]]; b = med["redis," w[i]]
            r = (b > 0) ? a / b : 0
            printf "%-9s %12s %12s %7.2fx  %s\n", w[i], a, b, r, (r >= 1.0) ? "PASS (>= 1.00x)" : "BELOW (>= 1.00x)"
        }
    }' "$MEDIANS"
echo "(median requests/s over $ROUNDS interleaved rounds; $CLIENTS clients, -P 16, $KEYS keys)"
# One redis-benchmark process drives both servers and is often the bottleneck at -P 16, so
# requests/s can tie while the servers' costs differ: the servers' own CPU time per request
# (10 ms clock ticks over each run) says which does less work.
echo
median_rows "$TMP/cpu.csv" | awk -F, -v W="$WORKLOADS" '{ med[$1 "," $2] = $4 }
    END {
        printf "%-9s %14s %14s %8s\n", "workload", "recached µs", "redis µs", "ratio"
        n = split(W, w, " ")
        for (i = 1; i <= n; i++) {
            a = med["recached," w[i]] / 1000; b = med["redis," w[i]] / 1000
            printf "%-9s %14.3f %14.3f %7.2fx\n", w[i], a, b, (a > 0) ? b / a : 0
        }
    }'
echo "(median server CPU µs per request; ratio = redis ÷ recached, above 1 = recached does less work)"
echo "results: $MEDIANS and small-collections-$RUN_ID-*.json"
